"""The rollout controls against `FakeEngine`: abort all during concurrent streams, the
drain, pause and continue, and a continuation that completes an aborted generation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import msgspec

from sglang_envelope import ClientRequest, aggregate_sse, decode_client_request, parse_unary
from sglang_envelope.rollout import (
    DrainPolicy,
    continuation_request,
    engine_idle,
    plan_abort_all,
    plan_continue,
    plan_drain,
    plan_pause,
    run_drain,
)
from sglang_envelope.testing import FakeEngine

T = TypeVar("T")
JSON = {"content-type": "application/json"}


def run(make: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await asyncio.wait_for(make(), 10)

    return asyncio.run(main())


def client_of(engine: FakeEngine) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=engine), base_url="http://fake")


def body(rid: str, max_new_tokens: int = 500, **more: Any) -> dict[str, Any]:
    params = {"max_new_tokens": max_new_tokens, "temperature": 0}
    return {"input_ids": [5, 6, 7], "rid": rid, "sampling_params": params, **more}


async def until(test: Callable[[], bool]) -> None:
    while not test():
        await asyncio.sleep(0.005)


async def streams(client: httpx.AsyncClient, rids: list[str]) -> list[asyncio.Future[Any]]:
    return [
        asyncio.ensure_future(client.post("/generate", json=body(rid, stream=True))) for rid in rids
    ]


def test_abort_all_ends_three_concurrent_streams_with_abort() -> None:
    engine = FakeEngine(frame_delay=0.01)

    async def main() -> list[Any]:
        async with client_of(engine) as client:
            answers = await streams(client, ["a", "b", "c"])
            await until(lambda: engine.running == 3)
            plan = plan_abort_all()
            reply = await client.post(plan.path, content=plan.body, headers=JSON)
            assert reply.status_code == 200
            return [aggregate_sse([(await answer).content]) for answer in answers]

    results = run(main)
    assert [r["meta_info"]["finish_reason"]["type"] for r in results] == ["abort"] * 3
    assert all(0 < len(r["output_ids"]) < 500 for r in results)
    assert list(engine.aborts) == [{"abort_all": True}]


def test_a_drain_aborts_until_the_engine_is_idle() -> None:
    engine = FakeEngine(frame_delay=0.01)

    async def main() -> tuple[Any, list[Any], bytes]:
        async with client_of(engine) as client:
            answers = await streams(client, ["a", "b", "c"])
            await until(lambda: engine.running == 3)
            plan = plan_drain(policy=DrainPolicy(retry_every_s=0.02, deadline_s=5))

            async def send(data: bytes) -> int:
                return (await client.post(plan.abort.path, content=data, headers=JSON)).status_code

            async def get_loads() -> bytes:
                return (await client.get(plan.loads_path)).content

            outcome = await run_drain(plan, send, get_loads)
            results = [aggregate_sse([(await answer).content]) for answer in answers]
            return outcome, results, await get_loads()

    outcome, results, loads = run(main)
    assert outcome.idle and outcome.stopped == "idle"
    assert outcome.rounds[-1].running == 0 and outcome.rounds[0].status == 200
    assert [r["meta_info"]["finish_reason"]["type"] for r in results] == ["abort"] * 3
    assert engine_idle(loads)


def test_the_fakes_loads_answer_is_sglangs_shape() -> None:
    engine = FakeEngine(frame_delay=0.01, dp_size=2)

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with client_of(engine) as client:
            answer = asyncio.ensure_future(client.post("/generate", json=body("a", 3)))
            await until(lambda: engine.running == 1)
            full = (await client.get("/v1/loads")).json()
            core = (await client.get("/v1/loads?include=core")).json()
            await answer
            return full, core

    full, core = run(main)
    assert list(full) == ["timestamp", "version", "accelerator", "num_accelerators", "loads"]
    assert [load["dp_rank"] for load in full["loads"]] == [0, 1]
    assert [load["num_running_reqs"] for load in full["loads"]] == [1, 0]
    assert "queues" in full["loads"][0] and "queues" not in core["loads"][0]
    assert not engine_idle(json.dumps(core).encode())


def test_pause_in_abort_mode_aborts_and_holds_new_requests_until_continued() -> None:
    engine = FakeEngine(frame_delay=0.005)

    async def main() -> tuple[list[Any], Any, list[int]]:
        async with client_of(engine) as client:
            answers = await streams(client, ["a", "b"])
            await until(lambda: engine.running == 2)
            pause = plan_pause()
            paused = await client.post(pause.path, content=pause.body, headers=JSON)
            assert paused.json() == {"message": "Generation paused successfully.", "status": "ok"}
            aborted = [aggregate_sse([(await answer).content]) for answer in answers]
            held = asyncio.ensure_future(client.post("/generate", json=body("c", 4)))
            await until(lambda: engine.running == 1)
            await asyncio.sleep(0.05)
            made = [outcome.completion_tokens for outcome in engine.outcomes if outcome.rid == "c"]
            resume = plan_continue()
            resumed = await client.post(resume.path, content=resume.body, headers=JSON)
            assert resumed.json()["status"] == "ok" and not engine.paused
            return aborted, parse_unary((await held).content), made

    aborted, held, made_while_paused = run(main)
    assert [r["meta_info"]["finish_reason"]["type"] for r in aborted] == ["abort"] * 2
    assert made_while_paused == [] and held["meta_info"]["finish_reason"]["type"] == "length"


def test_pause_in_retract_mode_holds_running_requests_until_continued() -> None:
    engine = FakeEngine(frame_delay=0.005)

    async def main() -> Any:
        async with client_of(engine) as client:
            answer = asyncio.ensure_future(client.post("/generate", json=body("a", 20)))
            await until(lambda: engine.running == 1)
            pause = plan_pause("retract")
            await client.post(pause.path, content=pause.body, headers=JSON)
            await asyncio.sleep(0.2)  # 40 frames' time: held, it makes none
            assert engine.running == 1 and not answer.done()
            resume = plan_continue(torch_empty_cache=False)
            await client.post(resume.path, content=resume.body, headers=JSON)
            return parse_unary((await answer).content)

    meta = run(main)["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 20}
    assert meta["num_retractions"] == 1  # as SGLang counts the retraction


def test_the_fake_refuses_a_pause_mode_sglang_does_not_have() -> None:
    async def main() -> httpx.Response:
        async with client_of(FakeEngine()) as client:
            return await client.post("/pause_generation", json={"mode": "inplace"})

    reply = run(main)
    assert reply.status_code == 400 and reply.json()["object"] == "error"


def test_a_continuation_after_an_abort_completes_the_generation() -> None:
    engine = FakeEngine(frame_delay=0.005)
    first = decode_client_request(body("r1", 40, stream=True))

    async def main() -> tuple[Any, ClientRequest, Any, Any]:
        async with client_of(engine) as client:
            answer = asyncio.ensure_future(
                client.post("/generate", content=msgspec.json.encode(first), headers=JSON)
            )
            await until(lambda: engine.running == 1)
            await asyncio.sleep(0.05)
            await client.post("/abort_request", json={"rid": "r1"})
            part = aggregate_sse([(await answer).content])
            then = continuation_request(part, first)
            rest = aggregate_sse(
                [
                    (
                        await client.post(
                            "/generate", content=msgspec.json.encode(then), headers=JSON
                        )
                    ).content
                ]
            )
            whole = await client.post("/generate", json=body("r2", 40))
            return part, then, rest, parse_unary(whole.content)

    part, then, rest, whole = run(main)
    assert part["meta_info"]["finish_reason"]["type"] == "abort"
    assert 0 < len(part["output_ids"]) < 40
    assert then.sampling_params.max_new_tokens == 40 - len(part["output_ids"])  # type: ignore[union-attr]
    assert rest["meta_info"]["finish_reason"]["type"] == "length"
    assert part["output_ids"] + rest["output_ids"] == whole["output_ids"]


#: A load's keys as a live SGLang 0.5.23 server writes them (`LoadSnapshot.to_dict`).
CORE_KEYS = [
    "timestamp", "dp_rank", "num_running_reqs", "num_waiting_reqs",
    "num_waiting_uncached_tokens", "num_used_tokens", "num_total_tokens",
    "num_active_tokens", "num_prealloc_ready_tokens", "max_total_num_tokens",
    "max_running_requests", "token_usage", "gen_throughput", "cache_hit_rate",
    "utilization", "total_prefill_uncached_tokens", "total_prefill_busy_us", "decode_moments",
]  # fmt: skip
SECTIONS = {
    "memory": ["weight_gb", "kv_cache_gb", "graph_gb", "token_capacity"],
    "disaggregation": [
        "mode", "prefill_bootstrap_queue_reqs", "prefill_inflight_queue_reqs",
        "decode_prealloc_queue_reqs", "decode_transfer_queue_reqs",
        "decode_retracted_queue_reqs", "kv_transfer_speed_gb_s", "kv_transfer_latency_ms",
    ],
    "queues": ["waiting", "grammar", "paused", "retracted", "prealloc_ready"],
}  # fmt: skip


def test_the_fakes_loads_answer_has_sglangs_sections_and_reads_its_query() -> None:
    engine = FakeEngine(dp_size=2, disaggregation_mode="decode")
    queries = [
        "", "?include=all", "?include=", "?include=core,queues", "?include=memory",
        "?include=disagg&include=queues", "?include=spec", "?dp_rank=1", "?dp_rank=2",
        "?include=bogus", "?include=bogus&dp_rank=9", "?dp_rank=x",
        "?format=prometheus&include=core,queues&dp_rank=0",
    ]  # fmt: skip

    async def main() -> list[httpx.Response]:
        async with client_of(engine) as client:
            return [await client.get(f"/v1/loads{query}") for query in queries]

    full, every, empty, queues, memory, last, spec, one, none, bogus, unread, rank, metrics = run(
        main
    )
    for answer in (full, every, empty):
        loads = answer.json()["loads"]
        assert [list(load) for load in loads] == [[*CORE_KEYS, *SECTIONS]] * 2
        assert all(list(load[name]) == keys for load in loads for name, keys in SECTIONS.items())
        assert loads[1]["disaggregation"]["mode"] == "decode"
    assert list(queues.json()["loads"][0]) == [*CORE_KEYS, "queues"]
    assert list(memory.json()["loads"][0]) == [*CORE_KEYS, "memory"]
    assert list(last.json()["loads"][0]) == [*CORE_KEYS, "queues"], "the last value is read"
    assert list(spec.json()["loads"][0]) == CORE_KEYS, "no speculative decoding: no section"
    assert [load["dp_rank"] for load in one.json()["loads"]] == [1]
    assert none.json()["loads"] == [] and unread.json()["loads"] == []
    # SGLang's LoadSnapshot.to_dict raises for an unknown section, and FastAPI answers 500.
    assert (bogus.status_code, bogus.headers["content-type"]) == (500, "text/plain; charset=utf-8")
    assert bogus.content == b"Internal Server Error"
    assert rank.status_code == 400 and rank.json()["object"] == "error"
    assert metrics.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    lines = metrics.text.splitlines()
    assert lines[2:4] == [
        "# TYPE sglang_num_running_reqs gauge",
        'sglang_num_running_reqs{dp_rank="0"} 0',
    ]
    assert 'sglang_queues_waiting{dp_rank="0"} 0' in lines
    assert not any("dp_rank gauge" in line or "decode_moments" in line for line in lines)
    assert metrics.text.endswith("\n")


def test_a_request_that_arrives_while_paused_loses_its_aborts_as_in_sglang() -> None:
    """As on a live SGLang 0.5.23 (docs/cancellation.md, "Registered is not dispatched";
    live/test_abort.py): a request that arrives while generation is paused is registered
    but not yet dispatched, so the loads do not count it; an abort of it by rid is lost
    and marks it, so a later one after the continue is ignored too; `abort_all` and a
    pause in abort mode are lost as well, and do not mark it."""
    engine = FakeEngine(frame_delay=0.001)

    async def held(client: httpx.AsyncClient, rid: str, *aborts: Any) -> tuple[Any, int]:
        """`rid`'s finish reason when `aborts` (bodies, or a pause mode) come while it
        is held, and a rid abort after the continue; and the loads' running count then."""
        await client.post("/pause_generation", json={"mode": "in_place"})
        answer = asyncio.ensure_future(client.post("/generate", json=body(rid, 100, stream=True)))
        await until(lambda: engine.running == 1)
        counted = (await client.get("/v1/loads?include=core")).json()["loads"][0]
        for abort in aborts:
            if isinstance(abort, str):
                await client.post("/pause_generation", json={"mode": abort})
            else:
                await client.post("/abort_request", json=abort)
        await client.post("/continue_generation", json={})
        await client.post("/abort_request", json={"rid": rid})
        finish = aggregate_sse([(await answer).content])["meta_info"]["finish_reason"]
        return finish, counted["num_running_reqs"]

    async def main() -> list[tuple[Any, int]]:
        async with client_of(engine) as client:
            return [
                await held(client, "a", {"rid": "a"}),
                await held(client, "b", {"abort_all": True}),
                await held(client, "c", "abort"),
            ]

    (by_rid, running), (by_all, _), (by_pause, _) = run(main)
    assert running == 0, "not dispatched: not counted"
    assert by_rid == {"type": "length", "length": 100}, "both rid aborts lost"
    assert by_all["type"] == "abort" and by_pause["type"] == "abort", "the later rid abort ends it"


#: The meta_info keys of SGLang 0.5.23's answer to a request aborted in the waiting queue
#: (`TokenizerManager._handle_abort_req`), seen on a live server: a request retracted by
#: a pause in "retract" mode, then aborted; with logprobs the block goes before
#: completion_tokens; a unary answer adds response_sent_to_client_ts.
QUEUE_ABORT_KEYS = ["id", "finish_reason", "weight_version", "e2e_latency", "weight_versions"]
LOGPROB_KEYS = [
    "input_token_logprobs", "output_token_logprobs", "output_token_logprobs_length",
    "input_top_logprobs", "output_top_logprobs",
]  # fmt: skip


def test_a_retracted_request_aborted_while_paused_ends_as_sglang_s_waiting_queue_abort() -> None:
    async def aborted(incremental: bool, stream: bool, **more: Any) -> tuple[list[Any], int]:
        engine = FakeEngine(frame_delay=0.002, incremental=incremental)
        async with client_of(engine) as client:
            answer = asyncio.ensure_future(
                client.post("/generate", json=body("r", 500, stream=stream, **more))
            )
            await until(lambda: engine.running == 1)
            await asyncio.sleep(0.02)
            await client.post("/pause_generation", json={"mode": "retract"})
            await client.post("/abort_request", json={"rid": "r"})
            reply = await answer  # answered while paused, as SGLang's scheduler does
            assert engine.paused
            made = [outcome.completion_tokens for outcome in engine.outcomes]
        if stream:
            return [
                json.loads(e[6:]) for e in reply.text.split("\n\n") if e[:7] == "data: {"
            ], made[0]
        return [reply.json()], made[0]

    logprobs = {"return_logprob": True, "top_logprobs_num": 2}
    for incremental in (False, True):
        for more in ({}, logprobs):
            frames, made = run(lambda: aborted(incremental, True, **more))  # noqa: B023
            last, before = frames[-1], frames[-2]
            meta = last["meta_info"]
            assert list(last) == ["text", "output_ids", "meta_info"]
            keys = [*QUEUE_ABORT_KEYS, *(LOGPROB_KEYS if more else []), "completion_tokens"]
            assert list(meta) == keys
            assert meta["finish_reason"] == {"type": "abort", "message": "Abort in waiting queue"}
            assert meta["completion_tokens"] == made == before["meta_info"]["completion_tokens"]
            # The whole text and every id (in an incremental stream the last id alone).
            shown = frames[:-1] if incremental else frames[-2:-1]
            text = "".join(frame["text"] for frame in shown)
            ids = [i for frame in shown for i in frame["output_ids"]]
            assert last["text"] == text and len(ids) == made
            assert last["output_ids"] == (ids[-1:] if incremental else ids)
            if more:
                assert len(meta["output_token_logprobs"]) == made
    unary, made = run(lambda: aborted(False, False, **logprobs))
    meta = unary[0]["meta_info"]
    last_keys = ["completion_tokens", "response_sent_to_client_ts"]
    assert list(meta) == [*QUEUE_ABORT_KEYS, *LOGPROB_KEYS, *last_keys]
    assert len(unary[0]["output_ids"]) == made == meta["completion_tokens"]


def test_an_abort_while_paused_in_place_ends_the_generation_once_continued() -> None:
    """On a live SGLang 0.5.23 a pause in "in_place" mode stops the scheduler with the
    running batch in place: an abort of a request in it is answered only once generation
    continues (with one token more, as any abort); one in "retract" mode at once."""
    engine = FakeEngine(frame_delay=0.002)

    async def main() -> tuple[bool, Any, int]:
        async with client_of(engine) as client:
            answer = asyncio.ensure_future(client.post("/generate", json=body("r", 500)))
            await until(lambda: engine.running == 1)
            await client.post("/pause_generation", json={"mode": "in_place"})
            await client.post("/abort_request", json={"rid": "r"})
            await asyncio.sleep(0.1)
            answered_while_paused = answer.done()
            await client.post("/continue_generation", json={})
            meta = (await answer).json()["meta_info"]
            return answered_while_paused, meta["finish_reason"], meta["completion_tokens"]

    answered_while_paused, finish, tokens = run(main)
    assert not answered_while_paused
    assert finish["message"] == "Aborted" and 0 < tokens < 500
