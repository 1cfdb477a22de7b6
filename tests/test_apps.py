"""docs/frontend.md's two apps, run as their readers run them, against the fake engine.

Each app runs in a subprocess (``uvicorn app_starlette:app``, ``python
app_aiohttp.py``) pointed at a `FakeEngine` served by uvicorn in this process;
the clients are real httpx clients. The apps are at most 25 lines of their
reader's own code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sglang_envelope import aggregate_sse
from sglang_envelope.testing import FakeEngine
from tests.apps import (
    APPS,
    app_sources,
    held_port,
    own_lines,
    running_app,
    serving,
    started_app,
)

VOCAB = 320
SLOW = {"max_new_tokens": 400, "temperature": 0}


def wait_for(test: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.01)


@pytest.fixture
def app(app_running: tuple[str, FakeEngine, str]) -> tuple[str, FakeEngine]:
    """(the app's URL, its engine) of the session's app (conftest.py), the engine's
    records cleared for this test."""
    url, engine, _ = app_running
    wait_for(lambda: engine.running == 0)
    for records in (engine.requests, engine.aborts, engine.outcomes):
        records.clear()
    return url, engine


@contextlib.contextmanager
def engine_set(engine: FakeEngine, **options: Any) -> Iterator[None]:
    """The session's `engine` given `options` (``frame_delay``, ``fail_after``, which it
    reads at each frame) for the block, then as it was for the other tests."""
    before = {name: getattr(engine, name) for name in options}
    for name, value in options.items():
        setattr(engine, name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(engine, name, value)


def test_each_app_is_at_most_25_lines_of_its_reader_s_code() -> None:
    for name, source in app_sources().items():
        assert own_lines(source) <= 25, name


def test_a_stream_and_a_unary_answer_are_sglang_s(app: tuple[str, FakeEngine]) -> None:
    url, engine = app
    body = {"rid": "mine", "input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 5}}
    with httpx.Client(timeout=10) as client:
        unary = client.post(url + "/generate", json=body)
        stream = client.post(url + "/generate", json={**body, "stream": True})
        flat = {**body, "return_logprob": True, "top_logprobs_num": 2}
        flat_answer = client.post(
            url + "/generate", json={**flat, "return_flat_raw_output_top_logprobs": True}
        )
    assert unary.status_code == stream.status_code == flat_answer.status_code == 200
    assert stream.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert aggregate_sse([stream.content])["output_ids"] == unary.json()["output_ids"]
    assert unary.json()["meta_info"]["id"] == "mine"
    assert "output_top_logprobs_val_flat" in flat_answer.json()["meta_info"]
    engine_rids = [json.loads(b)["rid"] for b in engine.requests]
    assert "mine" not in engine_rids and all(len(rid) == 32 for rid in engine_rids)


def test_a_client_gone_mid_stream_aborts_once_and_the_engine_s_stream_ends(
    app: tuple[str, FakeEngine],
) -> None:
    url, engine = app
    body = {"input_ids": [5, 6, 7], "sampling_params": SLOW, "stream": True}
    with (
        httpx.Client(timeout=10) as client,
        client.stream("POST", url + "/generate", json=body) as answer,
    ):
        next(answer.iter_raw())
    wait_for(lambda: len(engine.outcomes) == 1)
    (outcome,) = engine.outcomes
    assert outcome.ending == "abort" and outcome.completion_tokens < 100
    assert list(engine.aborts) == [{"rid": outcome.rid}] and engine.running == 0


def test_a_unary_client_gone_aborts_once_before_the_answer(app: tuple[str, FakeEngine]) -> None:
    url, engine = app
    body = {"input_ids": [5, 6, 7], "sampling_params": SLOW, "return_logprob": True}
    body["top_logprobs_num"] = 1
    body["return_flat_raw_output_top_logprobs"] = True  # output-flat: a unary engine request
    with httpx.Client() as client, pytest.raises(httpx.ReadTimeout):
        client.post(url + "/generate", json=body, timeout=0.3)
    wait_for(lambda: len(engine.outcomes) == 1)
    (outcome,) = engine.outcomes
    assert outcome.ending == "abort" and outcome.completion_tokens < 200, (outcome, engine.aborts)
    assert list(engine.aborts) == [{"rid": outcome.rid}]
    assert json.loads(engine.requests[0])["stream"] is False


def test_an_error_mid_stream_gives_sglang_s_frame_and_done(
    app: tuple[str, FakeEngine], app_running: tuple[str, FakeEngine, str]
) -> None:
    (url, engine), sglang = app, app_running[2]
    body = {"input_ids": [5, 6, 7], "stream": True}
    with engine_set(engine, fail_after=2):
        direct = httpx.post(sglang + "/generate", json=body).content
        relayed = httpx.post(url + "/generate", json=body).content
    assert relayed.endswith(b"data: [DONE]\n\n")
    assert relayed.split(b"\n\n")[-3] == direct.split(b"\n\n")[-3]  # SGLang's error frame


def test_a_refused_request_never_reaches_the_engine(app: tuple[str, FakeEngine]) -> None:
    url, engine = app
    with httpx.Client() as client:
        text = client.post(url + "/generate", json={"text": "hi"})
        streamed = client.post(url + "/generate", json={"text": "hi", "stream": True})
    assert text.status_code == 400 and streamed.status_code == 200
    assert streamed.content.endswith(b"data: [DONE]\n\n")
    assert list(engine.requests) == []


@pytest.mark.parametrize("name", APPS)
def test_an_upstream_gone_gives_a_502_within_a_second(tmp_path: Path, name: str) -> None:
    """SGLang answers the app's start, then goes away: its port is held, nothing listens."""
    with contextlib.ExitStack() as upstream:
        sglang = upstream.enter_context(serving(FakeEngine()))
        with running_app(name, tmp_path, sglang, VOCAB) as url:
            upstream.close()  # SGLang goes away
            with held_port(int(sglang.rsplit(":", 1)[1])):
                start = time.monotonic()
                answer = httpx.post(url + "/generate", json={"input_ids": [5], "stream": True})
                took = time.monotonic() - start
    assert answer.status_code == 502 and took < 1.0
    assert set(answer.json()) == {"error"}


def test_200_concurrent_requests_leave_nothing_behind(app: tuple[str, FakeEngine]) -> None:
    url, engine = app

    async def burst() -> list[int]:
        # Ten clients of 20 connections, not one of 200: httpx's pool looks at each of
        # its connections to place each request, which cost this test about a second.
        limits = httpx.Limits(max_connections=20)
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(httpx.AsyncClient(timeout=30, limits=limits))
                for _ in range(10)
            ]

            async def one(index: int) -> int:
                body = {"input_ids": [5, index % 300], "stream": index % 2 == 0}
                body["sampling_params"] = {"max_new_tokens": 3}
                answer = await clients[index % 10].post(url + "/generate", json=body)
                return answer.status_code

            return await asyncio.gather(*(one(index) for index in range(200)))

    assert asyncio.run(burst()) == [200] * 200
    wait_for(lambda: len(engine.outcomes) == 200)
    assert engine.running == 0 and list(engine.aborts) == []
    assert {outcome.ending for outcome in engine.outcomes} == {"length"}


#: An engine that stalls: its first token comes only after this long.
STALL_S = 30.0


def test_a_client_that_hangs_up_while_sglang_stalls_is_aborted(
    app: tuple[str, FakeEngine],
) -> None:
    """Nothing is being written to the client, so only watching its connection tells."""
    url, engine = app
    body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 3}, "stream": True}
    with engine_set(engine, frame_delay=STALL_S):
        with (
            httpx.Client(timeout=10) as client,
            client.stream("POST", url + "/generate", json=body) as answer,
        ):
            assert answer.status_code == 200  # the head came; no frame will for STALL_S
            wait_for(lambda: engine.running == 1)
        start = time.monotonic()
        wait_for(lambda: len(engine.outcomes) == 1, timeout=5)
        took = time.monotonic() - start
    (outcome,) = engine.outcomes
    assert outcome.ending == "abort" and list(engine.aborts) == [{"rid": outcome.rid}]
    assert took < 2.0, f"the abort came {took:.1f} s after the hang-up"


@pytest.mark.parametrize("name", APPS)
def test_sigterm_ends_a_stalled_stream_and_a_waiting_unary_client_and_aborts_both(
    tmp_path: Path, name: str
) -> None:
    engine = FakeEngine(frame_delay=STALL_S)
    body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 3}}
    got: dict[str, Any] = {}

    def unary(url: str) -> None:
        got["unary"] = httpx.post(url + "/generate", json=body, timeout=20)

    with serving(engine) as sglang, started_app(name, tmp_path, sglang, VOCAB) as (url, app):
        waiting = threading.Thread(target=unary, args=(url,))
        waiting.start()
        with (
            httpx.Client(timeout=20) as client,
            client.stream("POST", url + "/generate", json={**body, "stream": True}) as streamed,
        ):
            wait_for(lambda: engine.running == 2)
            start = time.monotonic()
            app.send_signal(signal.SIGTERM)
            got["stream"] = streamed.read()
        waiting.join(20)
        app.wait(20)
        exited = time.monotonic() - start
        wait_for(lambda: engine.running == 0)
    assert got["stream"].endswith(b"data: [DONE]\n\n")
    assert b'"code":503' in got["stream"].split(b"\n\n")[-3]  # the error frame, then [DONE]
    assert got["unary"].status_code == 503 and set(got["unary"].json()) == {"error"}
    # Each aborted once: the engine ends it at its first abort, and its end is seen.
    assert sorted(json.loads(b)["rid"] for b in engine.requests) == sorted(
        a["rid"] for a in engine.aborts
    )
    assert exited < 8.0, f"the app took {exited:.1f} s to exit"
