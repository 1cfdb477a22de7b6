"""Server-sent events as SGLang's /generate writes them, decoded and encoded.

SGLang writes ``data: <json>\\n\\n`` per frame and ends with ``data: [DONE]\\n\\n``
(``srt/entrypoints/http_server.py``, ``stream_results``). `SseDecoder` reads any
stream the WHATWG event-stream rules accept, whatever the chunk boundaries;
`encode_sse` writes frames exactly as SGLang does.

The decoder has two paths. A chunk whose events are all in SGLang's own
shape, a ``data: {`` line then a blank line, is read at once with C-level
scans (`SseDecoder.feed_sglang_events`, which hands a relay their bytes as
received); anything else goes through the line-by-line WHATWG rules. Either
splits a chunk into lines once (``bytes.split`` on LF) and keeps an
unfinished line in one growing ``bytearray``: the cost is linear in the stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from itertools import repeat
from typing import Any, Final, TypeAlias

import msgspec

from sglang_envelope.errors.exceptions import (
    EnvelopeError,
    LimitExceeded,
    ResponseError,
    show_value,
)
from sglang_envelope.response.frames import decode_frame
from sglang_envelope.response.sources import aclose_source, open_async_source

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "SSE_DONE",
    "SseDecoder",
    "aiter_frames",
    "check_bound",
    "encode_sse",
    "event_payloads",
    "indexed_event",
]

DEFAULT_MAX_EVENT_BYTES: Final = 64 * 1024 * 1024
"""The default bound on one event: 64 MiB, the size of a long cumulative frame."""

SSE_DONE: Final = b"data: [DONE]\n\n"
"""The event that ends SGLang's stream."""

BytesLike: TypeAlias = bytes | bytearray | memoryview
"""What the decoder reads: bytes, or any bytes-like object (copied once)."""

Payload: TypeAlias = bytes | bytearray
"""The data of one event, JSON not yet decoded (a bytearray: several ``data`` lines)."""

_BOM: Final = b"\xef\xbb\xbf"
_DONE: Final = b"[DONE]"
_DATA_PREFIX: Final = b"data: "
_SGLANG_PREFIX: Final = b"data: {"  # an event as SGLang writes it begins so
#: Larger chunks are read in slices, to bound the copies split makes.
_SLICE: Final = 256 * 1024
_ENCODER: Final = msgspec.json.Encoder()


def encode_sse(frame: dict[str, Any]) -> bytes:
    """One frame as SGLang writes it: ``data: <compact json>\\n\\n``.

    The JSON is compact with keys in insertion order and NaN written as null,
    as SGLang's orjson writes it. Send `SSE_DONE` after the last frame.
    """
    try:
        body = _ENCODER.encode(frame)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise EnvelopeError(f"frame is not JSON-encodable: {exc}") from exc
    return b"".join((_DATA_PREFIX, body, b"\n\n"))


class SseDecoder:
    """Turn the bytes of an SSE stream into the JSON frames it carries.

    Feed bytes as they arrive; `feed` returns the frames the bytes completed.
    The stream is read by the WHATWG rules ("Interpreting an event stream",
    listed in docs/responses.md), whatever the chunk boundaries. Every event's
    data must be a JSON object or ``[DONE]``, after which `done` is true and
    any further event is a `ResponseError`. An event larger than
    `max_event_bytes` (its lines with their line ends, each counted as one
    byte, up to the blank line that ends it) raises `LimitExceeded` as soon
    as the bound is passed, before it is parsed.

    Errors come in stream order, whatever the chunking: when a call finds a
    fault after some complete events, it returns the frames of those events
    and raises the fault at the next `feed` or `close`. After an error the
    decoder is unusable.
    """

    __slots__ = (
        "_after_cr",
        "_data",
        "_done",
        "_event_bytes",
        "_failed",
        "_head",
        "_max_event_bytes",
        "_partial",
    )

    def __init__(self, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        check_bound("max_event_bytes", max_event_bytes)
        self._max_event_bytes = max_event_bytes
        self._data: Payload | None = None  # the data of the event being read, if any
        self._event_bytes = 0  # the size of its complete lines
        self._partial = bytearray()  # the unfinished line at the end of the last chunk
        self._head: bytes | None = b""  # bytes that may yet be a BOM; None once past it
        # Whether the last chunk ended in CR, so that a leading LF pairs with it.
        self._after_cr = False
        self._done = False
        self._failed: EnvelopeError | None = None  # a fault found after events returned

    @property
    def done(self) -> bool:
        """True once ``data: [DONE]`` has been received."""
        return self._done

    def feed(self, data: BytesLike) -> list[dict[str, Any]]:
        """Return the frames completed by `data`, in order."""
        frames = []
        for payload in self.feed_payloads(data):
            try:
                frames.append(decode_frame(payload))
            except ResponseError as exc:
                if not frames:
                    raise
                self._failed = exc  # raised by the next call, after the frames before it
                break
        return frames

    def close(self) -> None:
        """Check the stream ended between events; raise `ResponseError` if not.

        The stream ended inside an event if a ``data`` line is waiting for its
        blank line, or if it stopped in the middle of a line that is not a
        comment.
        """
        self.raise_pending()
        unfinished = bytes(self._head or b"") + self._partial
        if self._data is not None or (unfinished and not unfinished.startswith(b":")):
            raise ResponseError(
                "the stream ended inside an event "
                f"({self._event_bytes + len(unfinished)} bytes after the last blank line)"
            )

    def raise_pending(self) -> None:
        """Raise the fault a previous call found after the events it returned, if any."""
        if self._failed is not None:
            raise self._failed

    def feed_payloads(self, data: BytesLike) -> list[Payload]:
        """Return the data of each event completed by `data`, JSON not decoded.

        ``[DONE]`` is not returned: it sets `done` instead. A fault after some
        events is kept for the next call (see the class docstring).
        """
        self.raise_pending()
        if not isinstance(data, bytes):
            if not isinstance(data, (bytearray, memoryview)):
                raise EnvelopeError(
                    f"SseDecoder.feed: expected bytes, got {type(data).__name__}"
                )
            data = bytes(data)
        payloads: list[Payload] = []
        try:
            if len(data) > _SLICE:
                view = memoryview(data)
                for start in range(0, len(data), _SLICE):
                    self._slice(bytes(view[start : start + _SLICE]), payloads)
            else:
                self._slice(data, payloads)
        except EnvelopeError as exc:
            if not payloads:
                raise
            self._failed = exc
        return payloads

    def feed_sglang_events(self, data: BytesLike) -> tuple[bytes, list[bytes]] | None:
        """Read `data` if the events it completes are all in SGLang's shape, untouched.

        SGLang's shape is ``data: {...}\\n\\n``: one ``data`` line whose value
        begins with ``{``, no CR, no comment, no other field. Returns the bytes
        of the completed events as received and each event's line (the bytes
        stand for the line of a lone event); the payloads are the lines past
        their first 6 bytes (`event_payloads`), as `feed_payloads` gives them.

        None, the decoder unchanged, inside an event, past ``[DONE]``, at the
        stream's start unless `data` begins with ``d`` (so no BOM), or when
        `data` holds anything else, ``[DONE]`` and an event near
        `max_event_bytes` included: `feed_payloads(data)` reads it then. The
        scans are C-level (``find``, ``split``): little Python work per event.
        """
        if (
            self._data is not None  # inside an event
            or self._event_bytes
            or self._after_cr
            or self._done
            or self._failed is not None
            or not (
                isinstance(data, (bytes, bytearray))
                or (type(data) is memoryview and data.contiguous)
            )
        ):
            return None
        if self._head is not None:  # the stream's start: past it if `data` begins "d"
            if self._head or not data or data[0] != _SGLANG_PREFIX[0]:
                return None
            self._head = None
        buffer = self._partial  # the unfinished line, which has no LF
        if (
            not buffer
            and type(data) is bytes
            and _one_whole_event(data, self._max_event_bytes)
        ):
            return data, [data]  # as a relay often reads it: nothing copied
        start = len(buffer)
        buffer += data
        shaped = _shaped_events(buffer, start, self._max_event_bytes)
        if shaped is None:
            del buffer[start:]
        else:
            del buffer[: len(shaped[0])]
        return shaped

    def _slice(self, data: bytes, payloads: list[Payload]) -> None:
        """Read at most _SLICE bytes, appending the data of each event they complete."""
        shaped = self.feed_sglang_events(data)
        if shaped is not None:
            if shaped[1]:
                payloads += event_payloads(*shaped)
            return
        if self._head is not None:
            data = self._skip_bom(data)
        if not data:
            return
        if self._after_cr and data[0] == 10:
            data = data[1:]
        self._after_cr = False
        if b"\r" in data:
            self._after_cr = data[-1] == 13
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        # Bytes, and a bytearray first if a line was open.
        lines: list[Any] = data.split(b"\n")
        last = lines.pop()  # the start of the next line, or b"" when data ends with LF
        if lines and self._partial:  # the line the last chunk began
            partial = self._partial
            partial += lines[0]
            self._partial = bytearray()
            lines[0] = bytes(partial)
        self._read(lines, payloads)
        if last:  # the start of an unfinished line, held within the bound
            if self._event_bytes + len(self._partial) + len(last) > self._max_event_bytes:
                raise self._too_big()
            self._partial += last

    def _read(self, lines: list[Any], payloads: list[Payload]) -> None:
        """Apply complete lines (without their line ends) by the WHATWG rules."""
        data = self._data
        size = self._event_bytes
        limit = self._max_event_bytes
        for line in lines:
            if not line:  # a blank line ends the event
                if data is not None:
                    self._data = None
                    if self._done:  # SGLang sends nothing after [DONE]
                        raise ResponseError("the stream sent an event after data: [DONE]")
                    if data == _DONE:
                        self._done = True
                    else:
                        payloads.append(data)
                    data = None
                size = 0
                continue
            size += len(line) + 1
            if size > limit:
                raise self._too_big()
            if line.startswith(b"data") and (len(line) == 4 or line[4] == 58):  # 58: ":"
                at = 5 + (line[5:6] == b" ")  # one space after the colon is dropped
                if data is None:  # the usual single line
                    data = line[at:]
                    continue
                # More lines: one buffer, joined with LF.
                if not isinstance(data, bytearray):
                    data = bytearray(data)
                data += b"\n"
                data += line[at:]
            # Comments and every other field leave the frames unchanged.
        self._data = data
        self._event_bytes = size

    def _skip_bom(self, data: bytes) -> bytes:
        """Drop one UTF-8 BOM at the stream's very start, even split across chunks."""
        head = (self._head or b"") + data
        if len(head) < len(_BOM) and _BOM.startswith(head):
            self._head = head
            return b""
        self._head = None
        return head[len(_BOM) :] if head.startswith(_BOM) else head

    def _too_big(self) -> LimitExceeded:
        limit = self._max_event_bytes
        return LimitExceeded(
            "max_event_bytes",
            limit,
            f"an SSE event is larger than max_event_bytes ({limit} bytes)",
        )


def indexed_event(frame: bytes, index: int) -> bytes:
    """The event of `frame`, a frame's JSON object, with ``"index": k`` as its last key,
    as SGLang writes a frame of a stream of many sequences (`choices`)."""
    return b"data: " + frame[:-1] + b',"index":%d}\n\n' % index


def aiter_frames(
    chunks: AsyncIterable[BytesLike], *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
) -> AsyncIterator[dict[str, Any]]:
    """The frames of an SSE stream, as `SseDecoder` reads them, as they complete.

    Ends after the last chunk, having checked that the stream did not stop
    inside an event (`SseDecoder.close`). Faults come in stream order: the
    frames before one are yielded first. The bound is checked at once, the
    chunks when iterated; their iterator is closed whenever reading stops
    (`sources.aclose_source`).
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


def check_bound(name: str, value: int) -> None:
    """`EnvelopeError` unless `value`, the argument `name`, is a positive integer."""
    if type(value) is not int or value < 1:
        raise EnvelopeError(
            f"{name}: expected a positive integer, got {show_value(value)}"
        )


def event_payloads(data: bytes, lines: list[bytes]) -> list[Payload]:
    """The data of events in SGLang's shape, from their lines
    (`SseDecoder.feed_sglang_events`: `data` stands for the line of its one event)."""
    return [data[6:-2]] if lines[0] is data else [line[6:] for line in lines]


def _one_whole_event(data: bytes, limit: int) -> bool:
    """Whether `data` holds exactly one event in SGLang's shape, within `limit`."""
    return (
        data.find(b"\n") == len(data) - 2
        and data[-1] == 10  # one line, then the blank line
        and data.startswith(_SGLANG_PREFIX)
        and data.find(b"\r") < 0
        and len(data) <= limit
    )


def _shaped_events(
    buffer: bytearray, start: int, limit: int
) -> tuple[bytes, list[bytes]] | None:
    """The complete events of `buffer` (read from `start`) and their lines, or None."""
    first = buffer.find(b"\n", start)  # the first LF: the line before it is complete
    end = buffer.rfind(b"\n") + 1 if first >= 0 else 0  # where the events end
    if (
        # The last LF does not end a blank line.
        (end and (end - first < 2 or buffer[end - 2] != 10))
        or buffer.find(b"\r", start) >= 0
        or len(buffer) > limit
    ):
        return None
    if not end:  # no event ends here
        return b"", []
    with memoryview(buffer) as view:
        events = bytes(view[:end])
    if first == end - 2:
        lines = [events]
    else:
        lines = events.split(b"\n")
        del lines[-1]  # the empty rest after the last LF
        if len(lines) % 2 or any(lines[1::2]):
            return None
        lines = lines[::2]
    if not all(map(bytes.startswith, lines, repeat(_SGLANG_PREFIX))):
        return None
    return events, lines
