"""aggregate_sse_bytes and its async twin: aggregate_sse's answer and verdicts, as JSON bytes."""

from __future__ import annotations

import asyncio
import copy
import tracemalloc
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import EnvelopeError, aggregate_sse
from sglang_envelope.stream import (
    SSE_DONE,
    aggregate_sse_bytes,
    aggregate_sse_bytes_async,
    encode_sse,
)
from tests.strategies import (
    SGLANG_ANSWERS,
    chunkings,
    cumulative_splits,
    final_responses,
    incremental_splits,
    sglang_generations,
    sse_transcripts,
    stream_events,
)

Verdict = tuple[str, Any]


def verdict(run: Callable[[], object]) -> Verdict:
    """("ok", the answer as a Python value) or ("raised", the exception's type)."""
    try:
        answer = run()
    except EnvelopeError as exc:
        return ("raised", type(exc))
    return ("ok", msgspec.json.decode(answer) if isinstance(answer, bytes) else answer)


async def delivered(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        await asyncio.sleep(0)
        yield chunk


def both_twins(chunks: list[bytes], **options: Any) -> list[Verdict]:
    return [
        verdict(lambda: aggregate_sse_bytes(chunks, **options)),
        verdict(lambda: asyncio.run(aggregate_sse_bytes_async(delivered(chunks), **options))),
    ]


@given(sglang_generations(), st.booleans(), st.data())
def test_sglangs_answer_as_bytes(
    generation: dict[str, Any], incremental: bool, data: st.DataObject
) -> None:
    frames = generation["incremental" if incremental else "cumulative"]
    chunks = data.draw(chunkings(data.draw(sse_transcripts(frames))))
    assert both_twins(chunks) == [("ok", generation["unary"])] * 2


@given(final_responses(), st.booleans(), st.data())
def test_any_stream_in_a_forced_mode(
    response: dict[str, Any], incremental: bool, data: st.DataObject
) -> None:
    split = incremental_splits if incremental else cumulative_splits
    frames = data.draw(split(copy.deepcopy(response)))
    chunks = data.draw(chunkings(data.draw(sse_transcripts(frames))))
    expected = verdict(lambda: aggregate_sse(chunks, incremental=incremental))
    assert expected[0] == "ok"
    assert both_twins(chunks, incremental=incremental) == [expected] * 2


@given(stream_events(), st.sampled_from([None, True, False]), st.data())
def test_the_same_verdicts_as_aggregate_sse(
    events: list[bytes], incremental: bool | None, data: st.DataObject
) -> None:
    stream = b"".join(events)
    bounds = {"max_event_bytes": 200, "max_bytes": data.draw(st.integers(1, len(stream) + 99))}
    chunks = data.draw(chunkings(stream))
    expected = verdict(lambda: aggregate_sse(chunks, incremental=incremental, **bounds))
    assert both_twins(chunks, incremental=incremental, **bounds) == [expected] * 2


@pytest.mark.parametrize("case", SGLANG_ANSWERS, ids=lambda case: case["name"])
def test_sglangs_own_streams(case: dict[str, Any]) -> None:
    if case["kind"] != "sse":
        return
    chunks = [case["body"].encode()]
    assert both_twins(chunks) == [verdict(lambda: aggregate_sse(chunks))] * 2


def test_the_text_joins_as_one_json_string() -> None:
    frames: list[dict[str, Any]] = [
        {"text": 'a"\\\n', "output_ids": [1], "meta_info": {"finish_reason": None}},
        {"text": "é\u2028", "output_ids": [], "meta_info": {"finish_reason": {"type": "stop"}}},
    ]
    stream = b"".join(encode_sse(frame) for frame in frames) + SSE_DONE
    answer = msgspec.json.decode(aggregate_sse_bytes([stream], incremental=True))
    assert answer["text"] == 'a"\\\né\u2028'
    assert answer["output_ids"] == [1]


def test_the_answer_is_written_as_the_store_lets_go_of_it() -> None:
    """Never the store and the answer both whole: the peak stays well under twice the answer.

    (Counted by tracemalloc, not timed: joining the store at once held 2x.)
    """
    frames: list[dict[str, Any]] = [
        {
            "text": f" word{i}",
            "output_ids": [i],
            "meta_info": {"finish_reason": None, "completion_tokens": i + 1},
        }
        for i in range(40_000)
    ]
    frames[-1]["meta_info"]["finish_reason"] = {"type": "length"}
    stream = b"".join(encode_sse(frame) for frame in frames) + SSE_DONE
    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]
    tracemalloc.start()
    try:
        answer = aggregate_sse_bytes(chunks, incremental=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert msgspec.json.decode(answer) == aggregate_sse(chunks, incremental=True)
    assert peak < 1.6 * len(answer)
