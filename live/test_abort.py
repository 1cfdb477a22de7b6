"""`plan_abort` and `run_abort` stop a live generation, streaming or unary, within seconds.

A 900-token generation takes about 1.4 s on the tiny model; an abort taken into
account ends it well before that, with SGLang's abort finish reason. One that SGLang
loses is pinned too: an abort while generation is paused.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from live.flow import (
    Answer,
    answer_of,
    body_of,
    client,
    collect,
    make_engine,
    post_chunks,
    sender,
    sse_frames,
    watched,
)
from live.servers import LiveServer
from sglang_envelope import EngineRequest, plan_abort, run_abort
from sglang_envelope.rollout import plan_continue, plan_pause
from sglang_envelope.types import AbortOutcome

LONG = {"max_new_tokens": 900, "ignore_eos": True, "temperature": 0}
SHORT = {"max_new_tokens": 300, "ignore_eos": True, "temperature": 0}
JSON = {"Content-Type": "application/json"}
#: How long an abort may take to end the generation, from the first abort posted.
WITHIN_S = 3.0


async def aborted(
    url: str, body: bytes, *, after_first_token: bool
) -> tuple[Answer, AbortOutcome, float, EngineRequest]:
    """The client's answer to `body` when its engine request is aborted (and how long it took)."""
    rid, engine, streams = make_engine(body)
    first_token, finished = asyncio.Event(), asyncio.Event()
    async with client() as http:
        chunks = watched(post_chunks(http, url, engine), first_token, finished)
        answering = asyncio.create_task(
            answer_of(chunks, engine, client_rid=rid, client_streams=streams, incremental=False)
        )
        if after_first_token:
            await asyncio.wait_for(first_token.wait(), 30)
        else:
            await asyncio.sleep(0.2)  # the POST is in flight; its answer is far off
        assert not finished.is_set(), "the generation ended before it was aborted"
        plan = plan_abort(engine, first_token_seen=first_token.is_set())
        start = time.monotonic()
        outcome = await run_abort(
            plan, sender(http, url), first_token=first_token, finished=finished
        )
        answer = await asyncio.wait_for(answering, plan.deadline_s)
        return answer, outcome, time.monotonic() - start, engine


def check_aborted(response: dict[str, Any], took: float) -> None:
    meta = response["meta_info"]
    assert meta["finish_reason"]["type"] == "abort", meta["finish_reason"]
    assert meta["completion_tokens"] < LONG["max_new_tokens"]
    assert took < WITHIN_S


def test_streaming_abort_ends_with_abort(server: LiveServer) -> None:
    body = body_of({"input_ids": [5, 6, 7], "stream": True, "sampling_params": LONG})
    answer, outcome, took, _ = asyncio.run(aborted(server.url, body, after_first_token=True))
    assert outcome.first_token_seen
    assert [send.status for send in outcome.sends] == [200]  # after a token, one abort is enough
    frames = sse_frames(answer.body)
    check_aborted(frames[-1], took)
    assert frames[-1]["output_ids"][: len(frames[0]["output_ids"])] == frames[0]["output_ids"]


def test_unary_output_flat_aborted_before_its_answer(server: LiveServer) -> None:
    body = body_of(
        {
            "input_ids": [5, 6, 7],
            "stream": False,
            "return_logprob": True,
            "top_logprobs_num": 2,
            "return_flat_raw_output_top_logprobs": True,
            "sampling_params": LONG,
        }
    )
    answer, outcome, took, engine = asyncio.run(aborted(server.url, body, after_first_token=False))
    assert not engine.stream  # output-flat: a unary engine request
    assert not outcome.first_token_seen
    assert outcome.sends and all(send.status == 200 for send in outcome.sends)
    response = json.loads(answer.body)
    check_aborted(response, took)
    meta = response["meta_info"]
    assert "output_top_logprobs_val_flat" in meta  # still the output-flat answer
    assert meta["finish_reason"]["message"] == "Aborted"


def test_an_abort_while_sglang_is_paused_is_lost_with_its_repeats(server: LiveServer) -> None:
    """An SGLang 0.5.23 fact, not a wish: a `/generate` that arrives while generation is
    paused has its rid registered by the tokenizer manager (`_init_req_state`) and then
    waits for the continue before it is sent to the scheduler. An abort meanwhile is passed
    to the scheduler, which holds no such request yet, and marks the rid `abort_sent`, so
    every later abort for it, the plan's repeats and one after the continue, is dropped: the
    request runs to its length. Should this test fail, SGLang has changed: docs/live.md and
    docs/cancellation.md say what it did."""
    body = body_of({"input_ids": [5, 6, 7], "stream": True, "sampling_params": SHORT})

    async def main() -> tuple[dict[str, Any], AbortOutcome, AbortOutcome]:
        _, engine, _ = make_engine(body)
        first_token, finished = asyncio.Event(), asyncio.Event()
        pause, resume = plan_pause("in_place"), plan_continue()
        async with client() as http:
            await http.post(f"{server.url}{pause.path}", content=pause.body, headers=JSON)
            try:
                chunks = watched(post_chunks(http, server.url, engine), first_token, finished)
                streaming = asyncio.create_task(collect(chunks))
                await asyncio.sleep(0.5)  # registered, waiting for the continue
                assert not first_token.is_set()
                plan = plan_abort(engine, first_token_seen=False)
                paused = await run_abort(plan, sender(http, server.url), finished=finished)
            finally:
                await http.post(f"{server.url}{resume.path}", content=resume.body, headers=JSON)
            await asyncio.wait_for(first_token.wait(), 30)
            again = plan_abort(engine, first_token_seen=True)
            after = await run_abort(again, sender(http, server.url), first_token=first_token)
            data = await asyncio.wait_for(streaming, 60)
        return sse_frames(data)[-1], paused, after

    last, paused, after = asyncio.run(main())
    assert len(paused.sends) == 6 and all(send.status == 200 for send in paused.sends)
    assert [send.status for send in after.sends] == [200]
    length = SHORT["max_new_tokens"]
    assert last["meta_info"]["finish_reason"] == {"type": "length", "length": length}
