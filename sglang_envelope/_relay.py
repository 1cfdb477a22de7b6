"""Relay SGLang's /generate stream to a streaming client: checked, in the client's mode.

The engine streams in one mode (see `_aggregate`) and the client asked for one.
The relay reads the engine's SSE bytes and writes client-ready SSE bytes, ending
with ``data: [DONE]\\n\\n`` as SGLang's ``http_server.stream_results`` does:

* same mode: every event's data goes out as received, framed as SGLang frames
  it; the JSON is checked, never decoded into objects and encoded again;
* incremental engine, cumulative client: each delta field's JSON is kept as
  bytes and appended to (`_Deltas`), so a cumulative frame costs the bytes it
  sends;
* cumulative engine, incremental client: each delta is cut from the cumulative
  field's JSON elements, as SGLang cuts them
  (``tokenizer_manager._slice_streaming_output_meta_info``).

A converted stream sends at most one frame per chunk read, the latest state,
as SGLang itself does when frames queue up behind a slow reader
(``_wait_one_response``: the last of a cumulative backlog, a
``_coalesce_streaming_chunks`` of an incremental one).

The checks are aggregation's (`aggregate_sse`): a `StreamAggregator` admits
every frame, and the final counts are checked before the terminal frame goes
out. A failure becomes SGLang's error frame and ``[DONE]``, never an exception:
the client already has a 200 and maybe frames, and SGLang answers a failed
stream the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any, Final

import msgspec
from msgspec import UNSET, Raw, UnsetType

from sglang_envelope._aggregate import DEFAULT_MAX_BYTES, DELTA_FIELDS, StreamAggregator
from sglang_envelope._errors import (
    EngineError,
    EnvelopeError,
    LimitExceeded,
    ResponseError,
    show_value,
)
from sglang_envelope._frame import CONSISTENCY, abort_error, decode_json, expected
from sglang_envelope._sse import (
    DEFAULT_MAX_EVENT_BYTES,
    SSE_DONE,
    BytesLike,
    Payload,
    SseDecoder,
    encode_sse,
)

__all__ = ["relay_sse", "relay_sse_async"]

ERROR_TYPE: Final = "invalid_request_error"
"""The ``type`` SGLang writes in every error frame of a stream."""

_ENCODER: Final = msgspec.json.Encoder()
_FIELDS: Final = msgspec.json.Decoder(dict[str, Raw])
_ELEMENTS: Final = msgspec.json.Decoder(list[Raw])
_COUNTED: Final = frozenset(path for _, path, _ in CONSISTENCY)
# (dotted path, key in its parent, parent is meta_info, opening byte of its JSON, type name)
_ROWS: Final = tuple(
    (path, path.rpartition(".")[2], "." in path, b'"' if kind is str else b"[", name)
    for path, kind in DELTA_FIELDS
    for name in ("a string" if kind is str else "an array",)
)
_CLOSE: Final = {b'"': b'"', b"[": b"]"}


def _view(name: str, fields: list[tuple[str, Any, Any]]) -> Any:
    return msgspec.defstruct(name, fields, gc=False)


def _raw_fields(in_meta: bool) -> list[tuple[str, Any, Any]]:
    return [(key, Raw | UnsetType, UNSET) for _, key, meta, _, _ in _ROWS if meta is in_meta]


# A frame as the relay reads it, built from DELTA_FIELDS: every delta field as
# its JSON (a zero-copy slice), and what mode detection needs. It is read only
# after the aggregator admitted the frame, so it always decodes.
_Meta = _view(
    "_Meta",
    [
        ("finish_reason", Any, None),
        ("completion_tokens", Any, None),
        ("beam_results", Raw | UnsetType, UNSET),
        *_raw_fields(True),
    ],
)
_Frame = _view(
    "_Frame", [("meta_info", _Meta, msgspec.field(default_factory=_Meta)), *_raw_fields(False)]
)
_FRAME: Final = msgspec.json.Decoder(_Frame)


def relay_sse(
    chunks: Iterable[BytesLike],
    *,
    incremental: bool | None = None,
    client_incremental: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> Iterator[bytes]:
    """SGLang's SSE stream, read chunk by chunk, as client-ready SSE bytes.

    `incremental` is the engine's mode (None: detected from the frames);
    `client_incremental` the mode the client gets (False, SGLang's default:
    cumulative). Yields the events each chunk completed, ending with
    ``data: [DONE]\\n\\n``. A stream aggregation would refuse (`EngineError`,
    `ResponseError`, `LimitExceeded`) ends with SGLang's error frame and
    ``[DONE]`` instead of raising; an abort frame is relayed as SGLang sends
    it. Raises `EnvelopeError` at once for bad arguments, and for a chunk that
    is not bytes.
    """
    relay = _Relay(incremental, client_incremental, max_bytes, max_event_bytes)
    try:
        iterator = iter(chunks)
    except TypeError:
        raise EnvelopeError(
            f"relay_sse chunks: expected an iterable, got {type(chunks).__name__}"
        ) from None
    return _relay(relay, iterator)


def relay_sse_async(
    chunks: AsyncIterable[BytesLike],
    *,
    incremental: bool | None = None,
    client_incremental: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> AsyncIterator[bytes]:
    """`relay_sse` over an async iterable of bytes (an httpx ``aiter_bytes()``, ...).

    Same bytes out for the same bytes in, whatever the chunking of either.
    """
    relay = _Relay(incremental, client_incremental, max_bytes, max_event_bytes)
    if not hasattr(type(chunks), "__aiter__"):
        raise EnvelopeError(
            f"relay_sse_async chunks: expected an async iterable, got {type(chunks).__name__}"
        )
    return _relay_async(relay, chunks)


def _relay(relay: _Relay, chunks: Iterator[BytesLike]) -> Iterator[bytes]:
    try:
        for chunk in chunks:
            out = relay.feed(chunk)
            if out:
                yield out
        out = relay.close()
    except ResponseError as exc:
        out = _error_event(exc) + SSE_DONE
    yield out


async def _relay_async(relay: _Relay, chunks: AsyncIterable[BytesLike]) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            out = relay.feed(chunk)
            if out:
                yield out
        out = relay.close()
    except ResponseError as exc:
        out = _error_event(exc) + SSE_DONE
    yield out


def _error_event(exc: ResponseError) -> bytes:
    """SGLang's error frame (``stream_results``) for a stream that failed.

    An engine error keeps SGLang's message and status (500 when it gave none);
    a stream the library refuses is the engine's fault as the client sees it: 502.
    """
    if isinstance(exc, EngineError):
        message, code = exc.message, 500 if exc.code is None else exc.code
    else:
        message, code = str(exc), 502
    error = {"message": message, "type": ERROR_TYPE, "code": code, "retryable": False}
    return encode_sse({"error": error})


def _stream_mode_from_counts(completion_tokens: int, ids_before: int, ids_now: int) -> bool | None:
    """The engine's mode a frame shows: True incremental, False cumulative, None either.

    A cumulative frame's ``completion_tokens`` counts its own ``output_ids``;
    an incremental frame's counts every id sent so far. A frame consistent
    with neither reading is a `ResponseError` naming both.

    Stands in for `StreamAggregator`'s own mode detection; the relay should
    take the aggregator's rule once it has one, so both always agree.
    """
    readings = (completion_tokens == ids_before + ids_now, completion_tokens == ids_now)
    if readings == (False, False):
        raise ResponseError(
            f"meta_info.completion_tokens is {completion_tokens}, but output_ids has "
            f"{ids_now} entries in this frame (a cumulative stream) and "
            f"{ids_before + ids_now} so far (an incremental stream)"
        )
    return None if all(readings) else readings[0]


class _Relay:
    """The sans-I/O relay: `feed` engine bytes, get client bytes; `close` at the end."""

    __slots__ = (
        "_checker",
        "_client_incremental",
        "_decoder",
        "_deltas",
        "_frames",
        "_incremental",
        "_max_bytes",
        "_seen",
        "_sent_ids",
        "_sent_text",
    )

    def __init__(
        self,
        incremental: bool | None,
        client_incremental: bool,
        max_bytes: int,
        max_event_bytes: int,
    ) -> None:
        if incremental is not None and type(incremental) is not bool:
            raise EnvelopeError(
                f"incremental: expected True, False or None, got {show_value(incremental)}"
            )
        if type(client_incremental) is not bool:
            raise EnvelopeError(
                f"client_incremental: expected a bool, got {show_value(client_incremental)}"
            )
        if type(max_bytes) is not int or max_bytes < 1:
            raise EnvelopeError(
                f"max_bytes: expected a positive integer, got {show_value(max_bytes)}"
            )
        self._decoder = SseDecoder(max_event_bytes=max_event_bytes)
        # Admits every frame as aggregation does; in cumulative mode it decodes
        # no more of an intermediate frame than its finish reason.
        self._checker = StreamAggregator(incremental=False)
        self._incremental = incremental
        self._client_incremental = client_incremental
        self._max_bytes = max_bytes
        self._seen = 0  # bytes read
        self._frames = 0  # frames read
        self._deltas = _Deltas(keep=not client_incremental)
        self._sent_ids = 0  # output_ids and text of the last frame sent, read cumulatively
        self._sent_text = b""

    def feed(self, chunk: BytesLike) -> bytes:
        """The client's bytes for the events `chunk` completed (maybe empty)."""
        if not isinstance(chunk, bytes):
            if not isinstance(chunk, (bytearray, memoryview)):
                raise EnvelopeError(f"relay chunk: expected bytes, got {type(chunk).__name__}")
            chunk = bytes(chunk)
        self._seen += len(chunk)
        if self._seen > self._max_bytes:
            limit = self._max_bytes
            raise LimitExceeded(
                "max_bytes", limit, f"the stream is larger than max_bytes ({limit} bytes)"
            )
        payloads = self._decoder._feed_raw(chunk)
        if not payloads:
            return b""
        self._checker._add_payloads(payloads)
        mode = self._incremental
        if mode is False and not self._client_incremental:
            self._frames += len(payloads)  # cumulative as received: the checker is enough
            self._final_check(None)
            return _as_received(payloads)
        passed = 0  # payloads read while the mode was undecided: they go out as received
        if mode is not False:
            for at, payload in enumerate(payloads):
                self._read(payload)
                if self._incremental is None:
                    passed = at + 1
            mode = self._incremental
        else:
            self._frames += len(payloads)
        if mode is None or mode is self._client_incremental:
            self._final_check(payloads[-1])
            return _as_received(payloads)
        self._final_check(payloads[-1])
        converted = self._to_cumulative if mode else self._to_incremental
        return _as_received(payloads[:passed]) + converted(payloads[-1])

    def close(self) -> bytes:
        """Check the stream's end; the last bytes for the client, ``[DONE]`` included."""
        self._decoder.close()
        if not self._checker.finished:
            self._checker._finish(said_done=self._decoder.done)  # raises: no terminal frame
        return SSE_DONE

    def _read(self, payload: Payload) -> None:
        """Take one admitted frame of a stream that may be incremental."""
        self._frames += 1
        frame = _FRAME.decode(payload)
        ids_before = self._deltas.ids
        try:
            self._deltas.add(frame)
        except ResponseError as exc:
            raise ResponseError(f"frame {self._frames}: {exc}") from exc
        if self._incremental is not None:
            return
        meta = frame.meta_info
        count = meta.completion_tokens
        ids_now = self._deltas.ids - ids_before
        if (
            frame.output_ids is not UNSET
            and type(count) is int
            and meta.beam_results is UNSET
            and not (type(meta.finish_reason) is dict and meta.finish_reason.get("type") == "abort")
        ):
            try:
                self._incremental = _stream_mode_from_counts(count, ids_before, ids_now)
            except ResponseError as exc:
                raise ResponseError(f"frame {self._frames}: {exc}") from exc
        if self._incremental is None:  # sent as received: what a cumulative reading sent
            if frame.output_ids is not UNSET:
                self._sent_ids = ids_now
            if frame.text is not UNSET:
                self._sent_text = bytes(frame.text)[1:-1]

    def _final_check(self, last: Payload | None) -> None:
        """Aggregation's final verdict, once the terminal frame is in: before it goes out."""
        if not self._checker.finished:
            return
        if self._incremental and last is not None:
            terminal = decode_json(last, "the terminal frame")
            self._deltas.check_counts(terminal["meta_info"])
            return
        # An abort with a status is an EngineError to aggregation; SGLang streams
        # it as a frame, and so does the relay.
        with contextlib.suppress(EngineError):
            self._checker._finish(said_done=False)

    def _to_cumulative(self, last: Payload) -> bytes:
        return _splice(last, self._deltas.cumulative())

    def _to_incremental(self, last: Payload) -> bytes:
        """The frame SGLang's incremental mode would send after the last one sent."""
        frame = _FRAME.decode(last)
        offset = self._sent_ids
        values: dict[str, list[Any]] = {}
        for path, key, in_meta, opening, name in _ROWS:
            raw = getattr(frame.meta_info if in_meta else frame, key)
            if raw is UNSET:
                continue
            _check_type(raw, path, opening, name, self._frames)
            if opening == b'"':
                values[path] = [b'"', self._text_delta(raw), b'"']
                continue
            elements = _ELEMENTS.decode(raw)
            if path == "output_ids":
                self._sent_ids = len(elements)
            values[path] = [b"[", b",".join(elements[offset:]), b"]"]
        return _splice(last, values)

    def _text_delta(self, raw: Raw) -> bytes:
        text = bytes(raw)[1:-1]
        sent, self._sent_text = self._sent_text, text
        if text.startswith(sent):
            return text[len(sent) :]
        old, new = decode_json(b'"' + sent + b'"', "text"), decode_json(raw, "text")
        if not new.startswith(old):
            raise ResponseError(
                f"frame {self._frames}: text does not extend the last frame's text, "
                "so no incremental delta exists"
            )
        return _ENCODER.encode(new[len(old) :])[1:-1]


class _Deltas:
    """An incremental stream's delta fields: counts, and their JSON so far when kept.

    Each field's JSON is kept as the bytes inside its brackets or quotes, in
    one growing buffer, so the cumulative value is those bytes closed again.
    Joining the insides of JSON strings joins the strings: SGLang writes UTF-8
    with only the escapes JSON requires, never a lone surrogate.
    """

    __slots__ = ("_buffers", "_counts", "_keep")

    def __init__(self, *, keep: bool) -> None:
        self._keep = keep
        self._buffers: dict[str, bytearray] = {}  # per path present so far, in order seen
        self._counts: dict[str, int] = {}  # per counted path present so far: entries so far

    @property
    def ids(self) -> int:
        return self._counts.get("output_ids", 0)

    def add(self, frame: Any) -> None:
        for path, key, in_meta, opening, name in _ROWS:
            raw = getattr(frame.meta_info if in_meta else frame, key)
            if raw is UNSET:
                continue
            _check_type(raw, path, opening, name, None)
            if path in _COUNTED:
                self._counts[path] = self._counts.get(path, 0) + len(_ELEMENTS.decode(raw))
            if not self._keep:
                self._buffers.setdefault(path, bytearray())
                continue
            inside = bytes(raw)[1:-1]
            buffer = self._buffers.setdefault(path, bytearray())
            if opening == b'"':
                buffer += inside
            elif inside.strip():
                if buffer:
                    buffer += b","
                buffer += inside

    def cumulative(self) -> dict[str, list[Any]]:
        """Each field's value so far, as parts of its JSON."""
        return {
            path: [opening, self._buffers[path], _CLOSE[opening]]
            for path, _, _, opening, _ in _ROWS
            if path in self._buffers
        }

    def check_counts(self, meta: dict[str, Any]) -> None:
        """Aggregation's consistency check of the terminal frame, on the counts so far."""
        finish = meta["finish_reason"]
        if finish.get("type") == "abort":
            abort_error(finish)  # its type checks; the abort itself is relayed as a frame
            return
        for count_key, path, unless in CONSISTENCY:
            count = meta.get(count_key)
            total = self._counts.get(path)
            if count is None or total is None or (unless is not None and unless in meta):
                continue
            if type(count) is not int:
                raise expected(f"meta_info.{count_key}", "an integer", count)
            if count != total:
                raise ResponseError(
                    f"meta_info.{count_key} is {show_value(count)} but {path} has {total} entries"
                )


def _check_type(raw: Raw, path: str, opening: bytes, name: str, number: int | None) -> None:
    """A delta field of the wrong JSON type is aggregation's `ResponseError`."""
    if bytes(raw)[:1] != opening:
        error = expected(path, name, decode_json(raw, path))
        if number is None:
            raise error
        raise ResponseError(f"frame {number}: {error}") from None


def _as_received(payloads: list[Payload]) -> bytes:
    """Events as SGLang frames them, each event's data unchanged.

    Several ``data`` lines were joined with LF, which in checked JSON is only
    whitespace: it becomes a space, so the event stays one line.
    """
    if not payloads:
        return b""
    fixed = [p.replace(b"\n", b" ") if type(p) is bytearray else p for p in payloads]
    return b"".join((b"data: ", b"\n\ndata: ".join(fixed), b"\n\n"))


def _splice(payload: Payload, values: dict[str, list[Any]]) -> bytes:
    """One event: `payload` with the delta fields in `values` (JSON parts) put in place.

    A field keeps its place among the frame's keys; one the frame lacks goes
    last in its object, as ``_coalesce_streaming_chunks`` puts it.
    """
    fields = _FIELDS.decode(payload)
    parts: list[Any] = [b"data: "]
    top = {path: value for path, value in values.items() if "." not in path}
    meta = {path[10:]: value for path, value in values.items() if path.startswith("meta_info.")}
    _object(fields, top, parts, meta)
    parts.append(b"\n\n")
    return b"".join(parts)


def _object(
    fields: dict[str, Raw],
    values: dict[str, list[Any]],
    parts: list[Any],
    meta: dict[str, list[Any]] | None = None,
) -> None:
    parts.append(b"{")
    comma = False
    for key, raw in fields.items():
        if comma:
            parts.append(b",")
        comma = True
        parts += (_ENCODER.encode(key), b":")
        if key in values:
            parts += values[key]
        elif key == "meta_info" and meta is not None:
            _object(_FIELDS.decode(raw), meta, parts)
        else:
            parts.append(raw)
    for key, value in values.items():
        if key not in fields:
            parts += ((b"," if comma else b""), _ENCODER.encode(key), b":", *value)
            comma = True
    parts.append(b"}")
