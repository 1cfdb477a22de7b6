"""relay_sse and relay_sse_async: SGLang's stream to a streaming client, checked, in its mode."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Iterable
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_envelope import (
    EngineError,
    EnvelopeError,
    ResponseError,
    aggregate_sse,
    relay_sse,
    relay_sse_async,
)
from sglang_envelope.stream import SSE_DONE, SseDecoder, StreamAggregator, encode_sse
from tests.strategies import (
    HOSTILE_KINDS,
    SGLANG_ANSWERS,
    chunkings,
    cumulative_splits,
    final_responses,
    hostile_streams,
    incremental_splits,
    mutated,
    relay_generations,
    sse_transcripts,
)

FIXTURES = Path(__file__).parent / "fixtures" / "relay_streams.jsonl"
CASES: list[dict[str, Any]] = [json.loads(line) for line in FIXTURES.read_text().splitlines()]
MODES = {"incremental": True, "cumulative": False}
#: error_event's types for a ResponseError and a LimitExceeded
REFUSALS = {"response_error", "limit_exceeded"}


def events(stream: bytes) -> list[bytes]:
    """The events of a stream in SGLang's shape, each with its blank line."""
    assert stream.endswith(b"\n\n")
    return [event + b"\n\n" for event in stream[:-2].split(b"\n\n")]


def one_event_per_chunk(stream: bytes) -> list[bytes]:
    return events(stream)


def relay(chunks: Iterable[bytes | bytearray | memoryview], **options: Any) -> bytes:
    return b"".join(relay_sse(chunks, **options))


def sse(frames: list[dict[str, Any]]) -> bytes:
    return b"".join(encode_sse(frame) for frame in frames) + SSE_DONE


def error_of(stream: bytes) -> dict[str, Any] | None:
    """The error frame a relayed stream ends with, checking it ends as SGLang's does."""
    assert stream.endswith(SSE_DONE)
    last = events(stream)[:-1][-1:]
    if not last or not last[0].startswith(b'data: {"error":'):
        return None
    frame = json.loads(last[0][6:])
    assert list(frame["error"]) == ["message", "type", "code", "retryable"]
    # SGLang's type for SGLang's own errors; error_event's for a stream the library refused
    expected_type = "invalid_request_error" if frame["error"]["code"] != 502 else None
    assert frame["error"]["type"] in ({expected_type} if expected_type else REFUSALS)
    assert frame["error"]["retryable"] is False
    error: dict[str, Any] = frame["error"]
    return error


# --- against SGLang's own streams ---


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
@pytest.mark.parametrize("engine", ["incremental", "cumulative"])
@pytest.mark.parametrize("client", ["incremental", "cumulative"])
@pytest.mark.parametrize("detect", [True, False])
def test_writes_sglang_stream_in_the_clients_mode(
    case: dict[str, Any], engine: str, client: str, detect: bool
) -> None:
    """One event a chunk: the client gets exactly the stream SGLang writes in its mode."""
    stream = case[engine].encode()
    out = relay(
        one_event_per_chunk(stream),
        incremental=None if detect else MODES[engine],
        client_incremental=MODES[client],
    )
    assert out == case[client].encode()


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
@pytest.mark.parametrize("engine", ["incremental", "cumulative"])
@pytest.mark.parametrize("client", ["incremental", "cumulative"])
def test_frames_read_together_become_sglangs_one_frame(
    case: dict[str, Any], engine: str, client: str
) -> None:
    """Any chunking: each frame sent is SGLang's own for the frames its chunk completed.

    Same mode, every event goes out; converted, one frame a chunk, the one
    SGLang sends a reader that fell behind by those frames.
    """
    stream = case[engine].encode()
    expected = events(case[client].encode())
    rng = random.Random(case["name"] + engine + client)
    for _ in range(20):
        cuts = sorted(rng.sample(range(len(stream)), rng.randint(0, 8)))
        chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        out = events(relay(chunks, client_incremental=MODES[client]))
        assert out[-1] == SSE_DONE
        if engine == client:
            assert out == expected
            continue
        start = 0
        runs = case["runs"][client]
        for event in out[:-1]:
            if event.startswith(b'data: {"error":'):
                assert event == expected[-2]  # SGLang's error frame, as SGLang wrote it
                break
            end = next(
                j
                for j in range(start + 1, len(runs) + 2)
                if runs.get(f"{start}:{j}") == event.decode()
            )
            start = end
        else:
            assert start == len(expected) - 1  # every frame covered, the terminal one last


def test_an_error_frame_is_sglangs_and_ends_the_stream() -> None:
    case = next(case for case in CASES if case["name"] == "error_frame")
    out = relay(one_event_per_chunk(case["incremental"].encode()))
    assert error_of(out) == {
        "message": "The running request was aborted by a backend error.",
        "type": "invalid_request_error",
        "code": 503,
        "retryable": False,
    }
    assert events(out)[:3] == events(case["cumulative"].encode())[:3]


@pytest.mark.parametrize(
    "answer",
    [a for a in SGLANG_ANSWERS if a["kind"] == "sse"],
    ids=[a["name"] for a in SGLANG_ANSWERS if a["kind"] == "sse"],
)
@pytest.mark.parametrize("client_incremental", [True, False])
def test_relayed_stream_aggregates_to_sglangs_answer(
    answer: dict[str, Any], client_incremental: bool
) -> None:
    """Every stream of the SSE fixture, 37-byte chunks: the client's stream gives SGLang's answer.

    An abort is relayed as the frame SGLang streams; aggregating it gives the
    same verdict as aggregating the engine's stream.
    """
    body = answer["body"].encode()
    out = relay(
        [body[i : i + 37] for i in range(0, len(body), 37)], client_incremental=client_incremental
    )
    expected = answer["expected"]
    try:
        result = aggregate_sse([out], incremental=client_incremental)
    except EngineError as exc:
        assert expected["error"] == {"message": exc.message, "code": exc.code}
    else:
        assert result == expected


# --- properties ---


@given(data=st.data(), engine=st.booleans(), client=st.booleans(), detect=st.booleans())
def test_relay_keeps_the_answer(
    data: st.DataObject, engine: bool, client: bool, detect: bool
) -> None:
    """Any SGLang generation, any SSE form and chunking, every pair of modes."""
    cumulative, incremental = data.draw(relay_generations())
    stream = data.draw(sse_transcripts(incremental if engine else cumulative))
    chunks = data.draw(chunkings(stream))
    out = relay(chunks, incremental=None if detect else engine, client_incremental=client)
    assert aggregate_sse([out], incremental=client) == cumulative[-1]
    frames = [msgspec.json.decode(event[6:]) for event in events(out)[:-1]]
    if client and not engine:  # each is the delta since the last one sent
        sent = len(frames[0]["output_ids"])
        assert frames[0]["output_ids"] == cumulative[-1]["output_ids"][:sent]
    elif not client:  # each is one of SGLang's cumulative frames, in order
        indices = [cumulative.index(frame) for frame in frames]
        assert indices == sorted(set(indices))


@given(data=st.data(), engine=st.booleans())
def test_same_mode_sends_every_event_unchanged(data: st.DataObject, engine: bool) -> None:
    cumulative, incremental = data.draw(relay_generations())
    stream = sse(incremental if engine else cumulative)
    chunks = data.draw(chunkings(stream))
    assert relay(chunks, client_incremental=engine) == stream


@given(data=st.data(), response=final_responses(), to_cumulative=st.booleans())
def test_forced_incremental_matches_aggregation(
    data: st.DataObject, response: dict[str, Any], to_cumulative: bool
) -> None:
    """Incremental streams with every field coming and going, relayed in either mode."""
    frames = data.draw(incremental_splits(response))
    stream = data.draw(sse_transcripts(frames))
    chunks = data.draw(chunkings(stream))
    out = relay(chunks, incremental=True, client_incremental=not to_cumulative)
    assert aggregate_sse([out], incremental=not to_cumulative) == aggregate_sse(
        [stream], incremental=True
    )


@given(data=st.data(), response=final_responses())
def test_an_event_a_chunk_sends_the_cumulative_frame_of_each(
    data: st.DataObject, response: dict[str, Any]
) -> None:
    """An event a chunk, incremental to cumulative (the relay's shortest path): each frame
    sent is `StreamAggregator.cumulative()` after its frame, its keys in the same order,
    whether the view reads the frame or it is decoded in full (unknown keys)."""
    frames = data.draw(incremental_splits(response))
    sent = events(relay(one_event_per_chunk(sse(frames)), incremental=True))
    assert sent[-1] == SSE_DONE
    aggregator = StreamAggregator(incremental=True)
    assert len(sent) - 1 == len(frames)
    for frame, event in zip(frames, sent, strict=False):
        aggregator.add(frame)
        expected = msgspec.json.decode(encode_sse(aggregator.cumulative())[6:])
        got = msgspec.json.decode(event[6:])
        assert got == expected
        assert list(got) == list(expected)
        assert list(got["meta_info"]) == list(expected["meta_info"])


@given(data=st.data(), response=final_responses())
def test_forced_cumulative_matches_aggregation(
    data: st.DataObject, response: dict[str, Any]
) -> None:
    frames = data.draw(cumulative_splits(response))
    stream = data.draw(sse_transcripts(frames))
    out = relay(data.draw(chunkings(stream)), incremental=False)
    assert aggregate_sse([out], incremental=False) == aggregate_sse([stream], incremental=False)


def verdict(run: Any) -> tuple[str, Any]:
    try:
        return "ok", run()
    except EngineError as exc:
        return "error", exc.message
    except ResponseError as exc:
        return "error", str(exc)


@given(data=st.data(), engine=st.booleans(), client=st.booleans())
def test_damaged_streams_get_aggregations_verdict(
    data: st.DataObject, engine: bool, client: bool
) -> None:
    """Whatever aggregation says of a stream, the relayed stream says to its client."""
    cumulative, incremental = data.draw(relay_generations())
    stream = data.draw(mutated(sse(incremental if engine else cumulative)))
    same_verdict(aggregations_verdict(stream, engine), data.draw(chunkings(stream)), engine, client)


def aggregations_verdict(stream: bytes, engine: bool) -> tuple[str, Any]:
    """What aggregation says of the engine's `stream`, read in the engine's mode."""
    return verdict(partial(aggregate_sse, [stream], incremental=engine))


def same_verdict(
    expected: tuple[str, Any], chunks: list[bytes], engine: bool, client: bool
) -> None:
    """The relayed stream (the engine's, in `chunks`) says what aggregation says of the
    engine's stream (`expected`, its `aggregations_verdict`).

    Converting, in one chunk, the same words. In several, the relay may find a
    fault of the terminal frame before a fault after it, which aggregation reads
    first. In the same mode the relay passes middle frames unparsed, so it may
    name a later fault than aggregation's, or none, when the client's stream
    is then the engine's, which aggregation refuses alike (the first branch);
    it never refuses a stream aggregation accepts. One verdict is the relay's
    own: a cumulative stream whose text or ids do not extend the last frame's
    has no incremental deltas.
    """
    out = relay(chunks, incremental=engine, client_incremental=client)
    error = error_of(out)
    if error is None:
        assert verdict(partial(aggregate_sse, [out], incremental=client)) == expected
    elif error["message"].endswith("so no incremental delta exists"):
        assert client and not engine
    elif len(chunks) == 1 and engine != client:
        assert expected == ("error", error["message"])
    else:
        assert expected[0] == "error"


@pytest.mark.parametrize("kind", HOSTILE_KINDS)
def test_hostile_streams_get_aggregations_verdict(kind: str) -> None:
    """Every hostile stream of the shared matrix, whole and in thirds, every mode pair
    (aggregation's verdict read once for each engine mode)."""
    for stream in hostile_streams(kind):
        third = max(1, len(stream) // 3)
        for engine in (True, False):
            expected = aggregations_verdict(stream, engine)
            for chunks in ([stream], [stream[i : i + third] for i in range(0, len(stream), third)]):
                for client in (True, False):
                    same_verdict(expected, chunks, engine, client)


# --- failures in the middle of a stream ---


def frames_of(count: int) -> list[dict[str, Any]]:
    return [
        {
            "text": f" t{i}",
            "output_ids": [i],
            "meta_info": {
                "finish_reason": {"type": "length"} if i == count - 1 else None,
                "completion_tokens": i + 1,
            },
        }
        for i in range(count)
    ]


@pytest.mark.parametrize("client_incremental", [True, False])
def test_response_error_mid_stream_is_an_error_frame_after_the_frames_sent(
    client_incremental: bool,
) -> None:
    stream = sse(frames_of(3)[:2])[: -len(SSE_DONE)] + b"data: {not json\n\n" + SSE_DONE
    out = events(
        relay(one_event_per_chunk(stream), incremental=True, client_incremental=client_incremental)
    )
    assert len(out) == 4  # two frames, the error frame, [DONE]
    assert [json.loads(e[6:])["output_ids"] for e in out[:2]] == (
        [[0], [1]] if client_incremental else [[0], [0, 1]]
    )
    error = error_of(b"".join(out))
    assert error is not None
    assert error["code"] == 502
    with pytest.raises(ResponseError) as refused:
        aggregate_sse([stream], incremental=True)
    assert error["message"] == str(refused.value)  # aggregation's words on the same bytes


@pytest.mark.parametrize("fault", [b'"output_ids":"x"', b'"output_ids":[2,'])
def test_a_fault_in_a_chunk_sends_the_state_of_the_frames_before_it(fault: bytes) -> None:
    """One chunk: the converted frame holds exactly the frames admitted before the fault."""
    stream = sse(frames_of(4)).replace(b'"output_ids":[2]', fault, 1)
    out = relay([stream], incremental=True)
    sent = events(out)
    assert len(sent) == 3  # the frames before the fault as one cumulative frame, error, [DONE]
    assert json.loads(sent[0][6:])["output_ids"] == [0, 1]
    assert json.loads(sent[0][6:])["text"] == " t0 t1"
    with pytest.raises(ResponseError) as refused:
        aggregate_sse([stream], incremental=True)
    error = error_of(out)
    assert error is not None
    assert error["message"] == str(refused.value)


def test_engine_error_mid_stream_keeps_its_message_and_status() -> None:
    error = {"message": "out of memory", "type": "invalid_request_error", "code": 503}
    stream = sse(frames_of(3)[:2])[: -len(SSE_DONE)] + encode_sse({"error": error}) + SSE_DONE
    out = relay(one_event_per_chunk(stream))
    assert len(events(out)) == 4
    assert error_of(out) == {**error, "retryable": False}
    with pytest.raises(EngineError, match="out of memory"):
        aggregate_sse([out])


def test_engine_error_without_status_is_500() -> None:
    out = relay([encode_sse({"error": {"message": "boom"}}) + SSE_DONE])
    assert error_of(out) == {
        "message": "boom",
        "type": "invalid_request_error",
        "code": 500,
        "retryable": False,
    }


def test_inconsistent_counts_stop_a_cumulative_terminal_frame() -> None:
    """Same mode, cumulative: the terminal frame is the answer, checked before it goes out."""
    frames = frames_of(3)
    for i, frame in enumerate(frames):
        frame["output_ids"] = list(range(i + 1))
    frames[-1]["meta_info"]["completion_tokens"] = 7
    out = relay(one_event_per_chunk(sse(frames)), incremental=False, client_incremental=False)
    assert len(events(out)) == 4  # two frames, then the error instead of the terminal frame
    error = error_of(out)
    assert error is not None
    assert error["message"] == "meta_info.completion_tokens is 7 but output_ids has 3 entries"


def test_inconsistent_counts_stop_the_terminal_frame_when_every_frame_was_read() -> None:
    """Incremental, while the mode is detected (one chunk): every delta is counted."""
    frames = frames_of(3)
    frames[-1]["meta_info"]["completion_tokens"] = 7
    error = error_of(relay([sse(frames)], client_incremental=True))
    assert error is not None
    assert error["message"] == "meta_info.completion_tokens is 7 but output_ids has 3 entries"


def test_same_mode_incremental_does_not_count_the_deltas_it_passes() -> None:
    """Documented: an incremental stream's middle frames go out unparsed, so uncounted."""
    frames = frames_of(3)
    frames[-1]["meta_info"]["completion_tokens"] = 7
    stream = sse(frames)
    assert relay(one_event_per_chunk(stream), incremental=True, client_incremental=True) == stream


def test_abort_with_status_is_relayed_as_sglang_streams_it() -> None:
    frames = frames_of(2)
    frames[-1]["meta_info"]["finish_reason"] = {
        "type": "abort",
        "status_code": 503,
        "message": "Request running timeout reached.",
    }
    stream = sse(frames)
    assert relay([stream], incremental=True, client_incremental=True) == stream
    with pytest.raises(EngineError, match="timeout"):
        aggregate_sse([relay([stream], incremental=True)])


@pytest.mark.parametrize(
    ("options", "stream", "message"),
    [
        ({"max_bytes": 100}, sse(frames_of(3)), "the stream is larger than max_bytes (100 bytes)"),
        (
            {"max_event_bytes": 50},
            sse(frames_of(3)),
            "an SSE event is larger than max_event_bytes (50 bytes)",
        ),
        ({}, sse(frames_of(3))[:-30], "the stream ended inside an event"),
        ({}, sse(frames_of(3)[:2]), "the stream said data: [DONE] after 2 frames without"),
        ({}, b"", "the stream ended before any frame"),
        ({}, sse(frames_of(2)) + b"data: {}\n\n", "the stream sent an event after data: [DONE]"),
    ],
)
def test_every_failure_ends_as_sglang_ends_a_failed_stream(
    options: dict[str, Any], stream: bytes, message: str
) -> None:
    out = relay([stream[i : i + 40] for i in range(0, len(stream), 40)], **options)
    error = error_of(out)
    assert error is not None
    assert error["code"] == 502
    assert error["message"].startswith(message)


# --- same mode: a checked pass-through ---


def three(mode: bool) -> list[bytes]:
    """Three frames in `mode` (incremental or cumulative), as SGLang writes them."""
    frames = frames_of(3)
    for i, frame in enumerate(frames):
        frame["output_ids"] = [i] if mode else list(range(i + 1))
    return [encode_sse(frame) for frame in frames]


def passed(*events: bytes, mode: bool) -> bytes:
    """The relay's output for these events (then [DONE]), one event a chunk, same mode."""
    return relay([*events, SSE_DONE], incremental=mode, client_incremental=mode)


@pytest.mark.parametrize("mode", [True, False])
def test_a_malformed_middle_frame_with_sglangs_marker_goes_out_unparsed(mode: bool) -> None:
    """Past the first frame, a frame with one "finish_reason":null is sent as received."""
    first, _, terminal = three(mode)
    odd = b'data: {"meta_info":{"finish_reason":null},"output_ids":"x", oops\n\n'
    assert passed(first, odd, terminal, mode=mode) == first + odd + terminal + SSE_DONE
    # aggregation, which reads every frame, refuses the same stream
    with pytest.raises(ResponseError):
        aggregate_sse([first, odd, terminal, SSE_DONE], incremental=mode)


@pytest.mark.parametrize("mode", [True, False])
def test_the_first_frame_is_always_parsed(mode: bool) -> None:
    odd = b'data: {"finish_reason":null,"meta_info":3}\n\n'
    error = error_of(passed(odd, three(mode)[2], mode=mode))
    assert error is not None
    assert error["message"] == "frame 1: meta_info: expected an object, got an integer"


@pytest.mark.parametrize("mode", [True, False])
@pytest.mark.parametrize(
    "event",
    [
        b"data: [1,2]\n\n",  # not an object
        b"data: not json\n\n",
        b'data:  [{"finish_reason":null}]\n\n',  # its first byte past the blanks is not {
    ],
)
def test_a_frame_that_is_not_an_object_is_refused(mode: bool, event: bytes) -> None:
    first, _, terminal = three(mode)
    out = passed(first, event, terminal, mode=mode)
    error = error_of(out)
    assert error is not None
    assert error["code"] == 502
    assert events(out)[0] == first  # the frames before it went out


@pytest.mark.parametrize("mode", [True, False])
def test_an_error_frame_is_parsed_and_ends_the_stream(mode: bool) -> None:
    """SGLang's error frame holds no finish_reason: it is always parsed."""
    error = {"message": "boom", "type": "invalid_request_error", "code": 503}
    first, second, terminal = three(mode)
    out = passed(first, second, encode_sse({"error": error}), terminal, mode=mode)
    assert error_of(out) == {**error, "retryable": False}
    assert events(out)[:2] == [first, second]


@pytest.mark.parametrize("mode", [True, False])
@pytest.mark.parametrize(
    "terminal",
    [
        # a second "finish_reason", null, elsewhere in the terminal frame
        b'data: {"x":{"finish_reason":null},"meta_info":{"finish_reason":{"type":"stop"}}}\n\n',
        # the terminal key spelt with an escape, beside a null one
        b'data: {"x":{"finish_reason":null},'
        b'"meta_info":{"finish_reaso\\u006e":{"type":"stop"}}}\n\n',
        # the marker written with a space
        b'data: {"meta_info":{"finish_reason": {"type":"stop"}}}\n\n',
    ],
)
def test_the_marker_cannot_hide_a_terminal_frame(mode: bool, terminal: bytes) -> None:
    """A terminal frame the heuristic might take for a middle one is parsed: the frame
    after it is refused, in stream order, after the terminal frame went out."""
    first, second, _ = three(mode)
    out = passed(first, terminal, second, mode=mode)
    error = error_of(out)
    assert error is not None
    assert error["message"] == "frame 3: it came after the terminal frame (frame 2)"
    assert events(out)[:2] == [first, terminal]


@pytest.mark.parametrize("mode", [True, False])
def test_a_middle_frame_without_the_marker_is_parsed_and_passes(mode: bool) -> None:
    first, second, terminal = three(mode)
    spaced = second.replace(b'"finish_reason":null', b'"finish_reason" : null')
    assert passed(first, spaced, terminal, mode=mode) == first + spaced + terminal + SSE_DONE
    bad = spaced.replace(b'"finish_reason" : null', b'"finish_reason" : 7')
    error = error_of(passed(first, bad, terminal, mode=mode))
    assert error is not None
    assert error["message"] == (
        "frame 2: meta_info.finish_reason: expected an object or null, got an integer"
    )


@pytest.mark.parametrize("mode", [True, False])
def test_framing_and_bounds_are_checked_on_every_event(mode: bool) -> None:
    first, second, terminal = three(mode)
    stream = first + second + terminal + SSE_DONE
    options = {"incremental": mode, "client_incremental": mode}
    # other line ends, a comment and a two-line event (parsed: its LF becomes a space, which
    # only JSON that parses allows): sent as SGLang frames them
    decorated = (
        first
        + b": keep-alive\r\n\r\n"
        + second.replace(b',"output_ids"', b'\ndata: ,"output_ids"')
        + terminal.replace(b"\n", b"\r\n")
        + SSE_DONE
    )
    out = relay([decorated[i : i + 7] for i in range(0, len(decorated), 7)], **options)
    assert out == stream.replace(second, second.replace(b',"output_ids"', b' ,"output_ids"'))
    broken = first + second.replace(b'" t1"', b'" t1\ndata: x"') + terminal  # LF in a string
    error = error_of(relay([first, broken[len(first) :]], **options))
    assert error is not None
    assert error["message"].startswith("SSE event data is not valid JSON")
    big = second.replace(b" t1", b" t1" + b"x" * 100)
    out = relay([first, big, terminal, SSE_DONE], max_event_bytes=len(big) - 3, **options)
    assert error_of(out) == {
        "message": f"an SSE event is larger than max_event_bytes ({len(big) - 3} bytes)",
        "type": "limit_exceeded",
        "code": 502,
        "retryable": False,
    }
    assert events(out)[0] == first
    out = relay([first, second, terminal], max_bytes=len(first) + 5, **options)
    error = error_of(out)
    assert error is not None
    assert error["message"].startswith("the stream is larger than max_bytes")
    assert events(out)[0] == first
    for cut in (stream[:-20], first + second + b"data: {"):
        error = error_of(relay([cut[:30], cut[30:]], **options))
        assert error is not None
        assert error["message"].startswith("the stream ended inside an event")
    error = error_of(relay([first, second, SSE_DONE], **options))
    assert error is not None
    assert error["message"].startswith("the stream said data: [DONE] after 2 frames")


@given(data=st.data(), engine=st.booleans(), detect=st.booleans())
def test_same_mode_any_form_any_chunking_sends_sglangs_frames(
    data: st.DataObject, engine: bool, detect: bool
) -> None:
    """Line ends, BOM, comments, fields, several data lines: each frame goes out once, in order,
    as SGLang frames it (its data as received, several lines joined by spaces)."""
    cumulative, incremental = data.draw(relay_generations())
    frames = incremental if engine else cumulative
    stream = data.draw(sse_transcripts(frames))
    chunks = data.draw(chunkings(stream))
    out = relay(chunks, incremental=None if detect else engine, client_incremental=engine)
    sent = events(out)
    assert sent[-1] == SSE_DONE
    assert all(event.startswith(b"data: {") and event.count(b"\n") == 2 for event in sent[:-1])
    assert [json.loads(event[6:]) for event in sent[:-1]] == frames


def test_many_middle_frames_in_one_chunk_go_out_as_received() -> None:
    """The chunk-at-a-time path: every event in SGLang's shape, any chunking."""
    stream = sse(frames_of(300))
    rng = random.Random(5)
    for _ in range(10):
        cuts = sorted(rng.sample(range(len(stream)), 6))
        chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        assert relay(chunks, incremental=True, client_incremental=True) == stream
    one_terminal_too_many = stream[: -len(SSE_DONE)] + three(True)[2] + SSE_DONE
    error = error_of(relay([one_terminal_too_many], incremental=True, client_incremental=True))
    assert error is not None
    assert error["message"] == "frame 301: it came after the terminal frame (frame 300)"


# --- stream mode ---


def test_detects_a_cumulative_engine_and_cuts_deltas() -> None:
    cumulative = frames_of(3)
    for i, frame in enumerate(cumulative):
        frame["text"] = "".join(f" t{j}" for j in range(i + 1))
        frame["output_ids"] = list(range(i + 1))
    out = relay(one_event_per_chunk(sse(cumulative)), client_incremental=True)
    assert out == sse(frames_of(3))


def test_a_stream_consistent_with_neither_mode_names_both() -> None:
    frames = frames_of(3)
    frames[1]["meta_info"]["completion_tokens"] = 5
    error = error_of(relay([sse(frames)]))
    assert error is not None
    assert error["message"] == (
        "frame 2: it fits neither stream mode: read incrementally (frames hold deltas), "
        "meta_info.completion_tokens is 5 but output_ids has 2 entries; read cumulatively "
        "(each frame holds everything so far), meta_info.completion_tokens is 5 but this "
        "frame's output_ids has 1 entries"
    )


def test_a_count_too_long_for_json_is_aggregations_refusal() -> None:
    """A 5,000-digit count: the full decoder refuses the frame, and so does the relay."""
    stream = sse(frames_of(3)).replace(
        b'"completion_tokens":2', b'"completion_tokens":1' + b"0" * 5000
    )
    with pytest.raises(ResponseError) as refused:
        aggregate_sse([stream])
    for client in (True, False):
        error = error_of(relay([stream], client_incremental=client))
        assert error is not None
        assert error["message"] == str(refused.value)


def test_a_stream_consistent_with_both_modes_passes_unchanged() -> None:
    frames = frames_of(1)
    frames[0]["output_ids"] = [4, 5]
    frames[0]["meta_info"]["completion_tokens"] = 2
    for client in (True, False):
        assert relay([sse(frames)], client_incremental=client) == sse(frames)


def test_wrong_delta_type_is_aggregations_error() -> None:
    frames = frames_of(2)
    frames[0]["output_ids"] = "7"
    error = error_of(relay([sse(frames)], incremental=True))
    assert error is not None
    assert error["message"] == "frame 1: output_ids: expected an array, got a string"


def test_many_small_frames_read_in_large_chunks_make_few_cumulative_frames() -> None:
    """Converting costs the bytes sent: one frame a chunk read, not one per frame."""
    stream = sse(frames_of(40_000))
    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]
    out = relay(chunks, incremental=True)
    assert len(events(out)) <= len(chunks) + 1
    response = aggregate_sse([out], incremental=False)
    assert response["output_ids"] == list(range(40_000))


# --- arguments ---


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"incremental": 1}, "incremental: expected True, False or None, got 1"),
        ({"client_incremental": None}, "client_incremental: expected a bool, got None"),
        ({"max_bytes": 0}, "max_bytes: expected a positive integer, got 0"),
        ({"max_event_bytes": "1"}, "max_event_bytes: expected a positive integer"),
    ],
)
def test_bad_arguments_raise_at_once(options: dict[str, Any], message: str) -> None:
    with pytest.raises(EnvelopeError, match=message.replace("(", r"\(")):
        relay_sse([], **options)
    with pytest.raises(EnvelopeError, match=message.replace("(", r"\(")):
        relay_sse_async(aiter_of([]), **options)


def test_chunks_must_be_bytes() -> None:
    with pytest.raises(EnvelopeError, match="expected an iterable, got int"):
        relay_sse(3)  # type: ignore[arg-type]
    with pytest.raises(EnvelopeError, match="expected an async iterable, got list"):
        relay_sse_async([b""])  # type: ignore[arg-type]
    with pytest.raises(EnvelopeError, match="relay_sse chunk: expected bytes, got str"):
        relay(["data: {}\n\n"])  # type: ignore[list-item]
    assert relay([bytearray(sse(frames_of(1))), memoryview(b"")]) == sse(frames_of(1))


# --- async, over a real socket ---


async def aiter_of(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def relay_async(chunks: AsyncIterator[bytes], **options: Any) -> bytes:
    return b"".join([part async for part in relay_sse_async(chunks, **options)])


@settings(max_examples=50, deadline=None)
@given(data=st.data(), client=st.booleans())
def test_async_writes_the_same_bytes(data: st.DataObject, client: bool) -> None:
    _, incremental = data.draw(relay_generations())
    stream = data.draw(sse_transcripts(incremental))
    chunks = data.draw(chunkings(stream))
    out = asyncio.run(relay_async(aiter_of(chunks), client_incremental=client))
    assert out == relay(chunks, client_incremental=client)


async def serve_and_relay(stream: bytes, **options: Any) -> bytes:
    """An engine on 127.0.0.1 writes `stream` in irregular pieces; relay what the socket gives."""

    async def engine(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        rng = random.Random(11)
        at = 0
        while at < len(stream):
            size = rng.choice([1, 3, 7, 64, 500, 4096])
            writer.write(stream[at : at + size])
            await writer.drain()
            at += size
            if rng.random() < 0.1:
                await asyncio.sleep(0.001)
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(engine, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)

        async def body() -> AsyncIterator[bytes]:
            while chunk := await reader.read(1024):
                yield chunk

        try:
            return await asyncio.wait_for(relay_async(body(), **options), 10)
        finally:
            writer.close()
            await writer.wait_closed()


@pytest.mark.parametrize("case", CASES[:2] + CASES[-1:], ids=lambda case: case["name"])
@pytest.mark.parametrize("engine", ["incremental", "cumulative"])
@pytest.mark.parametrize("client", ["incremental", "cumulative"])
def test_async_relay_over_loopback(case: dict[str, Any], engine: str, client: str) -> None:
    stream = case[engine].encode()
    out = asyncio.run(serve_and_relay(stream, client_incremental=MODES[client]))
    if engine == client:
        assert out == stream
        return
    expected = case[client].encode()
    assert events(out)[-1] == SSE_DONE
    if case["name"] == "error_frame":
        assert events(out)[-2:] == events(expected)[-2:]
    else:
        assert aggregate_sse([out], incremental=MODES[client]) == aggregate_sse(
            [expected], incremental=MODES[client]
        )


def test_a_frame_of_several_data_lines_is_converted_into_one_sse_line() -> None:
    """Line ends inside an event's JSON (between data lines) never reach the client's frames."""
    meta = '"meta_info":{"id":"r","finish_reason":%s,"completion_tokens":%d}'
    first = b'data: {"text":"a","output_ids":[1],' + (meta % ("null", 1)).encode() + b"}\n\n"
    split = b'data: {"text":"b","output_ids":[2\ndata: ],' + (meta % ("null", 2)).encode()
    last = b'data: {"text":"c","output_ids":[3],' + (meta % ('{"type":"length"}', 3)).encode()
    events = [first, split + b"}\n\n", last + b"}\n\n" + SSE_DONE]
    sent = b"".join(relay_sse(events, incremental=True))
    frames = [line for line in sent.split(b"\n") if line]
    assert all(line.startswith(b"data: ") for line in frames)
    decoded = SseDecoder().feed(sent)
    assert [frame["output_ids"] for frame in decoded] == [[1], [1, 2], [1, 2, 3]]
    assert [frame["text"] for frame in decoded] == ["a", "ab", "abc"]
