"""NVIDIA Dynamo 1.6.1's disaggregated SGLang, with the library (docs/dynamo.md).

`dynamo_pd_worker.py`, with `dynamo_worker.py` beside it, as docs/dynamo.md shows them,
runs as Dynamo's prefill worker and as its decode worker, their KV cache moving over
Mooncake's TCP transport (`live/dynamo_host.py`). Each body goes to the pair over
Dynamo's request plane as Dynamo's frontend routes it (`live/dynamo_call.py --pair`),
and to the live suite's aggregated SGLang server directly: at temperature 0 the pair
must answer what SGLang answers.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from live.dynamo_host import Call, Dynamo, call, start_frontend, start_pair
from live.flow import assert_same
from live.servers import LiveServer
from live.test_dynamo import (
    GREEDY,
    LONG,
    OUTPUT_FLAT,
    PLAIN,
    STREAM,
    TOLERANCE,
    assert_frontend_answers,
    page_file,
    sglang,
)
from sglang_envelope.stream import aggregate_frames

MEETING_POINT = {"bootstrap_host", "bootstrap_port", "bootstrap_room"}
#: Every test runs beside the default server, so that the pair starts once (the suite
#: groups its tests by the servers they use).
pytestmark = pytest.mark.usefixtures("server")


@pytest.fixture(scope="module")
def pair() -> Iterator[Dynamo]:
    """docs/dynamo.md's pair, started once and stopped after."""
    folder = Path(tempfile.mkdtemp(prefix="dynamo-pd-worker-"))
    page_file("dynamo_worker.py", folder)  # which dynamo_pd_worker.py imports
    running = start_pair(page_file("dynamo_pd_worker.py", folder))
    try:
        yield running
    finally:
        running.stop()


def check_prefill(got: Call) -> None:
    """The prefill worker gave the meeting point, then ended its stream."""
    (first,) = got.prefill
    assert set(first["disaggregated_params"]) == MEETING_POINT


def test_the_output_flat_unary_body(pair: Dynamo, server: LiveServer) -> None:
    got = call(pair, OUTPUT_FLAT)
    assert got.error is None, got.error
    check_prefill(got)
    (answer,) = got.answers  # SGLang's one unary answer
    assert_same(answer, sglang(server, OUTPUT_FLAT), tolerance=TOLERANCE)


def test_a_plain_unary_body(pair: Dynamo, server: LiveServer) -> None:
    got = call(pair, PLAIN)
    assert got.error is None, got.error
    check_prefill(got)
    (answer,) = got.answers
    assert_same(answer, sglang(server, PLAIN), tolerance=TOLERANCE)


def test_a_streaming_body(pair: Dynamo, server: LiveServer) -> None:
    got = call(pair, STREAM)
    assert got.error is None and len(got.answers) > 1, got.error
    check_prefill(got)
    # SGLang's default cumulative frames, converted from the engine's incremental ones.
    counts = [len(frame["output_ids"]) for frame in got.answers]
    assert counts == [frame["meta_info"]["completion_tokens"] for frame in got.answers]
    state = dict(aggregate_frames(got.answers, incremental=False))
    assert_same(state, sglang(server, STREAM), tolerance=TOLERANCE)


def test_output_flat_with_a_stream_is_refused_before_the_meeting_point(
    pair: Dynamo,
) -> None:
    got = call(pair, {**OUTPUT_FLAT, "stream": True})
    assert got.error is not None and not got.items
    assert not got.prefill  # refused by the prefill worker: decode never got it
    words = "return_flat_raw_output_top_logprobs is only set on the finished response"
    assert words in got.error


def test_an_id_outside_the_vocabulary_is_refused_and_the_pair_serves_on(
    pair: Dynamo,
) -> None:
    got = call(pair, {"input_ids": [1, 999], "sampling_params": GREEDY})
    assert got.error is not None and "outside the model's vocabulary" in got.error
    assert not got.prefill and not got.items  # neither engine got it
    assert call(pair, PLAIN).error is None  # both engines still answer


def test_prompt_logprobs_are_the_decode_leg_s_alone(pair: Dynamo, server: LiveServer) -> None:
    """The decode worker never sees the prefill leg's answer (`merge_prefill` cannot run):
    the prompt's logprobs are the decode leg's `[]`, the rest is SGLang's answer."""
    body = {**PLAIN, "return_logprob": True, "logprob_start_len": 0}
    got = call(pair, body)
    assert got.error is None, got.error
    (answer,) = got.answers
    want = sglang(server, body)
    assert len(want["meta_info"]["input_token_logprobs"]) == 3  # PLAIN's prompt
    decode_leg = {**want, "meta_info": {**want["meta_info"], "input_token_logprobs": []}}
    assert_same(answer, decode_leg, tolerance=TOLERANCE)


def test_an_older_caller_s_in_band_unset_rank_is_no_rank(pair: Dynamo, server: LiveServer) -> None:
    """Older callers say "no rank" with u32::MAX in `routing`, which Dynamo's own prefill
    handler reads as none: the pair serves the body as it serves it without one."""
    unset = 2**32 - 1
    got = call(pair, PLAIN, routing={"dp_rank": unset, "prefill_dp_rank": unset})
    assert got.error is None, got.error
    check_prefill(got)
    (answer,) = got.answers
    assert_same(answer, sglang(server, PLAIN), tolerance=TOLERANCE)


@pytest.mark.parametrize("stream", [True, False])
def test_a_request_stopped_after_half_a_second_ends_and_is_aborted(
    pair: Dynamo, stream: bool
) -> None:
    before = pair.log().count("Aborted Request ID")
    body = {"input_ids": [5, 6], "stream": stream, "sampling_params": LONG}
    got = call(pair, body, 0.5)
    assert got.seconds < 1.5, got  # 0.5 s, then the stream ends within a second
    deadline = time.monotonic() + 5
    while pair.log().count("Aborted Request ID") == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pair.log().count("Aborted Request ID") > before  # the decode request aborted


def test_through_dynamo_s_http_frontend(pair: Dynamo, server: LiveServer) -> None:
    """The frontend's own prefill router pairs the workers."""
    front = start_frontend(pair)
    model = {"model": "tiny-gpt2"}
    refused_body = {"input_ids": [1, 999], "stream": True, "sampling_params": GREEDY}
    with httpx.Client(timeout=60) as http:
        refused = http.post(f"{front.url}/generate", json={**refused_body, **model})
        streamed = http.post(f"{front.url}/generate", json={**STREAM, **model})
        unary = http.post(f"{front.url}/generate", json={**PLAIN, **model})
    # A prefill refusal is the frontend's own error, without the refusal's words: a 500,
    # or a stream of that one error, whichever the frontend has begun when it comes.
    assert refused.status_code in (200, 500), refused.text[:300]
    assert "internal server error" in refused.text.lower(), refused.text[:300]
    assert "vocabulary" not in refused.text
    assert_frontend_answers(streamed, unary, server)
