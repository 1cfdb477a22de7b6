"""A stream's SSE bytes, read within their bounds into its stream core (`core`).

`SseReader` counts each chunk against ``max_bytes``, decodes its events
(`SseDecoder`) and adds their frames to the core, in order, so that the first
fault in the stream is the one raised, whatever the chunking.
"""

from __future__ import annotations

from typing import Any, Final, Protocol, TypeAlias

from sglang_envelope.errors.exceptions import (
    EnvelopeError,
    LimitExceeded,
    ResponseError,
)
from sglang_envelope.response.sse import (
    BytesLike,
    Payload,
    SseDecoder,
    check_bound,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "Admitted",
    "FrameSink",
    "SseReader",
    "too_big",
]

DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
"""The default bound on a whole stream or body: 64 MiB."""

#: What `SseReader.admit` read: the data of the events admitted, in order, the fault
#: that stopped it (None), and the kept keys of the last frame (`keep_last`).
Admitted: TypeAlias = tuple[list[Payload], ResponseError | None, dict[str, Any] | None]


class FrameSink(Protocol):
    """What `SseReader` reads into: a stream core (`core.StreamCore`), or the cores of a
    stream of many sequences (`choices.ChoicesAggregator`)."""

    @property
    def frames(self) -> int: ...

    def add_payloads(
        self, payloads: list[Payload], *, keep_last: bool = False
    ) -> dict[str, Any] | None: ...


class SseReader:
    """A stream's SSE bytes read within `max_bytes` into its `core`: feed, then close.

    `decoder` is the stream's `SseDecoder`, for a relay that reads events
    itself; every event it reads must then go to `core` or be counted.
    """

    __slots__ = ("_max_bytes", "_seen", "_what", "core", "decoder")

    def __init__(
        self, what: str, core: FrameSink, max_bytes: int, max_event_bytes: int
    ) -> None:
        check_bound("max_bytes", max_bytes)
        self.decoder = SseDecoder(max_event_bytes=max_event_bytes)
        self.core = core
        self._max_bytes = max_bytes
        self._seen = 0
        self._what = what

    def feed(self, chunk: BytesLike) -> None:
        """Read the next chunk; bytes past `max_bytes` raise `LimitExceeded` unread."""
        chunk, limit_error = self.bounded(chunk)
        # The bytes within the bound still count, so that the first fault in the
        # stream is the one raised, however it was cut into chunks.
        error = self.admit(chunk)[1] or limit_error
        if error is not None:
            raise error

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

    def close(self) -> bool:
        """Check the stream ended between events; return whether it said ``[DONE]``."""
        self.decoder.close()
        return self.decoder.done


def too_big(limit: int, what: str) -> LimitExceeded:
    """The `LimitExceeded` for `what` past `max_bytes`."""
    return LimitExceeded(
        "max_bytes", limit, f"{what} is larger than max_bytes ({limit} bytes)"
    )
