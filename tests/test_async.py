"""aiter_frames and aggregate_sse_async: the synchronous readers' frames and verdicts, async."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import EnvelopeError, aggregate_sse, aggregate_sse_async
from sglang_envelope.stream import SseDecoder, aiter_frames, encode_sse
from tests.strategies import chunkings, sglang_generations, sse_transcripts, stream_events

Verdict = tuple[str, Any]


async def delivered(chunks: list[bytes]) -> AsyncIterator[bytes]:
    """The chunks, each after a turn of the event loop, as a socket reader gives them."""
    for chunk in chunks:
        await asyncio.sleep(0)
        yield chunk


def verdict(run: Callable[[], object]) -> Verdict:
    try:
        return ("ok", run())
    except EnvelopeError as exc:
        return ("raised", type(exc))


def frames_async(chunks: list[bytes], **options: Any) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [frame async for frame in aiter_frames(delivered(chunks), **options)]

    return asyncio.run(collect())


def frames_sync(chunks: list[bytes], **options: Any) -> list[dict[str, Any]]:
    decoder = SseDecoder(**options)
    frames = [frame for chunk in chunks for frame in decoder.feed(chunk)]
    decoder.close()
    return frames


@given(stream_events(), st.sampled_from([None, True, False]), st.data())
def test_the_async_twin_gives_the_same_verdict(
    events: list[bytes], incremental: bool | None, data: st.DataObject
) -> None:
    stream = b"".join(events)
    bounds = {"max_event_bytes": 200, "max_bytes": data.draw(st.integers(1, len(stream) + 99))}
    chunks = data.draw(chunkings(stream))
    expected = verdict(lambda: aggregate_sse(chunks, incremental=incremental, **bounds))
    run = aggregate_sse_async(delivered(chunks), incremental=incremental, **bounds)
    assert verdict(lambda: asyncio.run(run)) == expected
    frames = verdict(lambda: frames_sync(chunks, max_event_bytes=200))
    assert verdict(lambda: frames_async(chunks, max_event_bytes=200)) == frames


@given(sglang_generations(), st.booleans(), st.data())
def test_the_async_twin_gives_sglangs_answer(
    generation: dict[str, Any], incremental: bool, data: st.DataObject
) -> None:
    frames = generation["incremental" if incremental else "cumulative"]
    chunks = data.draw(chunkings(data.draw(sse_transcripts(frames))))
    assert asyncio.run(aggregate_sse_async(delivered(chunks))) == generation["unary"]
    assert frames_async(chunks) == copy.deepcopy(frames)


def test_the_frames_before_a_fault_are_yielded_first() -> None:
    stream = encode_sse({"a": 1}) + b"data: {nope\n\n"

    async def collect(into: list[dict[str, Any]]) -> None:
        async for frame in aiter_frames(delivered([stream])):
            into.append(frame)

    got: list[dict[str, Any]] = []
    with pytest.raises(EnvelopeError, match="not valid JSON"):
        asyncio.run(collect(got))
    assert got == [{"a": 1}]


def test_what_is_not_an_async_iterable_is_refused() -> None:
    with pytest.raises(EnvelopeError, match="aiter_frames chunks: expected an async iterable"):
        aiter_frames([b"data: {}\n\n"])  # type: ignore[arg-type]
    with pytest.raises(EnvelopeError, match="aggregate_sse_async chunks: expected an async"):
        asyncio.run(aggregate_sse_async([b"data: {}\n\n"]))  # type: ignore[call-overload]
    with pytest.raises(EnvelopeError, match="max_event_bytes"):
        aiter_frames(delivered([]), max_event_bytes=0)
    with pytest.raises(EnvelopeError, match="aggregate_sse_async chunk: expected bytes"):
        asyncio.run(aggregate_sse_async(delivered(["data: {}\n\n"])))  # type: ignore[list-item]
