"""The fake engine's requests for many sequences: a batch, ``n`` > 1 samples, or both.

As SGLang 0.5.23 serves them (``TokenizerManager._handle_batch_request``):
every sequence (index ``i * n + j``: prompt ``i``, sample ``j``) is a
generation of its own, under its own rid, answered by the fake's one-sequence
machinery. A stream interleaves the sequences' frames (here round by round,
in index order), each with ``"index": k`` as its last key, and ends with one
``data: [DONE]``; a unary answer is a JSON array of the sequences' answers in
index order. An error ends them all (SGLang's gather fails on the first).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, Literal, Protocol

import msgspec

from sglang_envelope.errors.answers import error_event, error_response
from sglang_envelope.errors.exceptions import EngineError
from sglang_envelope.request.checks import SAMPLING_EPS, effective_temperature
from sglang_envelope.request.deployment import Deployment
from sglang_envelope.request.types import ClientRequest
from sglang_envelope.response.sse import SSE_DONE
from sglang_envelope.testing.answers import (
    AnswerPlan,
    Role,
    Span,
    answer_object,
    plan_answer,
)
from sglang_envelope.testing.requests import Receive, Send, Sequences, check_generate
from sglang_envelope.testing.server import JSON, answer, body_chunk, stream_start

__all__ = ["Ending", "Generation", "plan_many", "serve_many", "span_ending"]

_ENCODE: Final = msgspec.json.Encoder().encode
#: How one generation ends.
Ending = Literal["length", "stop", "abort", "error", "disconnect"]


class Generation:
    """One sequence being answered (a request for one sequence is one)."""

    __slots__ = ("abort_sent", "made", "plan", "stop", "stopped")

    def __init__(self, plan: AnswerPlan) -> None:
        self.plan = plan
        self.made = 0
        self.abort_sent = False
        self.stop: Literal["abort", "disconnect"] | None = None
        self.stopped = asyncio.Event()

    def halt(self, why: Literal["abort", "disconnect"]) -> None:
        if self.stop is None:
            self.stop = why
            self.stopped.set()


def span_ending(span: Span) -> Ending:
    """How the generation of a finished `span` ended: its finish reason's type."""
    assert span.finish is not None
    kind: Ending = span.finish["type"]
    return kind


class _Engine(Protocol):
    """What the many-sequence serving reads of `FakeEngine`."""

    deployment: Deployment
    max_body_bytes: int
    vocab_size: int
    context_length: int
    default_max_new_tokens: int
    disaggregation_mode: Role
    routed_experts_shape: tuple[int, int] | None
    incremental: bool
    fail_after: int | None
    fail_message: str
    fail_status: int

    def is_running(self, rid: str) -> bool: ...

    def forget(self, generation: Generation) -> None: ...

    async def end_on_disconnect(
        self, generations: list[Generation], receive: Receive
    ) -> None: ...

    async def next_step(self, generation: Generation) -> Span | Ending: ...

    def record_outcome(self, generation: Generation, ending: Ending) -> None: ...


def _sampled(request: ClientRequest) -> bool:
    """Whether samples of the request differ:
    SGLang samples above its smallest temperature."""
    params = request.sampling_params
    if params is None or isinstance(params, msgspec.UnsetType):
        return True  # SGLang's default temperature is 1.0
    return effective_temperature(params) >= SAMPLING_EPS


def plan_many(engine: _Engine, sequences: Sequences) -> list[AnswerPlan]:
    """The answer of each sequence, once every prompt's body is checked;
    raises as SGLang refuses one, or for a rid a running generation has."""
    requests = [
        check_generate(body, engine.deployment, engine.max_body_bytes)
        for body in sequences.prompts
    ]
    for rid in sequences.rids:
        if engine.is_running(rid):
            raise EngineError(f"Duplicate request ID detected: {rid}", 400)
    n = sequences.n
    sampled = [_sampled(request) for request in requests]
    return [
        plan_answer(
            requests[index // n],
            rid,
            vocab_size=engine.vocab_size,
            context_length=engine.context_length,
            default_max_new_tokens=engine.default_max_new_tokens,
            seed=index % n if sampled[index // n] else 0,
            role=engine.disaggregation_mode,
            routed_experts_shape=engine.routed_experts_shape,
        )
        for index, rid in enumerate(sequences.rids)
    ]


async def serve_many(
    engine: _Engine, generations: list[Generation], receive: Receive, send: Send
) -> None:
    """Answer the request of `generations` (a stream or an array), and end them."""
    watcher = asyncio.ensure_future(engine.end_on_disconnect(generations, receive))
    try:
        if generations[0].plan.request.stream:
            await _stream(engine, generations, send)
        else:
            await _unary(engine, generations, send)
    finally:
        watcher.cancel()
        for generation in generations:
            engine.forget(generation)


def _frame(engine: _Engine, generation: Generation, step: Span, index: int) -> bytes:
    shown = step if engine.incremental else step._replace(start=0)
    frame: dict[str, Any] = answer_object(generation.plan, shown, unary=False)
    frame["index"] = index  # SGLang adds it last
    return b"data: " + _ENCODE(frame) + b"\n\n"


async def _stream(engine: _Engine, generations: list[Generation], send: Send) -> None:
    await stream_start(send)
    live = list(enumerate(generations))
    frames = 0
    while live:
        if engine.fail_after is not None and frames >= engine.fail_after:
            error = error_event(EngineError(engine.fail_message, engine.fail_status))
            await body_chunk(send, error + SSE_DONE, more=False)
            for _, generation in live:
                engine.record_outcome(generation, "error")
            return
        steps = await asyncio.gather(
            *(engine.next_step(generation) for _, generation in live)
        )
        frames += 1
        chunks = []
        going = []
        gone = False
        for (index, generation), step in zip(live, steps, strict=True):
            if not isinstance(step, Span):
                engine.record_outcome(generation, step)
                gone = True
                continue
            chunks.append(_frame(engine, generation, step, index))
            if step.finish is None:
                going.append((index, generation))
            else:
                engine.record_outcome(generation, span_ending(step))
        if gone:  # the client went away: nothing more is sent
            for _, generation in going:
                engine.record_outcome(generation, "disconnect")
            return
        live = going
        await body_chunk(
            send, b"".join(chunks) + (b"" if live else SSE_DONE), more=bool(live)
        )


async def _to_end(engine: _Engine, generation: Generation) -> Span | Ending:
    """Run one generation of a unary request to its end: its last span, or its ending."""
    frames = 0
    while True:
        if engine.fail_after is not None and frames >= engine.fail_after:
            engine.record_outcome(generation, "error")
            return "error"
        step = await engine.next_step(generation)
        if not isinstance(step, Span):
            engine.record_outcome(generation, step)
            return step
        frames += 1
        if step.finish is not None:
            engine.record_outcome(generation, span_ending(step))
            return step


async def _unary(engine: _Engine, generations: list[Generation], send: Send) -> None:
    ends = await asyncio.gather(
        *(_to_end(engine, generation) for generation in generations)
    )
    if "error" in ends:
        error = EngineError(engine.fail_message, engine.fail_status)
        await answer(send, *error_response(error, stream=False))
        return
    if "disconnect" in ends:
        return
    bodies = [
        answer_object(generation.plan, end._replace(start=0), unary=True)
        for generation, end in zip(generations, ends, strict=True)
        if isinstance(end, Span)
    ]
    await answer(send, 200, JSON, _ENCODE(bodies))
