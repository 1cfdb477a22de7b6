"""`Service` serving many sequences on a live SGLang: n > 1 and batches, one request a sequence.

Each body goes to SGLang directly (unary, read with ``choices=``) and through the
service (unary and streamed); at temperature 0 the service's answer must equal
SGLang's own, sequence by sequence, with the same keys in the same order (but the
volatile values, `flow.VOLATILE_META`). A client that leaves a stream of n
samples must get every sample aborted at the engine, and a prefill/decode pair
must serve n samples, each with a bootstrap room of its own.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from live.flow import assert_same, client, direct
from live.pd import PdPair
from live.proxy import recording
from live.servers import LiveServer
from live.test_choices import BODIES, TOLERANCE
from sglang_envelope import Deployment, Service, aggregate_sse, parse_unary
from sglang_envelope.adapters.httpx import HttpxTransport
from sglang_envelope.pair import PrefillServer

SERVERS = pytest.mark.parametrize("any_server", ["server", "incremental_server"], indirect=True)
LONG = {"max_new_tokens": 1000, "ignore_eos": True, "temperature": 0}


def _deployment(live: LiveServer) -> Deployment:
    return Deployment.from_server_info(live.server_info, model_config=live.model_config)


async def _served(live: LiveServer, body: dict[str, Any]) -> tuple[int, bytes]:
    transport = HttpxTransport(live.url)
    async with transport, Service(transport, deployment=_deployment(live)) as svc:
        answer = await svc.generate(json.dumps(body).encode())
        return answer.status, b"".join([chunk async for chunk in answer.body])


async def _sglang(live: LiveServer, body: dict[str, Any]) -> bytes:
    async with client() as http:
        answer = await direct(http, live.url, json.dumps({**body, "stream": False}).encode())
    assert answer.status == 200, answer.body[:300]
    return answer.body


@SERVERS
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", list(BODIES))
def test_the_service_answers_as_sglang_does_sequence_by_sequence(
    any_server: LiveServer, name: str, stream: bool
) -> None:
    body, n = BODIES[name]
    body = {**body, "rid": "job", "stream": stream}
    want = parse_unary(asyncio.run(_sglang(any_server, body)), choices=n)
    status, data = asyncio.run(_served(any_server, body))
    assert status == 200, data[:300]
    if stream:
        assert data.endswith(b"data: [DONE]\n\n") and data.count(b"[DONE]") == 1
        got = aggregate_sse([data], choices=n)
    else:
        got = parse_unary(data, choices=n)
    assert len(got) == len(want) == n
    for mine, theirs in zip(got, want, strict=True):
        assert_same(dict(mine), dict(theirs), tolerance=TOLERANCE)
    rids = [answer["meta_info"]["id"] for answer in got]
    prompts = len(body["input_ids"]) if isinstance(body["input_ids"][0], list) else 1
    per = n // prompts  # sample k of prompt i is named f"{rid}_{k}" after the prompt's rid
    named = [f"job_{k // per}_{k}" if prompts > 1 and per > 1 else f"job_{k}" for k in range(n)]
    assert rids == named
    if not body["sampling_params"].get("n"):  # a batch: SGLang's own rids are the same
        assert rids == [answer["meta_info"]["id"] for answer in want]


def test_a_batch_whose_rid_list_comes_first_answers_as_sglang_does(server: LiveServer) -> None:
    # The rid list before the prompts: a one-prompt decode trips on the rid first.
    greedy = {"max_new_tokens": 4, "temperature": 0}
    prompts = [[1, 2, 3], [40, 41]]
    body = {"rid": ["first", "second"], "input_ids": prompts, "sampling_params": greedy}
    assert list(body) == ["rid", "input_ids", "sampling_params"]
    want = parse_unary(asyncio.run(_sglang(server, body)), choices=2)
    status, data = asyncio.run(_served(server, body))
    assert status == 200, data[:300]
    got = parse_unary(data, choices=2)
    for mine, theirs in zip(got, want, strict=True):
        assert_same(dict(mine), dict(theirs), tolerance=TOLERANCE)
    assert [answer["meta_info"]["id"] for answer in got] == ["first", "second"]


def test_a_streaming_client_gone_aborts_every_sample(server: LiveServer) -> None:
    body = {"input_ids": [5, 6, 7], "stream": True, "sampling_params": {**LONG, "n": 3}}

    async def main(proxy: str) -> float:
        transport = HttpxTransport(proxy)
        async with transport, Service(transport, deployment=_deployment(server)) as svc:
            answer = await svc.generate(json.dumps(body).encode())
            assert b'"index":' in await anext(answer.body)
            await answer.body.aclose()
            return time.monotonic()

    with recording(server.url) as (recorder, proxy):
        left = asyncio.run(main(proxy))
        generations = recorder.wait_ended(3)
    assert [g.finish_type for g in generations] == ["abort"] * 3
    assert sorted(str(a["rid"]) for _, a in recorder.aborts) == sorted(g.rid for g in generations)
    assert all(g.ended is not None and g.ended - left < 1.0 for g in generations)


def test_a_pair_serves_n_samples_each_with_its_own_room(
    pd_pair: PdPair, server: LiveServer
) -> None:
    sampling = {"max_new_tokens": 5, "n": 2, "temperature": 0}
    body = {"rid": "pd", "input_ids": [5, 6, 7, 8], "sampling_params": sampling}

    async def main() -> tuple[bytes, list[dict[str, Any]]]:
        sent: list[dict[str, Any]] = []

        class Recording(HttpxTransport):
            async def generate(self, data: bytes, headers: Any) -> Any:
                sent.append(json.loads(data))
                return await super().generate(data, headers)

        decode, prefill = HttpxTransport(pd_pair.decode_url), Recording(pd_pair.prefill_url)
        pair = PrefillServer(prefill, pd_pair.bootstrap_host, pd_pair.bootstrap_port)
        async with decode, prefill:
            deployment = Deployment(vocab_size=320)
            async with Service(decode, deployment=deployment, prefill=pair) as svc:
                answer = await svc.generate(json.dumps(body).encode())
                return b"".join([chunk async for chunk in answer.body]), sent

    data, sent = asyncio.run(main())
    got = parse_unary(data, choices=2)
    want = parse_unary(asyncio.run(_sglang(server, body)), choices=2)
    assert [a["output_ids"] for a in got] == [a["output_ids"] for a in want]
    assert [a["meta_info"]["id"] for a in got] == ["pd_0", "pd_1"]
    assert len({request["bootstrap_room"] for request in sent}) == 2


def test_too_many_sequences_are_refused_before_dispatch(server: LiveServer) -> None:
    body = {"input_ids": [5], "sampling_params": {"n": 5000}}
    status, data = asyncio.run(_served(server, body))
    assert status == 400 and b"5000" in data
    with httpx.Client() as http:
        assert http.get(server.url + "/health").status_code == 200
