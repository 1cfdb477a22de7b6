"""The stream core's own interface, and what the relay's cuts and faults give the client."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from msgspec import Raw

from sglang_envelope import (
    EnvelopeError,
    LimitExceeded,
    ResponseError,
    aggregate_sse,
    parse_unary,
    relay_sse,
)
from sglang_envelope.response.core import StreamCore
from sglang_envelope.response.sse import Payload
from sglang_envelope.response.stores import DeltaStore, cut_deltas
from sglang_envelope.stream import (
    SSE_DONE,
    ChoicesAggregator,
    StreamAggregator,
    aggregate_frames,
    aggregate_sse_bytes,
    encode_sse,
)


def frame(text: str, ids: list[Any], finish: Any = None, **meta: Any) -> dict[str, Any]:
    return {"text": text, "output_ids": ids, "meta_info": {"finish_reason": finish, **meta}}


STOP = {"type": "stop"}


# --- the core ---


def test_the_object_store_keeps_a_chunks_last_frame_through_the_same_interface() -> None:
    """`keep_last` gives the last middle frame's keys as JSON; every store adds its deltas."""
    core = StreamCore(True, DeltaStore())
    payloads: list[Payload] = [
        msgspec.json.encode(f)
        for f in (frame("a", [1]), frame("b", [2]), frame("c", [3], None, completion_tokens=3))
    ]
    kept = core.add_payloads(payloads, keep_last=True)
    assert kept is not None
    assert bytes(kept["text"]) == b'"c"' and bytes(kept["meta_info"]["completion_tokens"]) == b"3"
    assert core.frames == 3
    core.add_payloads([msgspec.json.encode(frame("", [4], STOP, completion_tokens=4))])
    assert core.store.assemble(core.checked_terminal(False), copy=False)["output_ids"] == [
        1,
        2,
        3,
        4,
    ]


def test_keep_last_keeps_nothing_for_a_terminal_frame_and_adds_it_in_full() -> None:
    core = StreamCore(True, DeltaStore())
    payloads: list[Payload] = [msgspec.json.encode(frame("a", [1]))]
    payloads.append(msgspec.json.encode(frame("b", [2], STOP)))
    assert core.add_payloads(payloads, keep_last=True) is None
    assert core.finished and core.frames == 2


def test_two_readings_with_the_same_fields_but_other_lengths_are_ambiguous() -> None:
    """No count tells the modes apart, and the arrays' lengths differ: the error names both."""
    frames = [frame("a", [1]), frame("ab", [1, 2], STOP)]
    stream = b"".join(map(encode_sse, frames)) + SSE_DONE
    for aggregate in (aggregate_sse, aggregate_sse_bytes):
        with pytest.raises(ResponseError, match="fit both stream modes"):
            aggregate([stream])
    dropped = [frame("a", [1]), {"meta_info": {"finish_reason": STOP}}]  # text: "a" or none
    stream = b"".join(map(encode_sse, dropped)) + SSE_DONE
    for aggregate in (aggregate_sse, aggregate_sse_bytes):
        with pytest.raises(ResponseError, match="fit both stream modes"):
            aggregate([stream])
    empty_first = [frame("", []), frame("ab", [1, 2], STOP)]  # the same either way
    stream = b"".join(map(encode_sse, empty_first)) + SSE_DONE
    assert aggregate_sse([stream])["output_ids"] == [1, 2]
    assert msgspec.json.decode(aggregate_sse_bytes([stream]))["text"] == "ab"


def test_a_unary_body_may_be_any_bytes_like_object_but_nothing_else() -> None:
    body = msgspec.json.encode(frame("a", [1], STOP))
    for given in (bytearray(body), memoryview(body)):
        assert parse_unary(given)["text"] == "a"
    with pytest.raises(EnvelopeError, match="parse_unary body: expected bytes, got str"):
        parse_unary(body.decode())  # type: ignore[call-overload]


# --- the same-mode relay's faults in events it reads by the WHATWG rules ---


def relayed(chunks: list[bytes], **options: Any) -> bytes:
    return b"".join(relay_sse(chunks, **options))


def test_a_fault_in_a_crlf_chunk_follows_the_frames_before_it() -> None:
    first = encode_sse(frame("a", [1], None, completion_tokens=1))
    middle = encode_sse(frame("b", [2], None, completion_tokens=2)).replace(b"\n", b"\r\n")
    after_done = b"data: [DONE]\r\n\r\n" + middle
    out = relayed([first, after_done], incremental=True, client_incremental=True)
    assert out.startswith(first)
    assert out.endswith(b"data: [DONE]\n\n")
    assert b"after data: [DONE]" in out  # SGLang's error frame names the fault
    again = relayed([first, middle + SSE_DONE + middle], incremental=True, client_incremental=True)
    assert again.startswith(first + middle.replace(b"\r\n", b"\n"))
    assert b"after data: [DONE]" in again


def test_an_oversized_event_in_a_chunk_read_by_the_rules_is_the_limit_error() -> None:
    first = encode_sse(frame("a", [1]))
    big = b": comment\n" + b"data: " + b"x" * 200 + b"\n\n"
    out = relayed([first, big], incremental=True, client_incremental=True, max_event_bytes=100)
    assert out.startswith(first)
    assert b"max_event_bytes" in out and out.endswith(SSE_DONE)
    with pytest.raises(LimitExceeded):
        aggregate_sse([first, big], max_event_bytes=100)


# --- cutting a cumulative frame into deltas ---


def raw(fields: dict[str, Any]) -> dict[str, Any]:
    """A frame's keys as `frame_fields` gives them: each value its JSON."""
    meta = {key: Raw(msgspec.json.encode(value)) for key, value in fields["meta_info"].items()}
    top: dict[str, Any] = {key: Raw(msgspec.json.encode(value)) for key, value in fields.items()}
    top["meta_info"] = meta
    return top


def cut(fields: dict[str, Any], sent: dict[str, Any]) -> tuple[dict[str, Any], dict[str, bytes]]:
    values: dict[str, list[Any]] = {}
    held = cut_deltas(raw(fields), sent, values)
    return held, {path: b"".join(parts) for path, parts in values.items()}


def test_a_cut_sends_what_the_last_frame_sent_did_not_hold() -> None:
    held, deltas = cut(frame("ab", [1, 2]), {})
    assert deltas == {"text": b'"ab"', "output_ids": b"[1,2]"}
    _, deltas = cut(frame("abc", [1, 2, 3]), held)
    assert deltas == {"text": b'"c"', "output_ids": b"[3]"}


def test_a_text_whose_escapes_differ_is_cut_by_its_characters() -> None:
    sent = {"text": b"\\u00e9"}  # "é" escaped by the last frame, written plainly now
    _, deltas = cut(frame("éx", []), sent)
    assert msgspec.json.decode(deltas["text"]) == "x"
    with pytest.raises(ResponseError, match="text does not extend"):
        cut(frame("yx", []), sent)


def test_an_entry_written_another_way_still_extends() -> None:
    sent = {"output_ids": [Raw(b"1.0")]}
    _, deltas = cut(frame("", [1, 2]), sent)  # 1 == 1.0 as JSON values
    assert deltas["output_ids"] == b"[2]"


@pytest.mark.parametrize(
    ("fields", "sent", "fault"),
    [
        ({"meta_info": {"finish_reason": None}}, {"text": b"a"}, "text is missing"),
        (frame("", [2]), {"output_ids": [Raw(b"1")]}, "does not extend"),
        (frame("", []), {"output_ids": [Raw(b"1")]}, "does not extend"),  # shorter
        (frame("", [[1]]), {"output_ids": [Raw(b"[" * 10_000)]}, "does not extend"),
        ({"text": 7, "meta_info": {}}, {}, "text is not a string"),
        ({"output_ids": "7", "meta_info": {}}, {}, "output_ids is not an array"),
    ],
)
def test_a_frame_that_cannot_follow_the_last_one_sent_has_no_delta(
    fields: dict[str, Any], sent: dict[str, Any], fault: str
) -> None:
    with pytest.raises(ResponseError, match=fault):
        cut(fields, sent)


def test_an_array_that_is_not_json_is_the_json_error() -> None:
    fields = raw(frame("", []))
    fields["output_ids"] = Raw(b"[1,")
    with pytest.raises(ResponseError, match="output_ids is not valid JSON"):
        cut_deltas(fields, {}, {})


def test_a_chunk_ending_in_the_terminal_frame_sends_its_middle_frames_unparsed() -> None:
    """The same-mode relay passes the middle frames of a chunk at once and parses the last."""
    frames = [frame("a", [i], None, completion_tokens=i + 1) for i in range(4)]
    frames.append(frame("b", [4], STOP, completion_tokens=5))
    events = [encode_sse(f) for f in frames]
    chunks = [events[0], b"".join(events[1:]), SSE_DONE]
    assert relayed(chunks, incremental=True, client_incremental=True) == b"".join(chunks)
    broken = events[-1].replace(b'"finish_reason":{', b'"finish_reason":{{', 1)
    out = relayed(
        [events[0], b"".join(events[1:-1]) + broken, SSE_DONE],
        incremental=True,
        client_incremental=True,
    )
    assert out.startswith(b"".join(events[:-1]))  # the middle frames went out
    assert b"not valid JSON" in out[len(b"".join(events[:-1])) :]
    assert out.endswith(SSE_DONE)


@pytest.mark.parametrize("incremental", ["x", 1, 0.0, []])
def test_every_reader_refuses_a_mode_that_is_not_true_false_or_none(incremental: Any) -> None:
    # One check, in the stream core every reader is made on, with the relays' words.
    words = r"^incremental: expected True, False or None, got "
    readers: list[Any] = [
        lambda: StreamAggregator(incremental=incremental),
        lambda: aggregate_sse([], incremental=incremental),
        lambda: aggregate_sse_bytes([], incremental=incremental),
        lambda: aggregate_frames([], incremental=incremental),
        lambda: ChoicesAggregator(2, incremental=incremental),
    ]
    for reader in readers:
        with pytest.raises(EnvelopeError, match=words):
            reader()
