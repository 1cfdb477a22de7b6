"""Turn SGLang's /generate answer, streamed or not, into the final response.

SGLang streams in one of two modes (``srt/managers/tokenizer_manager.py``):

* cumulative, its default: every frame holds everything so far, so the
  terminal frame is the answer;
* incremental (server flag ``incremental_streaming_output``, which Dynamo
  requires): the fields in `DELTA_FIELDS` hold only what is new and are
  concatenated; every other field is the last frame's.

The terminal frame is the one whose ``meta_info.finish_reason`` is not null.
`aggregate_sse` decodes in full only what the answer needs: the delta fields
of each intermediate frame in incremental mode (a typed view skips the rest
without building it), nothing but the finish reason of intermediate frames in
cumulative mode, and the terminal frame.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

import msgspec
from msgspec import UNSET, UnsetType

from sglang_envelope._errors import EnvelopeError, LimitExceeded, ResponseError, show_value
from sglang_envelope._frame import (
    abort_error,
    check_consistency,
    decode_json,
    engine_error,
    expected,
)
from sglang_envelope._sse import DEFAULT_MAX_EVENT_BYTES, BytesLike, Payload, SseDecoder

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_EVENT_BYTES",
    "DELTA_FIELDS",
    "StreamAggregator",
    "aggregate_frames",
    "aggregate_sse",
    "parse_unary",
]

DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
"""The default bound on a whole stream or body: 64 MiB."""

DELTA_FIELDS: Final[tuple[tuple[str, type], ...]] = (
    ("text", str),
    ("output_ids", list),
    ("meta_info.output_token_logprobs", list),
    ("meta_info.output_top_logprobs", list),
    ("meta_info.output_token_ids_logprobs", list),
    ("meta_info.output_token_sampling_mask", list),
    ("meta_info.output_token_sampling_logprobs", list),
)
"""The fields an incremental stream sends as deltas, with their JSON type.

Aggregation concatenates these in frame order; a field that any frame carries
is in the result. Every other field, including the ``input_*`` keys,
``output_token_logprobs_length``, ``completion_tokens``, ``finish_reason`` and
unknown keys, takes the terminal frame's value. This mirrors SGLang's
``_INCREMENTAL_STREAMING_META_INFO_KEYS`` and its ``text``/``output_ids``
deltas, and the way its ``_coalesce_streaming_chunks`` merges queued chunks.
"""

# (dotted path, key in its parent, parent is meta_info, JSON type)
_ROWS: Final = tuple(
    (path, path.rpartition(".")[2], "." in path, kind) for path, kind in DELTA_FIELDS
)
_TYPE_NAMES: Final[dict[type, str]] = {str: "a string", list: "an array"}


# Typed views of an intermediate frame, built from DELTA_FIELDS: only the
# fields aggregation reads. msgspec skips every other field without building
# it. A frame a view cannot read (an error, a wrong type) is decoded in full,
# so the full path gives the answer or the message. gc=False: views are
# transient and hold no cycles.
def _view(name: str, fields: list[tuple[str, Any, Any]]) -> Any:
    return msgspec.defstruct(name, fields, gc=False)


def _delta_fields(in_meta: bool) -> list[tuple[str, Any, Any]]:
    return [
        (key, (str if kind is str else list[Any]) | UnsetType, UNSET)
        for _, key, meta, kind in _ROWS
        if meta is in_meta
    ]


_FINISH: Final = ("finish_reason", dict[str, Any] | None, None)
_COMMON: Final = [("error", Any, None), ("object", Any, None), ("index", Any, UNSET)]
_IncrementalMeta = _view("_IncrementalMeta", [_FINISH, *_delta_fields(True)])
_IncrementalFrame = _view(
    "_IncrementalFrame",
    [*_COMMON, ("meta_info", _IncrementalMeta | UnsetType, UNSET), *_delta_fields(False)],
)
_CumulativeMeta = _view("_CumulativeMeta", [_FINISH])
_CumulativeFrame = _view(
    "_CumulativeFrame", [*_COMMON, ("meta_info", _CumulativeMeta | UnsetType, UNSET)]
)
_VIEW_DECODERS: Final = {
    True: msgspec.json.Decoder(_IncrementalFrame),
    False: msgspec.json.Decoder(_CumulativeFrame),
}


class StreamAggregator:
    """Collect the frames of one streamed generation into its final response.

    `add` each frame in order (an error frame raises `EngineError`); `result`
    gives the response a non-streaming request would have received.
    `cumulative` gives the frame as SGLang's default cumulative mode would have
    sent it so far, for a frontend that reads an incremental stream but must
    give its clients SGLang's default semantics.

    After an exception from `add`, discard the aggregator.
    """

    __slots__ = (
        "_count",
        "_incremental",
        "_index",
        "_last",
        "_pieces",
        "_present",
        "_result",
        "_terminal",
    )

    def __init__(self, *, incremental: bool = True) -> None:
        self._incremental = bool(incremental)  # a key of _VIEW_DECODERS
        self._count = 0  # frames added
        self._index: Any = UNSET  # the first frame's "index" (UNSET when it has none)
        self._last: dict[str, Any] | None = None
        self._terminal: dict[str, Any] | None = None
        self._result: dict[str, Any] | None = None
        # Per DELTA_FIELDS path: its pieces (text) or items so far, and whether any frame had it.
        self._pieces: dict[str, list[Any]] = {path: [] for path, _ in DELTA_FIELDS}
        self._present: set[str] = set()

    @property
    def incremental(self) -> bool:
        """Whether frames are read as incremental deltas."""
        return self._incremental

    @property
    def finished(self) -> bool:
        """True once the terminal frame has been added."""
        return self._terminal is not None

    def add(self, frame: dict[str, Any]) -> None:
        """Add the next frame; raise `EngineError` for an error frame.

        A frame after the terminal one, a frame that is not a JSON object with
        a ``meta_info`` object, or a delta field of the wrong type raises
        `ResponseError`.
        """
        number = self._count + 1
        try:
            if type(frame) is not dict:
                raise expected("frame", "an object", frame)
            meta = self._admit(frame, number)
            if self._incremental:
                self._collect(frame, meta)
        except ResponseError as exc:
            if type(exc) is ResponseError:
                raise ResponseError(f"frame {number}: {exc}") from exc
            raise
        self._count = number
        self._last = frame
        if meta.get("finish_reason") is not None:
            self._terminal = frame

    def cumulative(self) -> dict[str, Any]:
        """The frame SGLang's cumulative mode would have sent at this point.

        In cumulative mode that is the last frame added. In incremental mode
        it is the last frame with each delta field holding all its deltas so
        far, in new lists and strings the caller may keep.
        """
        if self._last is None:
            raise EnvelopeError("cumulative() needs at least one frame")
        if not self._incremental:
            return self._last
        return self._assemble(self._last, copy=True)

    def result(self) -> dict[str, Any]:
        """The final response; `ResponseError` if the terminal frame never came.

        An abort (``finish_reason.type == "abort"``) with a ``status_code`` in
        [400, 600) raises `EngineError`; any other abort is returned as it
        stands, without the consistency checks.
        """
        return self._finish(said_done=False)

    def _admit(self, frame: dict[str, Any], number: int) -> dict[str, Any]:
        """Check that a frame may come next; return its meta_info."""
        if self._terminal is not None:
            raise ResponseError(f"it came after the terminal frame (frame {self._count})")
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
        elif not _same(index, self._index):
            raise ResponseError(
                f"its index {show_value(index)} differs from the first frame's "
                f"{show_value(self._index)}: "
                "the stream interleaves several generations (n > 1); aggregate one at a time"
            )
        return meta

    def _collect(self, frame: dict[str, Any], meta: dict[str, Any]) -> None:
        """Check the types of a frame's delta fields, then append them."""
        found: list[tuple[str, Any]] = []
        for path, key, in_meta, kind in _ROWS:
            value = (meta if in_meta else frame).get(key, UNSET)
            if value is UNSET:
                continue
            if type(value) is not kind:
                raise expected(path, _TYPE_NAMES[kind], value)
            found.append((path, value))
        for path, value in found:
            self._present.add(path)
            if type(value) is str:
                self._pieces[path].append(value)
            else:
                self._pieces[path].extend(value)

    def _add_payloads(self, payloads: list[Payload]) -> None:
        """`add` for frames still in JSON, decoding in each only what aggregation reads."""
        decode = _VIEW_DECODERS[self._incremental].decode
        incremental = self._incremental
        pieces = self._pieces
        # The straight-line reads below cost a quarter of a loop over
        # DELTA_FIELDS; _FAST_PATHS (checked against the table at import) lists them.
        text = pieces["text"]
        text_start = len(text)
        add_text = text.append
        add_ids = pieces["output_ids"].extend
        add_token = pieces["meta_info.output_token_logprobs"].extend
        add_top = pieces["meta_info.output_top_logprobs"].extend
        add_ids_lp = pieces["meta_info.output_token_ids_logprobs"].extend
        add_mask = pieces["meta_info.output_token_sampling_mask"].extend
        add_mask_lp = pieces["meta_info.output_token_sampling_logprobs"].extend
        seen = [False] * 7
        for payload in payloads:
            try:
                frame: Any = decode(payload)
            except (msgspec.DecodeError, RecursionError):
                frame = None
            if (
                frame is None
                or frame.error is not None
                or frame.object is not None
                or frame.meta_info is UNSET
                or frame.meta_info.finish_reason is not None
                or not (frame.index is self._index or _same(frame.index, self._index))
                or self._count == 0
                or self._terminal is not None
            ):
                # The first frame, the terminal one, errors and oddities take the full path.
                self.add(decode_json(payload, f"frame {self._count + 1}"))
                continue
            self._count += 1
            if not incremental:
                continue
            meta = frame.meta_info
            if (value := frame.text) is not UNSET:
                add_text(value)
                seen[0] = True
            if (value := frame.output_ids) is not UNSET:
                add_ids(value)
                seen[1] = True
            if (value := meta.output_token_logprobs) is not UNSET:
                add_token(value)
                seen[2] = True
            if (value := meta.output_top_logprobs) is not UNSET:
                add_top(value)
                seen[3] = True
            if (value := meta.output_token_ids_logprobs) is not UNSET:
                add_ids_lp(value)
                seen[4] = True
            if (value := meta.output_token_sampling_mask) is not UNSET:
                add_mask(value)
                seen[5] = True
            if (value := meta.output_token_sampling_logprobs) is not UNSET:
                add_mask_lp(value)
                seen[6] = True
        self._present.update(
            path for path, was_seen in zip(_FAST_PATHS, seen, strict=True) if was_seen
        )
        if len(text) - text_start > 1:  # one string per chunk: the pieces are freed as we go
            text[text_start:] = ["".join(text[text_start:])]

    def _assemble(self, last: dict[str, Any], *, copy: bool) -> dict[str, Any]:
        """`last` with every delta field holding its concatenation."""
        response = dict(last)
        meta = dict(last["meta_info"])
        for path, key, in_meta, _ in _ROWS:
            if path not in self._present:
                continue
            pieces = self._pieces[path]
            if path == "text":  # the one string field
                value: Any = "".join(pieces)
                if copy:
                    pieces[:] = [value]  # join each piece once, however often this is called
            else:
                value = pieces.copy() if copy else pieces
            (meta if in_meta else response)[key] = value
        response["meta_info"] = meta
        return response

    def _finish(self, *, said_done: bool) -> dict[str, Any]:
        if self._result is not None:
            return self._result
        terminal = self._terminal
        if terminal is None:
            end = "said data: [DONE]" if said_done else "ended"
            if self._count == 0:
                raise ResponseError(f"the stream {end} before any frame")
            raise ResponseError(
                f"the stream {end} after {self._count} frames without a terminal frame "
                "(one whose meta_info.finish_reason is not null)"
            )
        response = self._assemble(terminal, copy=False) if self._incremental else terminal
        meta = response["meta_info"]
        finish = meta["finish_reason"]
        if finish.get("type") == "abort":
            error = abort_error(finish)
            if error is not None:
                raise error
        else:
            check_consistency(response, meta)
        self._result = response
        return response


# The paths StreamAggregator._add_payloads reads, in its order.
_FAST_PATHS: Final = (
    "text",
    "output_ids",
    "meta_info.output_token_logprobs",
    "meta_info.output_top_logprobs",
    "meta_info.output_token_ids_logprobs",
    "meta_info.output_token_sampling_mask",
    "meta_info.output_token_sampling_logprobs",
)
if tuple(path for path, _ in DELTA_FIELDS) != _FAST_PATHS:  # pragma: no cover
    raise AssertionError("StreamAggregator._add_payloads must read exactly DELTA_FIELDS")


def aggregate_frames(
    frames: Iterable[dict[str, Any]], *, incremental: bool = True
) -> dict[str, Any]:
    """The final response of a stream's decoded frames (see `StreamAggregator`)."""
    aggregator = StreamAggregator(incremental=incremental)
    for frame in _iterate(frames, "aggregate_frames frames"):
        aggregator.add(frame)
    return aggregator.result()


def aggregate_sse(
    chunks: Iterable[BytesLike],
    *,
    incremental: bool = True,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> dict[str, Any]:
    """The final response of a raw SSE stream, read chunk by chunk.

    `LimitExceeded` when the stream passes `max_bytes` or one event passes
    `max_event_bytes`, raised before the excess is parsed. `ResponseError`
    when the stream ends inside an event, ends or says ``[DONE]`` without a
    terminal frame, or sends anything after its terminal frame or ``[DONE]``.
    """
    _check_bound("max_bytes", max_bytes)
    decoder = SseDecoder(max_event_bytes=max_event_bytes)
    aggregator = StreamAggregator(incremental=incremental)
    add = aggregator._add_payloads
    feed = decoder._feed_raw
    seen = 0
    for chunk in _iterate(chunks, "aggregate_sse chunks"):
        if not isinstance(chunk, bytes):
            chunk = _as_bytes(chunk, "aggregate_sse chunk")
        seen += len(chunk)
        if seen > max_bytes:
            raise _too_big(max_bytes, "the stream")
        add(feed(chunk))
    decoder.close()
    return aggregator._finish(said_done=decoder.done)


def parse_unary(body: BytesLike, *, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """The response of a non-streaming /generate, returned as sent.

    An SGLang error body raises `EngineError`. A JSON array (SGLang's answer to
    a batch, n > 1 included) or any value but an object with a ``meta_info``
    object raises `ResponseError`; a body over `max_bytes` raises
    `LimitExceeded` before it is parsed.
    """
    _check_bound("max_bytes", max_bytes)
    if not isinstance(body, bytes):
        body = _as_bytes(body, "parse_unary body")
    if len(body) > max_bytes:
        raise _too_big(max_bytes, "the response body")
    response = decode_json(body, "the response body")
    if type(response) is list:
        raise ResponseError(
            "the response body is a JSON array, SGLang's answer to a batch or n > 1; "
            "expected the object of one generation"
        )
    if type(response) is not dict:
        raise expected("the response body", "an object", response)
    error = engine_error(response)
    if error is not None:
        raise error
    meta = response.get("meta_info", UNSET)
    if meta is UNSET:
        raise ResponseError("the response body has no meta_info")
    if type(meta) is not dict:
        raise expected("meta_info", "an object", meta)
    return response


def _same(a: object, b: object) -> bool:
    """`a == b` for decoded JSON, where nesting too deep to compare counts as different."""
    try:
        return a == b
    except RecursionError:
        return False


def _check_bound(name: str, value: int) -> None:
    if type(value) is not int or value < 1:
        raise EnvelopeError(f"{name}: expected a positive integer, got {show_value(value)}")


def _iterate(items: Iterable[Any], what: str) -> Iterator[Any]:
    try:
        return iter(items)
    except TypeError:
        raise EnvelopeError(f"{what}: expected an iterable, got {type(items).__name__}") from None


def _as_bytes(data: object, what: str) -> bytes:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise EnvelopeError(f"{what}: expected bytes, got {type(data).__name__}")


def _too_big(limit: int, what: str) -> LimitExceeded:
    return LimitExceeded("max_bytes", limit, f"{what} is larger than max_bytes ({limit} bytes)")
