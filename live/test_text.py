"""A text prompt (`Target(input="text")`) through the library answers what SGLang answers.

The default server has a tokenizer. A `text` body posted directly and the same body
through the library (decoded for the text target, the envelope's wire form, an
aggregated worker posting `to_json()`) get equal answers at temperature 0, compared as
`test_answers.py` compares them. A body with neither `text` nor `input_ids` is refused by
the library in SGLang's words, and by SGLang with them; one with both is served by both
(SGLang serves the ids). A batch of texts through `Service` gets SGLang's own array:
the same output ids and rids, item by item.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from live.flow import assert_same, body_of, direct_once, final_state, library_and_direct
from live.servers import LiveServer
from sglang_envelope import (
    Deployment,
    RequestRejected,
    Service,
    Target,
    build_engine_request,
    decode_client_request,
    to_worker_envelope,
)
from sglang_envelope.adapters.httpx import HttpxTransport

TEXT = Target(input="text")
GREEDY = {"temperature": 0, "max_new_tokens": 12}
BODIES: dict[str, dict[str, Any]] = {
    "text": {"text": "The quick brown fox", "sampling_params": GREEDY},
    "text_logprobs": {
        "text": "Once upon a time",
        "sampling_params": GREEDY,
        "return_logprob": True,
        "top_logprobs_num": 2,
        "logprob_start_len": 0,
    },
    "text_null_media": {"text": "Hello", "image_data": None, "sampling_params": GREEDY},
    "text_and_ids": {"text": "Hello", "input_ids": [5, 6, 7], "sampling_params": GREEDY},
}


@pytest.mark.parametrize("name", list(BODIES))
def test_a_text_request_answers_as_sglang_does(server: LiveServer, name: str) -> None:
    got, want = asyncio.run(
        library_and_direct(server.url, body_of({**BODIES[name], "stream": False}), TEXT)
    )
    assert (want.status, got.status) == (200, 200)
    assert want.json()["meta_info"]["finish_reason"] == {"type": "length", "length": 12}
    assert_same(got.json(), want.json())


def test_a_streamed_text_request_answers_as_sglang_does(server: LiveServer) -> None:
    got, want = asyncio.run(
        library_and_direct(server.url, body_of({**BODIES["text"], "stream": True}), TEXT)
    )
    assert (want.status, got.status) == (200, 200)
    assert_same(
        final_state(got.frames(), incremental=False), final_state(want.frames(), incremental=False)
    )


def test_a_body_without_a_prompt_is_refused_in_sglangs_words(server: LiveServer) -> None:
    body = body_of({"sampling_params": GREEDY})
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(body, target=TEXT)
    assert caught.value.code == "no_input"

    want = asyncio.run(direct_once(server.url, body))
    assert want.status == 400
    answer = json.loads(want.body)
    assert caught.value.message in json.dumps(answer)
    assert caught.value.message == "Either text, input_ids or input_embeds should be provided."


def test_a_server_without_a_tokenizer_refuses_text_as_the_library_does(
    skip_tokenizer_server: LiveServer,
) -> None:
    server = skip_tokenizer_server
    body = body_of({"text": "Hello", "sampling_params": GREEDY, "stream": False})
    deployment = Deployment.from_server_info(server.server_info, model_config=server.model_config)
    envelope = to_worker_envelope(decode_client_request(body, target=TEXT), rid="r1")
    with pytest.raises(RequestRejected) as caught:
        build_engine_request(envelope, input_ids=None, role="aggregated", deployment=deployment)
    assert caught.value.code == "text_needs_tokenizer"

    want = asyncio.run(direct_once(server.url, body))
    assert want.status == 400
    assert caught.value.message in want.body.decode()


def test_a_text_batch_through_the_service_answers_as_sglang_does(server: LiveServer) -> None:
    body = body_of({"text": ["The quick brown fox", "Once upon a time"], "rid": "tb",
                    "sampling_params": GREEDY, "stream": False})  # fmt: skip

    async def both() -> tuple[int, bytes, Any]:
        want = await direct_once(server.url, body)
        transport = HttpxTransport(server.url)
        deployment = Deployment.from_server_info(
            server.server_info, model_config=server.model_config
        )
        async with transport, Service(transport, deployment=deployment, target=TEXT) as svc:
            answer = await svc.generate(body)
            return answer.status, b"".join([chunk async for chunk in answer.body]), want

    status, data, want = asyncio.run(both())
    assert (want.status, status) == (200, 200), data[:300]
    got, theirs = json.loads(data), want.json()
    assert len(got) == len(theirs) == 2
    assert [item["output_ids"] for item in got] == [item["output_ids"] for item in theirs]
    ids = [item["meta_info"]["id"] for item in got]
    assert ids == [item["meta_info"]["id"] for item in theirs] == ["tb_0", "tb_1"]
