"""Built-in data for `sglang-envelope demo`: one request, one unary answer, one SSE stream.

The unary answer's Base64 output-flat fields are made at run time by the
library's own `encode_flat_top_logprobs`, so they are always what SGLang would
write for `DEMO_OUTPUT_TOP_LOGPROBS`. Logprobs are binary fractions, which
float32 holds exactly, so the decoded table shows the numbers written here.
"""

from __future__ import annotations

from typing import Any

import msgspec

from sglang_envelope.request.deployment import Deployment
from sglang_envelope.request.routing import Bootstrap
from sglang_envelope.response.flat import encode_flat_top_logprobs

__all__ = [
    "DEMO_BOOTSTRAP",
    "DEMO_DEPLOYMENT",
    "DEMO_OUTPUT_TOP_LOGPROBS",
    "DEMO_RID",
    "DEMO_SSE_TRANSCRIPT",
    "SEED_REQUEST",
    "demo_unary_body",
]

#: The client's request: non-streaming, with output top logprobs as flat arrays.
SEED_REQUEST = (
    b'{"input_ids": [1, 2], "stream": false, "return_logprob": true, '
    b'"top_logprobs_num": 2, "return_flat_raw_output_top_logprobs": true}'
)
#: The request id the frontend resolves for it.
DEMO_RID = "req-7"
#: Where the disaggregated pair meets.
DEMO_BOOTSTRAP = Bootstrap(host="10.0.0.7", port=8998, room=4242)
#: The SGLang server the demo's worker serves: a model of 151,936 ids and 32,768 tokens.
DEMO_DEPLOYMENT = Deployment(vocab_size=151_936, context_length=32_768)

#: The top-2 logprobs of the three output tokens, SGLang's nested form.
DEMO_OUTPUT_TOP_LOGPROBS: list[list[tuple[float, int, None]] | None] = [
    [(-0.25, 791, None), (-1.75, 578, None)],
    [(-0.5, 3363, None), (-1.25, 4320, None)],
    [(-0.125, 13, None), (-2.5, 11, None)],
]


def demo_unary_body() -> bytes:
    """SGLang's unary answer to the seed request, with Base64 output-flat fields."""
    flat = encode_flat_top_logprobs(
        DEMO_OUTPUT_TOP_LOGPROBS, side="output", top_logprobs_num=2, b64=True
    )
    meta_info: dict[str, Any] = {
        "id": DEMO_RID,
        "finish_reason": {"type": "length", "length": 3},
        "prompt_tokens": 2,
        "completion_tokens": 3,
        "cached_tokens": 0,
        "input_token_logprobs": [[None, 1, None], [-7.5, 2, None]],
        "output_token_logprobs": [[-0.25, 791, None], [-0.5, 3363, None], [-0.125, 13, None]],
        "input_top_logprobs": [None, [[-2.0, 315, None], [-3.0, 279, None]]],
        **flat,
    }
    return msgspec.json.encode(
        {"text": " The answer.", "output_ids": [791, 3363, 13], "meta_info": meta_info}
    )


#: An incremental SSE stream (each frame holds only what is new), as SGLang writes it.
DEMO_SSE_TRANSCRIPT = (
    b'data: {"text":" The","output_ids":[791],"meta_info":{"id":"req-8","finish_reason":null,'
    b'"prompt_tokens":2,"completion_tokens":1,"cached_tokens":0,'
    b'"output_token_logprobs":[[-0.25,791,null]]}}\n\n'
    b'data: {"text":" answer","output_ids":[3363],"meta_info":{"id":"req-8","finish_reason":null,'
    b'"prompt_tokens":2,"completion_tokens":2,"cached_tokens":0,'
    b'"output_token_logprobs":[[-0.5,3363,null]]}}\n\n'
    b'data: {"text":".","output_ids":[13],"meta_info":{"id":"req-8",'
    b'"finish_reason":{"type":"length","length":3},'
    b'"prompt_tokens":2,"completion_tokens":3,"cached_tokens":0,'
    b'"output_token_logprobs":[[-0.125,13,null]]}}\n\n'
    b"data: [DONE]\n\n"
)
