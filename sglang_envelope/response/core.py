"""The stream core: one generation's frames, read in order into its answer.

SGLang streams in one of two modes, cumulative (its default: every frame holds
everything so far) or incremental (the fields of `DELTA_FIELDS` hold only what
is new); the mode is read from the frames unless the caller gives it, and the
terminal frame is the one whose ``meta_info.finish_reason`` is not null (see
docs/responses.md, Stream modes).

`StreamCore` admits each frame, detects the mode, keeps the deltas in its
store (`stores`) and makes the answer's final checks; `SseReader` feeds it a
stream's SSE bytes within their bounds. Every frame is decoded once: once the
mode is known, a middle frame is read by the stream's `MiddleReader` (a typed
view with the full decoder's verdict); the terminal frame, and anything the
view cannot read, is decoded in full. `aggregate` and `relay` use only the
public methods below.
"""

from __future__ import annotations

from typing import Any, Final, Generic, Protocol, TypeAlias, TypeVar, cast

from msgspec import UNSET

from sglang_envelope.errors.exceptions import (
    EnvelopeError,
    LimitExceeded,
    ResponseError,
    show_value,
)
from sglang_envelope.response.frames import (
    CONSISTENCY,
    JSON_TYPES,
    abort_error,
    check_consistency,
    decode_frame,
    engine_error,
    expected,
)
from sglang_envelope.response.sse import BytesLike, Payload, SseDecoder, check_bound
from sglang_envelope.response.stores import DeltaStore
from sglang_envelope.response.types import GenerateResponse
from sglang_envelope.response.views import (
    DELTA_ROWS,
    MiddleReader,
    frame_fields,
    same_json,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "SseBytes",
    "SseReader",
    "StreamCore",
    "answer",
    "check_modes",
    "too_big",
]

DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
"""The default bound on a whole stream or body: 64 MiB."""

#: What `SseReader.admit` read: the data of the events admitted, in order, the fault
#: that stopped it (None), and the kept keys of the last frame (`keep_last`).
Admitted: TypeAlias = tuple[list[Payload], ResponseError | None, dict[str, Any] | None]


#: `meta_info` keys SGLang sends only on a stream's first frame and at the end of its
#: unary answer: the aggregated answer ends with them too, as SGLang's unary one does.
FIRST_FRAME_KEYS: Final = ("response_sent_to_client_ts",)

_READINGS: Final = {
    True: "read incrementally (frames hold deltas)",
    False: "read cumulatively (each frame holds everything so far)",
}

S = TypeVar("S", bound=DeltaStore)
_BATCH: Final = 32  # middle frames whose views are held at once


class StreamCore(Generic[S]):
    """One generation's frames, added in order, and its answer's checks.

    ``incremental=None`` reads the mode from the frames: a frame whose
    ``meta_info.completion_tokens`` (or another count of `CONSISTENCY`) fits
    only one reading settles it; anything but True, False or None is an
    `EnvelopeError`. The deltas go to `store`. After an exception from an
    `add`, discard the core.
    """

    __slots__ = (
        "_count",
        "_first_meta",
        "_fits",
        "_index",
        "_last",
        "_mode",
        "_reader",
        "_terminal",
        "store",
    )

    def __init__(self, incremental: bool | None, store: S) -> None:
        check_modes(incremental)
        self._mode: bool | None = None if incremental is None else bool(incremental)
        self.store = store
        self._count = 0  # frames added
        self._first_meta: dict[str, Any] = {}  # the first frame's meta_info
        self._index: Any = UNSET  # the first frame's "index" (UNSET when it has none)
        self._reader = MiddleReader(UNSET)  # the middle frames' reader, for that index
        self._last: dict[str, Any] | None = None
        self._terminal: dict[str, Any] | None = None
        # While the mode is unknown: why each reading was ruled out (None: it still fits).
        self._fits: dict[bool, str | None] = {True: None, False: None}

    @property
    def incremental(self) -> bool | None:
        """Whether frames are read as incremental deltas (None: the mode is unknown)."""
        return self._mode

    @property
    def finished(self) -> bool:
        """True once the terminal frame has been added."""
        return self._terminal is not None

    @property
    def frames(self) -> int:
        """How many frames were added (or counted, `count_unparsed`)."""
        return self._count

    @property
    def last(self) -> dict[str, Any] | None:
        """The last frame added in full (not through a view), if any."""
        return self._last

    def add(self, frame: dict[str, Any]) -> None:
        """Add the next frame, decoded, as `StreamAggregator.add` says."""
        number = self.frames + 1
        try:
            if type(frame) is not dict:
                raise expected("frame", "an object", frame)
            meta = self._admit(frame, number)
            found = _deltas(frame, meta) if self._mode is not False else []
            if self._mode is None:
                self._detect(frame, meta)
            if self._mode is not False:
                self.store.add_found(found)
        except ResponseError as exc:
            if type(exc) is ResponseError:
                raise ResponseError(f"frame {number}: {exc}") from exc
            raise
        self._count = number
        self._last = frame
        if meta.get("finish_reason") is not None:
            self._terminal = frame

    def add_payloads(
        self, payloads: list[Payload], *, keep_last: bool = False
    ) -> dict[str, Any] | None:
        """`add` for frames still in JSON, each decoded once, in order; then the store's
        `end_chunk`.

        With `keep_last`, the last, when it is a middle frame of a stream known
        incremental, is added with its keys' JSON kept as it came
        (`frame_fields`, `DeltaStore.add_raw`): those keys are returned.
        """
        end = len(payloads) - (keep_last and bool(payloads))
        at = 0
        try:
            # The middle frames the reader reads, their views given to the store a
            # batch at a time (so that few are held at once); any other in full.
            while at < end:
                if self._count and self._terminal is None and self._mode is not None:
                    read = self._reader.read
                    stop = at + _BATCH if end - at > _BATCH else end
                    views: list[Any] = []
                    keep = views.append
                    while at < stop and (view := read(payloads[at])) is not None:
                        keep(view)
                        at += 1
                    self._count += len(views)
                    if self._mode:
                        self.store.add_views(views)
                    if at == stop:
                        continue
                self.add(decode_frame(payloads[at]))
                at += 1
        finally:
            if end:
                self.store.end_chunk()
        if end == len(payloads):
            return None
        fields = self._add_kept(payloads[end])
        if fields is None:
            self.add_payloads(payloads[end:])
        return fields

    def count_unparsed(self, count: int) -> None:
        """Count `count` middle frames that a relay passed on unparsed."""
        self._count += count

    def terminal_frame(self, said_done: bool) -> tuple[dict[str, Any], bool]:
        """The terminal frame and whether it is an abort; raise if there is no answer.

        No terminal frame is a `ResponseError`, an abort with a status in
        [400, 600) an `EngineError`. The terminal frame's `meta_info` gains the
        first frame's `FIRST_FRAME_KEYS` it lacks (in a new dict).
        """
        terminal = self._terminal
        if terminal is None:
            end = "said data: [DONE]" if said_done else "ended"
            if self.frames == 0:
                raise ResponseError(f"the stream {end} before any frame")
            raise ResponseError(
                f"the stream {end} after {self.frames} frames without a terminal frame "
                "(one whose meta_info.finish_reason is not null)"
            )
        meta = terminal["meta_info"]
        finish = meta["finish_reason"]
        aborted = finish.get("type") == "abort"
        if aborted and (error := abort_error(finish)) is not None:
            raise error
        first = self._first_meta
        kept = {
            key: first[key]
            for key in FIRST_FRAME_KEYS
            if key in first and key not in meta
        }
        if kept:  # a new terminal frame: the caller's stays as it came
            terminal = {**terminal, "meta_info": {**meta, **kept}}
        return terminal, aborted

    def checked_terminal(self, said_done: bool) -> dict[str, Any]:
        """The terminal frame (`terminal_frame`), once the answer's final checks pass.

        A stream whose mode was never told apart must give the same answer read
        either way; unless it is an abort, every `CONSISTENCY` count must match
        its array. Either fault is a `ResponseError`.
        """
        self.store.end_chunk()
        terminal, aborted = self.terminal_frame(said_done)
        meta = terminal["meta_info"]
        if self._mode is None and not self._readings_agree(terminal):
            raise ResponseError(
                f"the stream's {self.frames} frames fit both stream modes, which give "
                f"different answers: {_READINGS[True]} and {_READINGS[False]}; no frame "
                "carries a meta_info.completion_tokens that tells them apart: pass "
                "incremental=True or False"
            )
        if aborted:
            return terminal
        totals = None
        if self._mode is not False:  # the arrays' entries, stored
            present = self.store.present
            totals = {
                path: self.store.total(path)
                for _, path, _ in CONSISTENCY
                if path in present
            }
        check_consistency(terminal, meta, totals)
        return terminal

    def _add_kept(self, payload: Payload) -> dict[str, Any] | None:
        """Add a middle frame of a stream known incremental through the view, keeping its
        keys' JSON; None, adding nothing, for any other frame or state."""
        if not (self._mode is True and self._count and self._terminal is None):
            return None
        view = self._reader.read(payload)
        fields = None if view is None else frame_fields(payload)
        if fields is not None:
            self._count += 1
            self.store.add_raw(view, fields)
        return fields

    def _admit(self, frame: dict[str, Any], number: int) -> dict[str, Any]:
        """Check that a frame may come next; return its meta_info."""
        if self._terminal is not None:
            raise ResponseError(f"it came after the terminal frame (frame {self.frames})")
        error = engine_error(frame)
        if error is not None:
            raise error
        meta = frame.get("meta_info", UNSET)
        if meta is UNSET:
            raise ResponseError("it has no meta_info")
        if type(meta) is not dict:
            raise expected("meta_info", "an object", meta)
        finish = meta.get("finish_reason")
        if finish is not None and type(finish) is not dict:
            raise expected("meta_info.finish_reason", "an object or null", finish)
        index = frame.get("index", UNSET)
        if number == 1:
            self._index = index
            self._reader = MiddleReader(index, incremental=self._mode is not False)
            self._first_meta = meta
        elif not same_json(index, self._index):
            raise ResponseError(
                f"its index {show_value(index)} differs from the first frame's "
                f"{show_value(self._index)}: "
                "the stream interleaves several generations (n > 1); "
                "aggregate one at a time"
            )
        return meta

    def _detect(self, frame: dict[str, Any], meta: dict[str, Any]) -> None:
        """Rule out the readings this frame contradicts; settle the mode if one is left.

        A count is the deltas' total read incrementally, the frame's own array
        read cumulatively, and a cumulative frame extends the previous one
        (docs/responses.md, Stream modes). Runs before the frame's deltas are
        collected, so a frame that fails adds nothing.
        """
        fits = self._fits
        # A cumulative middle frame's lists may hold entries past their counts
        # (`COUNTED_BY`): SGLang hands them over as the request's growing lists.
        growing = meta.get("finish_reason") is None
        for count_key, path, unless in CONSISTENCY:
            count = meta.get(count_key)
            parent, _, key = path.rpartition(".")
            array = (meta if parent else frame).get(key, UNSET)
            if type(count) is not int or type(array) is not list or unless in meta:
                continue
            total = self.store.total(path) + len(array)
            if fits[True] is None and count != total:
                shown = show_value(count)
                fits[True] = (
                    f"meta_info.{count_key} is {shown} but {path} has {total} entries"
                )
            if fits[False] is None and (
                not 0 <= count <= len(array) if growing else count != len(array)
            ):
                fits[False] = (
                    f"meta_info.{count_key} is {show_value(count)} "
                    f"but this frame's {path} has {len(array)} entries"
                )
        if fits[False] is None and self._last is not None:
            fits[False] = _not_extending(self._last, frame)
        if fits[True] is not None and fits[False] is not None:
            raise ResponseError(
                f"it fits neither stream mode: {_READINGS[True]}, {fits[True]}; "
                f"{_READINGS[False]}, {fits[False]}"
            )
        if fits[True] is not None:
            self._mode = False
            self._reader = MiddleReader(self._index, incremental=False)
            self.store.forget()  # a cumulative stream's answer is its terminal frame
        elif fits[False] is not None:
            self._mode = True

    def _readings_agree(self, terminal: dict[str, Any]) -> bool:
        """Whether the incremental reading equals the terminal frame (the cumulative one):
        a concatenation equals its last piece exactly when their lengths are equal."""
        meta = terminal["meta_info"]
        for path, key, in_meta, _ in DELTA_ROWS:
            value = (meta if in_meta else terminal).get(key, UNSET)
            if (path in self.store.present) != (value is not UNSET):
                return False
            if value is not UNSET and self.store.total(path) != len(value):
                return False  # an earlier frame added to it
        return True


def check_modes(incremental: object, client_incremental: object = False) -> None:
    """`EnvelopeError` unless `incremental` is True, False or None and
    `client_incremental` a bool."""
    if incremental is not None and type(incremental) is not bool:
        shown = show_value(incremental)
        raise EnvelopeError(f"incremental: expected True, False or None, got {shown}")
    if type(client_incremental) is not bool:
        shown = show_value(client_incremental)
        raise EnvelopeError(f"client_incremental: expected a bool, got {shown}")


def answer(core: StreamCore[DeltaStore], *, said_done: bool) -> GenerateResponse:
    """The final response of a stream read into `core` (see `StreamAggregator.result`)."""
    terminal = core.checked_terminal(said_done)
    if core.incremental is False:
        return cast(GenerateResponse, terminal)
    return cast(GenerateResponse, core.store.assemble(terminal, copy=False))


def _deltas(frame: dict[str, Any], meta: dict[str, Any]) -> list[tuple[str, Any]]:
    """The `DELTA_FIELDS` a frame carries as (path, value), all of the right type."""
    found: list[tuple[str, Any]] = []
    for path, key, in_meta, kind in DELTA_ROWS:
        value = (meta if in_meta else frame).get(key, UNSET)
        if value is UNSET:
            continue
        if type(value) is not kind:
            raise expected(path, JSON_TYPES[kind], value)
        found.append((path, value))
    return found


def _not_extending(previous: dict[str, Any], frame: dict[str, Any]) -> str | None:
    """Why `frame` cannot follow `previous` in a cumulative stream, or None if it can."""
    for path, key, in_meta, kind in DELTA_ROWS:
        before = (previous["meta_info"] if in_meta else previous).get(key, UNSET)
        now = (frame["meta_info"] if in_meta else frame).get(key, UNSET)
        if type(before) is kind and type(now) is kind and not _begins_with(now, before):
            return f"this frame's {path} does not begin with the previous frame's"
    return None


def _begins_with(value: Any, start: Any) -> bool:
    """Whether a string or array `value` begins with `start` (of the same type)."""
    return len(value) >= len(start) and same_json(value[: len(start)], start)


class FrameSink(Protocol):
    """What `SseReader` reads into: a `StreamCore`, or the cores of a stream of many
    sequences (`choices.ChoicesAggregator`)."""

    @property
    def frames(self) -> int: ...

    def add_payloads(
        self, payloads: list[Payload], *, keep_last: bool = False
    ) -> dict[str, Any] | None: ...


class SseBytes:
    """A stream's SSE bytes, counted against `max_bytes` (`bounded`) and read by
    `decoder`, its `SseDecoder`; `close` at the end."""

    __slots__ = ("_max_bytes", "_seen", "_what", "decoder")

    def __init__(self, what: str, max_bytes: int, max_event_bytes: int) -> None:
        check_bound("max_bytes", max_bytes)
        self.decoder = SseDecoder(max_event_bytes=max_event_bytes)
        self._max_bytes = max_bytes
        self._seen = 0
        self._what = what

    def bounded(self, chunk: BytesLike) -> tuple[BytesLike, LimitExceeded | None]:
        """Count `chunk` against `max_bytes`: the part within the bound, and the error
        when bytes past it were cut off (to raise once the part is read)."""
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise EnvelopeError(
                f"{self._what} chunk: expected bytes, got {type(chunk).__name__}"
            )
        self._seen += len(chunk)
        over = self._seen - self._max_bytes
        if over > 0:
            return chunk[: len(chunk) - over], too_big(self._max_bytes, "the stream")
        return chunk, None

    def close(self) -> bool:
        """Check the stream ended between events; return whether it said ``[DONE]``."""
        self.decoder.close()
        return self.decoder.done


class SseReader(SseBytes):
    """A stream's SSE bytes read within `max_bytes` into its `core`: feed, then close.

    A relay that reads events itself through `decoder` must give each one it
    reads to `core`, or count it.
    """

    __slots__ = ("core",)

    def __init__(
        self, what: str, core: FrameSink, max_bytes: int, max_event_bytes: int
    ) -> None:
        super().__init__(what, max_bytes, max_event_bytes)
        self.core = core

    def feed(self, chunk: BytesLike) -> None:
        """Read the next chunk; bytes past `max_bytes` raise `LimitExceeded` unread."""
        chunk, limit_error = self.bounded(chunk)
        # The bytes within the bound still count, so that the first fault in the
        # stream is the one raised, however it was cut into chunks.
        error = self.admit(chunk)[1] or limit_error
        if error is not None:
            raise error

    def admit(self, chunk: BytesLike, *, keep_last: bool = False) -> Admitted:
        """Read `chunk` into the core: what it admitted.

        The fault is the first in the stream: a frame's, else the decoder's.
        """
        core = self.core
        before = core.frames
        payloads: list[Payload] = []
        try:
            payloads = self.decoder.feed_payloads(chunk)
            kept = core.add_payloads(payloads, keep_last=keep_last)
            self.decoder.raise_pending()
        except ResponseError as exc:
            return payloads[: core.frames - before], exc, None
        return payloads, None, kept


def too_big(limit: int, what: str) -> LimitExceeded:
    """The `LimitExceeded` for `what` past `max_bytes`."""
    return LimitExceeded(
        "max_bytes", limit, f"{what} is larger than max_bytes ({limit} bytes)"
    )
