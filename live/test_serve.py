"""The serving loop on a live SGLang: docs/frontend.md's apps, and a prefill/decode pair.

The apps run as their readers run them (``uvicorn app_starlette:app``,
``python app_aiohttp.py``), in front of a recording proxy to the live server:
a client that goes away must cause exactly one abort at the engine, and the
engine's answer must end with SGLang's abort finish reason, long before the
generation would have ended by itself (1,000 tokens take about 1.7 s).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from live.pd import PdPair
from live.proxy import recording
from live.servers import LiveServer
from sglang_envelope import Deployment, EngineReply, Routing, Service
from sglang_envelope.adapters.httpx import HttpxTransport
from sglang_envelope.pair import PrefillServer
from tests.apps import APPS, running_app

VOCAB = 320
LONG = {"max_new_tokens": 1000, "ignore_eos": True, "temperature": 0}
#: An abort must end the engine's answer within this long of the client leaving.
WITHIN_S = 1.0


@pytest.mark.parametrize("name", APPS)
def test_a_client_gone_mid_stream_is_aborted_at_the_engine(
    server: LiveServer, tmp_path: Path, name: str
) -> None:
    body = {"input_ids": [5, 6, 7], "sampling_params": LONG, "stream": True}
    with (
        recording(server.url) as (recorder, proxy),
        running_app(name, tmp_path, proxy, VOCAB) as url,
    ):
        with httpx.Client(timeout=30) as client:
            with client.stream("POST", url + "/generate", json=body) as answer:
                assert answer.status_code == 200
                next(answer.iter_raw())  # the first frame, then the client leaves
            left = time.monotonic()
        (generation,) = recorder.wait_ended()
        assert generation.finish_type == "abort"
        assert [abort for _, abort in recorder.aborts] == [{"rid": generation.rid}]
        assert generation.ended is not None and generation.ended - left < WITHIN_S


@pytest.mark.parametrize("name", APPS)
def test_a_unary_client_gone_is_aborted_before_its_answer(
    server: LiveServer, tmp_path: Path, name: str
) -> None:
    body = {"input_ids": [5, 6, 7], "sampling_params": LONG}
    with (
        recording(server.url) as (recorder, proxy),
        running_app(name, tmp_path, proxy, VOCAB) as url,
    ):
        with httpx.Client() as client, pytest.raises(httpx.ReadTimeout):
            client.post(url + "/generate", json=body, timeout=0.4)
        left = time.monotonic()
        (generation,) = recorder.wait_ended()
        assert generation.finish_type == "abort"
        ((aborted_at, abort),) = recorder.aborts
        assert abort == {"rid": generation.rid} and aborted_at - left < WITHIN_S
        assert generation.ended is not None and aborted_at < generation.ended


@pytest.mark.parametrize("name", APPS)
def test_the_apps_answer_as_sglang_does(server: LiveServer, tmp_path: Path, name: str) -> None:
    body = {
        "rid": "mine",
        "input_ids": [5, 6, 7],
        "sampling_params": {"max_new_tokens": 4, "temperature": 0},
    }
    flat = {**body, "return_logprob": True, "top_logprobs_num": 2}
    flat["return_flat_raw_output_top_logprobs"] = True
    with running_app(name, tmp_path, server.url, VOCAB) as url, httpx.Client() as client:
        direct = client.post(server.url + "/generate", json=flat).json()
        answer = client.post(url + "/generate", json=flat)
        assert answer.status_code == 200 and answer.json()["meta_info"]["id"] == "mine"
        assert answer.json()["output_ids"] == direct["output_ids"]
        keys = set(direct["meta_info"]) - {"e2e_latency", "response_sent_to_client_ts"}
        assert keys <= set(answer.json()["meta_info"])
        refused = client.post(url + "/generate", json={**flat, "stream": True})
        sglang = client.post(server.url + "/generate", json={**flat, "stream": True})
        assert (refused.status_code, refused.content) == (sglang.status_code, sglang.content)
        # A prompt holding a list: SGLang's validator refuses it, 400 in either mode.
        nested_bodies = ({"input_ids": [[[5]]]}, {"input_ids": [[5], [6, [7]]], "stream": True})
        for nested in (*nested_bodies, {"input_ids": [5, [6]], "stream": True}):
            mine = client.post(url + "/generate", json=nested)
            theirs = client.post(server.url + "/generate", json=nested)
            assert theirs.status_code == mine.status_code == 400, (nested, mine.text)
            assert mine.headers["content-type"] == theirs.headers["content-type"]
            assert list(mine.json()) == list(theirs.json())
        # Neither a body of no type nor a text one is JSON to SGLang's FastAPI.
        raw = json.dumps(body).encode()
        for headers in ({}, {"content-type": "text/plain"}):
            mine = client.post(url + "/generate", content=raw, headers=headers)
            theirs = client.post(server.url + "/generate", content=raw, headers=headers)
            assert theirs.status_code == mine.status_code == 400, (headers, mine.text)
            assert mine.headers["content-type"] == theirs.headers["content-type"]
            assert list(mine.json()) == list(theirs.json())


class Recording(HttpxTransport):
    """An httpx transport that keeps every answer's bytes and every abort."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.answers: list[bytearray] = []
        self.aborts: list[tuple[float, bytes]] = []

    async def generate(self, body: bytes, headers: Any) -> EngineReply:
        reply = await super().generate(body, headers)
        data = bytearray()
        self.answers.append(data)

        async def chunks() -> Any:
            async for chunk in reply.chunks:
                data.extend(chunk)
                yield chunk

        return EngineReply(reply.status, chunks(), reply.close, reply.headers)

    async def abort(self, body: bytes) -> int:
        self.aborts.append((asyncio.get_running_loop().time(), body))
        return await super().abort(body)


def frames(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(e[6:]) for e in data.split(b"\n\n") if e.startswith(b"data: {")]


def test_a_pair_s_stream_carries_the_prompt_logprobs_an_aggregated_stream_does(
    pd_pair: PdPair, server: LiveServer
) -> None:
    body = {"input_ids": [5, 6, 7, 8], "return_logprob": True, "logprob_start_len": 0}
    body.update(
        top_logprobs_num=2, stream=True, sampling_params={"max_new_tokens": 5, "temperature": 0}
    )
    wire = json.dumps(body).encode()

    async def main() -> tuple[bytes, bytes]:
        deployment = Deployment(vocab_size=VOCAB, incremental_streaming_output=False)
        decode, prefill = HttpxTransport(pd_pair.decode_url), HttpxTransport(pd_pair.prefill_url)
        aggregated = HttpxTransport(server.url)
        pair = PrefillServer(prefill, pd_pair.bootstrap_host, pd_pair.bootstrap_port)
        async with decode, prefill, aggregated:
            async with Service(decode, deployment=deployment, prefill=pair) as svc:
                answer = await svc.generate(wire)
                pd = b"".join([chunk async for chunk in answer.body])
            async with Service(aggregated, deployment=deployment) as svc:
                answer = await svc.generate(wire)
                direct = b"".join([chunk async for chunk in answer.body])
        return pd, direct

    pd, direct = asyncio.run(main())
    pd_frames, direct_frames = frames(pd), frames(direct)
    expected = direct_frames[-1]["meta_info"]
    assert expected["input_token_logprobs"], "the aggregated server's stream carries them"
    for frame in pd_frames:
        for key in ("input_token_logprobs", "input_top_logprobs"):
            assert frame["meta_info"][key] == expected[key]
    assert pd_frames[-1]["output_ids"] == direct_frames[-1]["output_ids"]


@pytest.mark.parametrize("stream", [True, False])
def test_a_decode_leg_refused_up_front_has_its_prefill_leg_aborted_at_once(
    pd_pair: PdPair, stream: bool
) -> None:
    body = json.dumps({"input_ids": [5, 6, 7], "stream": stream}).encode()

    async def main() -> tuple[bytes, Recording, float, float]:
        # No dp_size stated: the library cannot refuse the rank, so SGLang's decode server does.
        deployment = Deployment(vocab_size=VOCAB)
        decode, prefill = HttpxTransport(pd_pair.decode_url), Recording(pd_pair.prefill_url)
        pair = PrefillServer(prefill, pd_pair.bootstrap_host, pd_pair.bootstrap_port)
        loop = asyncio.get_running_loop()
        async with decode, prefill:
            start = loop.time()
            async with Service(decode, deployment=deployment, prefill=pair) as svc:
                answer = await svc.generate(body, routing=Routing(dp_rank=1), prefill_dp_rank=0)
                written = b"".join([chunk async for chunk in answer.body])
            return written, prefill, start, loop.time()

    written, prefill, start, ended = asyncio.run(main())
    assert b"routed_dp_rank=1 out of range" in written
    assert len(prefill.aborts) == 1 and prefill.aborts[0][0] - start < WITHIN_S
    assert ended - start < WITHIN_S + 1.0, "the prefill leg's answer ended soon after"
    assert b'"finish_reason":{"type":"abort"' in bytes(prefill.answers[0])
