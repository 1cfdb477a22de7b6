"""Relay an in-process SGLang engine's output objects to a streaming client, checked,
in the client's mode (docs/in-process.md); `relay` does the same for SSE bytes.

The engine (``tokenizer_manager.generate_request``) yields Python dicts in its
stream mode. Each is read by the stream core (`core.StreamCore`) as
`aggregate_frames` reads it, and goes out once admitted, the terminal frame
once the answer's final checks pass: in the engine's mode as it came (also
while the mode is not known: the first frame reads alike both ways), to a
cumulative client with every delta so far (`StreamAggregator.cumulative`'s
reading), to an incremental client cut to what it lacks, as SGLang cuts it
(``tokenizer_manager._slice_streaming_output_meta_info``). A failure ends the
frames with SGLang's error object (`error_frame`), never an exception.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

from sglang_envelope.errors.answers import error_frame
from sglang_envelope.errors.exceptions import EngineError, ResponseError
from sglang_envelope.response.core import StreamCore, check_modes
from sglang_envelope.response.sources import (
    open_async_source,
    open_source,
    relay_chunks,
    relay_chunks_async,
)
from sglang_envelope.response.stores import DeltaStore
from sglang_envelope.response.views import COUNTED_BY, DELTA_ROWS, own_length

__all__ = ["FrameRelay", "relay_frames", "relay_frames_async"]


class FrameRelay:
    """The sans-I/O relay of output objects: `feed` one engine frame, get the client's
    frames for it (none, one, or one and SGLang's error object); `close` at the end.

    After a failure `ended` is true and the last frame given was the error
    object: feed nothing more.
    """

    __slots__ = ("_client", "_core", "_sent", "ended")

    def __init__(self, *, incremental: bool | None, client_incremental: bool) -> None:
        check_modes(incremental, client_incremental)
        self._core = StreamCore(incremental, DeltaStore())
        self._client = client_incremental
        #: Per delta path, the entries (characters of the text) the client has of it.
        self._sent: dict[str, int] = {}
        self.ended = False

    def feed(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        """The client's frames for the engine's next `frame`."""
        core = self._core
        try:
            core.add(frame)
            if core.finished:
                core.checked_terminal(said_done=False)
        except EngineError as exc:
            if not core.finished:  # else an abort with a status, streamed as a frame
                return self._failed(exc)
        except ResponseError as exc:
            return self._failed(exc)
        return [self._shaped(frame)]

    def close(self) -> list[dict[str, Any]]:
        """SGLang's error object when the engine's frames ended without a terminal
        frame; nothing else."""
        if self.ended or self._core.finished:
            return []
        try:
            self._core.checked_terminal(said_done=False)
        except ResponseError as exc:
            return self._failed(exc)
        return []  # pragma: no cover - checked_terminal raises without a terminal frame

    def _failed(self, exc: ResponseError) -> list[dict[str, Any]]:
        self.ended = True
        return [error_frame(exc)]

    def _shaped(self, frame: dict[str, Any]) -> dict[str, Any]:
        """`frame` in the client's mode."""
        mode = self._core.incremental
        if mode:  # an incremental engine: the lists it yields are the frame's own
            return frame if self._client else self._core.store.assemble(frame, copy=True)
        # A cumulative engine's frame, or one that reads alike both ways.
        if mode is False and self._client:
            return self._cut(frame)
        frame = _as_of_its_counts(frame)
        if mode is None and self._client:  # a cut may follow, if the engine is cumulative
            self._count_sent(frame)
        return frame

    def _cut(self, frame: dict[str, Any]) -> dict[str, Any]:
        """A cumulative `frame` with each delta field cut to what was not sent yet, of
        the entries its counts say are its own."""
        out = dict(frame)
        meta = out["meta_info"] = dict(frame["meta_info"])
        for path, key, in_meta, _ in DELTA_ROWS:
            holder = meta if in_meta else out
            if key in holder:
                value = holder[key]
                sent = self._sent.get(path, 0)
                count = meta.get(COUNTED_BY.get(path, ""))  # the text has none
                holder[key] = value[sent : own_length(count, len(value))]
                self._sent[path] = sent + len(holder[key])
        return out

    def _count_sent(self, frame: dict[str, Any]) -> None:
        """Count what a frame sent as it came gives an incremental client: its deltas
        (the first frame of a stream whose mode is not known reads alike both ways)."""
        meta = frame["meta_info"]
        for path, key, in_meta, _ in DELTA_ROWS:
            value = (meta if in_meta else frame).get(key)
            if value is not None:
                self._sent[path] = self._sent.get(path, 0) + len(value)


def _as_of_its_counts(frame: dict[str, Any]) -> dict[str, Any]:
    """A cumulative middle frame with copies of its lists of `COUNTED_BY`, of their own
    entries (`own_length`): SGLang hands them over as the request's growing lists, which
    later tokens extend after the frame was yielded, and the frame must say what it said
    when read later. The terminal frame (SGLang's carries copies) and a frame without
    such lists as they are."""
    meta = frame["meta_info"]
    if meta.get("finish_reason") is not None:
        return frame
    out: dict[str, Any] | None = None
    for path, key, in_meta, _ in DELTA_ROWS:
        value = (meta if in_meta else frame).get(key)
        if path in COUNTED_BY and type(value) is list:
            if out is None:
                out = {**frame, "meta_info": dict(meta)}
            own = value[: own_length(meta.get(COUNTED_BY[path]), len(value))]
            (out["meta_info"] if in_meta else out)[key] = own
    return frame if out is None else out


def relay_frames(
    frames: Iterable[dict[str, Any]],
    *,
    incremental: bool | None = None,
    client_incremental: bool = False,
) -> Iterator[dict[str, Any]]:
    """The client's frames, in its mode, for the engine's output objects (`FrameRelay`).

    `incremental` is the engine's mode (None: detected from the frames),
    `client_incremental` the client's (False: SGLang's default, cumulative).
    The arguments are checked at the call; the frames as they are read, and the
    iterator they came from is closed when the relay stops.
    """
    relay = FrameRelay(incremental=incremental, client_incremental=client_incremental)
    return relay_chunks(relay, open_source(frames, "relay_frames frames"))


def relay_frames_async(
    frames: AsyncIterable[dict[str, Any]],
    *,
    incremental: bool | None = None,
    client_incremental: bool = False,
) -> AsyncIterator[dict[str, Any]]:
    """`relay_frames` for an async iterable of output objects: an in-process engine's
    ``generate_request``."""
    relay = FrameRelay(incremental=incremental, client_incremental=client_incremental)
    frames_read = open_async_source(frames, "relay_frames_async frames")
    return relay_chunks_async(relay, frames_read)
