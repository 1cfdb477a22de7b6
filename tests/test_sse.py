"""SseDecoder, encode_sse and SSE_DONE."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import EnvelopeError, LimitExceeded, ResponseError
from sglang_envelope.stream import SSE_DONE, SseDecoder, encode_sse
from tests.strategies import chunkings, json_values, sse_transcripts

FIXTURES = Path(__file__).parent / "fixtures" / "sse_responses.jsonl"
objects = st.dictionaries(st.text(max_size=6), json_values, max_size=4)


def decode_all(chunks: list[bytes], **options: Any) -> tuple[list[dict[str, Any]], SseDecoder]:
    decoder = SseDecoder(**options)
    frames = [frame for chunk in chunks for frame in decoder.feed(chunk)]
    decoder.close()
    return frames, decoder


# --- the SGLang shape ---


def sglang_streams() -> list[dict[str, Any]]:
    cases = [json.loads(line) for line in FIXTURES.read_text().splitlines()]
    return [case for case in cases if case["kind"] == "sse"]


@pytest.mark.parametrize("case", sglang_streams(), ids=lambda case: case["name"])
def test_encode_sse_writes_sglangs_bytes(case: dict[str, Any]) -> None:
    body = case["body"].encode()
    frames, decoder = decode_all([body])
    assert decoder.done
    assert b"".join(encode_sse(frame) for frame in frames) + SSE_DONE == body


def test_encode_sse_and_done() -> None:
    assert encode_sse({"text": "é", "meta_info": {"x": 1.5}}) == (
        b'data: {"text":"\xc3\xa9","meta_info":{"x":1.5}}\n\n'
    )
    assert SSE_DONE == b"data: [DONE]\n\n"


def test_encode_sse_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(EnvelopeError, match="not JSON-encodable"):
        encode_sse({"meta_info": {1j: 2}})


@given(st.lists(objects, max_size=6), st.data())
def test_any_transcript_in_any_chunks_gives_the_frames(
    frames: list[dict[str, Any]], data: st.DataObject
) -> None:
    transcript = data.draw(sse_transcripts(frames))
    decoded, decoder = decode_all(data.draw(chunkings(transcript)))
    assert decoded == frames
    assert decoder.done


@given(st.lists(objects, min_size=1, max_size=4))
def test_byte_at_a_time(frames: list[dict[str, Any]]) -> None:
    transcript = b"".join(encode_sse(frame) for frame in frames) + SSE_DONE
    decoded, decoder = decode_all([transcript[i : i + 1] for i in range(len(transcript))])
    assert decoded == frames
    assert decoder.done


# --- WHATWG details ---


@pytest.mark.parametrize(
    ("stream", "frames"),
    [
        (b'data: {"a":\ndata: 1}\n\n', [{"a": 1}]),  # data lines joined with LF
        (b'data:{"a":1}\n\n', [{"a": 1}]),  # no space after the colon
        (b'data:  {"a":1}\n\n', [{"a": 1}]),  # one space dropped, the next is JSON whitespace
        (b": comment\nid: 1\nevent: x\nretry: 10\ndata: {}\n\n", [{}]),
        (b"id\nevent\ndata: {}\n\n", [{}]),  # fields without a colon
        (b"\n\n\ndata: {}\n\n\n\n", [{}]),  # blank lines dispatch nothing
        (b"event: ping\n\n: just a comment\n\n", []),  # events without data are dropped
        (b"dataX: {}\ndata: {}\n\n", [{}]),  # "dataX" is another field
        (b"\xef\xbb\xbfdata: {}\n\n", [{}]),  # one leading BOM skipped
        (b"data: {}\r\n\r\ndata: {}\r\rdata: {}\n\r\n", [{}, {}, {}]),  # mixed line ends
    ],
)
def test_whatwg_rules(stream: bytes, frames: list[dict[str, Any]]) -> None:
    for size in (1, 2, 3, len(stream)):
        chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
        assert decode_all(chunks)[0] == frames


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: {}\r") == []
    assert decoder.feed(b"\n\r") == [{}]
    assert decoder.feed(b'\ndata: {"b":2}\r\r') == [{"b": 2}]


def test_bom_split_across_chunks_and_only_at_the_start() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"\xef") == []
    assert decoder.feed(b"\xbb") == []
    assert decoder.feed(b"\xbfdata: {}\n\n") == [{}]
    with pytest.raises(ResponseError, match="not valid JSON"):
        decoder.feed(b"data: \xef\xbb\xbf{}\n\n")


def test_accepts_bytearray_and_memoryview() -> None:
    decoder = SseDecoder()
    assert decoder.feed(bytearray(b"data: {}\n")) == []
    assert decoder.feed(memoryview(b"\ndata: [DONE]\n\n")) == [{}]
    assert decoder.done


def test_feed_refuses_text() -> None:
    with pytest.raises(EnvelopeError, match="expected bytes, got str"):
        SseDecoder().feed("data: {}\n\n")  # type: ignore[arg-type]


# --- [DONE] ---


def test_done_is_not_a_frame() -> None:
    decoder = SseDecoder()
    assert not decoder.done
    assert decoder.feed(b"data: {}\n\ndata: [DONE]\n\n") == [{}]
    assert decoder.done
    assert decoder.feed(b": trailing comment\n\n\n") == []


@pytest.mark.parametrize(
    "after",
    [b"data: {}\n\n", b"data: [DONE]\n\n", b"data:\n\n", b"data: {\ndata: }\n\n"],
)
def test_an_event_after_done_is_an_error(after: bytes) -> None:
    for stream in ([SSE_DONE + after], [SSE_DONE, after], [SSE_DONE + after[:3], after[3:]]):
        decoder = SseDecoder()
        with pytest.raises(ResponseError, match=r"after data: \[DONE\]"):
            for chunk in stream:
                decoder.feed(chunk)


def test_done_must_be_exact() -> None:
    with pytest.raises(ResponseError, match="not valid JSON"):
        SseDecoder().feed(b"data: [DONE] \n\n")


# --- errors ---


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"data: [1]\n\n", "expected a JSON object, got an array"),
        (b"data: 1\n\n", "expected a JSON object, got an integer"),
        (b"data\n\n", "not valid JSON"),
        (b"data: {\n\n", "not valid JSON"),
        (b"data: {}}\n\n", "not valid JSON"),
        (b'data: {"a": NaN}\n\n', "not valid JSON"),
        (b'data: "\xff"\n\n', "not valid JSON"),
        (b"data: " + b"[" * 100_000 + b"\n\n", "not valid JSON"),
    ],
)
def test_event_data_must_be_a_json_object(data: bytes, message: str) -> None:
    with pytest.raises(ResponseError, match=message):
        SseDecoder().feed(data)


@pytest.mark.parametrize(
    "tail",
    [b"data: {}", b"data: {}\n", b"da", b"data: {\ndata: }\n", b"id: 1\ndata: {}\r\n", b"\xef\xbb"],
)
def test_close_inside_an_event(tail: bytes) -> None:
    decoder = SseDecoder()
    decoder.feed(b"data: {}\n\n" + tail)
    with pytest.raises(ResponseError, match="ended inside an event"):
        decoder.close()


@pytest.mark.parametrize("tail", [b"", b"\n", b": keep-alive", b": keep-alive\n", b"id: 3\n"])
def test_close_between_events(tail: bytes) -> None:
    decoder = SseDecoder()
    decoder.feed(tail)
    decoder.close()  # no error: nothing with data was cut off


# --- max_event_bytes ---


def test_event_bound_when_a_chunk_over_it_ends_inside_its_only_event() -> None:
    with pytest.raises(LimitExceeded):
        SseDecoder(max_event_bytes=9).feed(b"data: { }\n")  # 10 bytes, no blank line yet


@given(st.integers(9, 60), st.booleans(), st.data())
def test_event_bound_is_exact(limit: int, over: bool, data: st.DataObject) -> None:
    """An event of `limit` bytes (its lines and their line ends) passes; one more byte fails."""
    payload = b"{" + b" " * (limit + over - 9) + b"}"  # with "data: " and LF: limit + over bytes
    chunks = data.draw(chunkings(b"data: " + payload + b"\n\n"))
    if not over:
        assert decode_all(chunks, max_event_bytes=limit)[0] == [{}]
        return
    with pytest.raises(LimitExceeded) as caught:
        decode_all(chunks, max_event_bytes=limit)
    assert (caught.value.bound, caught.value.limit) == ("max_event_bytes", limit)


def test_event_bound_is_checked_before_the_event_ends() -> None:
    decoder = SseDecoder(max_event_bytes=100)
    decoder.feed(b"data: " + b"x" * 90)
    with pytest.raises(LimitExceeded, match="larger than max_event_bytes"):
        decoder.feed(b"x" * 10)  # the event is not finished, and not parsed


def test_event_bound_counts_every_line_of_the_event() -> None:
    decoder = SseDecoder(max_event_bytes=30)
    assert decoder.feed(b": c\n" * 7 + b"\n") == []  # 28 bytes of comments
    with pytest.raises(LimitExceeded):
        decoder.feed(b": c\n" * 7 + b"data: {}\n\n")


def test_event_bound_holds_for_a_large_chunk() -> None:
    big = b"data: {}\n\n" * 10_000 + b"data: " + b" " * 300_000 + b"{}\n\n"
    decoder = SseDecoder(max_event_bytes=200_000)
    assert len(decoder.feed(big)) == 10_000  # the events before the oversized one
    with pytest.raises(LimitExceeded):
        decoder.close()
    assert len(SseDecoder(max_event_bytes=300_010).feed(big)) == 10_001


@pytest.mark.parametrize("bad", [0, -1, 1.5, "10", None])
def test_max_event_bytes_must_be_a_positive_integer(bad: Any) -> None:
    with pytest.raises(EnvelopeError, match="max_event_bytes"):
        SseDecoder(max_event_bytes=bad)


# --- hostile input ---


@given(st.lists(st.binary(max_size=64), max_size=8))
def test_random_bytes_raise_only_envelope_errors(chunks: list[bytes]) -> None:
    decoder = SseDecoder(max_event_bytes=256)
    try:
        for chunk in chunks:
            for frame in decoder.feed(chunk):
                assert isinstance(frame, dict)
        decoder.close()
    except EnvelopeError:
        pass


@given(st.lists(objects, max_size=3), st.data())
def test_mutated_transcripts_raise_only_envelope_errors(
    frames: list[dict[str, Any]], data: st.DataObject
) -> None:
    transcript = bytearray(data.draw(sse_transcripts(frames)))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(transcript)))
        transcript[at:at] = data.draw(
            st.sampled_from([b"\n", b"\r", b":", b"data: ", b"\xff", b"{"])
        )
    decoder = SseDecoder()
    try:
        for chunk in data.draw(chunkings(bytes(transcript))):
            decoder.feed(chunk)
        decoder.close()
    except EnvelopeError:
        pass


def test_a_long_event_in_many_chunks() -> None:
    """A 16 MiB event fed in 4 KiB chunks (held in one growing buffer)."""
    payload = msgspec.json.encode({"text": "x" * (16 * 2**20)})
    stream = b"data: " + payload + b"\n\n"
    decoder = SseDecoder()
    frames = []
    for i in range(0, len(stream), 4096):
        frames += decoder.feed(stream[i : i + 4096])
    assert frames == [{"text": "x" * (16 * 2**20)}]


# --- SGLang's shape, a chunk at a time (the relay's reading) ---


def read_either_way(decoder: SseDecoder, chunks: list[bytes]) -> list[bytes]:
    """Each chunk's payloads, read in SGLang's shape when it is, else by the WHATWG rules."""
    payloads: list[bytes] = []
    for chunk in chunks:
        shaped = decoder.feed_sglang_events(chunk)
        if shaped is None:
            payloads += [bytes(payload) for payload in decoder.feed_payloads(chunk)]
            continue
        data, lines = shaped
        if not lines:
            assert data == b""
            continue
        if lines[0] is data:
            lines = [data[:-2]]
        assert data == b"".join(line + b"\n\n" for line in lines)  # as received
        payloads += [line[6:] for line in lines]
    return payloads


@given(data=st.data(), frames=st.lists(st.dictionaries(st.text(max_size=3), json_values)))
def test_sglang_shaped_reading_gives_the_whatwg_payloads(
    data: st.DataObject, frames: list[dict[str, Any]]
) -> None:
    stream = data.draw(sse_transcripts(frames))
    chunks = data.draw(chunkings(stream))
    expected = SseDecoder().feed_payloads(stream)
    decoder = SseDecoder()
    assert read_either_way(decoder, chunks) == [bytes(payload) for payload in expected]
    decoder.close()
    assert decoder.done


def test_sglang_shaped_reading_declines_and_leaves_the_decoder_as_it_was() -> None:
    frame = b'data: {"a":1}\n\n'
    decoder = SseDecoder(max_event_bytes=40)
    assert decoder.feed_sglang_events(b"\xef\xbb\xbf" + frame) is None  # a BOM: not at once
    assert decoder.feed_payloads(b"\xef\xbb\xbf" + frame) == [b'{"a":1}']
    assert decoder.feed_sglang_events(frame + b'data: {"b"') == (frame, [frame])
    for other in (b":2}\r\n\r\n", b":2}\n: c\n\n", b":2}\n", b":2}\n\ndata: [DONE]\n\n"):
        assert decoder.feed_sglang_events(other) is None
    assert decoder.feed_sglang_events(b"x" * 40) is None  # past the bound: read by the rules
    assert decoder.feed_payloads(b':2}\n\ndata: {"c":3}\n\n') == [b'{"b":2}', b'{"c":3}']
    with pytest.raises(LimitExceeded):
        decoder.feed_payloads(b"data: " + b"x" * 40)
