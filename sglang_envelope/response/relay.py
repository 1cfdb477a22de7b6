"""Relay SGLang's /generate stream to a streaming client: checked, in the client's mode.

The relay reads the engine's SSE bytes and writes client-ready SSE bytes, ending
with ``data: [DONE]\\n\\n`` as SGLang's ``http_server.stream_results`` does. A
failure becomes SGLang's error frame (`error_event`) and ``[DONE]``, never an
exception: the client already has a 200 and maybe frames. docs/responses.md
(Relaying to a streaming client) says what the client gets in each case:

* until the engine's mode is known, and whenever it differs from the client's,
  every frame is read by the stream core (`core.SseReader`, `core.StreamCore`):
  a frame goes out once admitted, the terminal frame after aggregation's final
  checks, and a converted stream sends one frame per chunk read, the latest
  state, as SGLang does for a slow reader (``_wait_one_response``);
* incremental engine, cumulative client: the deltas' JSON is kept as it came
  (`stores.BufferStore`) and spliced into the last frame read;
* cumulative engine, incremental client: each delta is cut from the frame's
  JSON as SGLang cuts it (`stores.cut_deltas`);
* the same mode, once known: a checked pass-through, in which a frame whose
  bytes vouch for a middle frame goes out unparsed (`views.unparsed_middles`),
  a chunk of events in SGLang's shape as one slice
  (`SseDecoder.feed_sglang_events`);
* many sequences (``choices=N``): `ChoicesRelay` parses every frame and hands it,
  without its ``index``, to its index's own relay; what that relay writes goes
  out with ``"index": k`` added last (`sse.indexed_event`), and one ``[DONE]``
  ends the stream once every sequence's terminal frame has gone out.
"""

from __future__ import annotations

import functools
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterable,
    Iterator,
    Sequence,
)
from typing import Any

from sglang_envelope.errors.answers import error_event
from sglang_envelope.errors.exceptions import EngineError, ResponseError
from sglang_envelope.response.choices import check_choices, choice_index
from sglang_envelope.response.core import (
    DEFAULT_MAX_BYTES,
    SseBytes,
    SseReader,
    StreamCore,
    check_modes,
)
from sglang_envelope.response.frames import decode_frame
from sglang_envelope.response.sources import (
    open_async_source,
    open_source,
    relay_chunks,
    relay_chunks_async,
)
from sglang_envelope.response.sse import (
    DEFAULT_MAX_EVENT_BYTES,
    SSE_DONE,
    BytesLike,
    Payload,
    SseDecoder,
    encode_sse,
    event_payloads,
    indexed_event,
)
from sglang_envelope.response.stores import (
    BufferStore,
    CountStore,
    JsonStore,
    cut_deltas,
    splice,
)
from sglang_envelope.response.views import (
    frame_fields,
    one_line,
    unparsed_middle,
    unparsed_middles,
)

__all__ = ["relay_sse", "relay_sse_async"]


def relay_sse(
    chunks: Iterable[BytesLike],
    *,
    incremental: bool | None = None,
    client_incremental: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    choices: int | None = None,
) -> Iterator[bytes]:
    """SGLang's SSE stream, read chunk by chunk, as client-ready SSE bytes.

    `incremental` is the engine's mode (None: detected from the frames);
    `client_incremental` the mode the client gets (False, SGLang's default:
    cumulative). Yields the events each chunk completed, ending with
    ``data: [DONE]\\n\\n``. A fault the relay finds (`EngineError`,
    `ResponseError`, `LimitExceeded`, aggregation's verdicts) ends the stream
    with SGLang's error frame and ``[DONE]`` instead of raising; an abort frame
    is relayed as SGLang sends it. In the same mode the frames SGLang writes
    as middle frames pass unparsed (see the module's docstring). Raises
    `EnvelopeError` at once for bad arguments, and for a chunk that is not
    bytes. The chunks' generator (async: ``aclose``) is closed when reading stops.
    ``choices=N`` relays a stream of N sequences (`ChoicesRelay`).
    """
    relay = _make(
        "relay_sse", incremental, client_incremental, max_bytes, max_event_bytes, choices
    )
    return relay_chunks(relay, open_source(chunks, "relay_sse chunks"))


def relay_sse_async(
    chunks: AsyncIterable[BytesLike],
    *,
    incremental: bool | None = None,
    client_incremental: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    choices: int | None = None,
) -> AsyncIterator[bytes]:
    """`relay_sse` over an async iterable of bytes (an httpx ``aiter_bytes()``, ...).

    Same bytes out for the same bytes in, whatever the chunking of either.
    """
    what = "relay_sse_async"
    relay = _make(
        what, incremental, client_incremental, max_bytes, max_event_bytes, choices
    )
    return relay_chunks_async(relay, open_async_source(chunks, f"{what} chunks"))


def _make(
    what: str,
    engine: bool | None,
    client: bool,
    max_bytes: int,
    max_event: int,
    n: int | None,
) -> _Relay | ChoicesRelay:
    """The relay of one sequence, or of `n`, each index's made by the same arguments
    (checked at the call: one is made at once)."""
    make = functools.partial(_Relay, what, engine, client, max_bytes, max_event)
    one = make()
    return one if n is None else ChoicesRelay(what, n, make, max_bytes, max_event)


class _Relay:
    """The sans-I/O relay: `feed` engine bytes, get client bytes; `close` at the end."""

    __slots__ = (
        "_buffers",
        "_client",
        "_core",
        "_last",
        "_reader",
        "_sent",
        "_terminal_size",
        "ended",
    )

    def __init__(
        self,
        what: str,
        incremental: bool | None,
        client_incremental: bool,
        max_bytes: int,
        max_event_bytes: int,
    ) -> None:
        check_modes(incremental, client_incremental)
        # Keeps the deltas' JSON only for a cumulative client; counts in any case.
        self._buffers = None if client_incremental else BufferStore()
        store: JsonStore = CountStore() if self._buffers is None else self._buffers
        self._core = StreamCore(incremental, store)
        self._reader = SseReader(what, self._core, max_bytes, max_event_bytes)
        self._client = client_incremental
        self._last: Payload | None = None  # the last frame sent before the mode was known
        self._sent: dict[str, Any] = {}  # what the last frame sent holds (`cut_deltas`)
        self._terminal_size = 0  # the bytes of the last frame parsed as sent
        self.ended = False  # a failure was written: the stream is over

    def feed(self, chunk: BytesLike) -> list[bytes]:
        """The client's bytes for the events `chunk` completed (none, or one piece).

        After a failure they end with the error frame and ``[DONE]``, and
        `ended` is true: feed nothing more.
        """
        chunk, limit_error = self._reader.bounded(chunk)
        # Frames may go out unparsed once the mode is known and is the client's.
        if not self._core.finished and self._core.incremental is self._client:
            return self._pass(chunk, limit_error)
        # For a cumulative client, the chunk's last frame keeps its JSON (`_output`).
        keep_last = self._buffers is not None
        payloads, error, kept = self._reader.admit(chunk, keep_last=keep_last)
        error = error or limit_error
        if error is None and payloads and self._core.finished:
            error = self._answer_error(unparsed=False)
            if error is not None:  # the terminal frame fails: it does not go out
                payloads = payloads[:-1] if self._sends_as_received() else []
        try:
            out = self._output(payloads, kept)
        except ResponseError as exc:  # no delta
            # The stream's own error, if any, comes first.
            out = b""
            error = error or exc
        return self._ending(out, error)

    def _pass(self, chunk: BytesLike, limit_error: ResponseError | None) -> list[bytes]:
        """`feed` once frames go out unparsed: the frames the bytes cannot vouch for are
        parsed and checked (`unparsed_middle`), every event is framed and bounded."""
        decoder = self._reader.decoder
        events = decoder.feed_sglang_events(chunk)
        if events is not None:
            out, error = self._send_shaped(*events)
        else:
            out, error = self._send_read(decoder, chunk)
        # The deltas of the frames parsed: counted, their objects dropped.
        self._core.store.end_chunk()
        error = error or limit_error
        if error is None and self._core.finished:
            # After the chunk's own faults, as aggregation.
            error = self._answer_error(unparsed=True)
            if error is not None:  # the terminal frame, last sent, does not go out
                out = out[: len(out) - self._terminal_size]
        return self._ending(out, error)

    def _send_shaped(
        self, data: bytes, lines: list[bytes]
    ) -> tuple[bytes, ResponseError | None]:
        """`_check_each` for events in SGLang's shape (`SseDecoder.feed_sglang_events`),
        all of them sent at once, as received, when `unparsed_middles` vouches for
        them."""
        if not lines:
            return b"", None
        head = b""
        core = self._core
        if core.frames == 0:  # the stream's first frame
            head, error = self._check_each(event_payloads(data, lines[:1]))
            if error is not None:
                return head, error
            lines = lines[1:]
        if not lines or unparsed_middles(lines, data, len(head)):
            core.count_unparsed(len(lines))
            return data, None
        # Most often the last event is the terminal frame: the others go at once.
        cut = len(data) - len(lines[-1]) - 2
        if len(lines) > 2 and unparsed_middles(lines[:-1], data[:cut], len(head)):
            core.count_unparsed(len(lines) - 1)
            out, error = self._check_each(event_payloads(data, lines[-1:]))
            return data[:cut] + out, error
        out, error = self._check_each(event_payloads(data, lines))
        return head + out, error

    def _send_read(
        self, decoder: SseDecoder, chunk: BytesLike
    ) -> tuple[bytes, ResponseError | None]:
        """`_check_each` for events read by the WHATWG rules,
        in stream order with their faults."""
        try:
            payloads = decoder.feed_payloads(chunk)
        except ResponseError as exc:
            return b"", exc
        out, error = self._check_each(payloads)
        if error is None:
            try:
                decoder.raise_pending()
            except ResponseError as exc:
                error = exc
        return out, error

    def _check_each(
        self, payloads: Sequence[Payload]
    ) -> tuple[bytes, ResponseError | None]:
        """The events of `payloads` to send, each parsed unless `unparsed_middle`, and
        the fault."""
        core = self._core
        sent: list[Payload] = []
        for payload in payloads:
            if core.frames and not core.finished and unparsed_middle(payload):
                core.count_unparsed(1)
            else:
                try:
                    core.add(decode_frame(payload))
                except ResponseError as exc:
                    return _as_received(sent), exc
                self._terminal_size = len(payload) + len(b"data: \n\n")  # if it was that
            sent.append(payload)
        return _as_received(sent), None

    def close(self) -> list[bytes]:
        """The last bytes for the client, ``[DONE]`` included,
        once the stream's end is checked."""
        try:
            said_done = self._reader.close()
            if not self._core.finished:
                self._core.checked_terminal(said_done)  # raises: no terminal frame
        except ResponseError as exc:
            return [error_event(exc) + SSE_DONE]
        return [SSE_DONE]

    def _answer_error(self, *, unparsed: bool) -> ResponseError | None:
        """The fault aggregation's final checks find in the answer, before its terminal
        frame goes out; None for an abort with a status, which SGLang streams as a
        frame, as the relay does.

        With `unparsed` (frames went out unparsed), an incremental stream's counts
        go unchecked: its deltas were not all read.
        """
        core = self._core
        try:
            if unparsed and core.incremental:
                core.terminal_frame(said_done=False)
            else:
                core.checked_terminal(said_done=False)
        except EngineError:
            return None
        except ResponseError as exc:
            return exc
        return None

    def _ending(self, out: bytes, error: ResponseError | None) -> list[bytes]:
        """`out` as the chunk's one piece, if any; after a fault, ending with the error
        frame and ``[DONE]`` (`ended` then)."""
        if error is None:
            return [out] if out else []
        self.ended = True
        return [out + error_event(error) + SSE_DONE]

    def _sends_as_received(self) -> bool:
        mode = self._core.incremental
        return mode is None or mode is self._client

    def _output(self, payloads: list[Payload], kept: dict[str, Any] | None) -> bytes:
        """The client's bytes for frames that passed every check (`kept`: the last one's
        keys, if the core kept them)."""
        if not payloads:
            return b""
        if self._buffers is not None and self._core.incremental:  # to cumulative
            fields = frame_fields(payloads[-1]) if kept is None else kept
            if fields is None:
                return b""
            kept_json = self._buffers.values()
            return b"".join(splice(fields, kept_json, b"data: ", b"\n\n", owned=True))
        if self._sends_as_received():
            if self._core.incremental is None:  # kept in case a cut follows
                self._last = payloads[-1]
            return _as_received(payloads)
        fields = frame_fields(payloads[-1])
        if fields is None:
            return b""
        # To incremental: the frame SGLang would send after the last one sent.
        if self._last is not None:  # sent as received: what a cumulative reading sent
            last = frame_fields(self._last)
            self._sent = {} if last is None else cut_deltas(last, {}, {})
            self._last = None
        values: dict[str, list[BytesLike]] = {}
        sent = cut_deltas(fields, self._sent, values)
        out = b"".join(splice(fields, values, b"data: ", b"\n\n"))
        self._sent = sent  # the next delta starts here
        return out


class ChoicesRelay:
    """The sans-I/O relay of `choices` sequences: feed engine bytes, get client bytes."""

    __slots__ = ("_choices", "_finished", "_make", "_reader", "_relays", "ended")

    def __init__(
        self,
        what: str,
        choices: int,
        make: Callable[[], _Relay],
        max_bytes: int,
        max_event_bytes: int,
    ) -> None:
        self._choices = check_choices(choices)
        self._make = make  # a new single-sequence relay, in the client's mode
        self._reader = SseBytes(what, max_bytes, max_event_bytes)
        self._relays: dict[int, _Relay] = {}
        self._finished: set[int] = set()  # the indices whose terminal frame went out
        self.ended = False

    def feed(self, chunk: BytesLike) -> list[bytes]:
        """The client's bytes for the frames `chunk` completed (none, or one piece);
        after a fault, the error frame and ``[DONE]`` end them and `ended` is true."""
        chunk, limit_error = self._reader.bounded(chunk)
        decoder = self._reader.decoder
        out: list[bytes] = []
        try:
            for payload in decoder.feed_payloads(chunk):
                if self._frame(decode_frame(payload), out):
                    self.ended = True
                    return [b"".join(out)]
            decoder.raise_pending()
        except ResponseError as exc:
            return self._fail(out, exc)
        if limit_error is not None:
            return self._fail(out, limit_error)
        return [b"".join(out)] if out else []

    def close(self) -> list[bytes]:
        """The last bytes: ``[DONE]``, or the error frame and ``[DONE]`` when the stream
        ended inside an event or before every sequence's terminal frame."""
        try:
            self._reader.close()
            if len(self._finished) < self._choices:
                missing = next(
                    k for k in range(len(self._finished) + 1) if k not in self._finished
                )
                end = "said data: [DONE]" if self._reader.decoder.done else "ended"
                seen = (
                    "its terminal frame" if missing in self._relays else "any frame of it"
                )
                raise ResponseError(f"index {missing}: the stream {end} before {seen}")
        except ResponseError as exc:
            return [error_event(exc) + SSE_DONE]
        return [SSE_DONE]

    def _frame(self, frame: dict[str, Any], out: list[bytes]) -> bool:
        """Relay one frame through its index's relay into `out`; True if that relay
        ended the stream (its error frame and ``[DONE]`` are then in `out`)."""
        index = choice_index(frame, self._choices)
        relay = self._relays.get(index)
        if relay is None:
            relay = self._make()
        self._relays[index] = relay
        rest = dict(frame)
        del rest["index"]
        sent = b"".join(relay.feed(encode_sse(rest)))
        events = sent.split(b"\n\n")[:-1]  # a relay writes each event on one line
        if relay.ended:  # its last two: the error frame and [DONE]
            out += [indexed_event(event[6:], index) for event in events[:-2]]
            out += [_naming(events[-2], index), SSE_DONE]
            return True
        out += [indexed_event(event[6:], index) for event in events]
        meta = rest.get("meta_info")
        if type(meta) is dict and meta.get("finish_reason") is not None:
            self._finished.add(index)
        return False

    def _fail(self, out: list[bytes], error: ResponseError) -> list[bytes]:
        self.ended = True
        return [b"".join(out) + error_event(error) + SSE_DONE]


def _naming(event: bytes, index: int) -> bytes:
    """The error frame a sequence's relay ended with, its message naming the sequence
    when the fault is the library's finding (``response_error``); SGLang's own error
    frames go out as SGLang wrote them."""
    error = decode_frame(event[len(b"data: ") :]).get("error")
    if type(error) is dict and error.get("type") == "response_error":
        return error_event(ResponseError(f"index {index}: {error.get('message')}"))
    return event + b"\n\n"


def _as_received(payloads: Sequence[Payload]) -> bytes:
    """Events as SGLang frames them, each event's data unchanged."""
    if not payloads:
        return b""
    parts: list[Any] = [b"\n\ndata: "] * (2 * len(payloads) + 1)  # one join: one copy
    parts[1::2] = payloads
    if bytearray in set(map(type, payloads)):  # rare: an event of several data lines
        parts[1::2] = [one_line(payload) for payload in payloads]
    parts[0] = b"data: "
    parts[-1] = b"\n\n"
    return b"".join(parts)
