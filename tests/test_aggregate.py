"""StreamAggregator, aggregate_frames, aggregate_sse and parse_unary."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    EngineError,
    EnvelopeError,
    GenerateResponse,
    LimitExceeded,
    ResponseError,
    aggregate_sse,
    parse_unary,
)
from sglang_envelope.response.aggregate import DELTA_FIELDS
from sglang_envelope.stream import SSE_DONE, StreamAggregator, aggregate_frames, encode_sse
from tests.strategies import (
    chunkings,
    cumulative_splits,
    final_responses,
    hostile_json_documents,
    incremental_splits,
    json_values,
    retyped,
    sse_transcripts,
)

FIXTURES = Path(__file__).parent / "fixtures" / "sse_responses.jsonl"


def transcript(frames: list[dict[str, Any]], *, done: bool = True) -> bytes:
    return b"".join(encode_sse(frame) for frame in frames) + (SSE_DONE if done else b"")


def frame(ids: list[int], finish: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "text": "".join(f"<{i}>" for i in ids),
        "output_ids": ids,
        "meta_info": {"finish_reason": finish, **meta},
    }


STOP = {"type": "stop", "matched": 2}

# --- SGLang's own streams ---


def oracle_cases() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FIXTURES.read_text().splitlines()]


@pytest.mark.parametrize("case", oracle_cases(), ids=lambda case: case["name"])
def test_sglangs_own_streams_and_bodies(case: dict[str, Any]) -> None:
    """Bytes from SGLang's /generate handlers; answers from its own coalescing and abort code."""
    body = case["body"].encode()
    expected = case["expected"]

    def run() -> GenerateResponse:
        if case["kind"] == "unary":
            return parse_unary(body)
        return aggregate_sse(chunkings_of(body, 97), incremental=case["incremental"])

    if "error" in expected:
        with pytest.raises(EngineError) as caught:
            run()
        assert (caught.value.message, caught.value.code) == (
            expected["error"]["message"],
            expected["error"]["code"],
        )
    else:
        assert run() == expected


def chunkings_of(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def test_sglangs_incremental_abort_repeats_the_last_output() -> None:
    """An abort frame from _handle_abort_req carries the whole text and the last output id;
    aggregation concatenates it as SGLang's own coalescing does (see docs/responses.md)."""
    case = next(c for c in oracle_cases() if c["name"] == "abort_queue_incremental")
    result = aggregate_sse([case["body"].encode()], incremental=True)
    assert result["output_ids"][-1] == result["output_ids"][-2]
    assert result["meta_info"]["completion_tokens"] == len(result["output_ids"]) - 1


# --- any response, any split, any chunking ---


@given(final_responses(), st.data())
def test_incremental_frames_aggregate_to_the_response(
    response: dict[str, Any], data: st.DataObject
) -> None:
    frames = data.draw(incremental_splits(response))
    expected = copy.deepcopy(response)
    assert aggregate_frames(copy.deepcopy(frames), incremental=True) == expected
    stream = data.draw(sse_transcripts(frames))
    assert aggregate_sse(data.draw(chunkings(stream)), incremental=True) == expected


@given(final_responses(), st.data())
def test_cumulative_frames_aggregate_to_the_response(
    response: dict[str, Any], data: st.DataObject
) -> None:
    frames = data.draw(cumulative_splits(response))
    assert aggregate_frames(frames, incremental=False) == response
    stream = data.draw(sse_transcripts(frames))
    assert aggregate_sse(data.draw(chunkings(stream)), incremental=False) == response


@given(final_responses(), st.data())
def test_cumulative_view_of_an_incremental_stream(
    response: dict[str, Any], data: st.DataObject
) -> None:
    """After each frame, cumulative() is that frame with every delta so far."""
    frames = data.draw(incremental_splits(response))
    aggregator = StreamAggregator(incremental=True)
    for seen, current in enumerate(frames, start=1):
        aggregator.add(current)
        expected = copy.deepcopy(current)
        for path, kind in DELTA_FIELDS:
            *parents, key = path.split(".")
            holders = [f["meta_info"] if parents else f for f in frames[:seen]]
            if any(key in holder for holder in holders):
                target = expected["meta_info"] if parents else expected
                pieces = [holder.get(key, kind()) for holder in holders]
                target[key] = "".join(pieces) if kind is str else [x for p in pieces for x in p]
        assert aggregator.cumulative() == expected
    assert aggregator.finished
    assert aggregator.result() == response


def test_cumulative_view_is_a_copy() -> None:
    aggregator = StreamAggregator(incremental=True)
    aggregator.add(frame([1]))
    first = aggregator.cumulative()
    aggregator.add(frame([2], STOP))
    assert first["output_ids"] == [1]
    assert aggregator.cumulative()["output_ids"] == [1, 2]
    assert aggregator.cumulative()["text"] == "<1><2>"


def test_cumulative_view_in_cumulative_mode_is_the_last_frame() -> None:
    aggregator = StreamAggregator(incremental=False)
    with pytest.raises(EnvelopeError, match="at least one frame"):
        aggregator.cumulative()
    last = frame([1, 2], STOP)
    aggregator.add(frame([1]))
    aggregator.add(last)
    assert aggregator.cumulative() is last
    assert aggregator.result() is last
    assert not aggregator.incremental


def test_unknown_keys_survive_and_other_keys_are_the_last_frames() -> None:
    frames = [
        {
            "text": "a",
            "output_ids": [1],
            "extra": 1,
            "meta_info": {
                "finish_reason": None,
                "completion_tokens": 1,
                "x": "first",
                "input_token_logprobs": [0],
            },
        },
        {
            "text": "b",
            "output_ids": [2],
            "extra": 2,
            "meta_info": {
                "finish_reason": STOP,
                "completion_tokens": 2,
                "y": {"z": [1]},
                "input_token_logprobs": [1],
            },
        },
    ]
    result = aggregate_frames(frames, incremental=True)
    assert result == {
        "text": "ab",
        "output_ids": [1, 2],
        "extra": 2,
        "meta_info": {
            "finish_reason": STOP,
            "completion_tokens": 2,
            "y": {"z": [1]},
            "input_token_logprobs": [1],
        },
    }


def test_a_delta_key_any_frame_had_is_in_the_result() -> None:
    frames = [
        {"output_ids": [1], "meta_info": {"finish_reason": None, "output_top_logprobs": []}},
        {"output_ids": [2], "meta_info": {"finish_reason": STOP}},
    ]
    for result in (
        aggregate_frames(frames, incremental=True),
        aggregate_sse([transcript(frames)], incremental=True),
    ):
        assert result == {
            "output_ids": [1, 2],
            "meta_info": {"finish_reason": STOP, "output_top_logprobs": []},
        }


def test_result_is_computed_once() -> None:
    aggregator = StreamAggregator(incremental=True)
    aggregator.add(frame([1], STOP, completion_tokens=1))
    assert aggregator.result() is aggregator.result()


# --- the terminal frame ---


@given(final_responses(), st.data())
def test_a_stream_without_its_terminal_frame_is_an_error(
    response: dict[str, Any], data: st.DataObject
) -> None:
    frames = data.draw(incremental_splits(response))[:-1]
    expected = "before any frame" if not frames else "without a terminal frame"
    with pytest.raises(ResponseError, match=expected):
        aggregate_frames(frames, incremental=True)
    with pytest.raises(ResponseError, match=rf"said data: \[DONE\] .*{expected}"):
        aggregate_sse([transcript(frames)], incremental=True)
    with pytest.raises(ResponseError, match=rf"the stream ended .*{expected}"):
        aggregate_sse([transcript(frames, done=False)], incremental=True)


@given(final_responses(), st.data())
def test_a_frame_after_the_terminal_one_is_an_error(
    response: dict[str, Any], data: st.DataObject
) -> None:
    frames = data.draw(incremental_splits(response))
    moved = data.draw(st.integers(0, len(frames) - 2)) if len(frames) > 1 else None
    extra = (
        [*frames, frame([9])] if moved is None else [*frames[:moved], frames[-1], *frames[moved:-1]]
    )
    with pytest.raises(ResponseError, match="came after the terminal frame"):
        aggregate_frames(extra, incremental=True)
    with pytest.raises(ResponseError, match="came after the terminal frame"):
        aggregate_sse([transcript(extra)], incremental=True)


def test_an_empty_stream_is_an_error() -> None:
    for chunks in ([], [b""], [b": nothing\n\n"]):
        with pytest.raises(ResponseError, match="ended before any frame"):
            aggregate_sse(chunks, incremental=True)
    with pytest.raises(ResponseError, match=r"said data: \[DONE\] before any frame"):
        aggregate_sse([SSE_DONE], incremental=True)


def test_a_stream_cut_inside_an_event_is_an_error() -> None:
    stream = transcript([frame([1], STOP)], done=False)
    with pytest.raises(ResponseError, match="ended inside an event"):
        aggregate_sse([stream[:-1]], incremental=True)


def test_data_after_done_is_an_error() -> None:
    with pytest.raises(ResponseError, match=r"after data: \[DONE\]"):
        aggregate_sse([transcript([frame([1], STOP)]) + b"data: {}\n\n"], incremental=True)


# --- engine errors ---


SGLANG_ERROR_FRAME = {
    "error": {"message": "boom", "type": "invalid_request_error", "code": 503, "retryable": False}
}


@pytest.mark.parametrize("incremental", [True, False])
@pytest.mark.parametrize("position", [0, 1])
def test_an_error_frame_raises_engine_error(incremental: bool, position: int) -> None:
    frames = [*[frame([1])][:position], SGLANG_ERROR_FRAME]
    with pytest.raises(EngineError) as caught:
        aggregate_frames(frames, incremental=incremental)
    assert (caught.value.message, caught.value.code) == ("boom", 503)
    with pytest.raises(EngineError) as caught:
        aggregate_sse([transcript(frames)], incremental=incremental)
    assert (caught.value.message, caught.value.code) == ("boom", 503)


@pytest.mark.parametrize(
    ("status", "raises"),
    [(400, True), (503, True), (599, True), (None, False), (200, False), (600, False)],
)
def test_an_abort_is_what_the_non_streaming_path_makes_of_it(
    status: int | None, raises: bool
) -> None:
    reason = {"type": "abort", "message": "stopped", "status_code": status}
    frames = [
        frame([1]),
        frame([2], reason, completion_tokens=7),
    ]  # 7: no consistency check for aborts
    for incremental in (True, False):
        if raises:
            with pytest.raises(EngineError) as caught:
                aggregate_frames(frames, incremental=incremental)
            assert (caught.value.message, caught.value.code) == ("stopped", status)
        else:
            assert (
                aggregate_frames(frames, incremental=incremental)["meta_info"]["finish_reason"]
                == reason
            )


def test_an_abort_without_a_message_uses_sglangs_default() -> None:
    with pytest.raises(EngineError, match=r"^Aborted$"):
        aggregate_frames([frame([1], {"type": "abort", "status_code": 503})], incremental=True)


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        (
            {"type": "abort", "status_code": "503"},
            "status_code: expected an integer or null, got a string",
        ),
        (
            {"type": "abort", "status_code": 503, "message": 5},
            "message: expected a string, got an integer",
        ),
    ],
)
def test_a_malformed_abort_is_a_response_error(reason: dict[str, Any], message: str) -> None:
    with pytest.raises(ResponseError, match=message) as caught:
        aggregate_frames([frame([1], reason)], incremental=True)
    assert type(caught.value) is ResponseError


# --- consistency ---


@pytest.mark.parametrize("incremental", [True, False])
def test_completion_tokens_must_count_the_output_ids(incremental: bool) -> None:
    frames = [frame([1]), frame([1, 2] if not incremental else [2], STOP, completion_tokens=3)]
    with pytest.raises(ResponseError, match="completion_tokens is 3 but output_ids has 2 entries"):
        aggregate_frames(frames, incremental=incremental)


def test_output_token_logprobs_length_must_count_the_entries() -> None:
    frames = [
        frame([1], output_token_logprobs=[[-1.0, 1, None]]),
        frame([2], STOP, output_token_logprobs=[], output_token_logprobs_length=2),
    ]
    with pytest.raises(
        ResponseError,
        match=r"output_token_logprobs_length is 2 but meta_info\.output_token_logprobs has 1",
    ):
        aggregate_sse([transcript(frames)], incremental=True)


def test_a_lost_frame_breaks_the_counts() -> None:
    frames = [
        frame([1], completion_tokens=1),
        frame([2], completion_tokens=2),
        frame([3], STOP, completion_tokens=3),
    ]
    assert aggregate_frames(frames, incremental=True)["output_ids"] == [1, 2, 3]
    with pytest.raises(ResponseError, match="completion_tokens is 3 but output_ids has 2"):
        aggregate_frames([frames[0], frames[2]], incremental=True)


def test_beam_search_sums_completion_tokens_over_beams() -> None:
    beams = [{"output_ids": [1, 2]}, {"output_ids": [3, 4, 5]}]
    result = frame([1, 2], STOP, completion_tokens=5, beam_results=beams)
    assert aggregate_frames([result], incremental=True) == result


def test_counts_must_be_integers() -> None:
    with pytest.raises(ResponseError, match="completion_tokens: expected an integer, got a string"):
        aggregate_frames([frame([1], STOP, completion_tokens="1")], incremental=True)


# --- frames that are not frames ---


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([], "frame 1: frame: expected an object, got an array"),
        ({}, "frame 1: it has no meta_info"),
        ({"meta_info": [1]}, "frame 1: meta_info: expected an object, got an array"),
        (
            {"meta_info": {"finish_reason": 3}},
            "meta_info.finish_reason: expected an object or null, got an integer",
        ),
        (
            {"output_ids": "12", "meta_info": {}},
            "frame 1: output_ids: expected an array, got a string",
        ),
        ({"text": ["a"], "meta_info": {}}, "frame 1: text: expected a string, got an array"),
        (
            {"meta_info": {"output_top_logprobs": None}},
            "meta_info.output_top_logprobs: expected an array, got null",
        ),
        ({"error": 3}, "frame 1: error: expected an object or a string, got an integer"),
        ({"error": {"message": None}}, "error.message: expected a string, got null"),
    ],
)
def test_malformed_frames_name_the_key(bad: Any, message: str) -> None:
    with pytest.raises(ResponseError, match=message):
        aggregate_frames([bad], incremental=True)
    if type(bad) is not dict:  # the SSE path says what SseDecoder.feed says
        message = "SSE event data: expected a JSON object, got an array"
    with pytest.raises(ResponseError, match=message.removeprefix("frame 1: ")):
        aggregate_sse([b"data: " + msgspec.json.encode(bad) + b"\n\n"], incremental=True)


@pytest.mark.parametrize("incremental", [True, False])
def test_interleaved_generations_are_refused(incremental: bool) -> None:
    frames = [dict(frame([1]), index=0), dict(frame([2]), index=1), dict(frame([3], STOP), index=0)]
    with pytest.raises(ResponseError, match=r"frame 2: its index 1 differs .* \(n > 1\)"):
        aggregate_frames(frames, incremental=incremental)
    with pytest.raises(ResponseError, match="frame 2: its index 1 differs"):
        aggregate_sse([transcript(frames)], incremental=incremental)


def test_one_generation_of_a_batch_is_fine() -> None:
    frames = [dict(frame([1]), index=3), dict(frame([2], STOP), index=3)]
    assert aggregate_sse([transcript(frames)], incremental=True)["index"] == 3


# --- bounds ---


@given(final_responses(), st.data())
def test_max_bytes_is_exact(response: dict[str, Any], data: st.DataObject) -> None:
    stream = transcript(data.draw(incremental_splits(response)))
    chunks = data.draw(chunkings(stream))
    assert aggregate_sse(chunks, max_bytes=len(stream), incremental=True) == response
    with pytest.raises(LimitExceeded) as caught:
        aggregate_sse(chunks, max_bytes=len(stream) - 1, incremental=True)
    assert (caught.value.bound, caught.value.limit) == ("max_bytes", len(stream) - 1)


def test_max_bytes_stops_before_parsing_the_excess() -> None:
    def chunks() -> Any:
        yield transcript([frame([1])], done=False)
        yield b"data: {not json"  # never parsed: the bound is passed first

    with pytest.raises(LimitExceeded, match="larger than max_bytes"):
        aggregate_sse(chunks(), max_bytes=60, incremental=True)


def test_max_event_bytes_is_passed_on() -> None:
    stream = transcript([frame([1]), frame(list(range(50)), STOP)])
    with pytest.raises(LimitExceeded) as caught:
        aggregate_sse([stream], max_event_bytes=100, incremental=True)
    assert (caught.value.bound, caught.value.limit) == ("max_event_bytes", 100)


@pytest.mark.parametrize("bad", [0, -5, 2.0, "1"])
def test_bounds_must_be_positive_integers(bad: Any) -> None:
    with pytest.raises(EnvelopeError, match="max_bytes"):
        aggregate_sse([], max_bytes=bad, incremental=True)
    with pytest.raises(EnvelopeError, match="max_bytes"):
        parse_unary(b"{}", max_bytes=bad)


def test_chunks_must_be_bytes() -> None:
    with pytest.raises(EnvelopeError, match="expected bytes, got str"):
        aggregate_sse(["data: {}\n\n"], incremental=True)  # type: ignore[list-item]
    stream = transcript([frame([1], STOP)])
    assert aggregate_sse([memoryview(stream)], incremental=True) == frame([1], STOP)


# --- parse_unary ---


@given(final_responses())
def test_parse_unary_returns_the_body_as_sent(response: dict[str, Any]) -> None:
    assert parse_unary(msgspec.json.encode(response)) == response


@pytest.mark.parametrize(
    ("body", "message", "code"),
    [
        (b'{"error": {"message": "Input is too long."}}', "Input is too long.", None),
        (b'{"error": "unknown field `foo`"}', "unknown field `foo`", None),
        (
            b'{"object": "error", "message": "Aborted", "type": "503", "param": null, "code": 503}',
            "Aborted",
            503,
        ),
        (b'{"error": {"message": "m", "type": "t", "code": 429, "retryable": true}}', "m", 429),
    ],
)
def test_parse_unary_raises_sglangs_error_bodies(
    body: bytes, message: str, code: int | None
) -> None:
    with pytest.raises(EngineError) as caught:
        parse_unary(body)
    assert (caught.value.message, caught.value.code) == (message, code)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        # a prefill/decode leg's unary refusal, as SGLang 0.5.23 sent it
        (b'{"error":{"message":"routed_dp_rank=1 out of range [0, 1)"}}', 400, 400),
        (b'{"error":{"message":"routed_dp_rank=1 out of range [0, 1)"}}', 200, None),
        (b'{"error":"invalid type: string \\"a\\", expected i64"}', 400, 400),
        (b'{"error": {"message": "m", "code": 429}}', 503, 503),  # the HTTP status wins
        (b'{"error": {"message": "m", "code": 429}}', 200, 429),
        (
            b'{"object":"error","message":"m","type":"Bad Request","param":null,"code":400}',
            400,
            400,
        ),
    ],
)
def test_parse_unary_gives_the_error_the_http_status_sglang_sent(
    body: bytes, status: int, code: int | None
) -> None:
    with pytest.raises(EngineError) as caught:
        parse_unary(body, status=status)
    assert caught.value.code == code


def test_parse_unary_under_an_error_status_needs_an_error_body() -> None:
    with pytest.raises(ResponseError, match="HTTP status 502 but no SGLang error body"):
        parse_unary(b'{"meta_info": {}}', status=502)
    with pytest.raises(ResponseError, match="not valid JSON"):
        parse_unary(b"Internal Server Error", status=500)  # Starlette's answer to a crash
    assert parse_unary(b'{"meta_info": {}}', status=201) == cast(
        GenerateResponse, {"meta_info": {}}
    )


@pytest.mark.parametrize("bad", [99, 600, "400", None, 400.0, True])
def test_parse_unary_refuses_a_status_that_is_not_one(bad: Any) -> None:
    with pytest.raises(EnvelopeError, match=r"status: expected an HTTP status in \[100, 600\)"):
        parse_unary(b'{"meta_info": {}}', status=bad)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b'[{"meta_info": {}}, {"meta_info": {}}]',
            "JSON array, SGLang's answer to a batch or n > 1",
        ),
        (b'"text"', "expected an object, got a string"),
        (b"{}", "has no meta_info"),
        (b'{"meta_info": "x"}', "meta_info: expected an object, got a string"),
        (b'{"meta_info": {}', "not valid JSON"),
        (b"\xef\xbb\xbf{}", "not valid JSON"),
    ],
)
def test_parse_unary_refuses_what_is_not_one_response(body: bytes, message: str) -> None:
    with pytest.raises(ResponseError, match=message) as caught:
        parse_unary(body)
    assert type(caught.value) is ResponseError


def test_parse_unary_bound_is_checked_before_parsing() -> None:
    body = b'{"meta_info": {}}'
    assert parse_unary(body, max_bytes=len(body)) == cast(GenerateResponse, {"meta_info": {}})
    with pytest.raises(LimitExceeded) as caught:
        parse_unary(b"x" * 100, max_bytes=99)  # not JSON, but never parsed
    assert (caught.value.bound, caught.value.limit) == ("max_bytes", 99)


# --- hostile input ---


def _only_envelope_errors(run: Callable[[], object]) -> None:
    with contextlib.suppress(EnvelopeError):
        run()


@given(hostile_json_documents | st.binary(max_size=80))
def test_parse_unary_on_hostile_bodies(body: bytes) -> None:
    _only_envelope_errors(lambda: parse_unary(body))


@given(st.lists(json_values, max_size=4), st.booleans())
def test_aggregate_frames_on_any_json(frames: list[Any], incremental: bool) -> None:
    _only_envelope_errors(lambda: aggregate_frames(frames, incremental=incremental))


@given(final_responses(), st.booleans(), st.data())
def test_aggregation_of_retyped_frames(
    response: dict[str, Any], incremental: bool, data: st.DataObject
) -> None:
    split = incremental_splits if incremental else cumulative_splits
    frames = data.draw(split(response))
    at = data.draw(st.integers(0, len(frames) - 1))
    frames[at] = data.draw(retyped(frames[at]))
    _only_envelope_errors(lambda: aggregate_frames(copy.deepcopy(frames), incremental=incremental))
    stream = transcript(frames)
    _only_envelope_errors(lambda: aggregate_sse(chunkings_of(stream, 50), incremental=incremental))


@given(
    st.lists(hostile_json_documents | st.binary(max_size=40), min_size=1, max_size=4), st.booleans()
)
def test_aggregate_sse_on_hostile_events(payloads: list[bytes], incremental: bool) -> None:
    stream = b"".join(
        b"data: " + p.replace(b"\n", b" ").replace(b"\r", b" ") + b"\n\n" for p in payloads
    )
    _only_envelope_errors(lambda: aggregate_sse([stream], incremental=incremental))


@given(st.lists(st.binary(max_size=100), max_size=6), st.booleans())
def test_aggregate_sse_on_random_bytes(chunks: list[bytes], incremental: bool) -> None:
    _only_envelope_errors(
        lambda: aggregate_sse(chunks, incremental=incremental, max_event_bytes=300)
    )


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "frames",
    [
        [{"index": nested(100_000), "meta_info": {}}, {"index": nested(100_000), "meta_info": {}}],
        [{"index": 1, "meta_info": {}}, {"index": nested(100_000), "meta_info": {}}],
        [{"meta_info": nested(100_000)}],
        [{"error": {"message": nested(100_000)}}],
        [{"output_ids": [nested(100_000)], "meta_info": {"finish_reason": {}}}],
    ],
)
def test_values_nested_deeper_than_json_allows(frames: list[dict[str, Any]]) -> None:
    """Frames built in Python can nest deeper than any JSON decoder accepts."""
    _only_envelope_errors(lambda: aggregate_frames(frames))


def test_huge_arrays_are_bounded() -> None:
    huge = b'{"output_ids": [' + b"1," * 5_000_000 + b'1], "meta_info": {"finish_reason": null}}'
    with pytest.raises(LimitExceeded):
        aggregate_sse([b"data: " + huge + b"\n\n"], max_bytes=1_000_000)
    with pytest.raises(LimitExceeded):
        parse_unary(huge, max_bytes=1_000_000)
