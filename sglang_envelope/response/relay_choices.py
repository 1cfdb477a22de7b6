"""The relay of SGLang's stream of many sequences (a batch, or n > 1; see `choices`).

Every frame is read and goes, without its ``index``, to its index's own
single-sequence relay (`relay._Relay`, made at the index's first frame), which
checks it and converts it to the client's stream mode as it does for one
sequence; each frame that relay writes goes out with ``"index": k`` added as
its last key, as SGLang writes it. One ``[DONE]`` ends the stream, once every
sequence's terminal frame has gone out; a fault ends it with SGLang's error
frame and ``[DONE]``, as the single relay does. Nothing passes unparsed here:
a frame's index is inside its JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from sglang_envelope.errors.answers import error_event
from sglang_envelope.errors.exceptions import ResponseError
from sglang_envelope.response.choices import check_choices, choice_index
from sglang_envelope.response.frames import decode_frame
from sglang_envelope.response.reading import SseReader
from sglang_envelope.response.sse import (
    SSE_DONE,
    BytesLike,
    Payload,
    encode_sse,
    indexed_event,
)

__all__ = ["ChoicesRelay", "OneRelay"]


class OneRelay(Protocol):
    """The single-sequence relay each index gets (`relay._Relay`)."""

    ended: bool

    def feed(self, chunk: BytesLike) -> list[bytes]: ...


class _Count:
    """The `SseReader` sink of the choices relay: nothing read, only counted."""

    __slots__ = ("frames",)

    def __init__(self) -> None:
        self.frames = 0

    def add_payloads(
        self, payloads: list[Payload], *, keep_last: bool = False
    ) -> dict[str, Any] | None:
        self.frames += len(payloads)
        return None


class ChoicesRelay:
    """The sans-I/O relay of `choices` sequences: feed engine bytes, get client bytes."""

    __slots__ = ("_choices", "_finished", "_make", "_reader", "_relays", "ended")

    def __init__(
        self,
        what: str,
        choices: int,
        make: Callable[[], OneRelay],
        max_bytes: int,
        max_event_bytes: int,
    ) -> None:
        self._choices = check_choices(choices)
        self._make = make  # a new single-sequence relay, in the client's mode
        self._reader = SseReader(what, _Count(), max_bytes, max_event_bytes)
        self._relays: dict[int, OneRelay] = {}
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
