"""The final response of a stream as JSON bytes, without its deltas as Python objects.

A frontend answering a unary client needs bytes. `aggregate_sse_bytes` reads
the stream as `aggregate_sse` does (same decoder, same mode detection, same
bounds and verdicts), but keeps each delta field as the JSON text of its
entries, appended to one ``bytearray`` per field, instead of as lists of
Python objects: each intermediate frame is decoded, checked and dropped, and
its deltas re-encoded. At the end the terminal frame is encoded with
placeholders where the delta fields go, and the buffers are spliced in.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from typing import Any, Final

import msgspec
from msgspec import UNSET

from sglang_envelope._aggregate import (
    _FAST_PATHS,
    _ROWS,
    DEFAULT_MAX_BYTES,
    DELTA_FIELDS,
    StreamAggregator,
    _deltas,
    _iterate,
    _same,
    _SseAggregation,
)
from sglang_envelope._async import _aiterate
from sglang_envelope._frame import check_consistency
from sglang_envelope._sse import DEFAULT_MAX_EVENT_BYTES, BytesLike, Payload, decode_frame

__all__ = ["aggregate_sse_bytes", "aggregate_sse_bytes_async"]

_DECODER: Final = msgspec.json.Decoder()
_ENCODE: Final = msgspec.json.Encoder().encode
_MARK: Final = b"\x00"  # never in msgspec's JSON output, which escapes control characters
_TEXT: Final = "text"  # the one string field of DELTA_FIELDS: its pieces join without commas


class _BytesAggregator(StreamAggregator):
    """A `StreamAggregator` whose deltas are JSON text, one buffer per field."""

    __slots__ = ("_buffers", "_counts")

    def __init__(self, *, incremental: bool | None) -> None:
        super().__init__(incremental=incremental)
        self._buffers = {path: bytearray() for path, _ in DELTA_FIELDS}
        self._counts = dict.fromkeys(self._buffers, 0)

    def _collect(self, frame: dict[str, Any], meta: dict[str, Any]) -> None:
        for path, value in _deltas(frame, meta):
            self._append(path, value)

    def _append(self, path: str, value: Any) -> None:
        """Append a delta value of the right type (a string, or a list) to its buffer."""
        self._present.add(path)
        if not value:
            return
        encoded = _ENCODE(value)  # "..." or [...]: the part inside is what joins
        buffer = self._buffers[path]
        if buffer and path != _TEXT:
            buffer += b","
        buffer += memoryview(encoded)[1:-1]
        self._counts[path] += len(value)

    def _total(self, path: str) -> int:
        return self._counts[path]

    def _forget_deltas(self) -> None:
        super()._forget_deltas()
        self._buffers = {path: bytearray() for path, _ in DELTA_FIELDS}
        self._counts = dict.fromkeys(self._buffers, 0)

    def _add_deltas(self, payloads: list[Payload], at: int) -> int:
        """Add incremental frames from `at`; return where to go on.

        Each frame is decoded in full once, its deltas appended as JSON and the
        frame dropped; any frame but an intermediate one in SGLang's shape goes
        through `add`, which ends the run.
        """
        decode = _DECODER.decode
        index = self._index
        end = len(payloads)
        while at < end:
            payload = payloads[at]
            at += 1
            try:
                frame: Any = decode(payload)
            except (msgspec.DecodeError, RecursionError):
                frame = None
            meta = frame.get("meta_info") if type(frame) is dict else None
            if (
                type(meta) is not dict
                or meta.get("finish_reason") is not None
                or "error" in frame
                or "object" in frame
                or not _same(frame.get("index", UNSET), index)
            ):
                frame = meta = None  # free it before the full path decodes again
                self.add(decode_frame(payload))
                return at
            self._collect(frame, meta)  # a delta of the wrong type raises as in add()
            self._count += 1
        return at

    def _finish_bytes(self, said_done: bool) -> bytes:
        terminal, aborted = self._terminal_frame(said_done)
        if self._mode is False:
            if not aborted:
                check_consistency(terminal, terminal["meta_info"])
            return _ENCODE(terminal)
        if self._mode is None and not self._readings_agree(terminal):
            raise self._ambiguous()
        response = dict(terminal)
        meta = response["meta_info"] = dict(terminal["meta_info"])
        spliced: list[str] = []
        for path, key, in_meta, _ in _ROWS:
            if path in self._present:
                # A stand-in of the right length for the count checks, then a placeholder.
                (meta if in_meta else response)[key] = [None] * self._counts[path]
                spliced.append(path)
        if not aborted:
            check_consistency(response, meta)
        for number, path in enumerate(spliced):
            _, key, in_meta, _ = next(row for row in _ROWS if row[0] == path)
            (meta if in_meta else response)[key] = msgspec.Raw(_MARK + b"%d" % number + _MARK)
        # The JSON around the placeholders, and at odd places their numbers, in key order.
        skeleton = _ENCODE(response).split(_MARK)
        parts: list[bytes | bytearray] = []
        for at, piece in enumerate(skeleton):
            if at % 2 == 0:
                parts.append(piece)
                continue
            path = spliced[int(piece)]
            quote = b'"' if path == _TEXT else b""
            parts += [quote or b"[", self._buffers[path], quote or b"]"]
        self._forget_deltas()  # the parts hold the buffers until the join
        return b"".join(parts)

    def _readings_agree(self, terminal: dict[str, Any]) -> bool:
        """Whether the incremental reading equals the terminal frame (the cumulative one)."""
        meta = terminal["meta_info"]
        for path, key, in_meta, _ in _ROWS:
            value = (meta if in_meta else terminal).get(key, UNSET)
            if (path in self._present) != (value is not UNSET):
                return False
            if value is not UNSET and self._counts[path] != len(value):
                return False  # an earlier frame added to it
        return True


if tuple(path for path, _ in DELTA_FIELDS) != _FAST_PATHS:  # pragma: no cover
    raise AssertionError("_BytesAggregator must know every field of DELTA_FIELDS")


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
    aggregator = _BytesAggregator(incremental=incremental)
    aggregation = _SseAggregation("aggregate_sse_bytes", aggregator, max_bytes, max_event_bytes)
    for chunk in _iterate(chunks, "aggregate_sse_bytes chunks"):
        aggregation.feed(chunk)
    return aggregator._finish_bytes(said_done=aggregation.close())


async def aggregate_sse_bytes_async(
    chunks: AsyncIterable[BytesLike],
    *,
    incremental: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> bytes:
    """`aggregate_sse_bytes` for an async iterable of chunks."""
    aggregator = _BytesAggregator(incremental=incremental)
    what = "aggregate_sse_bytes_async"
    aggregation = _SseAggregation(what, aggregator, max_bytes, max_event_bytes)
    async for chunk in _aiterate(chunks, f"{what} chunks"):
        aggregation.feed(chunk)
    return aggregator._finish_bytes(said_done=aggregation.close())
