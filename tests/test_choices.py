"""The readers of SGLang's answer of many sequences (``choices=``): a batch, or n > 1."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    EngineError,
    EnvelopeError,
    ResponseError,
    aggregate_sse,
    aggregate_sse_async,
    parse_unary,
    relay_sse,
    relay_sse_async,
)
from sglang_envelope.stream import SSE_DONE, ChoicesAggregator, aggregate_frames, encode_sse
from tests.strategies import (
    chunkings,
    cumulative_splits,
    final_responses,
    incremental_splits,
    interleaved,
    relay_generations,
    sse_transcripts,
)


def sse(frames: list[dict[str, Any]], done: bool = True) -> bytes:
    return b"".join(map(encode_sse, frames)) + (SSE_DONE if done else b"")


def outcome(call: Any) -> Any:
    """What a reader gives: its answer, or its error's type."""
    try:
        return call()
    except ResponseError as exc:
        return type(exc)


def events(data: bytes) -> list[bytes]:
    return [event + b"\n\n" for event in data.split(b"\n\n")[:-1]]


def frame(
    k: int | None, finish: Any = None, ids: list[int] | None = None, rid: str = "r"
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "output_ids": ids or [],
        "meta_info": {"id": rid, "finish_reason": finish},
    }
    if k is not None:
        out["index"] = k
    return out


STOP = {"type": "stop"}


# --- properties ---


@given(st.lists(final_responses(), min_size=1, max_size=4), st.booleans(), st.data())
def test_interleaved_choices_give_each_its_own_answer(
    responses: list[dict[str, Any]], incremental: bool, data: st.DataObject
) -> None:
    """Any interleaving and chunking: each answer is that sequence aggregated alone, and the
    unary array of the same sequences."""
    split = incremental_splits if incremental else cumulative_splits
    streams = [data.draw(split(response)) for response in responses]
    frames = data.draw(interleaved(streams))
    n = len(responses)
    alone = [aggregate_frames(copy.deepcopy(s), incremental=incremental) for s in streams]
    assert alone == responses
    assert aggregate_frames(copy.deepcopy(frames), incremental=incremental, choices=n) == alone
    chunks = data.draw(chunkings(data.draw(sse_transcripts(frames))))
    assert aggregate_sse(chunks, incremental=incremental, choices=n) == alone
    assert parse_unary(msgspec.json.encode(responses), choices=n) == alone


@given(st.integers(1, 4), st.data())
def test_detected_modes_match_each_sequence_alone(n: int, data: st.DataObject) -> None:
    generations = [data.draw(relay_generations()) for _ in range(n)]
    modes = [data.draw(st.booleans()) for _ in range(n)]
    streams = [incr if mode else cum for (cum, incr), mode in zip(generations, modes, strict=True)]
    frames = data.draw(interleaved(streams))
    alone = [outcome(lambda s=s: aggregate_frames(copy.deepcopy(s))) for s in streams]
    chunks = data.draw(chunkings(sse(frames)))
    got = outcome(lambda: aggregate_sse(chunks, choices=n))
    if any(isinstance(one, type) for one in alone):  # a sequence alone fails: so do they all
        assert isinstance(got, type)
    else:
        assert got == alone


@given(st.integers(1, 4), st.booleans(), st.booleans(), st.data())
def test_relay_keeps_index_and_the_answers(
    n: int, engine: bool, client: bool, data: st.DataObject
) -> None:
    generations = [data.draw(relay_generations()) for _ in range(n)]
    streams = [incr if engine else cum for cum, incr in generations]
    stream = sse(data.draw(interleaved(streams)))
    chunks = data.draw(chunkings(stream))
    detect = data.draw(st.booleans())
    out = b"".join(
        relay_sse(
            chunks, choices=n, incremental=None if detect else engine, client_incremental=client
        )
    )
    assert out.endswith(SSE_DONE) and out.count(b"[DONE]") == 1
    for event in events(out)[:-1]:
        sent = json.loads(event[6:])
        assert list(sent)[-1] == "index" and 0 <= sent["index"] < n
    want = [cum[-1] for cum, _ in generations]
    assert aggregate_sse([out], choices=n, incremental=client) == want
    assert asyncio.run(_relay_async([stream], n, client)) == out


async def _relay_async(chunks: list[bytes], n: int, client: bool) -> bytes:
    async def source() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    return b"".join(
        [c async for c in relay_sse_async(source(), choices=n, client_incremental=client)]
    )


# --- examples and errors ---


def test_choices_none_is_todays_reading() -> None:
    stream = sse([frame(None, STOP, [1])])
    assert (
        aggregate_sse([stream]) == aggregate_sse([stream], choices=None) == frame(None, STOP, [1])
    )


@pytest.mark.parametrize("bad", [0, -1, True, 1.0, "2"])
def test_choices_must_be_a_positive_integer(bad: Any) -> None:
    for call in (
        lambda: aggregate_sse([], choices=bad),
        lambda: aggregate_frames([], choices=bad),
        lambda: parse_unary(b"[]", choices=bad),
        lambda: ChoicesAggregator(bad),
        lambda: relay_sse([], choices=bad),
    ):
        with pytest.raises(EnvelopeError, match="choices"):
            call()


@pytest.mark.parametrize("index", [None, 2, -1, "0", True, 0.0])
def test_a_frame_without_a_valid_index_is_refused(index: Any) -> None:
    bad = frame(0, STOP)
    if index is None:
        del bad["index"]
    else:
        bad["index"] = index
    with pytest.raises(ResponseError, match="index") as info:
        aggregate_frames([frame(1, STOP), bad], choices=2)
    assert type(info.value) is ResponseError
    out = b"".join(relay_sse([sse([frame(1, STOP), bad])], choices=2))
    assert events(out)[-2].startswith(b'data: {"error"') and b"index" in events(out)[-2]


def test_an_error_frame_is_the_engines_error() -> None:
    error = {"error": {"message": "boom", "code": 503}}
    with pytest.raises(EngineError, match="boom"):
        aggregate_frames([frame(0), error], choices=2)
    out = b"".join(relay_sse([sse([frame(0), error])], choices=2))
    assert b"boom" in events(out)[-2] and out.endswith(SSE_DONE)


@pytest.mark.parametrize("seen", [[frame(0, STOP)], [frame(0, STOP), frame(1)]])
def test_a_choice_without_its_terminal_frame_is_an_error(seen: list[dict[str, Any]]) -> None:
    with pytest.raises(ResponseError, match="index 1"):
        aggregate_sse([sse(seen)], choices=2)
    out = b"".join(relay_sse([sse(seen)], choices=2))
    assert b"index 1" in events(out)[-2] and out.endswith(SSE_DONE)


def test_anything_after_a_choices_terminal_frame_is_an_error() -> None:
    with pytest.raises(ResponseError, match=r"index 0.*after the terminal frame"):
        aggregate_sse([sse([frame(0, STOP), frame(1, STOP), frame(0, STOP)])], choices=2)
    with pytest.raises(ResponseError, match=r"after data: \[DONE\]"):
        aggregate_sse([sse([frame(0, STOP)]) + encode_sse(frame(0, STOP))], choices=1)


def test_a_huge_choices_costs_nothing_up_front() -> None:
    with pytest.raises(ResponseError, match=r"index 1: .*before any frame"):
        aggregate_sse([sse([frame(0, STOP)])], choices=10**9)
    out = b"".join(relay_sse([sse([frame(0, STOP)])], choices=10**9))
    assert b"index 1" in out


def test_rids_are_each_indexs_first_id() -> None:
    many = ChoicesAggregator(3)
    many.add(frame(2, rid="c"))
    many.add(frame(0, rid="a"))
    assert many.rids == ("a", None, "c")
    assert not many.finished
    for k in range(3):
        many.add(frame(k, STOP, rid="z"))
    assert many.finished and many.rids == ("a", "z", "c") and many.frames == 5
    assert [answer["meta_info"]["id"] for answer in many.result()] == ["z"] * 3


def test_async_reader_gives_the_same_answers() -> None:
    stream = sse([frame(1, STOP, [2]), frame(0, STOP, [1])])

    async def source() -> AsyncIterator[bytes]:
        yield stream

    got = asyncio.run(aggregate_sse_async(source(), choices=2))
    assert (
        got
        == aggregate_sse([stream], choices=2)
        == [frame(None, STOP, [1]), frame(None, STOP, [2])]
    )


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"{}", "expected a JSON array of 2"),
        (b"[{}]", "expected a JSON array of 2 sequences, got 1"),
        (b'[{"meta_info": {}}, 3]', r"\[1\]: expected an object"),
        (b'[{"meta_info": {}}, {}]', r"\[1\] has no meta_info"),
        (b'[{"meta_info": {}}, {"meta_info": []}]', r"\[1\]\.meta_info: expected an object"),
    ],
)
def test_parse_unary_checks_each_choice(body: bytes, match: str) -> None:
    with pytest.raises(ResponseError, match=match):
        parse_unary(body, choices=2)


def test_parse_unary_without_choices_says_how_to_read_an_array() -> None:
    with pytest.raises(ResponseError, match="choices=2"):
        parse_unary(b'[{"meta_info": {}}, {"meta_info": {}}]')
    with pytest.raises(EngineError) as info:
        parse_unary(b'{"error": {"message": "no"}}', status=400, choices=2)
    assert info.value.code == 400


def test_a_relayed_sequences_fault_names_its_index_and_sglangs_error_passes_as_sent() -> None:
    def frame(k: int, ids: list[int], count: int) -> bytes:
        meta = {"id": f"s{k}", "finish_reason": None, "completion_tokens": count}
        return encode_sse({"text": "", "output_ids": ids, "meta_info": meta, "index": k})

    broken = frame(0, [1], 1) + frame(1, [5], 1) + frame(1, [5], 3) + SSE_DONE
    out = b"".join(relay_sse([broken], choices=2))
    error = json.loads(out.split(b"\n\n")[-3][6:])["error"]
    assert error["message"].startswith("index 1: frame 2: it fits neither stream mode")
    assert out.endswith(b"\n\n" + SSE_DONE) and out.count(b"[DONE]") == 1
    sglang = b'data: {"error":{"message":"boom"}}\n\n'
    out = b"".join(relay_sse([frame(0, [1], 1) + sglang + SSE_DONE], choices=2))
    assert json.loads(out.split(b"\n\n")[-3][6:])["error"]["message"] == "boom"
