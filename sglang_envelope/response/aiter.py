"""The SSE readers for asyncio programs, still sans-I/O.

Each takes any ``AsyncIterable[bytes]`` the caller owns (an httpx
``aiter_bytes()``, an aiohttp ``content.iter_any()``, an ASGI receive loop)
and drives the same cores as the synchronous readers, so both give the same
frames and the same verdicts on the same bytes. Nothing here opens a socket or
starts a task. Whenever a reader stops reading the chunks (their end, a fault,
the consumer closing `aiter_frames`' iterator), it closes their iterator if it
has ``aclose`` (`sources.aclose_source`): the caller's async generator runs its
``finally`` then.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any, overload

from sglang_envelope.response.aggregate import StreamAggregator
from sglang_envelope.response.choices import ChoicesAggregator
from sglang_envelope.response.core import StreamCore, answer
from sglang_envelope.response.reading import DEFAULT_MAX_BYTES, SseReader
from sglang_envelope.response.sources import aclose_source, afeed_all, open_async_source
from sglang_envelope.response.sse import DEFAULT_MAX_EVENT_BYTES, BytesLike, SseDecoder
from sglang_envelope.response.stores import DeltaStore
from sglang_envelope.response.types import GenerateResponse

__all__ = ["aggregate_frames_async", "aggregate_sse_async", "aiter_frames"]


def aiter_frames(
    chunks: AsyncIterable[BytesLike], *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
) -> AsyncIterator[dict[str, Any]]:
    """The frames of an SSE stream, as `SseDecoder` reads them, as they complete.

    Ends after the last chunk, having checked that the stream did not stop
    inside an event (`SseDecoder.close`). Faults come in stream order: the
    frames before one are yielded first. The bound is checked at once, the
    chunks when iterated.
    """
    decoder = SseDecoder(max_event_bytes=max_event_bytes)
    return _frames(decoder, open_async_source(chunks, "aiter_frames chunks"))


async def _frames(
    decoder: SseDecoder, chunks: AsyncIterator[BytesLike]
) -> AsyncIterator[dict[str, Any]]:
    try:
        async for chunk in chunks:
            for frame in decoder.feed(chunk):
                yield frame
    finally:
        await aclose_source(chunks)
    decoder.close()


@overload
async def aggregate_sse_async(
    chunks: AsyncIterable[BytesLike],
    *,
    incremental: bool | None = ...,
    max_bytes: int = ...,
    max_event_bytes: int = ...,
    choices: None = ...,
) -> GenerateResponse: ...
@overload
async def aggregate_sse_async(
    chunks: AsyncIterable[BytesLike],
    *,
    incremental: bool | None = ...,
    max_bytes: int = ...,
    max_event_bytes: int = ...,
    choices: int,
) -> list[GenerateResponse]: ...
async def aggregate_sse_async(
    chunks: AsyncIterable[BytesLike],
    *,
    incremental: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    choices: int | None = None,
) -> GenerateResponse | list[GenerateResponse]:
    """`aggregate_sse` for an async iterable of chunks: same answer, same errors."""
    if choices is not None:
        many = ChoicesAggregator(choices, incremental=incremental)
        reader = SseReader("aggregate_sse_async", many, max_bytes, max_event_bytes)
        await afeed_all(chunks, "aggregate_sse_async chunks", reader.feed)
        return many.result(said_done=reader.close())
    core = StreamCore(incremental, DeltaStore())
    reader = SseReader("aggregate_sse_async", core, max_bytes, max_event_bytes)
    await afeed_all(chunks, "aggregate_sse_async chunks", reader.feed)
    return answer(core, said_done=reader.close())


@overload
async def aggregate_frames_async(
    frames: AsyncIterable[dict[str, Any]],
    *,
    incremental: bool | None = ...,
    choices: None = ...,
) -> GenerateResponse: ...
@overload
async def aggregate_frames_async(
    frames: AsyncIterable[dict[str, Any]], *, incremental: bool | None = ..., choices: int
) -> list[GenerateResponse]: ...
async def aggregate_frames_async(
    frames: AsyncIterable[dict[str, Any]],
    *,
    incremental: bool | None = None,
    choices: int | None = None,
) -> GenerateResponse | list[GenerateResponse]:
    """`aggregate_frames` for an async iterable of frames as an in-process SGLang engine
    yields them (``tokenizer_manager.generate_request``): same answer, same errors."""
    if choices is not None:
        many = ChoicesAggregator(choices, incremental=incremental)
        await afeed_all(frames, "aggregate_frames_async frames", many.add)
        return many.result()
    aggregator = StreamAggregator(incremental=incremental)
    await afeed_all(frames, "aggregate_frames_async frames", aggregator.add)
    return aggregator.result()
