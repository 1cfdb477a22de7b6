"""`FakeEngine`: a fake SGLang 0.5.23 HTTP server, as a plain ASGI 3 app, for tests.

It answers ``POST /generate`` (both stream modes, unary, logprobs, flat
fields, refusals; many sequences and text as ``testing/many.py`` says),
``POST /abort_request``, ``GET /get_server_info``, ``GET /health``, and the
rollout controls ``GET /v1/loads``,
``POST /pause_generation`` and ``POST /continue_generation`` as SGLang's own
server does, and counts what it saw. Run it
under any ASGI server (uvicorn) or call it in process (``httpx.ASGITransport``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import uuid
from typing import Any, Final, NamedTuple

import msgspec

from sglang_envelope.errors.answers import error_event, error_response, stream_requested
from sglang_envelope.errors.exceptions import EngineError, EnvelopeError, RequestRejected
from sglang_envelope.request.deployment import Deployment, check_routed_experts_shape
from sglang_envelope.request.limits import DEFAULT_MAX_BODY_BYTES
from sglang_envelope.request.types import ClientRequest
from sglang_envelope.response.sse import SSE_DONE
from sglang_envelope.testing.answers import (
    ABORTED,
    Role,
    Span,
    answer_object,
    plan_answer,
)
from sglang_envelope.testing.control import Pause, loads_body, serve_control
from sglang_envelope.testing.many import (
    Ending,
    Generation,
    plan_many,
    serve_many,
    span_ending,
)
from sglang_envelope.testing.requests import (
    ClientGone,
    Message,
    Receive,
    Send,
    check_generate,
    json_content,
    read_body,
    split_many,
)
from sglang_envelope.testing.server import (
    JSON,
    NOT_JSON_MESSAGE,
    AbortBody,
    abort_order,
    answer,
    body_chunk,
    lifespan,
    not_found,
    parse_abort,
    server_info,
    stream_start,
)

__all__ = ["FakeEngine", "Outcome"]

#: What SGLang writes when a generation fails (`fail_after`), by default.
FAIL_MESSAGE: Final = "The running request was aborted by a backend error."
_ENCODE = msgspec.json.Encoder().encode


class Outcome(NamedTuple):
    """How one generation ended: its rid, the ending, and how many tokens it made."""

    rid: str
    ending: Ending
    completion_tokens: int


def _check_options(options: dict[str, Any]) -> None:
    for name in (
        "default_max_new_tokens",
        "tokens_per_frame",
        "vocab_size",
        "context_length",
    ):
        value = options[name]
        low = 4 if name == "vocab_size" else 0 if name == "default_max_new_tokens" else 1
        if type(value) is not int or value < low:
            raise EnvelopeError(f"{name} must be an int >= {low}, got {value!r}")
    for name in ("max_body_bytes", "dp_size", "max_recorded"):
        if type(options[name]) is not int or options[name] < 1:
            raise EnvelopeError(f"{name} must be an int >= 1, got {options[name]!r}")
    delay = options["frame_delay"]
    if type(delay) not in (int, float) or not 0 <= delay <= 60:
        raise EnvelopeError(
            f"frame_delay must be a number of seconds in [0, 60], got {delay!r}"
        )
    fail_after = options["fail_after"]
    if fail_after is not None and (type(fail_after) is not int or fail_after < 0):
        raise EnvelopeError(f"fail_after must be None or an int >= 0, got {fail_after!r}")
    if type(options["fail_status"]) is not int or not 400 <= options["fail_status"] < 600:
        raise EnvelopeError(
            f"fail_status must be an HTTP error status, got {options['fail_status']!r}"
        )
    if (
        type(options["incremental"]) is not bool
        or type(options["fail_message"]) is not str
    ):
        raise EnvelopeError("incremental must be a bool and fail_message a str")
    if options["disaggregation_mode"] not in ("null", "prefill", "decode"):
        raise EnvelopeError(
            "disaggregation_mode must be 'null', 'prefill' or 'decode', "
            f"got {options['disaggregation_mode']!r}"
        )
    check_routed_experts_shape("routed_experts_shape", options["routed_experts_shape"])


class FakeEngine:
    """A fake SGLang 0.5.23 server, an ASGI 3 app: ``await engine(scope, receive, send)``.

    - `incremental`: the server's ``--incremental-streaming-output``
      (default: cumulative).
    - `default_max_new_tokens`: the output length when a request sets none
      (SGLang's is 128); a null ``max_new_tokens`` runs to the context length.
    - `frame_delay`: seconds between tokens (both modes), so a test can abort or
      disconnect mid-generation; `tokens_per_frame`: tokens in one stream frame.
    - `fail_after`: each generation fails after that many frames (0: before the
      first) with `fail_message` and `fail_status`, as SGLang does for an error
      it raises mid-generation: a stream's error frame then ``[DONE]``, a unary
      ``{"error": {"message"}}`` with the status.
    - `vocab_size`, `context_length`, `dp_size`: the model and server it
      pretends to be (SGLang's checks of ``input_ids``, lengths, ``routed_dp_rank``).
    - `max_body_bytes`: a larger body is refused (413) without being read further.
    - `disaggregation_mode`: ``"prefill"`` or ``"decode"`` makes it one server of a
      prefill/decode pair, answering as that role does (`testing.answers`); the two
      fakes of a pair do not talk to each other.
    - `routed_experts_shape`: ``(num_hidden_layers, num_experts_per_tok)`` makes it a
      Mixture-of-Experts model served with ``--enable-return-routed-experts``: it
      answers ``return_routed_experts`` with made-up routed experts of that shape.

    Counts for tests: `requests` (each ``/generate`` body, refused or served),
    `aborts` (each ``/abort_request`` body, decoded), `outcomes` (how each
    generation ended), `disconnects` (clients that went away mid-answer) and
    `running` (generations still running). A request for many sequences
    (``n`` > 1, a batch) is one generation a sequence. The records keep the last
    `max_recorded` items.

    `is_running`, `forget`, `end_on_disconnect`, `next_step` and `record_outcome`
    are the steps of serving generations, which ``testing/many.py`` drives for a
    request of many sequences; a test has no need of them.
    """

    __slots__ = (
        "_pause",
        "_running",
        "aborts",
        "context_length",
        "default_max_new_tokens",
        "deployment",
        "disaggregation_mode",
        "disconnects",
        "dp_size",
        "fail_after",
        "fail_message",
        "fail_status",
        "frame_delay",
        "incremental",
        "max_body_bytes",
        "outcomes",
        "requests",
        "routed_experts_shape",
        "tokens_per_frame",
        "vocab_size",
    )

    def __init__(
        self,
        *,
        incremental: bool = False,
        default_max_new_tokens: int = 16,
        frame_delay: float = 0.0,
        tokens_per_frame: int = 1,
        fail_after: int | None = None,
        fail_status: int = 400,
        fail_message: str = FAIL_MESSAGE,
        vocab_size: int = 320,
        context_length: int = 1024,
        dp_size: int = 1,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_recorded: int = 10_000,
        disaggregation_mode: Role = "null",
        routed_experts_shape: tuple[int, int] | None = None,
    ) -> None:
        _check_options(dict(locals()))
        self.incremental = incremental
        self.default_max_new_tokens = default_max_new_tokens
        self.frame_delay = float(frame_delay)
        self.tokens_per_frame = tokens_per_frame
        self.fail_after = fail_after
        self.fail_status = fail_status
        self.fail_message = fail_message
        self.vocab_size = vocab_size
        self.context_length = context_length
        self.dp_size = dp_size
        self.max_body_bytes = max_body_bytes
        self.disaggregation_mode: Role = disaggregation_mode
        self.routed_experts_shape = routed_experts_shape
        #: What SGLang's checks after dispatch read, as `Deployment.from_server_info`
        #: gives it; without the flag SGLang answers without routed experts (no refusal
        #: of its own).
        described = Deployment.from_server_info(
            _ENCODE(self.server_info()), model_config=_ENCODE(self.model_config())
        )
        self.deployment = msgspec.structs.replace(
            described, enable_return_routed_experts=None
        )
        self.requests: collections.deque[bytes] = collections.deque(maxlen=max_recorded)
        self.aborts: collections.deque[Any] = collections.deque(maxlen=max_recorded)
        self.outcomes: collections.deque[Outcome] = collections.deque(maxlen=max_recorded)
        self.disconnects = 0
        self._running: dict[str, Generation] = {}
        self._pause = Pause()

    @property
    def running(self) -> int:
        """How many generations are still running."""
        return len(self._running)

    @property
    def paused(self) -> bool:
        """Whether generation is paused
        (``/pause_generation`` without ``/continue_generation``)."""
        return self._pause.paused

    def server_info(self) -> dict[str, Any]:
        """The body of ``GET /get_server_info``:
        the keys the library reads, as SGLang has them."""
        return server_info(
            context_length=self.context_length,
            dp_size=self.dp_size,
            incremental=self.incremental,
            disaggregation_mode=self.disaggregation_mode,
            routed_experts=self.routed_experts_shape is not None,
        )

    def model_config(self) -> dict[str, Any]:
        """The keys of the fake model's ``config.json`` the library reads."""
        config: dict[str, Any] = {"vocab_size": self.vocab_size}
        if self.routed_experts_shape is not None:
            layers, top_k = self.routed_experts_shape
            config.update(num_hidden_layers=layers, num_experts_per_tok=top_k)
        return config

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await lifespan(receive, send)
            return
        if kind != "http":
            return
        route = (scope["method"], scope["path"])
        if route == ("POST", "/generate"):
            await self._generate(scope, receive, send)
        elif route == ("POST", "/abort_request"):
            await self._abort(scope, receive, send)
        elif route in (("GET", "/get_server_info"), ("GET", "/server_info")):
            await answer(send, 200, JSON, _ENCODE(self.server_info()))
        elif route == ("GET", "/health"):
            await answer(send, 200, None, b"")
        elif route == ("GET", "/v1/loads"):
            body = loads_body(
                running=self.running,
                dp_size=self.dp_size,
                query=scope.get("query_string", b""),
            )
            await answer(send, 200, JSON, body)
        elif route in (("POST", "/pause_generation"), ("POST", "/continue_generation")):
            await serve_control(scope, receive, send, self._running, self._pause)
        else:
            await not_found(send, scope["path"], scope["method"])

    async def _abort(self, scope: Message, receive: Receive, send: Send) -> None:
        try:
            body = await read_body(receive, scope["headers"], 65536)
        except ClientGone:
            return
        parsed = parse_abort(body, json_content(scope["headers"]))
        if not isinstance(parsed, AbortBody):
            await answer(send, *parsed)
            return
        self.aborts.append(parsed.value)
        for generation in abort_order(self._running, parsed):
            generation.halt("abort")
        await answer(send, 200, None, b"")

    async def _generate(self, scope: Message, receive: Receive, send: Send) -> None:
        headers = scope["headers"]
        try:
            body = await read_body(receive, headers, self.max_body_bytes)
        except ClientGone:
            self.disconnects += 1
            return
        # SGLang answers a refusal in the client's mode once its engine reads the body.
        stream = not isinstance(body, RequestRejected) and stream_requested(body)
        try:
            if isinstance(body, RequestRejected):
                raise body
            self.requests.append(body)
            if not json_content(headers):
                raise RequestRejected("not_object", None, NOT_JSON_MESSAGE)
            many = split_many(body, self.vocab_size)  # None: one token-input sequence
            if many is not None and many.array:
                generations = [Generation(plan) for plan in plan_many(self, many)]
                self._running.update((g.plan.rid, g) for g in generations)
            else:
                one = body if many is None else many.prompts[0]
                generation = self._start(
                    check_generate(one, self.deployment, self.max_body_bytes)
                )
        except (RequestRejected, EngineError) as error:
            refusal = error_response(error, stream=stream)
            await answer(send, *refusal)
            return
        if many is not None and many.array:
            await serve_many(self, generations, receive, send)
        else:
            await self._serve(generation, receive, send)

    def _start(self, request: ClientRequest) -> Generation:
        rid = request.rid or uuid.uuid4().hex
        if self.is_running(rid):
            raise EngineError(f"Duplicate request ID detected: {rid}", 400)
        plan = plan_answer(
            request,
            rid,
            vocab_size=self.vocab_size,
            context_length=self.context_length,
            default_max_new_tokens=self.default_max_new_tokens,
            role=self.disaggregation_mode,
            routed_experts_shape=self.routed_experts_shape,
        )
        generation = Generation(plan)
        self._running[rid] = generation
        return generation

    async def _serve(self, generation: Generation, receive: Receive, send: Send) -> None:
        watcher = asyncio.ensure_future(self.end_on_disconnect([generation], receive))
        try:
            if generation.plan.request.stream:
                await self._stream(generation, send)
            else:
                await self._unary(generation, send)
        finally:
            watcher.cancel()
            self.forget(generation)

    def is_running(self, rid: str) -> bool:
        """Whether a generation is running under `rid` (SGLang refuses a second one)."""
        return rid in self._running

    def forget(self, generation: Generation) -> None:
        """Drop `generation` from the running ones, unless another has taken its rid."""
        if self._running.get(generation.plan.rid) is generation:
            del self._running[generation.plan.rid]

    async def end_on_disconnect(
        self, generations: list[Generation], receive: Receive
    ) -> None:
        """End a request's generations when its client goes away, as SGLang does."""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if any(generation.stop is None for generation in generations):
                    self.disconnects += 1
                for generation in generations:
                    generation.halt("disconnect")
                return

    async def next_step(self, generation: Generation) -> Span | Ending:
        """Make the next frame's tokens (after the delay): their span, or how it ended."""
        if self.frame_delay > 0 and generation.stop is None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(generation.stopped.wait(), self.frame_delay)
        else:
            await asyncio.sleep(0)
        if generation.stop is None:  # held while paused, until continued or stopped
            await self._pause.wait(generation.stopped)
        plan = generation.plan
        start = generation.made
        if generation.stop == "disconnect":
            return "disconnect"
        total = len(plan.output_ids)
        if generation.stop == "abort":
            generation.made = min(start + 1, total)  # SGLang runs one more decode step
            return Span(start, generation.made, ABORTED, start == 0)
        generation.made = min(start + self.tokens_per_frame, total)
        finish = plan.finish if generation.made == total else None
        return Span(start, generation.made, finish, start == 0)

    def record_outcome(self, generation: Generation, ending: Ending) -> None:
        """Count how `generation` ended (`outcomes`)."""
        self.outcomes.append(Outcome(generation.plan.rid, ending, generation.made))

    async def _stream(self, generation: Generation, send: Send) -> None:
        await stream_start(send)
        frames = 0
        while True:
            if self.fail_after is not None and frames >= self.fail_after:
                frame = error_event(EngineError(self.fail_message, self.fail_status))
                await body_chunk(send, frame + SSE_DONE, more=False)
                self.record_outcome(generation, "error")
                return
            step = await self.next_step(generation)
            if not isinstance(step, Span):
                self.record_outcome(generation, step)
                return
            shown = step if self.incremental else step._replace(start=0)
            data = _ENCODE(answer_object(generation.plan, shown, unary=False))
            frames += 1
            if step.finish is not None:
                await body_chunk(send, b"data: " + data + b"\n\n" + SSE_DONE, more=False)
                self.record_outcome(generation, span_ending(step))
                return
            await body_chunk(send, b"data: " + data + b"\n\n", more=True)

    async def _unary(self, generation: Generation, send: Send) -> None:
        frames = 0
        while True:
            if self.fail_after is not None and frames >= self.fail_after:
                error = EngineError(self.fail_message, self.fail_status)
                await answer(send, *error_response(error, stream=False))
                self.record_outcome(generation, "error")
                return
            step = await self.next_step(generation)
            if not isinstance(step, Span):
                self.record_outcome(generation, step)
                return
            frames += 1
            if step.finish is not None:
                body = answer_object(generation.plan, step._replace(start=0), unary=True)
                await answer(send, 200, JSON, _ENCODE(body))
                self.record_outcome(generation, span_ending(step))
                return
