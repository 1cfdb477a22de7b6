"""The stream mode, read from the frames: SGLang's answer whichever mode its server streams in."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    EngineError,
    EnvelopeError,
    ResponseError,
    aggregate_sse,
    parse_unary,
    relay_sse,
)
from sglang_envelope.response.views import COUNTED_BY
from sglang_envelope.stream import (
    SSE_DONE,
    StreamAggregator,
    aggregate_frames,
    encode_sse,
    relay_frames,
)
from tests.strategies import SGLANG_ANSWERS, chunkings, sglang_generations, sse_transcripts


def transcript(frames: list[dict[str, Any]]) -> bytes:
    return b"".join(encode_sse(frame) for frame in frames) + SSE_DONE


def told_apart(frames: list[dict[str, Any]], mode: bool) -> bool | None:
    """The mode known after these frames: told by the frame after one with tokens."""
    carried = [len(frame["output_ids"]) for frame in frames]
    return mode if len(frames) > 1 and carried[0] > 0 else None


@given(sglang_generations(), st.booleans(), st.data())
def test_every_stream_aggregates_to_sglangs_non_streaming_answer(
    generation: dict[str, Any], incremental: bool, data: st.DataObject
) -> None:
    """Whatever the mode, the frame cuts and the chunking: the same answer as stream=false."""
    frames = generation["incremental" if incremental else "cumulative"]
    expected = generation["unary"]
    assert aggregate_frames(copy.deepcopy(frames)) == expected
    assert aggregate_frames(copy.deepcopy(frames), incremental=incremental) == expected
    stream = data.draw(sse_transcripts(frames))
    assert aggregate_sse(data.draw(chunkings(stream))) == expected
    assert aggregate_sse(data.draw(chunkings(stream)), incremental=incremental) == expected


@given(sglang_generations(), st.booleans())
def test_the_mode_is_known_as_soon_as_a_frame_tells_it(
    generation: dict[str, Any], incremental: bool
) -> None:
    frames = generation["incremental" if incremental else "cumulative"]
    aggregator = StreamAggregator()
    for seen in range(1, len(frames) + 1):
        aggregator.add(frames[seen - 1])
        assert aggregator.incremental is told_apart(frames[:seen], incremental)
    assert aggregator.result() == generation["unary"]


def sglang_triples() -> list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """SGLang's own streams of one generation in both modes, and its unary body."""
    by_name = {answer["name"]: answer for answer in SGLANG_ANSWERS}
    return [
        (
            name,
            by_name[f"{name}_incremental"],
            by_name[f"{name}_cumulative"],
            by_name[f"{name}_unary"],
        )
        for name in ("plain", "logprobs", "every_delta_key", "skip_tokenizer_init")
    ]


@pytest.mark.parametrize("names", sglang_triples(), ids=lambda triple: triple[0])
@given(data=st.data())
def test_sglangs_own_streams_in_either_mode(
    names: tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]], data: st.DataObject
) -> None:
    """The golden streams SGLang's handlers wrote, with no mode given, in any chunks."""
    _, incremental, cumulative, unary = names
    for case in (incremental, cumulative):
        chunks = data.draw(chunkings(case["body"].encode()))
        assert aggregate_sse(chunks) == case["expected"]
    assert parse_unary(unary["body"].encode()) == unary["expected"]


def test_a_stock_cumulative_stream_is_read_without_a_flag() -> None:
    frames = [
        {
            "text": "The",
            "output_ids": [464],
            "meta_info": {"finish_reason": None, "completion_tokens": 1},
        },
        {
            "text": "The answer",
            "output_ids": [464, 3280],
            "meta_info": {"finish_reason": {"type": "stop"}, "completion_tokens": 2},
        },
    ]
    assert aggregate_sse([transcript(frames)])["text"] == "The answer"
    assert aggregate_sse([transcript(frames)], incremental=False)["text"] == "The answer"
    with pytest.raises(ResponseError, match="completion_tokens is 2 but output_ids has 3"):
        aggregate_sse([transcript(frames)], incremental=True)  # a forced mode is trusted


def test_frames_without_counts_that_fit_both_modes_differently_are_refused() -> None:
    """Never guessed: "The", "The answer" is a cumulative stream or "TheThe answer"."""
    frames = [
        {"text": "The", "meta_info": {"finish_reason": None}},
        {"text": "The answer", "meta_info": {"finish_reason": {"type": "stop"}}},
    ]
    runs: list[Callable[[], object]] = [
        lambda: aggregate_frames(frames),
        lambda: aggregate_sse([transcript(frames)]),
    ]
    for run in runs:
        with pytest.raises(ResponseError) as caught:
            run()
        message = str(caught.value)
        assert "read incrementally" in message and "read cumulatively" in message
        assert "incremental=True or False" in message
    assert aggregate_frames(frames, incremental=False)["text"] == "The answer"
    assert aggregate_frames(frames, incremental=True)["text"] == "TheThe answer"


def test_frames_without_counts_still_tell_a_delta_from_a_prefix() -> None:
    """A cumulative frame begins with the previous frame's text: " answer" cannot follow "The"."""
    frames = [
        {"text": "The", "meta_info": {"finish_reason": None}},
        {"text": " answer", "meta_info": {"finish_reason": {"type": "stop"}}},
    ]
    aggregator = StreamAggregator()
    aggregator.add(frames[0])
    assert aggregator.incremental is None
    aggregator.add(frames[1])
    assert aggregator.incremental is True
    assert aggregator.result()["text"] == "The answer"


def test_a_stream_that_fits_neither_mode_names_both_readings() -> None:
    frames = [
        {"output_ids": [1], "meta_info": {"finish_reason": None, "completion_tokens": 1}},
        {"output_ids": [2, 3], "meta_info": {"finish_reason": None, "completion_tokens": 4}},
    ]
    runs: list[Callable[[], object]] = [
        lambda: aggregate_frames(frames),
        lambda: aggregate_sse([transcript(frames)]),
    ]
    for run in runs:
        with pytest.raises(ResponseError, match="frame 2: it fits neither stream mode") as caught:
            run()
        message = str(caught.value)
        assert (
            "read incrementally (frames hold deltas), meta_info.completion_tokens is 4 but "
            in message
        )
        assert "output_ids has 3 entries" in message
        assert "read cumulatively" in message and "output_ids has 2 entries" in message


def test_a_single_frame_fits_both_modes_alike() -> None:
    only = {
        "output_ids": [5, 6],
        "meta_info": {"finish_reason": {"type": "stop"}, "completion_tokens": 2},
    }
    aggregator = StreamAggregator()
    aggregator.add(only)
    assert aggregator.incremental is None
    assert aggregator.cumulative() == only
    assert aggregator.result() == only


def test_cumulative_view_waits_for_the_mode() -> None:
    aggregator = StreamAggregator()
    aggregator.add({"text": "a", "meta_info": {"finish_reason": None}})
    aggregator.add({"text": "ab", "meta_info": {"finish_reason": None}})
    assert aggregator.incremental is None
    with pytest.raises(EnvelopeError, match="mode is not known yet"):
        aggregator.cumulative()


@pytest.mark.parametrize("incremental", [True, False])
def test_a_forced_mode_is_known_from_the_start(incremental: bool) -> None:
    assert StreamAggregator(incremental=incremental).incremental is incremental
    assert StreamAggregator().incremental is None


@pytest.mark.parametrize(
    "case", [c for c in SGLANG_ANSWERS if c["kind"] == "sse"], ids=lambda case: case["name"]
)
def test_every_golden_stream_without_a_mode(case: dict[str, Any]) -> None:
    """Errors and aborts included: detection gives SGLang's own answer for each golden stream."""
    chunks = [case["body"].encode()]
    if "error" in case["expected"]:
        with pytest.raises(EngineError) as caught:
            aggregate_sse(chunks)
        assert caught.value.message == case["expected"]["error"]["message"]
    else:
        assert aggregate_sse(chunks) == case["expected"]


def running_ahead(
    frames: list[dict[str, Any]], data: st.DataObject, *, text: bool
) -> list[dict[str, Any]]:
    """`frames` (cumulative) as SGLang may write them: each middle frame's counted lists
    (`COUNTED_BY`) those of a frame at or after it, and with `text` its text too."""
    frames = copy.deepcopy(frames)
    last = len(frames) - 1
    at = 0
    for i in range(last):
        at = data.draw(st.integers(max(at, i), last), label=f"frame {i} holds")
        ahead = frames[at]
        for path in COUNTED_BY:
            key = path.rpartition(".")[2]
            owner, source = (
                (frames[i]["meta_info"], ahead["meta_info"]) if "." in path else (frames[i], ahead)
            )
            if key in owner:
                owner[key] = list(source[key])
        if text and "text" in frames[i]:
            frames[i]["text"] = ahead["text"]
    return frames


def sse_frames(stream: bytes) -> list[dict[str, Any]]:
    events = [event[6:] for event in stream.split(b"\n\n") if event.startswith(b"data: {")]
    return [json.loads(event) for event in events]


@given(sglang_generations(), st.booleans(), st.data())
def test_cumulative_lists_running_ahead_of_their_counts_read_as_sglangs_answer(
    generation: dict[str, Any], text_ahead: bool, data: st.DataObject
) -> None:
    """SGLang puts the request's growing lists into a cumulative middle frame, written when
    the frame goes out: its ids, logprobs and sampling masks may hold entries a later frame
    counts (seen live with n = 4 and logprobs). The answer is SGLang's; a relay to a client
    of either mode sends what SGLang sends in that mode, each frame as of its counts."""
    frames = running_ahead(generation["cumulative"], data, text=text_ahead)
    expected = generation["unary"]
    assert aggregate_frames(copy.deepcopy(frames)) == expected
    assert aggregate_sse([transcript(frames)]) == expected
    one_a_chunk = [encode_sse(frame) for frame in frames] + [SSE_DONE]
    for client_incremental in (True, False):
        want = generation["incremental" if client_incremental else "cumulative"]
        relayed = b"".join(relay_sse(one_a_chunk, client_incremental=client_incremental))
        assert b'"error"' not in relayed
        assert aggregate_sse([relayed]) == expected  # each frame's counts fit its mode
        in_process = list(
            relay_frames(copy.deepcopy(frames), client_incremental=client_incremental)
        )
        if client_incremental:
            assert sse_frames(relayed) == in_process
        else:
            assert sse_frames(relayed) == frames  # SGLang's own frames, as they came
        if not text_ahead:
            assert in_process == want
        else:
            for got, wanted in zip(in_process, want, strict=True):
                assert {**got, "text": ""} == {**wanted, "text": ""}


@pytest.mark.parametrize(
    ("count_key", "count"),
    [("completion_tokens", 2), ("completion_tokens", -1), ("output_token_logprobs_length", 2)],
)
def test_cumulative_lists_behind_their_count_are_still_refused(count_key: str, count: int) -> None:
    """A middle frame's list may run ahead of its count, never behind it or below 0."""
    meta = {"completion_tokens": 1, "output_token_logprobs_length": 1, "finish_reason": None}
    frame = {
        "text": "a",
        "output_ids": [1],
        "meta_info": {**meta, "output_token_logprobs": [[-1.0, 1, None]], count_key: count},
    }
    with pytest.raises(ResponseError, match="fits neither stream mode"):
        aggregate_frames([frame])
