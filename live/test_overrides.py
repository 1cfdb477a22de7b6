"""SGLang's override headers on a live server: the client's own body, and the engine request.

A server run with ``SGLANG_ENABLE_REQUEST_HEADER_OVERRIDES=1`` reads the rid and
the routed rank from ``x-override-*`` headers, so `Service(header_overrides=True)`
sends the client's bytes as they came; a server run without it ignores them.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from live.servers import LiveServer
from live.test_serve import Recording, frames
from sglang_envelope import Deployment, Routing, Service

BODY = {"rid": "mine", "input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4}}
DEPLOYMENT = Deployment(vocab_size=320, incremental_streaming_output=False)


def served(url: str, body: dict[str, Any], **options: Any) -> tuple[int, bytes, Recording]:
    async def main() -> tuple[int, bytes, Recording]:
        transport = Recording(url)
        async with (
            transport,
            Service(transport, deployment=DEPLOYMENT, header_overrides=True) as svc,
        ):
            answer = await svc.generate(json.dumps(body).encode(), **options)
            return answer.status, b"".join([chunk async for chunk in answer.body]), transport

    return asyncio.run(main())


def test_the_override_rid_names_the_engine_request(overrides_server: LiveServer) -> None:
    status, written, transport = served(overrides_server.url, {**BODY, "stream": True})
    assert status == 200 and all(f["meta_info"]["id"] == "mine" for f in frames(written))
    engine_ids = {f["meta_info"]["id"] for f in frames(bytes(transport.answers[0]))}
    (engine_id,) = engine_ids
    assert engine_id != "mine" and len(engine_id) == 32, "SGLang ran it under the header's rid"


def test_the_override_rank_reaches_sglang(overrides_server: LiveServer) -> None:
    status, written, _ = served(
        overrides_server.url, {**BODY, "stream": True}, routing=Routing(dp_rank=1)
    )
    assert status == 200 and b"routed_dp_rank=1 out of range" in written


def test_output_flat_goes_as_the_client_s_bytes(overrides_server: LiveServer) -> None:
    flat = {**BODY, "return_logprob": True, "top_logprobs_num": 2}
    flat["return_flat_raw_output_top_logprobs"] = True
    status, written, _ = served(overrides_server.url, flat)
    meta = json.loads(written)["meta_info"]
    assert status == 200 and meta["id"] == "mine" and "output_top_logprobs_val_flat" in meta


def test_a_server_without_the_variable_ignores_the_headers(server: LiveServer) -> None:
    _, _, transport = served(server.url, {**BODY, "stream": True})
    engine_ids = {f["meta_info"]["id"] for f in frames(bytes(transport.answers[0]))}
    assert engine_ids == {"mine"}, "the body's own rid: the header was not read"
