"""The rollout controls against a live SGLang: abort all during three concurrent streams,
the drain, pause and continue, a continuation that completes an aborted generation, and
docs/rollout.md's own rollout loop.

The suite's own server runs them (abort all ends every request on the server, so do not
point these tests at a server others are using).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import msgspec

from live.flow import TIMEOUT, client, sender
from live.servers import LiveServer
from sglang_envelope import aggregate_sse, decode_client_request, parse_unary, read_deployment
from sglang_envelope.adapters.httpx import HttpxTransport
from sglang_envelope.rollout import (
    DrainPolicy,
    WeightVersionSpan,
    continuation_request,
    engine_idle,
    plan_abort_all,
    plan_continue,
    plan_drain,
    plan_pause,
    run_drain,
)
from tests.test_docs import run_blocks

ROLLOUT_PAGE = Path(__file__).resolve().parent.parent / "docs" / "rollout.md"
LONG = {"max_new_tokens": 900, "ignore_eos": True, "temperature": 0}
JSON = {"Content-Type": "application/json"}


async def stream_of(
    http: httpx.AsyncClient, url: str, rid: str, seen: asyncio.Event, max_new_tokens: int
) -> bytes:
    """A streaming generation's whole answer; `seen` is set at its first chunk."""
    params = {**LONG, "max_new_tokens": max_new_tokens}
    body = {"input_ids": [5, 6, 7], "rid": rid, "stream": True, "sampling_params": params}
    chunks: list[bytes] = []
    async with http.stream("POST", f"{url}/generate", json=body) as answer:
        async for chunk in answer.aiter_bytes():
            chunks.append(chunk)
            seen.set()
    return b"".join(chunks)


async def three_streams(
    http: httpx.AsyncClient, url: str, max_new_tokens: int = 900
) -> list[asyncio.Task[bytes]]:
    seen = [asyncio.Event() for _ in range(3)]
    tasks = [
        asyncio.create_task(stream_of(http, url, f"rollout-{i}-{id(seen)}", event, max_new_tokens))
        for i, event in enumerate(seen)
    ]
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in seen)), 60)
    return tasks


def test_abort_all_ends_three_concurrent_streams_with_abort(server: LiveServer) -> None:
    async def main() -> list[Any]:
        async with client() as http:
            streams = await three_streams(http, server.url)
            plan = plan_abort_all()
            status = await sender(http, server.url)(plan.body)
            assert status == 200
            return [aggregate_sse([await stream]) for stream in streams]

    for response in asyncio.run(main()):
        assert response["meta_info"]["finish_reason"]["type"] == "abort"
        assert response["meta_info"]["completion_tokens"] < LONG["max_new_tokens"]


def test_a_drain_leaves_the_engine_idle(server: LiveServer) -> None:
    async def main() -> tuple[Any, list[Any], bytes]:
        async with client() as http:
            streams = await three_streams(http, server.url)
            plan = plan_drain(policy=DrainPolicy(retry_every_s=0.5, deadline_s=30))

            async def get_loads() -> bytes:
                return (await http.get(f"{server.url}{plan.loads_path}")).content

            outcome = await run_drain(plan, sender(http, server.url), get_loads)
            answers = [aggregate_sse([await stream]) for stream in streams]
            return outcome, answers, await get_loads()

    outcome, answers, loads = asyncio.run(main())
    assert outcome.idle and outcome.stopped == "idle", outcome
    assert [a["meta_info"]["finish_reason"]["type"] for a in answers] == ["abort"] * 3
    assert engine_idle(loads)
    assert set(json.loads(loads)) >= {"timestamp", "version", "loads"}


def test_pause_in_abort_mode_then_continue(server: LiveServer) -> None:
    async def main() -> tuple[list[Any], Any, Any, Any]:
        async with client() as http:
            streams = await three_streams(http, server.url)
            pause, resume = plan_pause(), plan_continue()
            paused = await http.post(f"{server.url}{pause.path}", content=pause.body, headers=JSON)
            answers = [aggregate_sse([await stream]) for stream in streams]
            resumed = await http.post(
                f"{server.url}{resume.path}", content=resume.body, headers=JSON
            )
            after = await http.post(
                f"{server.url}/generate",
                json={"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4}},
            )
            return answers, paused, resumed, parse_unary(after.content)

    answers, paused, resumed, after = asyncio.run(main())
    assert paused.status_code == 200 and paused.json()["status"] == "ok"
    assert [a["meta_info"]["finish_reason"]["type"] for a in answers] == ["abort"] * 3
    assert resumed.status_code == 200 and resumed.json()["status"] == "ok"
    assert after["meta_info"]["finish_reason"]["type"] == "length"


def test_a_continuation_after_an_abort_completes_the_generation(server: LiveServer) -> None:
    params = {"max_new_tokens": 300, "ignore_eos": True, "temperature": 0}
    first = decode_client_request(
        {"input_ids": [5, 6, 7], "rid": "continued-1", "stream": True, "sampling_params": params}
    )

    async def main() -> tuple[Any, Any, Any]:
        async with client() as http:
            seen = asyncio.Event()

            async def stream() -> bytes:
                chunks = []
                async with http.stream(
                    "POST",
                    f"{server.url}/generate",
                    content=msgspec.json.encode(first),
                    headers=JSON,
                ) as answer:
                    async for chunk in answer.aiter_bytes():
                        chunks.append(chunk)
                        seen.set()
                return b"".join(chunks)

            task = asyncio.create_task(stream())
            await asyncio.wait_for(seen.wait(), 60)
            await asyncio.sleep(0.1)
            await sender(http, server.url)(b'{"rid":"continued-1"}')
            part = aggregate_sse([await task])
            then = continuation_request(part, first)
            rest = await http.post(
                f"{server.url}/generate", content=msgspec.json.encode(then), headers=JSON
            )
            whole = await http.post(
                f"{server.url}/generate",
                json={"input_ids": [5, 6, 7], "rid": "continued-2", "sampling_params": params},
            )
            return part, aggregate_sse([rest.content]), parse_unary(whole.content)

    part, rest, whole = asyncio.run(main())
    assert part["meta_info"]["finish_reason"]["type"] == "abort"
    made = len(part["output_ids"])
    assert 0 < made < 300
    assert rest["meta_info"]["finish_reason"]["type"] == "length"
    assert part["output_ids"] + rest["output_ids"] == whole["output_ids"]


def test_sglang_takes_the_weight_versions_the_plan_sends_and_not_another_shape(
    server: LiveServer,
) -> None:
    spans = (WeightVersionSpan(version="step-3", start=0, end=12),)

    async def main() -> tuple[int, int]:
        async with client() as http:
            send = sender(http, server.url)
            taken = await send(plan_abort_all(weight_versions=spans).body)
            refused = await send(b'{"abort_all":true,"weight_versions":[["step-3",0,12]]}')
            return taken, refused

    taken, refused = asyncio.run(main())
    assert (taken, refused) == (200, 400)


def test_pause_in_retract_mode_holds_a_stream_until_continued(server: LiveServer) -> None:
    async def main() -> tuple[list[Any], bool]:
        async with client() as http:
            streams = await three_streams(http, server.url, max_new_tokens=400)
            pause, resume = plan_pause("retract"), plan_continue()
            await http.post(f"{server.url}{pause.path}", content=pause.body, headers=JSON)
            await asyncio.sleep(1.0)
            held = not any(stream.done() for stream in streams)
            await http.post(f"{server.url}{resume.path}", content=resume.body, headers=JSON)
            return [aggregate_sse([await stream]) for stream in streams], held

    answers, held = asyncio.run(main())
    assert held
    for answer in answers:
        assert answer["meta_info"]["finish_reason"] == {"type": "length", "length": 400}


def test_the_rollout_loop_of_the_docs_runs_against_sglang(server: LiveServer) -> None:
    """docs/rollout.md's `rollout`, as the page writes it (its blocks run first as test_docs
    runs them, on the fake engine), against the real server, described by itself: it waits
    for the 8 samples in SGLang's own /v1/loads (the server runs 4 at once and queues the
    rest), drains, and continues each sample to its length (`ignore_eos`: none ends by
    itself before the drain)."""
    rollout = run_blocks(ROLLOUT_PAGE)["rollout"]
    sampling = {"max_new_tokens": 400, "temperature": 1.0, "ignore_eos": True}

    async def main() -> list[Any]:
        async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as http:
            transport = HttpxTransport(server.url, client=http)
            deployment = await read_deployment(transport, vocab_size=320)
            samples: list[Any] = await asyncio.wait_for(rollout(http, deployment, sampling), 180)
            return samples

    samples = asyncio.run(main())
    assert len(samples) == 8
    assert all(len(sample["output_ids"]) < 400 for sample in samples)
