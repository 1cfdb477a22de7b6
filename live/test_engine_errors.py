"""SGLang's errors after dispatch reach the client as SGLang writes them, in both modes.

With the context length not known to the deployment (only its vocabulary), a
prompt longer than the context goes to SGLang, which refuses it after dispatch:
through the README worker the client gets SGLang's own status, content type and
body bytes, an error frame and ``[DONE]`` for a streaming client.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx

from live.flow import Answer, body_of, client, collect, direct
from sglang_envelope import (
    Deployment,
    EnvelopeError,
    Role,
    aggregate_sse_async,
    build_engine_request,
    decode_client_request,
    error_response,
    parse_unary,
    relay_sse_async,
    to_worker_envelope,
)

#: The vocabulary only: the context is left to SGLang.
VOCABULARY_ONLY = Deployment(vocab_size=320)
TOO_LONG = {"input_ids": [5] * 1100, "sampling_params": {"max_new_tokens": 4}}


async def worker(http: httpx.AsyncClient, url: str, body: bytes) -> Answer:
    """The README's worker, with its frontend's error answer."""
    request = decode_client_request(body)
    envelope = to_worker_envelope(request, rid=uuid.uuid4().hex)
    engine = build_engine_request(
        envelope, input_ids=request.input_ids, role=Role.AGGREGATED, deployment=VOCABULARY_ONLY
    )
    sent = http.build_request("POST", f"{url}/generate", content=engine.to_json(),
                              headers=engine.headers)  # fmt: skip
    answer = await http.send(sent, stream=True)
    try:
        if envelope.stream and answer.status_code == 200:
            relayed = await collect(relay_sse_async(answer.aiter_bytes()))
            return Answer(200, "text/event-stream; charset=utf-8", relayed)
        try:
            if engine.stream and answer.status_code == 200:
                await aggregate_sse_async(answer.aiter_bytes())
            else:
                parse_unary(await answer.aread(), status=answer.status_code)
        except EnvelopeError as exc:
            return Answer(*error_response(exc, stream=envelope.stream))
        raise AssertionError("SGLang answered a prompt longer than its context")
    finally:
        await answer.aclose()


async def _both(url: str, body: bytes) -> tuple[Answer, Answer]:
    async with client() as http:
        return await worker(http, url, body), await direct(http, url, body)


def test_a_refusal_after_dispatch_is_sglang_s_in_both_modes(server: Any) -> None:
    for stream in (False, True):
        got, want = asyncio.run(_both(server.url, body_of({**TOO_LONG, "stream": stream})))
        assert b"longer than the model's context length" in want.body
        assert (got.status, got.content_type, got.body) == (
            want.status, want.content_type, want.body,
        )  # fmt: skip
    assert server.alive()
