"""NVIDIA Dynamo 1.6.1's SGLang worker, stock and with the library (docs/dynamo.md).

Each body goes to Dynamo's worker over Dynamo's request plane, as its frontend carries
it (`live/dynamo_host.py`), and to the live suite's SGLang HTTP server directly; at
temperature 0 the library's worker must answer what SGLang answers, where the stock
worker does not. `dynamo_worker.py` is the file docs/dynamo.md shows, run as it stands.
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from live.dynamo_host import Dynamo, call, start_frontend, start_worker
from live.flow import assert_same, client, direct, sse_frames
from live.servers import LiveServer
from sglang_envelope.stream import aggregate_frames

ROOT = Path(__file__).resolve().parent.parent
GREEDY = {"max_new_tokens": 6, "temperature": 0}
LONG = {"max_new_tokens": 900, "ignore_eos": True}
OUTPUT_FLAT = {"input_ids": [1, 2], "stream": False, "return_logprob": True,
               "top_logprobs_num": 2, "return_flat_raw_output_top_logprobs": True,
               "sampling_params": GREEDY}  # fmt: skip
PLAIN = {"input_ids": [5, 6, 7], "stream": False, "sampling_params": GREEDY}
STREAM = {"input_ids": [5, 6, 7], "stream": True, "sampling_params": GREEDY}
#: The engine computes the same tokens in another process: logprobs equal to about 1e-7.
TOLERANCE = 1e-5
#: Every test runs beside the default server, so that each worker starts once (the suite
#: groups its tests by the servers they use).
pytestmark = pytest.mark.usefixtures("server")


def page_file(name: str, folder: Path | None = None) -> Path:
    """docs/dynamo.md's file `name`, written out as it stands on the page (into `folder`)."""
    page = (ROOT / "docs" / "dynamo.md").read_text(encoding="utf-8")
    pattern = rf"^```python\n(# {re.escape(name)}\n.*?)^```"
    (code,) = re.findall(pattern, page, re.S | re.M)
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="dynamo-worker-"))
    path = folder / name
    path.write_text(code, encoding="utf-8")
    return path


def worker_file() -> Path:
    """docs/dynamo.md's `dynamo_worker.py`, written out as it stands on the page."""
    return page_file("dynamo_worker.py")


@pytest.fixture(scope="module", params=["stock", "library"])
def dynamo(request: pytest.FixtureRequest) -> Iterator[tuple[str, Dynamo]]:
    """Dynamo's own worker, then docs/dynamo.md's, each started once and stopped after."""
    kind = str(request.param)
    running = start_worker(None if kind == "stock" else worker_file())
    try:
        yield kind, running
    finally:
        running.stop()


def sglang(server: LiveServer, body: dict[str, Any]) -> dict[str, Any]:
    async def answer() -> Any:
        async with client() as http:
            data = json.dumps({**body, "stream": False}).encode()
            return (await direct(http, server.url, data)).json()

    result: dict[str, Any] = asyncio.run(answer())
    return result


def test_the_output_flat_unary_body(dynamo: tuple[str, Dynamo], server: LiveServer) -> None:
    kind, worker = dynamo
    got = call(worker, OUTPUT_FLAT)
    if kind == "stock":  # the stream-mode bug: a valid body refused
        assert got.error is not None and "does not support stream=True" in got.error
        return
    assert got.error is None and len(got.answers) == 1
    assert_same(got.answers[0], sglang(server, OUTPUT_FLAT), tolerance=TOLERANCE)


def test_a_plain_unary_body(dynamo: tuple[str, Dynamo], server: LiveServer) -> None:
    kind, worker = dynamo
    got = call(worker, PLAIN)
    assert got.error is None
    if kind == "stock":  # frames, where the client asked for one answer
        assert len(got.answers) > 1
        return
    (answer,) = got.answers
    assert_same(answer, sglang(server, PLAIN), tolerance=TOLERANCE)


def test_a_streaming_body(dynamo: tuple[str, Dynamo], server: LiveServer) -> None:
    kind, worker = dynamo
    got = call(worker, STREAM)
    assert got.error is None and len(got.answers) > 1
    # The stock worker streams the engine's incremental frames; the library's, SGLang's
    # default cumulative ones, converted: each holds everything so far.
    incremental = kind == "stock"
    counts = [len(frame["output_ids"]) for frame in got.answers]
    assert (counts == [frame["meta_info"]["completion_tokens"] for frame in got.answers]) is (
        not incremental
    )
    state = dict(aggregate_frames(got.answers, incremental=incremental))
    assert_same(state, sglang(server, STREAM), tolerance=TOLERANCE)


def test_output_flat_with_a_stream_is_refused_in_sglang_s_words(
    dynamo: tuple[str, Dynamo],
) -> None:
    _, worker = dynamo
    body = {**OUTPUT_FLAT, "stream": True}
    got = call(worker, body)
    assert got.error is not None and not got.items
    words = "return_flat_raw_output_top_logprobs is only set on the finished response"
    assert words in got.error


def test_an_id_outside_the_vocabulary_is_refused_and_the_worker_serves_on(
    dynamo: tuple[str, Dynamo],
) -> None:
    kind, worker = dynamo
    if kind == "stock":
        pytest.skip("Dynamo's stock worker lets it through, and its engine stops for good")
    got = call(worker, {"input_ids": [1, 999], "sampling_params": GREEDY})
    assert got.error is not None and "outside the model's vocabulary" in got.error
    assert call(worker, PLAIN).error is None  # the engine still answers


@pytest.mark.parametrize("stream", [True, False])
def test_a_request_stopped_after_half_a_second_ends_and_is_aborted(
    dynamo: tuple[str, Dynamo], stream: bool
) -> None:
    kind, worker = dynamo
    if kind == "stock":
        pytest.skip("the library's worker is checked; the stock one aborts alike")
    before = worker.log().count("Aborted Request ID")
    got = call(worker, {"input_ids": [5, 6], "stream": stream, "sampling_params": LONG}, 0.5)
    assert got.seconds < 1.5, got  # 0.5 s, then the stream ends within a second
    deadline = time.monotonic() + 5
    while worker.log().count("Aborted Request ID") == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert worker.log().count("Aborted Request ID") > before  # the engine request aborted


def test_through_dynamo_s_http_frontend(dynamo: tuple[str, Dynamo], server: LiveServer) -> None:
    kind, worker = dynamo
    if kind == "stock":
        pytest.skip("the frontend is the same for both workers")
    front = start_frontend(worker)
    with httpx.Client(timeout=60) as http:
        streamed = http.post(f"{front.url}/generate", json={**STREAM, "model": "tiny-gpt2"})
        unary = http.post(f"{front.url}/generate", json={**PLAIN, "model": "tiny-gpt2"})
    assert_frontend_answers(streamed, unary, server)


def assert_frontend_answers(
    streamed: httpx.Response, unary: httpx.Response, server: LiveServer
) -> None:
    """Through Dynamo's frontend: the stream is SGLang's, in cumulative frames each with
    the ids of its own count; a unary body gets the frontend's 501."""
    assert streamed.status_code == 200, streamed.text[:300]
    frames = sse_frames(streamed.content)
    assert all(len(f["output_ids"]) == f["meta_info"]["completion_tokens"] for f in frames)
    state = dict(aggregate_frames(frames, incremental=False))
    assert_same(state, sglang(server, STREAM), tolerance=TOLERANCE)
    assert unary.status_code == 501  # the frontend serves no unary native /generate
