"""Routed experts on a live Mixture-of-Experts SGLang: a prefill/decode pair, through the
library, answers what an aggregated server of the same model answers, routed experts included.

The decode server alone zero-fills the prompt's rows of ``meta_info.routed_experts``; the
library's merge (`Service` with a `PrefillServer`, and the piece `merge_prefill`) puts the
prefill server's rows in their place. Every body goes to the aggregated server directly and
to the pair through the library; at temperature 0 the answers must be equal, key order
included (the volatile values aside, `flow.VOLATILE_META`), the routed experts byte for byte.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from live.flow import assert_same, client, direct, through_pd
from live.pd import PdPair
from live.servers import LiveServer
from sglang_envelope import (
    Deployment,
    RequestRejected,
    Service,
    aggregate_sse,
    decode_client_request,
    parse_unary,
)
from sglang_envelope.adapters.httpx import HttpxTransport
from sglang_envelope.pair import PrefillServer, merge_prefill
from sglang_envelope.rollout import continuation_request
from sglang_envelope.routed import decode_routed_experts, encode_routed_experts, join_routed_experts

GREEDY = {"max_new_tokens": 5, "temperature": 0}
#: The pair computes with a KV cache it received: the same tokens and experts, logprobs
#: equal to about 1e-7 (float32).
TOLERANCE = 1e-5
#: name -> (client body, sequences in its answer)
BODIES: dict[str, tuple[dict[str, Any], int]] = {
    "routed": ({"input_ids": [5, 6, 7, 8, 9], "return_routed_experts": True,
                "sampling_params": GREEDY}, 1),
    "from_start_len": ({"input_ids": [5, 6, 7, 8, 9, 10], "return_routed_experts": True,
                        "routed_experts_start_len": 4, "sampling_params": GREEDY}, 1),
    "with_logprobs": ({"input_ids": [21, 22, 23, 24], "return_routed_experts": True,
                       "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 2,
                       "token_ids_logprob": [5, 6], "sampling_params": GREEDY}, 1),
    "n_2": ({"input_ids": [31, 32, 33], "return_routed_experts": True,
             "sampling_params": {**GREEDY, "n": 2}}, 2),
    "batch_2": ({"input_ids": [[41, 42, 43], [44, 45, 46, 47]], "return_routed_experts": True,
                 "sampling_params": GREEDY}, 2),
    "not_asked": ({"input_ids": [5, 6, 7, 8], "sampling_params": GREEDY}, 1),
}  # fmt: skip


def deployment(live: LiveServer) -> Deployment:
    return Deployment.from_server_info(live.server_info, model_config=live.model_config)


async def sglang(live: LiveServer, body: dict[str, Any], n: int) -> list[dict[str, Any]]:
    async with client() as http:
        answer = await direct(http, live.url, json.dumps({**body, "stream": False}).encode())
    assert answer.status == 200, answer.body[:300]
    parsed = parse_unary(answer.body, choices=n) if n > 1 else parse_unary(answer.body)
    return list(parsed) if n > 1 else [dict(parsed)]  # type: ignore[arg-type]


async def served(pair: PdPair, body: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The pair's answer through `Service`, read as SGLang's unary answer (a stream read)."""
    decode, prefill = HttpxTransport(pair.decode_url), HttpxTransport(pair.prefill_url)
    server = PrefillServer(prefill, pair.bootstrap_host, pair.bootstrap_port)
    live = Deployment.from_server_info(pair.server_info, model_config=pair.model_config)
    async with decode, prefill, Service(decode, deployment=live, prefill=server) as service:
        answer = await service.generate(json.dumps(body).encode())
        data = b"".join([chunk async for chunk in answer.body])
    assert answer.status == 200, data[:300]
    if body.get("stream"):
        chunks = [data]
        read = aggregate_sse(chunks, choices=n) if n > 1 else aggregate_sse(chunks)
    else:
        read = parse_unary(data, choices=n) if n > 1 else parse_unary(data)
    return list(read) if n > 1 else [dict(read)]  # type: ignore[arg-type]


def check_rows(answer: dict[str, Any], shape: tuple[int, int] | None) -> None:
    """The string decodes into rows of the model's shape and back, byte for byte."""
    assert shape is not None
    text = answer["meta_info"]["routed_experts"]
    rows = decode_routed_experts(text, layers=shape[0], top_k=shape[1])
    assert encode_routed_experts(rows) == text


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", list(BODIES))
def test_the_pair_through_the_service_answers_as_the_aggregated_server(
    moe_pair: PdPair, moe_server: LiveServer, name: str, stream: bool
) -> None:
    body, n = BODIES[name]
    want = asyncio.run(sglang(moe_server, {**body, "rid": "job"}, n))
    got = asyncio.run(served(moe_pair, {**body, "rid": "job", "stream": stream}, n))
    shape = deployment(moe_server).routed_experts_shape
    assert shape == (2, 2)
    for mine, theirs in zip(got, want, strict=True):
        assert_same(mine, theirs, tolerance=TOLERANCE)
        asked = body.get("return_routed_experts", False)
        assert ("routed_experts" in mine["meta_info"]) is asked
        if asked:
            assert mine["meta_info"]["routed_experts"] == theirs["meta_info"]["routed_experts"]
            check_rows(mine, shape)


@pytest.mark.parametrize("name", ["routed", "from_start_len", "with_logprobs"])
def test_the_pieces_merge_the_legs_into_the_aggregated_answer(
    moe_pair: PdPair, moe_server: LiveServer, name: str
) -> None:
    body, _ = BODIES[name]
    data = json.dumps({**body, "stream": False}).encode()

    async def legs() -> Any:
        async with client() as http:
            bootstrap = (moe_pair.bootstrap_host, moe_pair.bootstrap_port)
            return await through_pd(
                http, moe_pair.prefill_url, moe_pair.decode_url, data, bootstrap
            )

    got = asyncio.run(legs())
    (want,) = asyncio.run(sglang(moe_server, body, 1))
    decode = got.decode.json()  # the decode leg's answer, finalized for its client
    start = body.get("routed_experts_start_len", 0)
    rows = decode_routed_experts(decode["meta_info"]["routed_experts"], layers=2, top_k=2)
    prompt = len(body["input_ids"]) - start
    assert rows[:prompt] == [[[0, 0], [0, 0]]] * prompt  # what the decode leg alone gives
    merged = merge_prefill(
        got.prefill, decode, routed_experts_start_len=start, routed_experts_shape=(2, 2)
    )
    assert merged["meta_info"]["routed_experts"] == want["meta_info"]["routed_experts"]
    for leg in (got.prefill, decode, merged):
        check_rows(leg, (2, 2))


def test_a_continuation_after_an_abort_joins_into_the_uninterrupted_rows(
    moe_server: LiveServer,
) -> None:
    long = {"max_new_tokens": 40, "temperature": 0, "ignore_eos": True}
    body = {"input_ids": [51, 52, 53, 54], "return_routed_experts": True, "sampling_params": long}

    async def cut_short() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with httpx.AsyncClient(timeout=60) as http:
            url = f"{moe_server.url}/generate"
            chunks: list[bytes] = []
            stream = {**body, "rid": "cut", "stream": True}
            async with http.stream("POST", url, json=stream) as reply:
                async for chunk in reply.aiter_bytes():
                    chunks.append(chunk)
                    if len(chunks) == 3:
                        await http.post(f"{moe_server.url}/abort_request", json={"rid": "cut"})
            whole = (await http.post(url, json=body)).json()
        first = dict(aggregate_sse(chunks))
        follow = continuation_request(first, decode_client_request(json.dumps(body).encode()))
        transport = HttpxTransport(moe_server.url)
        async with transport, Service(transport, deployment=deployment(moe_server)) as service:
            answer = await service.generate(follow)
            rest = json.loads(b"".join([chunk async for chunk in answer.body]))
        return first, rest, whole

    first, rest, whole = asyncio.run(cut_short())
    assert first["meta_info"]["finish_reason"]["type"] == "abort"
    assert 0 < len(first["output_ids"]) < 40
    assert first["output_ids"] + rest["output_ids"] == whole["output_ids"]
    parts = [first["meta_info"]["routed_experts"], rest["meta_info"]["routed_experts"]]
    assert join_routed_experts(parts) == whole["meta_info"]["routed_experts"]


def test_start_len_past_the_prompt_is_refused_before_dispatch_in_sglang_s_words(
    moe_server: LiveServer,
) -> None:
    body = {"input_ids": [5, 6, 7], "return_routed_experts": True, "routed_experts_start_len": 5}

    async def sglang_error() -> str:
        async with client() as http:
            answer = await direct(http, moe_server.url, json.dumps(body).encode())
        assert answer.status == 400
        message: str = json.loads(answer.body)["error"]["message"]
        return message

    with pytest.raises(RequestRejected) as refused:
        decode_client_request(json.dumps(body).encode())
    assert refused.value.code == "routed_experts_start_len_past_prompt"
    assert refused.value.message == asyncio.run(sglang_error())


def test_a_server_without_the_flag_is_asked_for_none(server: LiveServer) -> None:
    body = {"input_ids": [5, 6, 7], "return_routed_experts": True, "sampling_params": GREEDY}

    async def sglang_answer() -> dict[str, Any]:
        async with client() as http:
            answer = await direct(http, server.url, json.dumps(body).encode())
        assert answer.status == 200
        return dict(parse_unary(answer.body))

    assert "routed_experts" not in asyncio.run(sglang_answer())["meta_info"]  # SGLang: silence
    live = deployment(server)
    assert live.enable_return_routed_experts is False

    async def through_service() -> tuple[int, bytes]:
        transport = HttpxTransport(server.url)
        async with transport, Service(transport, deployment=live) as service:
            answer = await service.generate(json.dumps(body).encode())
            return answer.status, b"".join([chunk async for chunk in answer.body])

    status, data = asyncio.run(through_service())
    assert status == 400 and b"--enable-return-routed-experts" in data
