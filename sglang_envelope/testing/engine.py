"""`FakeEngine`: a fake SGLang 0.5.23 HTTP server, as a plain ASGI 3 app, for tests.

It answers ``POST /generate`` (or ``PUT``; both stream modes, unary, logprobs,
flat fields, refusals, many sequences and text), ``POST /abort_request``,
``GET /get_server_info``, ``GET /health`` (``/health_generate``, ``/ready``), and
the rollout controls
``GET /v1/loads``, ``POST /pause_generation`` and ``POST /continue_generation``
as SGLang's own server does, and counts what it saw. Run it under any ASGI
server (uvicorn) or call it in process (``httpx.ASGITransport``).

A request for many sequences (a batch, ``n`` > 1 samples, or both) is served as
SGLang 0.5.23 serves it (``TokenizerManager._handle_batch_request``): every
sequence (index ``i * n + j``: prompt ``i``, sample ``j``) is a generation of
its own, under its own rid. A stream interleaves the sequences' frames (here
round by round, in index order), each with ``"index": k`` as its last key, and
ends with one ``data: [DONE]``; a unary answer is a JSON array of the
sequences' answers in index order. An error ends them all (SGLang's gather
fails on the first). A request for one sequence is served the same way, its
frames without ``index`` and its unary answer one object.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import uuid
from typing import Any, Final, Literal, NamedTuple

import msgspec

from sglang_envelope.errors.answers import error_event, error_response, stream_requested
from sglang_envelope.errors.exceptions import EngineError, EnvelopeError, RequestRejected
from sglang_envelope.request.checks import SAMPLING_EPS, effective_temperature
from sglang_envelope.request.deployment import Deployment, check_routed_experts_shape
from sglang_envelope.request.limits import DEFAULT_MAX_BODY_BYTES
from sglang_envelope.request.types import ClientRequest
from sglang_envelope.response.sse import SSE_DONE
from sglang_envelope.testing.answers import (
    ABORTED,
    WAITING_ABORT,
    AnswerPlan,
    Role,
    Span,
    answer_object,
    plan_answer,
)
from sglang_envelope.testing.requests import (
    ClientGone,
    Message,
    Receive,
    Send,
    Sequences,
    check_generate,
    json_content,
    read_body,
    split_many,
)
from sglang_envelope.testing.server import (
    JSON,
    NOT_JSON_MESSAGE,
    ROUTES,
    SERVER_INFO,
    answer,
    body_chunk,
    lifespan,
    loads_answer,
    not_found,
    refuse,
    serve_control,
    stream_start,
)

__all__ = ["FakeEngine", "Outcome"]

#: What SGLang writes when a generation fails (`fail_after`), by default.
FAIL_MESSAGE: Final = "The running request was aborted by a backend error."
_ENCODE = msgspec.json.Encoder().encode
#: How one generation ends.
Ending = Literal["length", "stop", "abort", "error", "disconnect"]


class Outcome(NamedTuple):
    """How one generation ended: its rid, the ending, and how many tokens it made."""

    rid: str
    ending: Ending
    completion_tokens: int


class Generation:
    """One sequence being answered (a request for one sequence is one); `dispatched`:
    whether SGLang's scheduler holds it (one that arrives while generation is paused
    waits for the continue in the tokenizer manager)."""

    __slots__ = (
        "abort_sent",
        "dispatched",
        "held_in",
        "made",
        "plan",
        "retractions",
        "stop",
        "stopped",
    )

    def __init__(self, plan: AnswerPlan, *, dispatched: bool) -> None:
        self.plan = plan
        self.made = 0
        self.abort_sent = False
        self.dispatched = dispatched
        #: Where a pause holds it in the paused scheduler: the waiting queue ("retract")
        #: or the running batch ("in_place"); and how often it was retracted.
        self.held_in: Literal["retract", "in_place"] | None = None
        self.retractions = 0
        self.stop: Literal["abort", "disconnect"] | None = None
        self.stopped = asyncio.Event()

    def halt(self, why: Literal["abort", "disconnect"]) -> None:
        if self.stop is None:
            self.stop = why
            self.stopped.set()

    def pause(self, mode: Literal["abort", "retract", "in_place"]) -> None:
        """A pause in `mode`: "retract" moves it to the scheduler's waiting queue,
        "in_place" keeps it in the running batch ("abort" leaves the scheduler be)."""
        if self.dispatched and mode != "abort":
            self.held_in = mode
            self.retractions += mode == "retract"

    def resume(self) -> None:
        """Generation continues: it is (or goes on) in the scheduler."""
        self.dispatched = True
        self.held_in = None


def _sampled(request: ClientRequest) -> bool:
    """Whether samples of the request differ:
    SGLang samples above its smallest temperature."""
    params = request.sampling_params
    if params is None or isinstance(params, msgspec.UnsetType):
        return True  # SGLang's default temperature is 1.0
    return effective_temperature(params) >= SAMPLING_EPS


#: The integer options, in the order they are checked, and the least each may be.
_INT_OPTIONS: Final = {
    "default_max_new_tokens": 0,
    "tokens_per_frame": 1,
    "vocab_size": 4,
    "context_length": 1,
    "max_body_bytes": 1,
    "dp_size": 1,
    "max_recorded": 1,
}


def _check_options(options: dict[str, Any]) -> None:
    for name, low in _INT_OPTIONS.items():
        value = options[name]
        if type(value) is not int or value < low:
            raise EnvelopeError(f"{name} must be an int >= {low}, got {value!r}")
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
    """

    __slots__ = (
        "_resumed",
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
        self._resumed = asyncio.Event()  # cleared while generation is paused
        self._resumed.set()

    @property
    def running(self) -> int:
        """How many generations are still running."""
        return len(self._running)

    @property
    def paused(self) -> bool:
        """Whether generation is paused
        (``/pause_generation`` without ``/continue_generation``)."""
        return not self._resumed.is_set()

    def server_info(self) -> dict[str, Any]:
        """The body of ``GET /get_server_info``:
        the keys the library reads, as SGLang has them."""
        info = dict(SERVER_INFO)
        info.update(
            context_length=self.context_length,
            dp_size=self.dp_size,
            incremental_streaming_output=self.incremental,
            disaggregation_mode=self.disaggregation_mode,
            enable_return_routed_experts=self.routed_experts_shape is not None,
            # SGLang keeps room for the decode tokens a request may still need.
            max_req_input_len=max(1, self.context_length - 6),
        )
        return info

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
        path = scope["path"]
        if scope["method"] not in ROUTES.get(path, ()):
            await not_found(send, scope)
        elif path == "/generate":
            await self._generate(scope, receive, send)
        elif path in ("/get_server_info", "/server_info"):
            await answer(send, 200, JSON, _ENCODE(self.server_info()))
        elif path in ("/health", "/health_generate", "/ready"):
            await answer(send, 200, None, b"")
        elif path == "/v1/loads":
            loads = loads_answer(
                running=sum(g.dispatched for g in self._running.values()),
                dp_size=self.dp_size,
                mode=self.disaggregation_mode,
                query=scope.get("query_string", b""),
            )
            await answer(send, *loads)
        else:  # /abort_request, /pause_generation, /continue_generation
            await serve_control(
                scope, receive, send, self._running, self._resumed, self.aborts
            )

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
            many = split_many(body, self.vocab_size) or Sequences([body], 1, [], False)
            generations = [
                Generation(plan, dispatched=not self.paused) for plan in self._plan(many)
            ]
        except (RequestRejected, EngineError) as error:
            await refuse(send, *error_response(error, stream=stream))
            return
        self._running.update((g.plan.rid, g) for g in generations)
        watcher = asyncio.ensure_future(self._end_on_disconnect(generations, receive))
        try:
            if stream:
                await self._stream(generations, many.array, send)
            else:
                await self._unary(generations, many.array, send)
        finally:
            watcher.cancel()
            for generation in generations:  # forgotten, unless another took its rid
                if self._running.get(generation.plan.rid) is generation:
                    del self._running[generation.plan.rid]

    def _plan(self, many: Sequences) -> list[AnswerPlan]:
        """The answer of each sequence, once every prompt's body is checked; raises as
        SGLang refuses one, or for a rid a running generation has (SGLang refuses a
        second one)."""
        requests = [
            check_generate(body, self.deployment, self.max_body_bytes)
            for body in many.prompts
        ]
        rids = many.rids if many.array else [requests[0].rid or uuid.uuid4().hex]
        for rid in rids:
            if rid in self._running:
                raise EngineError(f"Duplicate request ID detected: {rid}", 400)
        n = many.n
        return [
            plan_answer(
                requests[index // n],
                rid,
                vocab_size=self.vocab_size,
                context_length=self.context_length,
                default_max_new_tokens=self.default_max_new_tokens,
                seed=index % n if _sampled(requests[index // n]) else 0,
                role=self.disaggregation_mode,
                routed_experts_shape=self.routed_experts_shape,
            )
            for index, rid in enumerate(rids)
        ]

    async def _end_on_disconnect(
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

    async def _next_step(self, generation: Generation) -> Span | Ending:
        """Make the next frame's tokens (after the delay): their span, or how it ended."""
        if self.frame_delay > 0 and generation.stop is None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(generation.stopped.wait(), self.frame_delay)
        else:
            await asyncio.sleep(0)
        # An abort of one paused in the running batch waits for the scheduler too.
        frozen = generation.stop == "abort" and generation.held_in == "in_place"
        if (generation.stop is None or frozen) and not self._resumed.is_set():
            # Held while paused, until continued (or stopped, if it can be).
            events = (self._resumed,) if frozen else (self._resumed, generation.stopped)
            waiters = [asyncio.ensure_future(event.wait()) for event in events]
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
        plan = generation.plan
        start = generation.made
        if generation.stop == "disconnect":
            return "disconnect"
        total = len(plan.output_ids)
        if generation.stop == "abort" and generation.held_in == "retract":
            return Span(start, start, WAITING_ABORT, start == 0)  # no token more
        if generation.stop == "abort":
            generation.made = min(start + 1, total)  # SGLang runs one more decode step
            return Span(start, generation.made, ABORTED, start == 0)
        generation.made = min(start + self.tokens_per_frame, total)
        finish = plan.finish if generation.made == total else None
        return Span(start, generation.made, finish, start == 0)

    def _record(self, generation: Generation, ending: Ending) -> None:
        self.outcomes.append(Outcome(generation.plan.rid, ending, generation.made))

    async def _stream(
        self, generations: list[Generation], array: bool, send: Send
    ) -> None:
        """The sequences' frames, round by round (with ``index`` when `array`)."""
        await stream_start(send)
        if not generations:  # an empty batch: SGLang's stream ends at once
            await body_chunk(send, SSE_DONE, more=False)
            return
        live = list(enumerate(generations))
        frames = 0
        while live:
            if self.fail_after is not None and frames >= self.fail_after:
                error = error_event(EngineError(self.fail_message, self.fail_status))
                await body_chunk(send, error + SSE_DONE, more=False)
                for _, generation in live:
                    self._record(generation, "error")
                return
            steps = await asyncio.gather(*(self._next_step(g) for _, g in live))
            frames += 1
            chunks = []
            going = []
            gone = False
            for (index, generation), step in zip(live, steps, strict=True):
                if not isinstance(step, Span):
                    self._record(generation, step)
                    gone = True
                    continue
                shown = step if self.incremental else step._replace(start=0)
                frame = answer_object(
                    generation.plan,
                    shown,
                    unary=False,
                    retractions=generation.retractions,
                )
                if array:
                    frame["index"] = index  # SGLang adds it last
                chunks.append(b"data: " + _ENCODE(frame) + b"\n\n")
                if step.finish is None:
                    going.append((index, generation))
                else:
                    self._record(generation, step.finish["type"])
            if gone:  # the client went away: nothing more is sent
                for _, generation in going:
                    self._record(generation, "disconnect")
                return
            live = going
            await body_chunk(
                send, b"".join(chunks) + (b"" if live else SSE_DONE), more=bool(live)
            )

    async def _to_end(self, generation: Generation) -> Span | Ending:
        """Run one generation of a unary request to its end: its last span, or its
        ending."""
        frames = 0
        while True:
            if self.fail_after is not None and frames >= self.fail_after:
                self._record(generation, "error")
                return "error"
            step = await self._next_step(generation)
            if not isinstance(step, Span):
                self._record(generation, step)
                return step
            frames += 1
            if step.finish is not None:
                self._record(generation, step.finish["type"])
                return step

    async def _unary(
        self, generations: list[Generation], array: bool, send: Send
    ) -> None:
        """The sequences' answers, when all have ended (an array of them when `array`)."""
        ends = await asyncio.gather(*(self._to_end(g) for g in generations))
        if "error" in ends:
            error = EngineError(self.fail_message, self.fail_status)
            await answer(send, *error_response(error, stream=False))
            return
        if "disconnect" in ends:
            return
        bodies = [
            answer_object(
                generation.plan,
                end._replace(start=0),
                unary=True,
                retractions=generation.retractions,
            )
            for generation, end in zip(generations, ends, strict=True)
            if isinstance(end, Span)
        ]
        await answer(send, 200, JSON, _ENCODE(bodies if array else bodies[0]))
