"""SGLang's answer of many sequences: a batch of prompts, or n > 1 samples each.

A stream interleaves the sequences' frames, each with ``"index": k`` added as
its last key, and ends with one ``[DONE]``; a unary answer is a JSON array of
the sequences' answers in index order (docs/responses.md, Many sequences).
`ChoicesAggregator` gives each index its own stream core (`core.StreamCore`),
made at the index's first frame, and each frame goes to it without its
``index``, so that each answer equals SGLang's unary element.
"""

from __future__ import annotations

from typing import Any

from sglang_envelope.errors.exceptions import EnvelopeError, ResponseError, show_value
from sglang_envelope.response.core import StreamCore, answer, check_modes
from sglang_envelope.response.frames import (
    check_unary_object,
    decode_frame,
    engine_error,
    json_type,
)
from sglang_envelope.response.sse import Payload
from sglang_envelope.response.stores import DeltaStore
from sglang_envelope.response.types import GenerateResponse

__all__ = ["ChoicesAggregator", "check_choices", "choice_index", "unary_choices"]


def check_choices(choices: object) -> int:
    """`choices` if it is an integer >= 1; else `EnvelopeError` naming it."""
    if type(choices) is not int or choices < 1:
        raise EnvelopeError(
            f"choices: expected an integer >= 1, got {show_value(choices)}"
        )
    return choices


def choice_index(frame: dict[str, Any], choices: int) -> int:
    """The ``index`` of one frame of a stream of `choices` sequences.

    A frame without one is SGLang's error frame (`EngineError`, raised) or a
    `ResponseError`; so is an index that is not an integer in [0, `choices`).
    """
    index = frame.get("index")
    if type(index) is int and 0 <= index < choices:
        return index
    if index is None:
        error = engine_error(frame)
        if error is not None:
            raise error
        raise ResponseError(
            f"index: the frame has none, in a stream of {choices} sequences"
        )
    raise ResponseError(
        f"index: expected an integer in [0, {choices}), got {show_value(index)}"
    )


class ChoicesAggregator:
    """Collect the interleaved frames of `choices` streamed sequences into their answers.

    `add` each frame in stream order; `result` gives the list of answers in
    index order, each the response a non-streaming request would have given
    that sequence (`StreamAggregator.result`). `incremental` is the stream
    mode for every sequence (None: detected per sequence). A sequence's core
    is made at its first frame, so a large `choices` costs nothing up front.
    After an exception from `add`, discard the aggregator.
    """

    __slots__ = ("_choices", "_cores", "_finished", "_frames", "_incremental", "_rids")

    def __init__(self, choices: int, *, incremental: bool | None = None) -> None:
        self._choices = check_choices(choices)
        check_modes(incremental)
        self._incremental = incremental
        self._cores: dict[int, StreamCore[DeltaStore]] = {}
        self._rids: dict[int, str] = {}
        self._finished = 0  # sequences whose terminal frame came
        self._frames = 0  # frames added, all sequences

    @property
    def choices(self) -> int:
        """How many sequences the stream holds."""
        return self._choices

    @property
    def finished(self) -> bool:
        """True once every sequence's terminal frame has been added."""
        return self._finished == self._choices

    @property
    def frames(self) -> int:
        """How many frames were added, all sequences together."""
        return self._frames

    @property
    def rids(self) -> tuple[str | None, ...]:
        """Each index's ``meta_info.id`` as its first frame gave it; None while unseen.

        SGLang gives every sample of n > 1 a rid of its own, and aborts a
        sample only by it: these are the rids to abort. Costs `choices`.
        """
        seen = self._rids
        return tuple(seen.get(index) for index in range(self._choices))

    def add(self, frame: dict[str, Any]) -> None:
        """Add the next frame to its index's sequence, without its ``index``.

        SGLang's error frame raises `EngineError`; a frame without a valid
        ``index`` (`choice_index`), or one its sequence refuses
        (`StreamAggregator.add`), `ResponseError`. A frame that raises adds nothing.
        """
        if type(frame) is not dict:
            raise ResponseError(f"frame {self._frames + 1}: expected an object")
        index = choice_index(frame, self._choices)
        core = self._cores.get(index)
        if core is None:
            core = StreamCore(self._incremental, DeltaStore())
            self._cores[index] = core
        rest = dict(frame)
        del rest["index"]
        try:
            core.add(rest)
        except ResponseError as exc:
            if type(exc) is ResponseError:
                raise ResponseError(f"index {index}: {exc}") from exc
            raise
        self._frames += 1
        if core.frames == 1:
            meta = rest["meta_info"]
            rid = meta.get("id")
            if type(rid) is str:
                self._rids[index] = rid
        if core.finished:
            self._finished += 1

    def add_payloads(
        self, payloads: list[Payload], *, keep_last: bool = False
    ) -> dict[str, Any] | None:
        """`add` for frames still in JSON, in order (`SseReader` feeds them so)."""
        for payload in payloads:
            self.add(decode_frame(payload))
        return None

    def result(self, *, said_done: bool = False) -> list[GenerateResponse]:
        """Every sequence's answer, in index order (see `StreamAggregator.result`).

        A sequence without a terminal frame is a `ResponseError` naming its
        index; an abort with a status in [400, 600) an `EngineError`.
        """
        cores = self._cores
        if len(cores) < self._choices:
            missing = next(index for index in range(len(cores) + 1) if index not in cores)
            end = "said data: [DONE]" if said_done else "ended"
            raise ResponseError(
                f"index {missing}: the stream {end} before any frame of that sequence "
                f"({self._choices} expected)"
            )
        answers = []
        for index in range(self._choices):
            try:
                answers.append(answer(cores[index], said_done=said_done))
            except ResponseError as exc:
                if type(exc) is ResponseError:
                    raise ResponseError(f"index {index}: {exc}") from exc
                raise
        return answers


def unary_choices(response: Any, choices: int) -> list[GenerateResponse]:
    """A non-streaming body of `choices` sequences, decoded: checked, returned as sent.

    It must be a JSON array of exactly `choices` objects, each checked as
    `parse_unary` checks one generation's object (`ResponseError` naming ``[k]``).
    """
    if type(response) is not list or len(response) != choices:
        got = len(response) if type(response) is list else json_type(response)
        raise ResponseError(
            f"the response body: expected a JSON array of {choices} sequences, got {got}"
        )
    for index, item in enumerate(response):
        if type(item) is dict and (error := engine_error(item)) is not None:
            raise error
        check_unary_object(item, f"[{index}]", f"[{index}].meta_info")
    return response
