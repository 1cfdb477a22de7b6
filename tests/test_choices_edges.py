"""The edges of reading and relaying many sequences (``choices=``): bad arguments, SGLang's
errors inside a sequence, and the stream's byte bound."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sglang_envelope import EngineError, EnvelopeError, ResponseError, parse_unary, relay_sse
from sglang_envelope.stream import SSE_DONE, ChoicesAggregator, encode_sse

STOP = {"type": "stop"}


def frame(k: int | None, finish: Any = None, ids: list[int] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "output_ids": ids or [],
        "meta_info": {"id": "r", "finish_reason": finish},
    }
    if k is not None:
        out["index"] = k
    return out


def sent_events(out: bytes) -> list[dict[str, Any]]:
    """The JSON of every event the relay wrote but the closing ``[DONE]``."""
    assert out.endswith(SSE_DONE) and out.count(b"[DONE]") == 1
    parts = out.split(b"\n\n")[:-2]
    assert all(part.startswith(b"data: ") for part in parts)
    return [json.loads(part[6:]) for part in parts]


@pytest.mark.parametrize("bad", ["yes", 1, 0, []])
def test_a_choices_aggregator_refuses_an_incremental_that_is_not_a_bool_or_none(bad: Any) -> None:
    with pytest.raises(EnvelopeError, match=r"incremental: expected True, False or None") as info:
        ChoicesAggregator(2, incremental=bad)
    assert type(info.value) is EnvelopeError


def test_a_choices_aggregator_says_how_many_sequences_it_holds() -> None:
    many = ChoicesAggregator(3, incremental=False)
    assert many.choices == 3 and many.frames == 0 and not many.finished


@pytest.mark.parametrize("bad", [None, [frame(0)], "data", 3])
def test_a_frame_that_is_not_an_object_is_refused_by_its_position(bad: Any) -> None:
    many = ChoicesAggregator(2)
    many.add(frame(1))
    with pytest.raises(ResponseError, match=r"^frame 2: expected an object$") as info:
        many.add(bad)
    assert type(info.value) is ResponseError
    assert many.frames == 1, "a frame that raises adds nothing"


def test_an_error_frame_carrying_an_index_is_sglangs_error_not_renamed() -> None:
    many = ChoicesAggregator(2)
    many.add(frame(0, None, [1]))
    with pytest.raises(EngineError) as info:
        many.add({"error": {"message": "boom", "code": 503}, "index": 1})
    assert str(info.value) == "boom" and info.value.code == 503, "no 'index 1:' prefix"
    assert many.frames == 1


def test_an_abort_with_an_error_status_in_one_sequence_is_its_engine_error() -> None:
    abort = {"type": "abort", "message": "out of memory", "status_code": 503}
    many = ChoicesAggregator(2, incremental=False)
    many.add(frame(1, STOP, [4]))
    many.add(frame(0, abort, [3]))
    assert many.finished
    with pytest.raises(EngineError) as info:
        many.result(said_done=True)
    assert (str(info.value), info.value.code) == ("out of memory", 503)


@pytest.mark.parametrize(
    ("item", "message", "code"),
    [
        (b'{"error": {"message": "boom", "code": 503}}', "boom", 503),
        (b'{"error": "bad rid"}', "bad rid", None),
        (b'{"object": "error", "message": "nope", "code": 400}', "nope", 400),
    ],
)
def test_an_sglang_error_body_inside_a_unary_array_is_its_engine_error(
    item: bytes, message: str, code: int | None
) -> None:
    body = b'[{"output_ids": [1], "meta_info": {}}, ' + item + b"]"
    with pytest.raises(EngineError) as info:
        parse_unary(body, choices=2)
    assert (str(info.value), info.value.code) == (message, code)


def test_a_choices_stream_over_max_bytes_ends_with_the_limit_error_after_what_fit() -> None:
    first = encode_sse(frame(0, None, [1]))
    second = encode_sse(frame(1, STOP, [2]))
    limit = len(first) + 10  # the second event is cut inside
    out = b"".join(relay_sse([first + second + SSE_DONE], choices=2, max_bytes=limit))
    sent = sent_events(out)
    assert sent[0] == frame(0, None, [1]), "the frame within the bound went out"
    assert len(sent) == 2
    error = sent[1]["error"]
    assert error["type"] == "limit_exceeded" and error["code"] == 502
    assert error["message"] == f"the stream is larger than max_bytes ({limit} bytes)"


def test_a_choices_stream_over_max_bytes_in_a_later_chunk_keeps_the_earlier_frames() -> None:
    first = encode_sse(frame(0, STOP, [1]))
    second = encode_sse(frame(1, None, [2]))
    chunks = [first, second, encode_sse(frame(1, STOP, [2, 3])) + SSE_DONE]
    out = b"".join(relay_sse(chunks, choices=2, max_bytes=len(first) + len(second) + 5))
    sent = sent_events(out)
    assert sent[:2] == [frame(0, STOP, [1]), frame(1, None, [2])]
    assert sent[2]["error"]["type"] == "limit_exceeded" and len(sent) == 3


def test_a_relayed_error_frame_carrying_an_index_goes_out_as_sglangs_error() -> None:
    error = {"error": {"message": "boom", "code": 503}, "index": 1}
    stream = encode_sse(frame(0, None, [1])) + encode_sse(error) + SSE_DONE
    sent = sent_events(b"".join(relay_sse([stream], choices=2)))
    assert sent[0] == frame(0, None, [1])
    (last,) = sent[1:]
    assert last == {
        "error": {
            "message": "boom",
            "type": "invalid_request_error",
            "code": 503,
            "retryable": False,
        }
    }, "SGLang's own error is not renamed with its index, nor indexed"
