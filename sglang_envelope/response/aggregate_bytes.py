"""The final response of a stream as JSON bytes, without its deltas as Python objects.

A frontend answering a unary client needs bytes. `aggregate_sse_bytes` reads
the stream as `aggregate_sse` does (the same core: decoder, typed views, mode
detection, bounds and verdicts), but its store (`stores.JsonStore`) encodes
the deltas each chunk of the stream brought, once, and drops their objects:
only the JSON text of the deltas lives to the end. The terminal frame is then
written with the texts spliced in (`stores.splice_parts`), piece by piece as
the store lets go of each piece (`stores.written`), so that the store and the
answer are never both whole.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from typing import Final

import msgspec

from sglang_envelope.response.core import StreamCore
from sglang_envelope.response.reading import DEFAULT_MAX_BYTES, SseReader
from sglang_envelope.response.sources import afeed_all, feed_all
from sglang_envelope.response.sse import DEFAULT_MAX_EVENT_BYTES, BytesLike
from sglang_envelope.response.stores import JsonStore, splice_parts, written

__all__ = ["aggregate_sse_bytes", "aggregate_sse_bytes_async", "answer_bytes"]

_ENCODE: Final = msgspec.json.Encoder().encode


def answer_bytes(core: StreamCore[JsonStore], *, said_done: bool) -> bytes:
    """The answer's JSON, written piece by piece as the store lets go of each piece.

    Raises what `StreamAggregator.result` raises: no terminal frame, an abort
    with a status (`EngineError`), two readings that differ, counts that do
    not match.
    """
    terminal = core.checked_terminal(said_done)
    if core.incremental is False:
        return _ENCODE(terminal)
    values = core.store.take_values()  # the pieces now live only in `values`
    parts = splice_parts(terminal, values, b"", b"")
    values.clear()  # and now only in `parts`
    return written(parts)


def aggregate_sse_bytes(
    chunks: Iterable[BytesLike],
    *,
    incremental: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> bytes:
    """`aggregate_sse`'s answer as compact JSON bytes, equal to it as JSON.

    The same bounds, mode detection and errors as `aggregate_sse` on the same
    bytes; the delta fields are never held as Python objects.
    """
    core = StreamCore(incremental, JsonStore())
    reader = SseReader("aggregate_sse_bytes", core, max_bytes, max_event_bytes)
    feed_all(chunks, "aggregate_sse_bytes chunks", reader.feed)
    return answer_bytes(core, said_done=reader.close())


async def aggregate_sse_bytes_async(
    chunks: AsyncIterable[BytesLike],
    *,
    incremental: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> bytes:
    """`aggregate_sse_bytes` for an async iterable of chunks."""
    core = StreamCore(incremental, JsonStore())
    what = "aggregate_sse_bytes_async"
    reader = SseReader(what, core, max_bytes, max_event_bytes)
    await afeed_all(chunks, f"{what} chunks", reader.feed)
    return answer_bytes(core, said_done=reader.close())
