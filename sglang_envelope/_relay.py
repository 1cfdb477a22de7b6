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

import copy
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
_HOLE: Final = Raw(b"\x00")  # where _splice puts a new value
if {
    "output_ids",
    "meta_info.output_token_logprobs",
    "meta_info.output_token_sampling_mask",
} != _COUNTED:
    raise AssertionError(
        "_Deltas.count must count exactly the arrays CONSISTENCY counts"
    )  # pragma: no cover


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
        ("completion_tokens", Raw | UnsetType, UNSET),
        ("beam_results", Raw | UnsetType, UNSET),
        *_raw_fields(True),
    ],
)
_Frame = _view(
    "_Frame", [("meta_info", _Meta, msgspec.field(default_factory=_Meta)), *_raw_fields(False)]
)
_FRAME: Final = msgspec.json.Decoder(_Frame)


def _typed_fields(in_meta: bool) -> list[tuple[str, Any, Any]]:
    return [
        (key, (str if opening == b'"' else list[Raw]) | UnsetType, UNSET)
        for _, key, meta, opening, _ in _ROWS
        if meta is in_meta
    ]


# An intermediate frame when only its counts matter: msgspec checks each delta
# field's type, and a frame it refuses takes the full path for the message.
_CountsMeta = _view("_CountsMeta", [("finish_reason", Any, None), *_typed_fields(True)])
_Counts = _view(
    "_Counts",
    [("meta_info", _CountsMeta, msgspec.field(default_factory=_CountsMeta)), *_typed_fields(False)],
)
_COUNTS: Final = msgspec.json.Decoder(_Counts)


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
    for chunk in chunks:
        out = relay.feed(chunk)
        if out:
            yield out
        if relay.ended:
            return
    yield relay.close()


async def _relay_async(relay: _Relay, chunks: AsyncIterable[BytesLike]) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        out = relay.feed(chunk)
        if out:
            yield out
        if relay.ended:
            return
    yield relay.close()


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
            f"meta_info.completion_tokens is {show_value(completion_tokens)}, but output_ids has "
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
        "_passed",
        "_seen",
        "_sent",
        "ended",
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
        # What the last frame sent holds, read cumulatively (see _cut).
        self._sent: dict[str, Any] = {}
        self._passed = 0  # frames of the last chunk read while the mode was undecided
        self.ended = False  # a failure was written: the stream is over

    def feed(self, chunk: BytesLike) -> bytes:
        """The client's bytes for the events `chunk` completed (maybe empty).

        After a failure they end with the error frame and ``[DONE]``, and
        `ended` is true: feed nothing more.
        """
        if not isinstance(chunk, bytes):
            if not isinstance(chunk, (bytearray, memoryview)):
                raise EnvelopeError(f"relay chunk: expected bytes, got {type(chunk).__name__}")
            chunk = bytes(chunk)
        try:
            self._seen += len(chunk)
            if self._seen > self._max_bytes:
                limit = self._max_bytes
                raise LimitExceeded(
                    "max_bytes", limit, f"the stream is larger than max_bytes ({limit} bytes)"
                )
            payloads = [_one_line(p) for p in self._decoder._feed_raw(chunk)]
            good, error = self._check(payloads)
        except ResponseError as exc:
            return self._end(b"", exc)
        try:
            sent = self._output(payloads[:good])
        except ResponseError as exc:  # no delta: the stream's own error, if any, comes first
            return self._end(b"", error or exc)
        return sent if error is None else self._end(sent, error)

    def _end(self, sent: bytes, error: ResponseError) -> bytes:
        """`sent`, then SGLang's error frame and ``[DONE]``: the stream is over."""
        self.ended = True
        return sent + _error_event(error) + SSE_DONE

    def close(self) -> bytes:
        """The last bytes for the client, ``[DONE]`` included, once the stream's end is checked."""
        try:
            self._decoder.close()
            if not self._checker.finished:
                self._checker._finish(said_done=self._decoder.done)  # raises: no terminal frame
        except ResponseError as exc:
            return _error_event(exc) + SSE_DONE
        return SSE_DONE

    def _check(self, payloads: list[Payload]) -> tuple[int, ResponseError | None]:
        """Aggregation's verdict on these frames, in its order: how many pass, and the error."""
        self._passed = 0
        if not payloads:
            return 0, None
        good, error = self._admit(payloads)
        if self._incremental is False:
            self._frames += good
        else:
            good, error = self._read_all(payloads, good, error)
        if error is None and self._checker.finished and not self._incremental:
            # The terminal frame came: aggregation's final checks, before it goes out.
            # An abort with a status is an EngineError to aggregation; SGLang streams
            # it as a frame, and so does the relay.
            try:
                self._checker._finish(said_done=False)
            except EngineError:
                pass
            except ResponseError as exc:
                return good - 1, exc
        return good, error

    def _admit(self, payloads: list[Payload]) -> tuple[int, ResponseError | None]:
        """Admit frames into the checker: how many it took, and its error."""
        before = copy.copy(self._checker) if len(payloads) > 1 else None
        try:
            self._checker._add_payloads(payloads)
        except ResponseError as exc:
            if before is None:
                return 0, exc
            # Which frame failed: the checker as it was takes them one at a time.
            for good, payload in enumerate(payloads):
                try:
                    before._add_payloads([payload])
                except ResponseError:
                    return good, exc
            raise  # pragma: no cover - the same frames fail the same way
        return len(payloads), None

    def _read_all(
        self, payloads: list[Payload], good: int, error: ResponseError | None
    ) -> tuple[int, ResponseError | None]:
        """Read the admitted frames of a stream that may be incremental.

        A frame's own fault comes before a later frame's admission error.
        """
        count = self._deltas.count if self._incremental and self._client_incremental else None
        for at, payload in enumerate(payloads[:good]):
            if count is not None and count(payload):
                self._frames += 1
                continue
            try:
                # Aggregation's final checks come after every frame: a later
                # frame's fault comes first.
                self._read(payload, final_checks=error is None)
            except ResponseError as exc:
                return at, exc
            if self._incremental is None:
                self._passed = at + 1
        return good, error

    def _output(self, payloads: list[Payload]) -> bytes:
        """The client's bytes for frames that passed every check."""
        if not payloads:
            return b""
        mode = self._incremental
        if mode is None or mode is self._client_incremental:
            return _as_received(payloads)
        passed = self._passed
        if mode:
            converted = self._to_cumulative(payloads[-1])
        else:
            converted = self._to_incremental(payloads[-1])
        return _as_received(payloads[:passed]) + converted

    def _read(self, payload: Payload, *, final_checks: bool) -> None:
        """Take one admitted frame of a stream that may be incremental: counts, deltas, mode.

        Nothing is kept of a frame that fails.
        """
        self._frames += 1
        if self._incremental is False:  # found cumulative earlier in this chunk
            return
        frame = _read_frame(payload, f"frame {self._frames}")
        try:
            found = self._deltas.measure(frame)
            ids_now = sum(count for path, _, _, count in found if path == "output_ids")
            if self._incremental is None:
                self._detect(frame, ids_now)
        except ResponseError as exc:
            raise ResponseError(f"frame {self._frames}: {exc}") from exc
        if final_checks and self._incremental and frame.meta_info.finish_reason is not None:
            self._deltas.check_counts(decode_json(payload, "the terminal frame"), found)
        self._deltas.take(found)
        if self._incremental is None:  # sent as received: what a cumulative reading sent
            self._sent = self._cut(frame, {}, {})

    def _detect(self, frame: Any, ids_now: int) -> None:
        meta = frame.meta_info
        count = _small_int(meta.completion_tokens)
        finish = meta.finish_reason
        if (
            frame.output_ids is not UNSET
            and count is not None
            and meta.beam_results is UNSET
            and not (type(finish) is dict and finish.get("type") == "abort")
        ):
            self._incremental = _stream_mode_from_counts(count, self._deltas.ids, ids_now)

    def _to_cumulative(self, last: Payload) -> bytes:
        return _splice(last, self._deltas.cumulative())

    def _to_incremental(self, last: Payload) -> bytes:
        """The frame SGLang's incremental mode would send after the last one sent."""
        values: dict[str, list[Any]] = {}
        sent = self._cut(_read_frame(last, f"frame {self._frames}"), self._sent, values)
        out = _splice(last, values)
        if out:  # sent: the next delta starts here
            self._sent = sent
        return out

    def _cut(
        self, frame: Any, sent: dict[str, Any], deltas: dict[str, list[Any]]
    ) -> dict[str, Any]:
        """Put into `deltas` each field's JSON past what `sent` holds; return what `frame` holds.

        What a frame holds is, per delta field, its text's JSON inside the quotes
        or its list's JSON elements. A list's delta is its elements past those
        sent; SGLang cuts every list at the ids sent (its output offset), which
        is the same number for its streams, whose lists grow a token at a time.
        A frame that does not extend the last one sent has no delta.
        """
        held: dict[str, Any] = {}
        for path, key, in_meta, opening, name in _ROWS:
            raw = getattr(frame.meta_info if in_meta else frame, key)
            if raw is UNSET:
                if path in sent:  # an incremental frame cannot take a field back
                    raise self._no_delta(path, "is missing, though the last frame sent had it")
                continue
            if bytes(raw)[:1] != opening:
                raise self._no_delta(path, f"is not {name}")
            if opening == b'"':
                text = held[path] = bytes(raw)[1:-1]
                deltas[path] = [b'"', self._text_delta(sent.get(path, b""), text), b'"']
                continue
            elements = held[path] = _read_json(_ELEMENTS, raw, path)
            before = sent.get(path, [])
            if not _extends(elements, before):
                raise self._no_delta(path, "does not extend the last frame sent")
            deltas[path] = [b"[", b",".join(elements[len(before) :]), b"]"]
        return held

    def _text_delta(self, sent: bytes, text: bytes) -> bytes:
        if text.startswith(sent):
            return text[len(sent) :]
        old = decode_json(b'"' + sent + b'"', "text")
        new = decode_json(b'"' + text + b'"', f"frame {self._frames}: text")
        if not new.startswith(old):
            raise self._no_delta("text", "does not extend the last frame sent")
        return _ENCODER.encode(new[len(old) :])[1:-1]

    def _no_delta(self, path: str, fault: str) -> ResponseError:
        return ResponseError(
            f"frame {self._frames}: {path} {fault}, so no incremental delta exists"
        )


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

    def count(self, payload: Payload) -> bool:
        """Count an intermediate frame's entries, when they are all that is kept.

        False when the frame needs the full path: the terminal frame, or a
        frame whose delta fields are not all of their types.
        """
        try:
            frame = _COUNTS.decode(payload)
        except (msgspec.DecodeError, RecursionError):
            return False
        meta = frame.meta_info
        if meta.finish_reason is not None:
            return False
        counts = self._counts
        if (ids := frame.output_ids) is not UNSET:
            counts["output_ids"] = counts.get("output_ids", 0) + len(ids)
        if (logprobs := meta.output_token_logprobs) is not UNSET:
            path = "meta_info.output_token_logprobs"
            counts[path] = counts.get(path, 0) + len(logprobs)
        if (mask := meta.output_token_sampling_mask) is not UNSET:
            path = "meta_info.output_token_sampling_mask"
            counts[path] = counts.get(path, 0) + len(mask)
        return True

    def measure(self, frame: Any) -> list[tuple[str, bytes, bytes, int]]:
        """A frame's delta fields as (path, JSON, opening byte, entries), types checked."""
        found = []
        for path, key, in_meta, opening, name in _ROWS:
            raw = getattr(frame.meta_info if in_meta else frame, key)
            if raw is UNSET:
                continue
            data = bytes(raw)
            if data[:1] != opening:
                raise expected(path, name, decode_json(data, path))
            count = len(_read_json(_ELEMENTS, data, path)) if path in _COUNTED else 0
            found.append((path, data, opening, count))
        return found

    def take(self, found: list[tuple[str, bytes, bytes, int]]) -> None:
        for path, data, opening, count in found:
            if path in _COUNTED:
                self._counts[path] = self._counts.get(path, 0) + count
            buffer = self._buffers.setdefault(path, bytearray())
            if not self._keep:
                continue
            inside = data[1:-1]
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

    def check_counts(
        self, terminal: dict[str, Any], found: list[tuple[str, bytes, bytes, int]]
    ) -> None:
        """Aggregation's checks of the terminal frame, on the counts with its own."""
        meta = terminal["meta_info"]
        finish = meta["finish_reason"]
        if finish.get("type") == "abort":
            abort_error(finish)  # its type checks; the abort itself is relayed as a frame
            return
        totals = dict(self._counts)
        for path, _, _, count in found:
            if path in _COUNTED:
                totals[path] = totals.get(path, 0) + count
        for count_key, path, unless in CONSISTENCY:
            count = meta.get(count_key)
            total = totals.get(path)
            if count is None or total is None or (unless is not None and unless in meta):
                continue
            if type(count) is not int:
                raise expected(f"meta_info.{count_key}", "an integer", count)
            if count != total:
                raise ResponseError(
                    f"meta_info.{count_key} is {show_value(count)} but {path} has {total} entries"
                )


def _small_int(raw: Raw | UnsetType) -> int | None:
    """A count's value when it is an integer JSON writes in at most 19 digits, else None."""
    if raw is UNSET:
        return None
    data = bytes(raw)
    digits = data[1:] if data[:1] == b"-" else data
    return int(data) if 0 < len(digits) <= 19 and digits.isdigit() else None


def _extends(elements: list[Raw], before: list[Raw]) -> bool:
    """Whether a list's JSON elements begin with `before`'s, as JSON values."""
    head = elements[: len(before)]
    if head == before:  # the same bytes: SGLang writes each entry alike every time
        return True
    if len(head) < len(before):
        return False
    try:
        return all(
            a == b or decode_json(a, "an entry") == decode_json(b, "an entry")
            for a, b in zip(head, before, strict=True)
        )
    except (ResponseError, RecursionError):
        return False


def _read_frame(payload: Payload, what: str) -> Any:
    """A frame the checker admitted, as the relay reads it (`_Frame`)."""
    try:
        return _FRAME.decode(payload)
    except (msgspec.DecodeError, RecursionError):
        # A key given twice, first with a value the view cannot hold: the last
        # one counts, as in aggregation, so read the frame as aggregation did.
        frame = decode_json(payload, what)
        try:
            again = _ENCODER.encode(frame)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ResponseError(f"{what} cannot be read: {exc}") from exc
        return _read_json(_FRAME, again, what)


def _read_json(decoder: msgspec.json.Decoder[Any], data: Any, what: str) -> Any:
    """Decode part of a frame the checker admitted; should it still fail, a `ResponseError`."""
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ResponseError(f"{what} is not valid JSON: {exc}") from exc


def _one_line(payload: Payload) -> Payload:
    """An event's data as one line.

    The data of several ``data`` lines is joined with LF (in a bytearray), which
    in JSON can only be whitespace: it becomes a space. If the data is not
    JSON, the checker refuses it either way.
    """
    return payload.replace(b"\n", b" ") if type(payload) is bytearray else payload


def _as_received(payloads: list[Payload]) -> bytes:
    """Events as SGLang frames them, each event's data unchanged."""
    if not payloads:
        return b""
    parts: list[Any] = [b"\n\ndata: "] * (2 * len(payloads) + 1)  # one join: one copy
    parts[1::2] = payloads
    parts[0], parts[-1] = b"data: ", b"\n\n"
    return b"".join(parts)


def _splice(payload: Payload, values: dict[str, list[Any]]) -> bytes:
    """One event: `payload` with the delta fields in `values` (JSON parts) put in place.

    A field keeps its place among the frame's keys; one the frame lacks goes
    last in its object, as ``_coalesce_streaming_chunks`` puts it. msgspec
    writes the frame with a NUL byte where each new value goes (JSON text
    holds no raw NUL: msgspec refuses one when it reads), and the values are
    joined in at those places: every byte is copied once.
    """
    try:
        fields = _FIELDS.decode(payload)
        meta = _FIELDS.decode(fields["meta_info"])
    except msgspec.DecodeError:
        # Keys that are not UTF-8, in a frame the checker read no further than its
        # finish reason: it cannot be written again. Nothing is lost by not sending
        # it: the next frame sent carries everything so far.
        return b""
    fills: list[Any] = []
    for path in values:
        owner, key = (meta, path[10:]) if path.startswith("meta_info.") else (fields, path)
        owner[key] = _HOLE
    for key, value in fields.items():
        if key == "meta_info":
            fills += [values["meta_info." + k] for k, v in meta.items() if v is _HOLE]
        elif value is _HOLE:
            fills.append(values[key])
    fields["meta_info"] = meta  # type: ignore[assignment]  # written as an object
    pieces = _ENCODER.encode(fields).split(b"\x00")
    parts: list[Any] = [b"data: ", pieces[0]]
    for fill, piece in zip(fills, pieces[1:], strict=True):
        parts += fill
        parts.append(piece)
    parts.append(b"\n\n")
    return b"".join(parts)
