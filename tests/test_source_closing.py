"""The readers close the caller's source whenever they stop reading it.

An async generator of chunks (an httpx ``aiter_bytes()``) has its ``finally``
run when the reader stops: at the stream's end, after a fault, or when the
consumer closes the reader's own iterator; a generator given to a synchronous
reader likewise. Each check comes right after the exit, before any other turn
of the event loop and without the garbage collector: the source is held, so
only the reader's closing can run its ``finally``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any

import pytest

from sglang_envelope import (
    EngineError,
    EnvelopeError,
    LimitExceeded,
    ResponseError,
    aggregate_sse,
    aggregate_sse_async,
    relay_sse,
    relay_sse_async,
)
from sglang_envelope.stream import (
    SSE_DONE,
    aggregate_frames,
    aggregate_sse_bytes,
    aggregate_sse_bytes_async,
    aiter_frames,
    encode_sse,
)

FRAMES = [
    {"text": " a", "output_ids": [0], "meta_info": {"finish_reason": None}},
    {"text": " b", "output_ids": [1], "meta_info": {"finish_reason": {"type": "length"}}},
]
GOOD = [encode_sse(frame) for frame in FRAMES] + [SSE_DONE]
ENGINE_ERROR = encode_sse({"error": {"message": "out of memory", "code": 503}})
#: a fault, then chunks the reader must not read; each with what aggregation raises
FAULTS: dict[str, tuple[list[Any], type[Exception]]] = {
    "bad JSON": ([GOOD[0], b"data: {nope\n\n", GOOD[1], SSE_DONE], ResponseError),
    "engine error": ([GOOD[0], ENGINE_ERROR, GOOD[1], SSE_DONE], EngineError),
    "past max_bytes": ([GOOD[0], b"data: " + b"x" * 200 + b"\n\n", SSE_DONE], LimitExceeded),
    "after the terminal frame": ([*GOOD[:2], GOOD[0], SSE_DONE], ResponseError),
    "after [DONE]": ([*GOOD, GOOD[0], GOOD[1]], ResponseError),
    "not bytes": ([GOOD[0], "data: {}\n\n", SSE_DONE], EnvelopeError),
}
BOUND = {"max_bytes": 150}  # past GOOD[0], short of the stream "past max_bytes" sends
AGGREGATORS: dict[str, Callable[..., Awaitable[object]]] = {
    "aggregate_sse_async": aggregate_sse_async,
    "aggregate_sse_bytes_async": aggregate_sse_bytes_async,
}


class Source:
    """The caller's source: chunks, a turn of the loop before each, and a record of its end."""

    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = chunks
        self.read = 0
        self.closed = False

    async def chunks_async(self) -> AsyncIterator[Any]:
        try:
            for chunk in self.chunks:
                await asyncio.sleep(0)
                self.read += 1
                yield chunk
        finally:
            self.closed = True

    def chunks_sync(self) -> Iterator[Any]:
        try:
            for chunk in self.chunks:
                self.read += 1
                yield chunk
        finally:
            self.closed = True


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


@pytest.mark.parametrize("name", list(AGGREGATORS))
@pytest.mark.parametrize("fault", list(FAULTS))
def test_an_aggregation_that_raises_has_closed_the_source(name: str, fault: str) -> None:
    chunks, raised = FAULTS[fault]

    async def test() -> None:
        source = Source(chunks)
        held = source.chunks_async()
        with pytest.raises(raised):
            await AGGREGATORS[name](held, **BOUND)
        assert source.closed
        assert source.read < len(chunks)

    run(test)


@pytest.mark.parametrize("name", list(AGGREGATORS))
def test_an_aggregation_that_answers_has_closed_the_source(name: str) -> None:
    async def test() -> None:
        source = Source(GOOD)
        held = source.chunks_async()
        assert await AGGREGATORS[name](held)
        assert source.closed

    run(test)


def test_a_fault_in_the_frames_closes_the_source() -> None:
    async def test() -> None:
        source = Source(FAULTS["bad JSON"][0])
        held = source.chunks_async()
        frames = aiter_frames(held)
        assert await anext(frames) == FRAMES[0]
        with pytest.raises(ResponseError, match="not valid JSON"):
            await anext(frames)
        assert source.closed
        assert source.read == 2

    run(test)


@pytest.mark.parametrize("stop", ["aclose", "break and aclose"])
def test_a_consumer_closing_the_frames_closes_the_source(stop: str) -> None:
    async def test() -> None:
        source = Source(GOOD)
        held = source.chunks_async()
        frames = aiter_frames(held)
        if stop == "aclose":
            assert await anext(frames) == FRAMES[0]
        else:
            async for _ in frames:
                break
        await frames.aclose()  # type: ignore[attr-defined]
        assert source.closed
        assert source.read == 1

    run(test)


@pytest.mark.parametrize("client_incremental", [True, False])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_relay_ending_on_a_fault_has_closed_the_source_before_its_error_frame(
    fault: str, client_incremental: bool
) -> None:
    chunks, _ = FAULTS[fault]

    async def test() -> None:
        source = Source(chunks)
        held = source.chunks_async()
        sent = relay_sse_async(held, client_incremental=client_incremental, max_bytes=150)
        if fault == "not bytes":
            with pytest.raises(EnvelopeError, match="chunk: expected bytes"):
                async for _ in sent:
                    pass
        else:
            async for out in sent:
                if out.endswith(SSE_DONE):  # the error frame and [DONE], the last bytes
                    assert b'{"error":' in out
                    assert source.closed
        assert source.closed
        assert source.read < len(chunks)

    run(test)


@pytest.mark.parametrize("stop", ["aclose", "break and aclose"])
def test_a_consumer_closing_the_relay_closes_the_source(stop: str) -> None:
    async def test() -> None:
        source = Source(GOOD)
        held = source.chunks_async()
        sent = relay_sse_async(held)
        if stop == "aclose":
            assert await anext(sent)
        else:
            async for _ in sent:
                break
        await sent.aclose()  # type: ignore[attr-defined]
        assert source.closed
        assert source.read == 1

    run(test)


def test_a_relayed_stream_closes_the_source_at_its_end() -> None:
    async def test() -> None:
        source = Source(GOOD)
        held = source.chunks_async()
        assert b"".join([out async for out in relay_sse_async(held)]).endswith(SSE_DONE)
        assert source.closed

    run(test)


def test_a_source_without_aclose_is_read_as_before() -> None:
    class Chunks:
        def __init__(self) -> None:
            self.left = list(GOOD)

        def __aiter__(self) -> Chunks:
            return self

        async def __anext__(self) -> bytes:
            if not self.left:
                raise StopAsyncIteration
            return self.left.pop(0)

    async def test() -> None:
        assert await aggregate_sse_async(Chunks()) == aggregate_sse(GOOD)
        assert await aggregate_sse_bytes_async(Chunks()) == aggregate_sse_bytes(GOOD)
        assert [frame async for frame in aiter_frames(Chunks())] == FRAMES
        assert b"".join([out async for out in relay_sse_async(Chunks())]) == b"".join(
            relay_sse(GOOD)
        )

    run(test)


# --- the synchronous readers, given a generator ---


@pytest.mark.parametrize("read", [aggregate_sse, aggregate_sse_bytes])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_synchronous_aggregation_that_raises_has_closed_the_generator(
    read: Callable[..., object], fault: str
) -> None:
    chunks, raised = FAULTS[fault]
    source = Source(chunks)
    held = source.chunks_sync()
    with pytest.raises(raised):
        read(held, **BOUND)
    assert source.closed
    assert source.read < len(chunks)


def test_aggregating_frames_that_raise_closes_the_generator() -> None:
    source = Source([FRAMES[1], FRAMES[0]])  # a frame after the terminal frame
    held = source.chunks_sync()
    with pytest.raises(ResponseError):
        aggregate_frames(held)
    assert source.closed


def test_a_synchronous_relay_closes_the_generator_on_a_fault_and_when_closed() -> None:
    chunks, _ = FAULTS["bad JSON"]
    source = Source(chunks)
    held = source.chunks_sync()
    *_, last = relay_sse(held)
    assert b'{"error":' in last
    assert source.closed
    assert source.read == 2
    source = Source(GOOD)
    held = source.chunks_sync()
    sent = relay_sse(held)
    assert next(sent)
    sent.close()  # type: ignore[attr-defined]
    assert source.closed
    assert source.read == 1
