"""One verdict per stream: the same whatever the chunking and whichever path reads it."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    EngineError,
    EnvelopeError,
    GenerateResponse,
    LimitExceeded,
    aggregate_sse,
    parse_unary,
)
from sglang_envelope.response.views import MAX_LEARNED_KEYS, MiddleReader
from sglang_envelope.stream import SSE_DONE, SseDecoder, StreamAggregator, encode_sse
from tests.strategies import SKIPPED_VALUES, chunkings, nested_lists, stream_events

Verdict = tuple[str, Any]


def verdict(run: Callable[[], object]) -> Verdict:
    """("ok", the response) or ("raised", the exception's type)."""
    try:
        return ("ok", run())
    except EnvelopeError as exc:
        return ("raised", type(exc))


def by_frames(chunks: list[bytes], incremental: bool | None, **bounds: int) -> GenerateResponse:
    """The long way: SseDecoder.feed, then StreamAggregator.add on each frame."""
    limit = bounds.get("max_bytes")
    decoder = SseDecoder(max_event_bytes=bounds.get("max_event_bytes", 64 * 2**20))
    aggregator = StreamAggregator(incremental=incremental)
    seen = 0
    for chunk in chunks:
        seen += len(chunk)
        within = chunk if limit is None or seen <= limit else chunk[: len(chunk) - (seen - limit)]
        for frame in decoder.feed(within):
            aggregator.add(frame)
        if within is not chunk:
            decoder.raise_pending()
            raise LimitExceeded("max_bytes", limit or 0)
    decoder.close()
    return aggregator.result()


def frames_of(tokens: int) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    for i in range(tokens):
        meta: dict[str, Any] = {
            "finish_reason": None,
            "completion_tokens": i + 1,
            "output_top_logprobs": [[[-1.0, i, None]]],
        }
        frames.append({"text": f" t{i}", "output_ids": [i], "meta_info": meta})
    frames[-1]["meta_info"]["finish_reason"] = {"type": "length", "length": tokens}
    return frames


def cumulative_of(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    text, ids, tops = "", list[Any](), list[Any]()
    for frame in frames:
        text += frame["text"]
        ids = ids + frame["output_ids"]
        tops = tops + frame["meta_info"]["output_top_logprobs"]
        meta = {**frame["meta_info"], "output_top_logprobs": tops}
        out.append({"text": text, "output_ids": ids, "meta_info": meta})
    return out


@given(
    st.sampled_from(SKIPPED_VALUES),
    st.integers(0, 4),
    st.sampled_from([None, True, False]),
    st.booleans(),
    st.data(),
)
def test_the_fast_path_refuses_what_the_frame_decoder_refuses(
    value: bytes, at: int, incremental: bool | None, cumulative: bool, data: st.DataObject
) -> None:
    """Invalid UTF-8, numbers out of range, integers over 4,300 digits in a field
    aggregation never reads: aggregate_sse says what SseDecoder.feed + add say."""
    frames = frames_of(5)
    if cumulative:
        frames = cumulative_of(frames)
        incremental = None if incremental is None else False
    elif incremental is False:
        incremental = True
    events = [encode_sse(frame) for frame in frames]
    events[at] = events[at].replace(b'"meta_info":{', b'"meta_info":{"skipped":' + value + b",", 1)
    stream = b"".join(events) + SSE_DONE
    chunks = data.draw(chunkings(stream))
    fast = verdict(lambda: aggregate_sse(chunks, incremental=incremental))
    assert fast == verdict(lambda: by_frames(chunks, incremental))
    assert fast == verdict(lambda: aggregate_sse([stream], incremental=incremental))


@given(stream_events(), st.sampled_from([None, True, False]), st.data())
def test_the_first_fault_wins_whatever_the_chunking(
    events: list[bytes], incremental: bool | None, data: st.DataObject
) -> None:
    stream = b"".join(events)
    bounds = {"max_event_bytes": 200}
    if data.draw(st.booleans()):
        bounds["max_bytes"] = data.draw(st.integers(1, len(stream) + 1))
    whole = verdict(lambda: aggregate_sse([stream], incremental=incremental, **bounds))
    chunks = data.draw(chunkings(stream))
    assert verdict(lambda: aggregate_sse(chunks, incremental=incremental, **bounds)) == whole
    assert verdict(lambda: by_frames(chunks, incremental, **bounds)) == whole
    assert verdict(lambda: by_frames([stream], incremental, **bounds)) == whole


@pytest.mark.parametrize("cut", [None, 1, 20, 90, 100, 110])
def test_an_error_frame_then_done_then_more_is_the_engine_error(cut: int | None) -> None:
    error = {"error": {"message": "boom", "type": "x", "code": 503, "retryable": False}}
    stream = encode_sse(error) + SSE_DONE + b"data: {}\n\n"
    chunks = [stream] if cut is None else [stream[:cut], stream[cut:]]
    with pytest.raises(EngineError, match="boom"):
        aggregate_sse(chunks)
    with pytest.raises(EngineError, match="boom"):
        by_frames(chunks, None)


def test_feed_returns_the_frames_before_a_fault_and_raises_it_next() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: {}\n\ndata: [DONE]\n\ndata: {}\n\n") == [{}]
    with pytest.raises(EnvelopeError, match=r"after data: \[DONE\]"):
        decoder.close()
    decoder = SseDecoder()
    assert decoder.feed(b'data: {"a": 1}\n\ndata: {nope\n\n') == [{"a": 1}]
    with pytest.raises(EnvelopeError, match="not valid JSON"):
        decoder.feed(b"")


def test_a_big_terminal_frame_is_decoded_once() -> None:
    """An incremental stream's terminal frame costs what parse_unary needs, not twice that."""
    frames = frames_of(2)
    frames[-1]["meta_info"]["output_top_logprobs"] = [[[-1.0, i, None]] * 5 for i in range(10_000)]
    frames[-1]["meta_info"]["completion_tokens"] = 2
    terminal = msgspec.json.encode(frames[-1])
    stream = encode_sse(frames[0]) + b"data: " + terminal + b"\n\n" + SSE_DONE

    def peak(run: Callable[[], object]) -> int:
        tracemalloc.start()
        try:
            run()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    alone = peak(lambda: parse_unary(terminal))
    assert peak(lambda: aggregate_sse([stream])) < 1.3 * alone
    assert peak(lambda: aggregate_sse([stream], incremental=True)) < 1.3 * alone


def test_a_deeply_nested_bound_is_refused_without_recursion() -> None:
    with pytest.raises(EnvelopeError, match="max_event_bytes: expected a positive integer"):
        SseDecoder(max_event_bytes=nested_lists(100_000))  # type: ignore[arg-type]


@given(st.sampled_from((b"1", b'"x"', *SKIPPED_VALUES)), st.integers(1, 4), st.data())
def test_a_new_key_in_every_frame_keeps_the_frame_decoders_verdict(
    value: bytes, at: int, data: st.DataObject
) -> None:
    """A meta_info key SGLang 0.5.23 does not write, in every frame (a newer release):
    once the first frame has it, the stream's frames are read by the view that skips
    it; a skipped value the full decoder refuses is still refused, and the answer is
    the one the frame-by-frame path gives."""
    events = [
        encode_sse(frame).replace(b'"meta_info":{', b'"meta_info":{"new_key":1,', 1)
        for frame in frames_of(5)
    ]
    events[at] = events[at].replace(b'"new_key":1', b'"new_key":' + value, 1)
    stream = b"".join(events) + SSE_DONE
    chunks = data.draw(chunkings(stream))
    fast = verdict(lambda: aggregate_sse(chunks, incremental=True))
    assert fast == verdict(lambda: by_frames(chunks, True))
    assert fast == verdict(lambda: aggregate_sse([stream], incremental=True))
    if fast[0] == "ok":
        terminal = msgspec.json.decode(events[-1][len(b"data: ") :])
        assert fast[1]["meta_info"]["new_key"] == terminal["meta_info"]["new_key"]
        assert fast[1]["output_ids"] == [0, 1, 2, 3, 4]


def test_the_reader_learns_new_keys_and_still_checks_them() -> None:
    reader = MiddleReader(msgspec.UNSET)
    plain_frame = msgspec.json.encode(frames_of(2)[0])
    assert reader.read(plain_frame).output_ids == [0]
    assert not any(reader.learned)
    # A wrong type: refused (decoded in full), nothing learned.
    assert reader.read(plain_frame.replace(b'"output_ids":[0]', b'"output_ids":7')) is None
    assert not any(reader.learned)
    new = plain_frame.replace(b'"meta_info":{', b'"meta_info":{"new_key":[1],', 1)
    new = new.replace(b"{", b'{"top_key":2,', 1)
    assert reader.read(new).output_ids == [0]
    assert reader.learned == (("top_key",), ("new_key",))
    assert reader.read(plain_frame).output_ids == [0]
    for refused in (b"[1e400]", b'["\xff"]', b"[" + b"1" * 5000 + b"]"):
        assert reader.read(new.replace(b"[1]", refused)) is None  # what the full decoder refuses
        with pytest.raises(msgspec.DecodeError):
            msgspec.json.decode(new.replace(b"[1]", refused))


def test_the_reader_learns_a_bounded_number_of_plain_keys() -> None:
    base = msgspec.json.encode(frames_of(2)[0])
    many = b"".join(b'"k%d":0,' % i for i in range(MAX_LEARNED_KEYS + 1))
    for unlearnable in (
        base.replace(b'"meta_info":{', b'"meta_info":{' + many, 1),
        base.replace(b'"meta_info":{', b'"meta_info":{"' + b"k" * 65 + b'":0,', 1),
        base.replace(b'"meta_info":{', b'"meta_info":{"a\\"b":0,', 1),
    ):
        reader = MiddleReader(msgspec.UNSET)
        assert reader.read(unlearnable) is None
        assert not any(reader.learned)
