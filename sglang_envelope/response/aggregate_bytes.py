"""The final response of a stream as JSON bytes, without its deltas as Python objects.

A frontend answering a unary client needs bytes. `aggregate_sse_bytes` reads
the stream as `aggregate_sse` does (the same decoder, typed views, mode
detection, bounds and verdicts), but after each chunk of the stream it
encodes the deltas that chunk brought, once, and drops their objects: only the
JSON text of the deltas lives to the end. The terminal frame is then encoded
with placeholders where the delta fields go, and the texts are spliced in
(`splice`), written piece by piece as the store lets go of each piece
(`_written`), so that the store and the answer are never both whole.

`relay_sse` to a cumulative client writes each frame it sends from a
variant of that store (`_CumulativeFrames`: one growing buffer a field, a
chunk's last frame keeping its deltas' JSON as it came), and, counting only,
`relay_sse` while it detects the mode of a stream relayed in the client's
mode.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterable, Iterable
from typing import Any, Final

import msgspec
from msgspec import UNSET

from sglang_envelope.errors.exceptions import ResponseError, show_value
from sglang_envelope.response.aggregate import (
    _FAST_PATHS,
    DEFAULT_MAX_BYTES,
    StreamAggregator,
    _SseAggregation,
)
from sglang_envelope.response.frames import CONSISTENCY, check_consistency, expected
from sglang_envelope.response.sources import _afeed_all, _feed_all
from sglang_envelope.response.sse import DEFAULT_MAX_EVENT_BYTES, BytesLike, Payload, decode_frame
from sglang_envelope.response.views import (
    DELTA_FIELDS,
    DELTA_ROWS,
    frame_fields,
    intermediate_view,
)

__all__ = ["aggregate_sse_bytes", "aggregate_sse_bytes_async"]

_ENCODE: Final = msgspec.json.Encoder().encode
_MARK: Final = b"\x00"  # never in msgspec's JSON output, which escapes control characters
_MARKS: Final = {
    path: msgspec.Raw(b"%b%d%b" % (_MARK, n, _MARK)) for n, (path, _) in enumerate(DELTA_FIELDS)
}
_MARKED: Final = {b"%d" % n: path for n, (path, _) in enumerate(DELTA_FIELDS)}
# `_CumulativeFrames`' row of each delta field: path, key, whether in meta_info, the
# number of its mark, and the mark followed by the field's closing quote or bracket.
_OPEN_ROWS: Final = tuple(
    (path, key, in_meta, b"%d" % n, msgspec.Raw(b"%b%d%b%b" % (_MARK, n, _MARK, closing)))
    for n, (path, key, in_meta, kind) in enumerate(DELTA_ROWS)
    for closing in [b'"' if kind is str else b"]"]
)
_NUMBERS: Final = {path: number for path, _, _, number, _ in _OPEN_ROWS}
_PLACES: Final = {path: (in_meta, key) for path, key, in_meta, _ in DELTA_ROWS}
_TEXT: Final = "text"  # the one string field of DELTA_FIELDS: its pieces join without commas


class _BytesAggregator(StreamAggregator):
    """A `StreamAggregator` that turns its deltas into JSON text after each chunk.

    Frames are read exactly as `StreamAggregator` reads them; the deltas one
    chunk of the stream brought are then encoded at once and the objects
    dropped, so only the JSON text of the deltas lives to the end. With
    ``keep=False`` only their counts are kept (a relay to a client of the
    engine's own mode needs no more for aggregation's final checks).
    """

    __slots__ = ("_counts", "_keep", "_stores")

    def __init__(self, *, incremental: bool | None, keep: bool = True) -> None:
        super().__init__(incremental=incremental)
        self._keep = keep
        # Per path: the JSON inside its quotes or brackets so far, in exact-size pieces
        # (no commas between), one a chunk read.
        self._stores: dict[str, list[BytesLike]] = {path: [] for path, _ in DELTA_FIELDS}
        self._counts = dict.fromkeys(self._stores, 0)

    def _add_payloads(self, payloads: list[Payload]) -> None:
        try:
            super()._add_payloads(payloads)
        finally:  # the chunk's deltas as JSON, those of the frames before a fault included
            self._flush()

    def _add_deltas(self, payloads: list[Payload], at: int) -> int:
        """`StreamAggregator._add_deltas`, keeping the deltas' JSON or only their counts.

        Every byte is checked by the same view. When only counts are kept, the
        counted arrays are counted, and each frame is dropped at once.
        """
        if self._keep:
            return super()._add_deltas(payloads, at)
        counts = self._counts
        index = self._index
        decode = self._reader.decode
        while at < len(payloads):
            payload = payloads[at]
            at += 1
            frame = intermediate_view(decode, payload, index)
            if frame is None:
                self.add(decode_frame(payload))
                return at
            self._count += 1
            meta = frame.meta_info
            if (value := frame.output_ids) is not UNSET:
                counts["output_ids"] += len(value)
                self._present.add("output_ids")
            if (value := meta.output_token_logprobs) is not UNSET:
                counts["meta_info.output_token_logprobs"] += len(value)
                self._present.add("meta_info.output_token_logprobs")
            if (value := meta.output_token_sampling_mask) is not UNSET:
                counts["meta_info.output_token_sampling_mask"] += len(value)
                self._present.add("meta_info.output_token_sampling_mask")
        return at

    def _keep_json(self, path: str, json: bytes) -> None:
        """Store a delta's JSON (not empty) inside its quotes or brackets, as an exact-size
        piece, let go of once written (`_written`)."""
        self._stores[path].append(json[1:-1])

    def _flush(self) -> None:
        """Move the deltas collected so far from objects to JSON text."""
        if not any(self._pieces.values()):
            return
        for path, pieces in self._pieces.items():
            if not pieces:
                continue
            value: Any = "".join(pieces) if path == _TEXT else pieces
            self._counts[path] += len(value)  # entries, or characters of the text
            if value and self._keep:
                self._keep_json(path, _ENCODE(value))
            pieces.clear()

    def _total(self, path: str) -> int:
        return self._counts[path] + len(self._pieces[path])

    def _forget_deltas(self) -> None:
        super()._forget_deltas()
        self._stores = {path: [] for path, _ in DELTA_FIELDS}
        self._counts = dict.fromkeys(self._stores, 0)

    def _checked_terminal(self, said_done: bool) -> dict[str, Any]:
        """The terminal frame, once aggregation's final checks pass on the answer.

        Raises what `result` raises: no terminal frame, an abort with a status
        (`EngineError`), two readings that differ, counts that do not match.
        """
        self._flush()
        terminal, aborted = self._terminal_frame(said_done)
        meta = terminal["meta_info"]
        if self._mode is False:
            if not aborted:
                check_consistency(terminal, meta)
            return terminal
        if self._mode is None and not self._readings_agree(terminal):
            raise self._ambiguous()
        if not aborted:
            self._check_counts(meta)
        return terminal

    def _finish_bytes(self, said_done: bool) -> bytes:
        """The answer's JSON, written piece by piece as the store lets go of each piece.

        The store holds about the answer's size in JSON text; joining it into
        the answer at once would hold both whole. Written into a growing
        buffer, each piece dropped once copied, the peak is the answer and
        the pieces not yet written: little more than the answer.
        """
        terminal = self._checked_terminal(said_done)
        if self._mode is False:
            return _ENCODE(terminal)
        values = self._values()
        self._forget_deltas()  # the pieces now live only in `values`
        parts = _parts(terminal, values, b"", b"")
        values.clear()  # and now only in `parts`
        return _written(parts)

    def _values(self) -> dict[str, list[BytesLike]]:
        """Per delta field so far, the parts its JSON joins to."""
        self._flush()
        return {
            path: [b'"', *pieces, b'"'] if path == _TEXT else [b"[", *_commas(pieces), b"]"]
            for path, pieces in self._stores.items()
            if path in self._present
        }

    def _check_counts(self, meta: dict[str, Any]) -> None:
        """`check_consistency` on the answer, with the arrays' lengths for the arrays."""
        for count_key, path, unless in CONSISTENCY:
            count = meta.get(count_key)
            if count is None or path not in self._present or (unless and unless in meta):
                continue
            if type(count) is not int:
                raise expected(f"meta_info.{count_key}", "an integer", count)
            if count != self._counts[path]:
                raise ResponseError(
                    f"meta_info.{count_key} is {show_value(count)} but {path} has "
                    f"{self._counts[path]} entries"
                )

    def _readings_agree(self, terminal: dict[str, Any]) -> bool:
        """Whether the incremental reading equals the terminal frame (the cumulative one)."""
        meta = terminal["meta_info"]
        for path, key, in_meta, _ in DELTA_ROWS:
            value = (meta if in_meta else terminal).get(key, UNSET)
            if (path in self._present) != (value is not UNSET):
                return False
            if value is not UNSET and self._counts[path] != len(value):
                return False  # an earlier frame added to it
        return True


class _CumulativeFrames(_BytesAggregator):
    """The store of a relay that sends a cumulative client a frame for each chunk it reads.

    A field's JSON so far is one growing buffer (its opening quote or bracket,
    then the deltas), which each frame sent copies once (`write`). A chunk's
    last frame keeps its deltas' JSON as it came: the view checks every byte
    and counts, and its keys, decoded as Raw (`frame_fields`), give its
    deltas' JSON and the frame to write, a mark in place of each. The frames
    before it in the chunk are read as `aggregate_sse_bytes` reads them (their
    deltas encoded once for the chunk, which costs less than a second decoding
    of each).
    """

    __slots__ = ("_buffers", "_read")

    def __init__(self, *, incremental: bool | None) -> None:
        super().__init__(incremental=incremental)
        # Per delta field, by its mark's number: its JSON so far, without the closing byte.
        self._buffers = _open_buffers()
        # The payload last read through the view, its keys (meta_info's too) as Raw with
        # its delta fields marked (`write`), and how many it marked.
        self._read: tuple[Payload, dict[str, Any], int] | None = None

    def _add_payloads(self, payloads: list[Payload]) -> None:
        """`_BytesAggregator._add_payloads`, the chunk's last frame read by `_add_last`."""
        if len(payloads) > 1:
            super()._add_payloads(payloads[:-1])
        if payloads and not self._add_last(payloads[-1]):
            super()._add_payloads(payloads[-1:])

    def _add_last(self, payload: Payload) -> bool:
        """Add a chunk's last frame once the stream is known incremental: a middle frame
        through the view, its deltas' JSON kept as it came; any other decoded in full.

        False, adding nothing, before that (the first frame, while the mode is
        detected) and after the terminal frame.
        """
        if not (self._mode is True and self._count and self._terminal is None):
            return False
        index = self._index
        frame = intermediate_view(self._reader.decode, payload, index)
        fields = None if frame is None else frame_fields(payload)
        if fields is None:
            try:
                self.add(decode_frame(payload))
            finally:
                self._flush()
            return True
        self._count += 1
        meta, raw_meta = frame.meta_info, fields["meta_info"]
        present, counts, buffers = self._present, self._counts, self._buffers
        marked = 0
        for path, key, in_meta, number, mark in _OPEN_ROWS:
            keys = raw_meta if in_meta else fields
            json = keys.get(key)
            if json is None:
                continue
            keys[key] = mark
            marked += 1
            present.add(path)
            value = getattr(meta if in_meta else frame, key)
            counts[path] += len(value)  # entries, or characters of the text
            if value:
                _append_delta(buffers[number], json, path != _TEXT)
        self._read = (payload, fields, marked)
        return True

    def _keep_json(self, path: str, json: BytesLike) -> None:
        """Add a delta's JSON to its field's buffer (`_append_delta`)."""
        _append_delta(self._buffers[_NUMBERS[path]], json, path != _TEXT)

    def _forget_deltas(self) -> None:
        super()._forget_deltas()
        self._buffers = _open_buffers()

    def write(self, payload: Payload, prefix: bytes, suffix: bytes) -> bytes:
        """The last frame read, `payload`, as JSON between `prefix` and `suffix`, every delta
        field so far holding all its deltas; nothing if its JSON cannot be written again
        (`frame_fields`).

        A field keeps its place among the frame's keys; one the frame lacks goes
        last in its object, as SGLang's ``_coalesce_streaming_chunks`` puts it.
        msgspec writes the frame with numbered NUL-delimited marks where the
        buffers go (JSON text holds no raw NUL): each stored byte is copied
        once, into the result. The buffers hold every frame read: reading a
        chunk ends with no delta left as objects (`_flush`).
        """
        read, self._read = self._read, None  # its fields are ours to write over
        fields: dict[str, Any] | None
        if read is not None and read[0] is payload:
            _, fields, marked = read
        else:
            fields, marked = frame_fields(payload), 0
            if fields is None:
                return b""
        if marked < len(self._present):  # a field the frame lacks, or one not marked yet
            meta = fields["meta_info"]
            for path, key, in_meta, _, mark in _OPEN_ROWS:
                if path in self._present:
                    (meta if in_meta else fields)[key] = mark
        # The JSON around the marks, and at odd places the numbers of the buffers, in key order.
        pieces: list[Any] = _ENCODE(fields).split(_MARK)
        pieces[1::2] = map(self._buffers.__getitem__, pieces[1::2])
        pieces[0] = prefix + pieces[0]
        pieces[-1] = pieces[-1] + suffix
        return b"".join(pieces)


def _append_delta(buffer: bytearray, json: BytesLike, array: bool) -> None:
    """Add a delta's JSON to its field's buffer: all of it, then its closing byte is
    dropped and its opening byte becomes the comma between two `array` deltas (or is
    dropped: a first delta, or text)."""
    end = len(buffer)
    buffer += json
    del buffer[-1]
    if end > 1 and array:
        buffer[end] = 44  # the opening bracket becomes a comma
    else:
        del buffer[end]


def _open_buffers() -> dict[bytes, bytearray]:
    """Each delta field's buffer, by its mark's number, holding its opening quote or bracket."""
    return {
        number: bytearray(b'"' if path == _TEXT else b"[") for path, _, _, number, _ in _OPEN_ROWS
    }


if tuple(path for path, _ in DELTA_FIELDS) != _FAST_PATHS:  # pragma: no cover
    raise AssertionError("_BytesAggregator must know every field of DELTA_FIELDS")
if {path for _, path, _ in CONSISTENCY} != {  # pragma: no cover
    "output_ids",
    "meta_info.output_token_logprobs",
    "meta_info.output_token_sampling_mask",
}:
    raise AssertionError("_BytesAggregator._add_deltas must count what CONSISTENCY counts")


def _commas(pieces: list[BytesLike]) -> list[BytesLike]:
    """Array insides, with the commas that join them."""
    if len(pieces) < 2:
        return pieces
    out: list[BytesLike] = [b","] * (2 * len(pieces) - 1)
    out[::2] = pieces
    return out


def _written(parts: list[BytesLike]) -> bytes:
    """`b"".join(parts)`, each part let go of once copied (see `_finish_bytes`).

    `io.BytesIO` grows in place and hands over its buffer as the bytes
    (``getvalue`` copies nothing when no view of it is held).
    """
    out = io.BytesIO()
    for at, part in enumerate(parts):
        out.write(part)
        parts[at] = b""
    del part
    return out.getvalue()


def splice(
    frame: dict[str, Any], values: dict[str, list[BytesLike]], prefix: bytes, suffix: bytes
) -> bytes:
    """`frame` as JSON between `prefix` and `suffix`, each `DELTA_FIELDS` path of `values`
    holding the JSON its parts join to.

    A field keeps its place among the frame's keys; one the frame lacks goes
    last in its object, as SGLang's ``_coalesce_streaming_chunks`` puts it.
    msgspec writes the frame with numbered NUL-delimited marks where the values
    go (JSON text holds no raw NUL) and the parts are joined in: each byte of
    them is copied once.
    """
    return b"".join(_parts(frame, values, prefix, suffix))


def _parts(
    frame: dict[str, Any], values: dict[str, list[BytesLike]], prefix: bytes, suffix: bytes
) -> list[BytesLike]:
    """The parts `splice` joins."""
    top = dict(frame)
    meta = top["meta_info"] = dict(frame["meta_info"])
    for path in values:
        in_meta, key = _PLACES[path]
        (meta if in_meta else top)[key] = _MARKS[path]
    # The JSON around the marks, and at odd places the paths they stand for, in key order.
    skeleton = _ENCODE(top).split(_MARK)
    parts: list[BytesLike] = [prefix, skeleton[0]]
    for at in range(1, len(skeleton), 2):
        parts += values[_MARKED[skeleton[at]]]
        parts.append(skeleton[at + 1])
    parts.append(suffix)
    return parts


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
    _feed_all(chunks, "aggregate_sse_bytes chunks", aggregation.feed)
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
    await _afeed_all(chunks, f"{what} chunks", aggregation.feed)
    return aggregator._finish_bytes(said_done=aggregation.close())
