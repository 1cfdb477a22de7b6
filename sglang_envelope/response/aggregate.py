"""Turn SGLang's /generate answer, streamed or not, into the final response.

A stream is read by the stream core (`core`: mode detection, checks, a typed
view for each middle frame) with its deltas kept as Python objects
(`stores.DeltaStore`): `StreamAggregator` for frames the caller decoded,
`aggregate_sse` for raw SSE bytes. `aggregate_sse_bytes` keeps them as JSON
text instead (`stores.JsonStore`, `answer_bytes`). `parse_unary` reads a
non-streaming body. Each asyncio reader feeds the same core as its
synchronous twin, so both give the same answer and the same verdicts; the
caller's iterator is closed whenever reading stops (`sources`).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from typing import Any, cast, overload

import msgspec

from sglang_envelope.errors.exceptions import (
    EngineError,
    EnvelopeError,
    ResponseError,
    show_value,
)
from sglang_envelope.response.choices import (
    ChoicesAggregator,
    check_choices,
    unary_choices,
)
from sglang_envelope.response.core import (
    DEFAULT_MAX_BYTES,
    SseReader,
    StreamCore,
    answer,
    too_big,
)
from sglang_envelope.response.frames import check_unary_object, decode_json, engine_error
from sglang_envelope.response.sources import afeed_all, feed_all
from sglang_envelope.response.sse import DEFAULT_MAX_EVENT_BYTES, BytesLike, check_bound
from sglang_envelope.response.stores import DeltaStore, JsonStore, splice, written
from sglang_envelope.response.types import GenerateResponse
from sglang_envelope.response.views import DELTA_FIELDS

#: A unary answer as an in-process engine gives it: one object, or a list of them.
UnaryObject = dict[str, Any] | list[dict[str, Any]]

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DELTA_FIELDS",
    "StreamAggregator",
    "aggregate_frames",
    "aggregate_frames_async",
    "aggregate_sse",
    "aggregate_sse_async",
    "aggregate_sse_bytes",
    "aggregate_sse_bytes_async",
    "answer_bytes",
    "parse_unary",
]


class StreamAggregator:
    """Collect the frames of one streamed generation into its final response.

    `add` each frame in order (an error frame raises `EngineError`); `result`
    gives the response a non-streaming request would have received.
    `cumulative` gives the frame as SGLang's default cumulative mode would have
    sent it so far, for a frontend that reads an incremental stream but must
    give its clients SGLang's default semantics.

    ``incremental=None`` (the default) reads the mode from the frames: a frame
    whose ``meta_info.completion_tokens`` (or another count of
    `sglang_envelope.response.frames.CONSISTENCY`) fits only one reading settles it, and
    `incremental` says which once it is known. ``True`` or ``False`` forces a
    mode.

    After an exception from `add`, discard the aggregator.
    """

    __slots__ = ("_core", "_result")

    def __init__(self, *, incremental: bool | None = None) -> None:
        self._core = StreamCore(incremental, DeltaStore())
        self._result: GenerateResponse | None = None

    @property
    def incremental(self) -> bool | None:
        """Whether frames are read as incremental deltas (None while the mode is unknown).

        A forced mode is known from the start. A detected one is known from the
        first frame that fits only one reading (with SGLang's frames, the first
        frame after one that carried tokens), and stays None to the end of a
        stream that fits both readings the same way (a single frame, say).
        """
        return self._core.incremental

    @property
    def finished(self) -> bool:
        """True once the terminal frame has been added."""
        return self._core.finished

    def add(self, frame: dict[str, Any]) -> None:
        """Add the next frame; raise `EngineError` for an error frame.

        A frame after the terminal one, a frame that is not a JSON object with
        a ``meta_info`` object, a delta field of the wrong type, or, while the
        mode is being detected, a frame that fits neither mode raises
        `ResponseError`. A frame that raises adds nothing.
        """
        self._core.add(frame)

    def cumulative(self) -> dict[str, Any]:
        """The frame SGLang's cumulative mode would have sent at this point.

        In cumulative mode that is the last frame added. In incremental mode
        it is the last frame with each delta field holding all its deltas so
        far, in new lists and strings the caller may keep. While the mode is
        not known, only after the first frame (which both modes read alike).
        """
        core = self._core
        last = core.last
        if last is None:
            raise EnvelopeError("cumulative() needs at least one frame")
        if core.incremental is False:
            return last
        if core.incremental is None and core.frames > 1:
            raise EnvelopeError(
                "cumulative(): the stream mode is not known yet (no frame has told the "
                "two apart); pass incremental=True or False to StreamAggregator"
            )
        return core.store.assemble(last, copy=True)

    def result(self) -> GenerateResponse:
        """The final response; `ResponseError` if the terminal frame never came.

        An abort (``finish_reason.type == "abort"``) with a ``status_code`` in
        [400, 600) raises `EngineError`; any other abort is returned as it
        stands, without the consistency checks. A stream whose mode was never
        told apart must give the same answer read either way, or it is a
        `ResponseError`.
        """
        if self._result is None:
            self._result = answer(self._core, said_done=False)
        return self._result


@overload
def aggregate_frames(
    frames: Iterable[dict[str, Any]],
    *,
    incremental: bool | None = ...,
    choices: None = ...,
) -> GenerateResponse: ...
@overload
def aggregate_frames(
    frames: Iterable[dict[str, Any]], *, incremental: bool | None = ..., choices: int
) -> list[GenerateResponse]: ...
def aggregate_frames(
    frames: Iterable[dict[str, Any]],
    *,
    incremental: bool | None = None,
    choices: int | None = None,
) -> GenerateResponse | list[GenerateResponse]:
    """The final response of a stream's decoded frames (see `StreamAggregator`).

    ``choices=N`` reads a stream of N sequences (`ChoicesAggregator`) and
    returns their answers in index order.
    """
    sink = _sink(incremental, choices)
    feed_all(frames, "aggregate_frames frames", sink.add)
    return _answer(sink, said_done=False)


@overload
def aggregate_sse(
    chunks: Iterable[BytesLike],
    *,
    incremental: bool | None = ...,
    max_bytes: int = ...,
    max_event_bytes: int = ...,
    choices: None = ...,
) -> GenerateResponse: ...
@overload
def aggregate_sse(
    chunks: Iterable[BytesLike],
    *,
    incremental: bool | None = ...,
    max_bytes: int = ...,
    max_event_bytes: int = ...,
    choices: int,
) -> list[GenerateResponse]: ...
def aggregate_sse(
    chunks: Iterable[BytesLike],
    *,
    incremental: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    choices: int | None = None,
) -> GenerateResponse | list[GenerateResponse]:
    """The final response of a raw SSE stream, read chunk by chunk.

    The stream mode is detected unless `incremental` forces it (see
    `StreamAggregator`). `LimitExceeded` when the stream passes `max_bytes` or
    one event passes `max_event_bytes`, raised before the excess is parsed.
    `ResponseError` when the stream ends inside an event, ends or says
    ``[DONE]`` without a terminal frame, or sends anything after its terminal
    frame or ``[DONE]``. The first fault in the stream is the one raised,
    whatever the chunking, and the verdict is the one `SseDecoder.feed` and
    `StreamAggregator.add` give on the same bytes. A generator of chunks is
    closed when reading stops, on a fault as at the end.

    ``choices=N`` reads SGLang's stream of N sequences (a batch, or n > 1):
    the answers in index order, each as `ChoicesAggregator` reads it.
    """
    sink = _sink(incremental, choices)
    reader = SseReader("aggregate_sse", sink, max_bytes, max_event_bytes)
    feed_all(chunks, "aggregate_sse chunks", reader.feed)
    return _answer(sink, said_done=reader.close())


@overload
async def aggregate_sse_async(
    chunks: AsyncIterable[BytesLike],
    *,
    incremental: bool | None = ...,
    max_bytes: int = ...,
    max_event_bytes: int = ...,
    choices: None = ...,
) -> GenerateResponse: ...
@overload
async def aggregate_sse_async(
    chunks: AsyncIterable[BytesLike],
    *,
    incremental: bool | None = ...,
    max_bytes: int = ...,
    max_event_bytes: int = ...,
    choices: int,
) -> list[GenerateResponse]: ...
async def aggregate_sse_async(
    chunks: AsyncIterable[BytesLike],
    *,
    incremental: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    choices: int | None = None,
) -> GenerateResponse | list[GenerateResponse]:
    """`aggregate_sse` for an async iterable of chunks: same answer, same errors."""
    sink = _sink(incremental, choices)
    reader = SseReader("aggregate_sse_async", sink, max_bytes, max_event_bytes)
    await afeed_all(chunks, "aggregate_sse_async chunks", reader.feed)
    return _answer(sink, said_done=reader.close())


@overload
async def aggregate_frames_async(
    frames: AsyncIterable[dict[str, Any]],
    *,
    incremental: bool | None = ...,
    choices: None = ...,
) -> GenerateResponse: ...
@overload
async def aggregate_frames_async(
    frames: AsyncIterable[dict[str, Any]], *, incremental: bool | None = ..., choices: int
) -> list[GenerateResponse]: ...
async def aggregate_frames_async(
    frames: AsyncIterable[dict[str, Any]],
    *,
    incremental: bool | None = None,
    choices: int | None = None,
) -> GenerateResponse | list[GenerateResponse]:
    """`aggregate_frames` for an async iterable of frames as an in-process SGLang engine
    yields them (``tokenizer_manager.generate_request``): same answer, same errors."""
    sink = _sink(incremental, choices)
    await afeed_all(frames, "aggregate_frames_async frames", sink.add)
    return _answer(sink, said_done=False)


def _sink(
    incremental: bool | None, choices: int | None
) -> StreamCore[DeltaStore] | ChoicesAggregator:
    """What a stream's frames are added to: one sequence's core, or `choices`'."""
    if choices is None:
        return StreamCore(incremental, DeltaStore())
    return ChoicesAggregator(choices, incremental=incremental)


def _answer(
    sink: StreamCore[DeltaStore] | ChoicesAggregator, *, said_done: bool
) -> GenerateResponse | list[GenerateResponse]:
    """The answer of the frames added to `sink` (`_sink`)."""
    if isinstance(sink, ChoicesAggregator):
        return sink.result(said_done=said_done)
    return answer(sink, said_done=said_done)


def answer_bytes(core: StreamCore[JsonStore], *, said_done: bool) -> bytes:
    """The answer's JSON, written piece by piece as the store lets go of each piece.

    Raises what `StreamAggregator.result` raises: no terminal frame, an abort
    with a status (`EngineError`), two readings that differ, counts that do
    not match.
    """
    terminal = core.checked_terminal(said_done)
    if core.incremental is False:
        return msgspec.json.encode(terminal)
    values = core.store.take_values()  # the pieces now live only in `values`
    parts = splice(terminal, values, b"", b"")
    values.clear()  # and now only in `parts`
    return written(parts)


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
    core = StreamCore(incremental, JsonStore())
    reader = SseReader("aggregate_sse_bytes", core, max_bytes, max_event_bytes)
    feed_all(chunks, "aggregate_sse_bytes chunks", reader.feed)
    return answer_bytes(core, said_done=reader.close())


async def aggregate_sse_bytes_async(
    chunks: AsyncIterable[BytesLike],
    *,
    incremental: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> bytes:
    """`aggregate_sse_bytes` for an async iterable of chunks."""
    core = StreamCore(incremental, JsonStore())
    reader = SseReader("aggregate_sse_bytes_async", core, max_bytes, max_event_bytes)
    await afeed_all(chunks, "aggregate_sse_bytes_async chunks", reader.feed)
    return answer_bytes(core, said_done=reader.close())


@overload
def parse_unary(
    body: BytesLike | UnaryObject,
    *,
    status: int = ...,
    max_bytes: int = ...,
    choices: None = ...,
) -> GenerateResponse: ...
@overload
def parse_unary(
    body: BytesLike | UnaryObject,
    *,
    status: int = ...,
    max_bytes: int = ...,
    choices: int,
) -> list[GenerateResponse]: ...
def parse_unary(
    body: BytesLike | UnaryObject,
    *,
    status: int = 200,
    max_bytes: int = DEFAULT_MAX_BYTES,
    choices: int | None = None,
) -> GenerateResponse | list[GenerateResponse]:
    """The response of a non-streaming /generate, returned as sent.

    `body` is the answer's bytes, or the object (a dict; a list for many
    sequences) an in-process engine's ``generate_request`` gives for a unary
    request, read with the same checks; `max_bytes` bounds bytes only.

    `status` is the HTTP status SGLang answered with. An SGLang error body
    raises `EngineError` whose `code` is `status` when that is an error status
    (>= 400; SGLang's unary error body carries none), else the body's own
    ``code``; a body that is not one under an error status raises
    `ResponseError`. A JSON array (SGLang's answer to a batch, n > 1 included)
    or any value but an object with a ``meta_info`` object raises
    `ResponseError`; a body over `max_bytes` raises `LimitExceeded` before it
    is parsed.

    ``choices=N`` reads the answer of N sequences: a JSON array of exactly N
    objects, each checked as one generation's (`ResponseError` naming ``[k]``).
    """
    check_bound("max_bytes", max_bytes)
    if choices is not None:
        check_choices(choices)
    if type(status) is not int or not 100 <= status < 600:
        shown = show_value(status)
        raise EnvelopeError(f"status: expected an HTTP status in [100, 600), got {shown}")
    if type(body) is dict or type(body) is list:  # as an in-process engine gives it
        response: Any = body
    else:
        if isinstance(body, (bytearray, memoryview)):
            body = bytes(body)
        elif not isinstance(body, bytes):
            kind = type(body).__name__
            raise EnvelopeError(f"parse_unary body: expected bytes, got {kind}")
        if len(body) > max_bytes:
            raise too_big(max_bytes, "the response body")
        response = decode_json(body, "the response body")
    error = engine_error(response) if type(response) is dict else None
    if error is not None:
        raise EngineError(error.message, status) if status >= 400 else error
    if status >= 400:
        raise ResponseError(
            f"the response has HTTP status {status} but no SGLang error body"
        )
    if choices is not None:
        return unary_choices(response, choices)
    if type(response) is list:
        raise ResponseError(
            "the response body is a JSON array, SGLang's answer to a batch or n > 1 "
            f"({len(response)} sequences); expected the object of one generation: pass "
            f"choices={len(response)} to read it"
        )
    check_unary_object(response, "the response body")
    return cast(GenerateResponse, response)
