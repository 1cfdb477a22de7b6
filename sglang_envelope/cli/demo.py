"""`sglang-envelope demo`: the whole job on built-in data, as readable text.

The data: one request, one unary answer, one SSE stream; then `Service`, the
whole serving loop, answering a request of its own against `FakeEngine`, a fake
SGLang called in this process (`InProcess`: no socket, no HTTP client).

The unary answer's Base64 output-flat fields are made at run time by the
library's own `encode_flat_top_logprobs`, so they are always what SGLang would
write for `DEMO_OUTPUT_TOP_LOGPROBS`. Logprobs are binary fractions, which
float32 holds exactly, so the decoded table shows the numbers written here.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import msgspec

from sglang_envelope import Service, read_deployment
from sglang_envelope.cli.common import EXIT_OK, Commands, Parser, add_command, encoder
from sglang_envelope.errors.answers import error_response
from sglang_envelope.errors.exceptions import RequestRejected
from sglang_envelope.request.deployment import Deployment
from sglang_envelope.request.engine import ROLE_PLANS, Role, build_engine_request
from sglang_envelope.request.envelope import encode_envelope, to_worker_envelope
from sglang_envelope.request.routing import Bootstrap
from sglang_envelope.request.types import decode_client_request
from sglang_envelope.response.aggregate import aggregate_sse, parse_unary
from sglang_envelope.response.flat import (
    decode_flat_top_logprobs,
    encode_flat_top_logprobs,
)
from sglang_envelope.response.relay import relay_sse

__all__ = [
    "DEMO_BOOTSTRAP",
    "DEMO_DEPLOYMENT",
    "DEMO_OUTPUT_TOP_LOGPROBS",
    "DEMO_RID",
    "DEMO_SERVICE_REQUEST",
    "DEMO_SSE_TRANSCRIPT",
    "SEED_REQUEST",
    "add_demo",
    "cmd_demo",
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
        "output_token_logprobs": [
            [-0.25, 791, None],
            [-0.5, 3363, None],
            [-0.125, 13, None],
        ],
        "input_top_logprobs": [None, [[-2.0, 315, None], [-3.0, 279, None]]],
        **flat,
    }
    return msgspec.json.encode(
        {"text": " The answer.", "output_ids": [791, 3363, 13], "meta_info": meta_info}
    )


#: An incremental SSE stream (each frame holds only what is new), as SGLang writes it.
DEMO_SSE_TRANSCRIPT = (
    b'data: {"text":" The","output_ids":[791],"meta_info":{"id":"req-8",'
    b'"finish_reason":null,"prompt_tokens":2,"completion_tokens":1,"cached_tokens":0,'
    b'"output_token_logprobs":[[-0.25,791,null]]}}\n\n'
    b'data: {"text":" answer","output_ids":[3363],"meta_info":{"id":"req-8",'
    b'"finish_reason":null,"prompt_tokens":2,"completion_tokens":2,"cached_tokens":0,'
    b'"output_token_logprobs":[[-0.5,3363,null]]}}\n\n'
    b'data: {"text":".","output_ids":[13],"meta_info":{"id":"req-8",'
    b'"finish_reason":{"type":"length","length":3},'
    b'"prompt_tokens":2,"completion_tokens":3,"cached_tokens":0,'
    b'"output_token_logprobs":[[-0.125,13,null]]}}\n\n'
    b"data: [DONE]\n\n"
)


#: The request `Service` answers, against the fake engine.
DEMO_SERVICE_REQUEST = (
    b'{"rid": "mine", "input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 3}}'
)


# --- the command ----------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    """The whole job on built-in data, as readable text."""
    _demo_request()
    _demo_rejection()
    _demo_unary()
    _demo_stream()
    asyncio.run(_demo_service())
    return EXIT_OK


def add_demo(commands: Commands[Parser]) -> None:
    demo = add_command(
        commands,
        "demo",
        "show the whole job on built-in data",
        "Show, on built-in data: a request becoming a worker envelope and the engine "
        "request for each role; the same request with stream true, rejected; a unary "
        "response's Base64 flat top logprobs decoded; an SSE transcript aggregated, "
        "and relayed to a streaming client; Service answering a request against a "
        "fake SGLang in this process.",
    )
    demo.set_defaults(run=cmd_demo)


def _heading(text: str) -> None:
    print()
    print(f"== {text}")


def _json(value: Any) -> str:
    return encoder.encode(value).decode()


def _demo_request() -> None:
    print("sglang-envelope demo: one request through the frontend, the worker and back")
    _heading("1. The client's request")
    print(f"  {SEED_REQUEST.decode()}")
    request = decode_client_request(SEED_REQUEST)
    envelope = to_worker_envelope(request, rid=DEMO_RID)
    stream = _json(envelope.stream)
    _heading(f"2. The worker envelope (rid {DEMO_RID!r}): stream stays {stream}")
    print(f"  {encode_envelope(envelope).decode()}")
    _heading("3. The engine request for each role")
    for role in Role:
        bootstrap = DEMO_BOOTSTRAP if ROLE_PLANS[role].needs_bootstrap else None
        engine = build_engine_request(
            envelope,
            input_ids=request.input_ids,
            role=role,
            deployment=DEMO_DEPLOYMENT,
            bootstrap=bootstrap,
        )
        print(f"  {role.value}: stream {_json(engine.stream)}, Accept: {engine.accept}")
        print(f"    {engine.to_json().decode()}")
    print(
        "  (prefill streams, drops output-flat, which decode provides, "
        "and makes one token)"
    )


def _demo_rejection() -> None:
    _heading('4. The same request with "stream": true')
    streaming = SEED_REQUEST.replace(b'"stream": false', b'"stream": true')
    try:
        decode_client_request(streaming)
    except RequestRejected as error:
        print(f"  rejected: code {error.code}, field {error.field}")
        print(f"  {error.message}")
        status, content_type, body = error_response(error, stream=True)
        answered = f"{status} {content_type}"
        print(f"  the client's answer (error_response, stream=True): {answered}")
        for event in body.decode().split("\n\n")[:-1]:
            print(f"    {event}")
    else:  # pragma: no cover -- the rule table says otherwise
        raise AssertionError("the streaming request was accepted")


def _demo_unary() -> None:
    _heading("5. A unary response with Base64 output-flat fields")
    meta_info = parse_unary(demo_unary_body())["meta_info"]
    for key, value in meta_info.items():
        if key.startswith("output_top_logprobs_"):
            print(f"  {key}: {_json(value)}")
    flat = decode_flat_top_logprobs(meta_info, side="output")
    assert flat is not None  # the demo body has them
    print()
    print(f"  {'position':>8}  {'token id':>8}  {'logprob':>8}")
    for position, row in enumerate(flat.to_nested()):
        for logprob, token_id, _text in row or ():
            print(f"  {position:>8}  {token_id:>8}  {logprob:>8.4f}")


def _demo_stream() -> None:
    _heading("6. An SSE transcript (incremental frames), aggregated")
    for line in DEMO_SSE_TRANSCRIPT.decode().splitlines():
        if line:
            print(f"  {line}")
    print("  final response:")
    print(f"  {_json(aggregate_sse([DEMO_SSE_TRANSCRIPT]))}")
    _heading(
        "7. The same stream relayed to a streaming client (cumulative, SGLang's default)"
    )
    events = [event + b"\n\n" for event in DEMO_SSE_TRANSCRIPT.split(b"\n\n") if event]
    for line in b"".join(relay_sse(events)).decode().splitlines():
        if line:
            print(f"  {line}")


async def _demo_service() -> None:
    # Imported here: the other commands need no fake engine.
    from sglang_envelope.cli.in_process import InProcess
    from sglang_envelope.testing import FakeEngine

    _heading("8. Service, the whole loop, against a fake SGLang in this process")
    engine = FakeEngine()
    transport = InProcess(engine)
    config = encoder.encode(engine.model_config())
    deployment = await read_deployment(transport, model_config=config)
    print(
        "  read_deployment (GET /get_server_info and config.json): "
        f"vocab_size {deployment.vocab_size}, context_length {deployment.context_length}"
    )
    async with Service(transport, deployment=deployment) as service:
        print(f"  POST /generate {DEMO_SERVICE_REQUEST.decode()}")
        answer = await service.generate(DEMO_SERVICE_REQUEST)
        body = b"".join([chunk async for chunk in answer.body])
        print(f"  {answer.status} {answer.media_type}: {body.decode()}")
    (sent,) = engine.requests
    engine = msgspec.json.decode(sent)
    print(
        f"  (the engine request: rid {engine['rid']!r}, the service's own, stream "
        f"{_json(engine['stream'])}; the client got one body, under its own rid)"
    )
