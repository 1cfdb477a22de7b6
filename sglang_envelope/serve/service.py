"""The serving loop: a client's body in, its answer out, over the caller's transport.

`Service` is made once, at a server's start, with the caller's `Transport` to
SGLang and the SGLang server's `Deployment`. `Service.generate` takes a
client's ``POST /generate`` body (checked once); `Service.generate_envelope` a
worker envelope off the wire (checked again). Each returns an `Answer`: a
status, headers and an async body, the bytes SGLang would have sent this client.
`Service.generate_request` reads a client's HTTP request first, as SGLang's
server reads it (`serve.incoming`): its type, its body within the bound.

- It sends the engine request for the deployment's role in the client's stream
  mode, and relays SGLang's stream (a streaming client) or reads its unary
  answer (a unary client).
- SGLang's status and error bodies are carried through (`error_response`); a
  failed transport is answered 502 or 504 (`UpstreamError`), and mid-stream
  with SGLang's error frame and ``data: [DONE]``.
- Many sequences (a batch, or n > 1) are one request a sequence (`serve.many`).
- The engine runs under a request id of the service's own (32 hex digits,
  fixed width: SGLang matches aborts by prefix); the client gets its own rid back.
- A client that goes away is aborted at once, in a task of its own
  (`Aborts`): a streaming body closed, dropped or cancelled (read or not), or
  `disconnected()` turning true while a unary answer is awaited. The answer is
  read to its end meanwhile, and the connection released. A send still waiting
  for a connection is cancelled: it never reaches SGLang.
- SGLang silent for `idle_timeout_s` (the answer's head, then between chunks)
  is answered 504 in SGLang's shape (mid-stream: its error frame), and the
  engine request aborted.
- `aclose(deadline_s)` shuts down: new requests 503, every answer in flight
  stopped (an error frame and ``[DONE]``, or 503) and its engine request aborted.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import msgspec

from sglang_envelope.cancel.plan import AbortPolicy, check_seconds
from sglang_envelope.errors.answers import EVENT_STREAM, JSON, error_event
from sglang_envelope.errors.exceptions import (
    EnvelopeError,
    RequestRejected,
    ResponseError,
    UpstreamError,
)
from sglang_envelope.releases.target import Target
from sglang_envelope.request.deployment import Deployment
from sglang_envelope.request.engine import EngineRequest, header_overrides
from sglang_envelope.request.envelope import (
    WorkerEnvelope,
    decode_envelope,
    to_worker_envelope,
)
from sglang_envelope.request.routing import Routing
from sglang_envelope.request.types import ClientRequest
from sglang_envelope.response.aggregate import DEFAULT_MAX_BYTES
from sglang_envelope.response.merge import finalize_response
from sglang_envelope.response.relay import relay_sse_async
from sglang_envelope.response.sse import DEFAULT_MAX_EVENT_BYTES, SSE_DONE
from sglang_envelope.serve.aborts import AbortReport, Aborts
from sglang_envelope.serve.answer import (
    Answer,
    check_target,
    client_request,
    envelope_stream_requested,
    id_bytes,
    new_rid,
    refused,
    refused_unread,
    request_bytes,
    started,
    stream_of,
    whole_answer,
)
from sglang_envelope.serve.checks import (
    check_answer_arguments,
    check_disconnected,
    check_request_arguments,
    check_service_arguments,
)
from sglang_envelope.serve.incoming import read_client_body
from sglang_envelope.serve.legs import Leg
from sglang_envelope.serve.many import fan_out, samples_of
from sglang_envelope.serve.pair import (
    PrefillLeg,
    PrefillServer,
    engine_requests,
    with_prefill_side,
)
from sglang_envelope.serve.signals import calling_on
from sglang_envelope.serve.transport import (
    Transport,
    as_upstream_error,
    transport_failures,
)
from sglang_envelope.serve.watch import (
    ClientListener,
    Disconnected,
    is_gone,
    read_past_done,
    until_done_or_gone,
)

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "CLIENT_GONE",
    "DEFAULT_CLOSE_DEADLINE_S",
    "DEFAULT_IDLE_TIMEOUT_S",
    "Answer",
    "Service",
]

#: The status of an answer to a client that went away (nginx's "client closed request").
CLIENT_GONE: Final = 499
#: How long SGLang may send nothing on an engine request: the answer's head (for a
#: unary engine request, which SGLang sends whole at its end, the whole generation),
#: then between chunks. Generous: SGLang may queue a request, or pause for a long prompt.
DEFAULT_IDLE_TIMEOUT_S: Final = 600.0
#: How long `Service.aclose` waits for the aborts it began before it gives up on them.
DEFAULT_CLOSE_DEADLINE_S: Final = 5.0


def _shutting_down() -> UpstreamError:
    return UpstreamError("the service is shutting down", 503)


class Service:
    """One SGLang server (or prefill/decode pair), served to clients."""

    __slots__ = (
        "_aborts",
        "_client_incremental",
        "_closing",
        "_deployment",
        "_idle_s",
        "_new_rid",
        "_open",
        "_overrides",
        "_poll_s",
        "_prefill",
        "_routing",
        "_target",
        "_transport",
        "max_bytes",
    )

    def __init__(
        self,
        transport: Transport,
        *,
        deployment: Deployment,
        prefill: PrefillServer | None = None,
        target: Target = Target(),  # noqa: B008 -- frozen, so sharing is safe
        routing: Routing | None = None,
        abort_policy: AbortPolicy = AbortPolicy(),  # noqa: B008
        on_abort: AbortReport | None = None,
        client_incremental: bool = False,
        rid: Callable[[], str] = new_rid,
        disconnect_poll_s: float = 0.1,
        max_bytes: int = DEFAULT_MAX_BYTES,
        header_overrides: bool = False,
        idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
    ) -> None:
        check_service_arguments(locals())
        self._overrides = header_overrides
        self._transport = transport
        self._prefill = prefill
        self._deployment = deployment
        self._target = target
        self._routing = routing
        self._aborts = Aborts(abort_policy, on_abort)
        self._client_incremental = client_incremental
        self._new_rid = rid
        self._poll_s = disconnect_poll_s
        self._idle_s = idle_timeout_s
        self.max_bytes = max_bytes
        #: Every leg sent and not yet settled (`_settle`): what `aclose` stops.
        self._open: set[Leg] = set()
        self._closing = False

    async def __aenter__(self) -> Service:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def disconnect_poll_s(self) -> float:
        """How often a client's connection is tested while nothing is written to it."""
        return self._poll_s

    async def aclose(self, deadline_s: float = DEFAULT_CLOSE_DEADLINE_S) -> None:
        """Close the service within `deadline_s` seconds.

        A request that comes after is answered 503. Every answer in flight is stopped
        at once (`stop_serving`): a stream ends with SGLang's error frame (code 503)
        and ``data: [DONE]``, a unary client not yet answered gets 503, and each
        engine request is aborted by its plan. The aborts are awaited until the
        deadline; those left then are cancelled and their connections released.
        """
        check_seconds("deadline_s", deadline_s)
        self.stop_serving()
        await self._aborts.wait(float(deadline_s))

    def stop_serving(self) -> None:
        """`aclose`'s first step, which never suspends (a signal handler's, `close_on`):
        refuse new requests with 503, stop every answer in flight, abort its engine
        request."""
        self._closing = True
        for leg in list(self._open):
            leg.stop(_shutting_down())
            self._settle(leg)

    def close_on(self, *signals: int) -> contextlib.AbstractContextManager[None]:
        """While the block runs, each of `signals` (``signal.SIGTERM``) calls
        `stop_serving` at once, then the handler it had: the server's own (uvicorn's),
        which stops taking requests and waits for those in flight, now ending. Use it
        inside the running loop, in the main thread, with a server that handles the
        signal itself; `aclose` at the server's shutdown then awaits the aborts. Raises
        `EnvelopeError` naming a signal that is not one or cannot be handled."""
        return calling_on(signals, self.stop_serving)

    @property
    def aborts_pending(self) -> int:
        """How many aborts (and releases of answers) are still under way."""
        return self._aborts.pending

    async def generate(
        self,
        body: bytes | str | Mapping[str, Any] | ClientRequest,
        *,
        disconnected: Disconnected | None = None,
        routing: Routing | None = None,
        prefill_dp_rank: int | None = None,
    ) -> Answer:
        """The answer to a client's ``POST /generate`` `body`, checked once.

        `disconnected` is the framework's test for a client gone (Starlette's
        ``request.is_disconnected``), polled while a unary answer is awaited.
        `routing` is what the router decided for this request (the service's
        own when None); `prefill_dp_rank`, for a pair, the prefill server's
        data-parallel rank (`Bootstrap.prefill_dp_rank`).

        `body` may be a `ClientRequest` already made (for the service's target),
        such as a `continuation_request`. A batch of prompts, or n > 1 samples,
        is fanned out one request a sequence (`serve.many`): the client gets the
        one answer SGLang gives, an array or frames with ``"index"``.
        """
        check_target(body, self._target)
        check_disconnected(disconnected)
        try:
            request = client_request(body, self._target)
            if not isinstance(request, tuple):
                envelope = to_worker_envelope(request, rid=self._new_rid())
        except EnvelopeError as exc:
            return refused(exc, stream_of(body))
        if isinstance(request, tuple):  # a batch: one request a sequence
            return await self._many(request, disconnected, routing, prefill_dp_rank)
        return await self.answer(
            envelope,
            client_rid=request.rid or envelope.rid,
            body=body if type(body) is bytes else None,
            disconnected=disconnected,
            routing=routing,
            prefill_dp_rank=prefill_dp_rank,
        )

    async def generate_request(
        self,
        headers: Mapping[str, str],
        chunks: AsyncIterable[bytes],
        *,
        disconnected: Disconnected | None = None,
        receive: Callable[[], Awaitable[Mapping[str, Any]]] | None = None,
        routing: Routing | None = None,
        prefill_dp_rank: int | None = None,
    ) -> Answer:
        """The answer to a client's HTTP ``POST /generate``: its `headers` and its body's
        `chunks` (Starlette's ``request.headers, request.stream()``; aiohttp: `respond`),
        read as SGLang's server reads them (`serve.incoming`), then `generate`'s.

        A ``Content-Type`` SGLang does not parse as JSON is refused as SGLang refuses
        it (400, pydantic's shape); a body over 16 MiB with 413, unread when its
        ``Content-Length`` says so, else read no further than the bound. Either
        answer has ``connection: close``: the server reads no more of the body.

        `receive`, the request's ASGI ``receive`` (Starlette's ``request.receive``), in
        place of `disconnected`: once the body is read, the client's departure is heard
        on it (`ClientListener`), at once and without polling.
        """
        check_request_arguments(headers, chunks, receive, disconnected)
        try:
            body = await read_client_body(headers, chunks)
        except RequestRejected as exc:
            return refused_unread(exc)
        listener = None if receive is None else ClientListener(receive)
        try:
            return await self.generate(
                body,
                disconnected=listener or disconnected,
                routing=routing,
                prefill_dp_rank=prefill_dp_rank,
            )
        finally:
            if listener is not None:
                listener.close()

    async def generate_envelope(
        self,
        wire: bytes,
        *,
        disconnected: Disconnected | None = None,
        routing: Routing | None = None,
        prefill_dp_rank: int | None = None,
    ) -> Answer:
        """The answer to a worker envelope off the wire (`encode_envelope`), checked anew.

        The client gets back its own rid, or the frontend's when it sent none.
        """
        try:
            envelope = decode_envelope(wire, target=self._target)
            client_rid = envelope.request.rid or envelope.rid
            owned = to_worker_envelope(envelope.request, rid=self._new_rid())
        except EnvelopeError as exc:
            return refused(exc, envelope_stream_requested(wire))
        body = request_bytes(wire) if self._overrides else None
        return await self.answer(
            owned,
            client_rid=client_rid,
            body=body,
            disconnected=disconnected,
            routing=routing,
            prefill_dp_rank=prefill_dp_rank,
        )

    async def answer(
        self,
        envelope: WorkerEnvelope,
        *,
        client_rid: str,
        body: bytes | None = None,
        disconnected: Disconnected | None = None,
        routing: Routing | None = None,
        prefill_dp_rank: int | None = None,
    ) -> Answer:
        """The answer to `envelope`, run under `envelope.rid`, given back as `client_rid`.

        `body` is the client's body that `envelope.request` was decoded from: with
        `header_overrides`, sent as it is where override headers carry the engine
        request. n > 1 samples run one request each, back as `f"{client_rid}_{k}"`.
        Raises `EnvelopeError` naming `envelope`, `client_rid` or `body` of the wrong
        type (`client_rid`: not a non-empty string), before anything is sent.
        """
        check_answer_arguments(envelope, client_rid, body)
        check_disconnected(disconnected)
        try:
            if self._closing:
                raise _shutting_down()
            samples = samples_of(envelope.request, client_rid)  # n > 1: one a sample
            if samples is None:
                engines = engine_requests(
                    envelope,
                    self._deployment,
                    prefill=self._prefill,
                    transport=self._transport,
                    routing=routing or self._routing,
                    prefill_dp_rank=prefill_dp_rank,
                )
        except EnvelopeError as exc:
            return refused(exc, envelope.stream)
        if samples is not None:
            return await self._many(samples, disconnected, routing, prefill_dp_rank)
        if disconnected is not None and await is_gone(disconnected):
            return whole_answer(CLIENT_GONE, JSON, b"")  # gone already: never dispatched
        legs = await self._dispatched(engines, envelope, body, disconnected)
        if isinstance(legs, Answer):
            return legs
        main = legs[-1]
        prefill = self._read_prefill(legs[0], main) if len(legs) == 2 else None
        if main.watched.status != 200:
            return await self._refused_by_engine(main, prefill, envelope.stream)
        if envelope.stream:
            relayed = await started(self._relayed(main, client_rid, prefill))
            return Answer(200, {"content-type": EVENT_STREAM}, relayed)
        return await self._unary(main, client_rid, disconnected, prefill)

    async def _dispatched(
        self,
        engines: list[tuple[EngineRequest, Transport]],
        envelope: WorkerEnvelope,
        body: bytes | None,
        disconnected: Disconnected | None,
    ) -> list[Leg] | Answer:
        """The legs of `engines`, sent at once and kept in flight (`_open`) until settled,
        once every one is sent; or, when the client left first or a leg could not be
        sent, the answer to give, the other legs aborted."""
        import asyncio

        if self._closing:  # `stop_serving` came while the client was looked at
            return refused(_shutting_down(), envelope.stream)
        legs = [
            Leg(e, to, self._wire(e, envelope.request, body), self._idle_s)
            for e, to in engines
        ]
        self._open.update(legs)
        sent = asyncio.gather(*(leg.sent for leg in legs), return_exceptions=True)
        try:
            gone = await until_done_or_gone(sent, disconnected, self._poll_s)
        except BaseException:  # cancelled (aiohttp cancels a handler whose client left)
            self._settle_all(legs)
            raise
        failed = [] if gone else [leg.failure() for leg in legs]
        failure = next((error for error in failed if error is not None), None)
        if not gone and failure is None:
            return legs
        self._settle_all(legs)  # a leg not sent: the other is aborted
        if gone:
            return whole_answer(CLIENT_GONE, JSON, b"")
        if not isinstance(failure, EnvelopeError):
            raise failure  # type: ignore[misc]
        return refused(failure, envelope.stream)

    async def _many(
        self,
        samples: tuple[ClientRequest, ...],
        disconnected: Disconnected | None,
        routing: Routing | None,
        prefill_dp_rank: int | None,
    ) -> Answer:
        def one(envelope: WorkerEnvelope, client_rid: str) -> Awaitable[Answer]:
            return self.answer(
                envelope,
                client_rid=client_rid,
                disconnected=disconnected,
                routing=routing,
                prefill_dp_rank=prefill_dp_rank,
            )

        return await fan_out(one, samples, self._new_rid)

    def _wire(
        self, engine: EngineRequest, request: ClientRequest, body: bytes | None
    ) -> tuple[bytes, Mapping[str, str]] | None:
        """The client's own body and SGLang's override headers,
        when they can carry `engine`."""
        if not self._overrides or body is None:
            return None
        headers = header_overrides(engine, request)
        return None if headers is None else (body, headers)

    def _read_prefill(self, leg: Leg, main: Leg) -> PrefillLeg:
        """Read the prefill's answer to its end;
        its failure aborts the decode leg at once."""
        import asyncio

        reading = asyncio.ensure_future(leg.response(self._deployment, self.max_bytes))
        prefill = PrefillLeg(leg, reading, self._deployment.routed_experts_shape)

        def ended(task: asyncio.Future[Any]) -> None:
            failed = not task.cancelled() and task.exception() is not None
            # Its reader reads it to the end.
            if failed and not main.watched.finished.is_set():
                self._aborts.start(
                    main, asyncio.ensure_future(main.watched.finished.wait())
                )

        reading.add_done_callback(ended)
        return prefill

    async def _refused_by_engine(
        self, main: Leg, prefill: PrefillLeg | None, stream: bool
    ) -> Answer:
        """SGLang's error answer (not 200) in the client's mode; the other leg aborted."""
        try:
            await main.response(self._deployment, self.max_bytes)  # raises SGLang's error
            error: EnvelopeError = ResponseError(f"SGLang answered {main.watched.status}")
        except EnvelopeError as exc:
            error = exc
        finally:
            self._settle(main, prefill=prefill)
        return refused(error, stream)

    def _settle_all(self, legs: list[Leg]) -> None:
        for leg in legs:
            self._settle(leg)

    def _settle(
        self,
        leg: Leg,
        reading: asyncio.Future[Any] | None = None,
        prefill: PrefillLeg | None = None,
    ) -> None:
        """Abort each answer not read to its end, else release it (never suspends). A
        send still waiting for a connection is cancelled: it is never dispatched."""
        self._open.discard(leg)
        if not leg.dispatched:  # still waiting for a connection: it never will
            leg.sending.cancel()
        elif leg.watched.finished.is_set():
            self._aborts.release(leg.watched)
        else:
            self._aborts.start(leg, reading)
        if prefill is not None:
            self._settle(prefill.leg, None if prefill.reading.done() else prefill.reading)

    async def _relayed(
        self, main: Leg, client_rid: str, prefill: PrefillLeg | None
    ) -> AsyncGenerator[bytes, None]:
        """SGLang's stream, relayed in the client's mode under the client's rid."""
        engine_id, client_id = id_bytes(main.engine, client_rid)
        # The pair's prefill leg, when its prompt side goes into the decode frames.
        asks = main.engine.body.return_logprob or main.engine.body.return_routed_experts
        merging = prefill if asks else None
        incremental = self._deployment.incremental_streaming_output
        # A cumulative frame is the answer so far: SGLang's stream repeats the answer in
        # every frame, so `max_bytes` bounds each frame, never their sum, which SGLang
        # delivers whole (the relay holds one event at a time). Otherwise it bounds the
        # stream, whose increments add up to the answer.
        whole, event = (
            (sys.maxsize, self.max_bytes)
            if incremental is False
            else (self.max_bytes, DEFAULT_MAX_EVENT_BYTES)
        )
        try:
            yield b""  # dropped by `started`: from here on, a body closed is settled
            async for out in relay_sse_async(
                main.watched,
                incremental=incremental,
                client_incremental=self._client_incremental,
                max_bytes=whole,
                max_event_bytes=min(event, self.max_bytes),
            ):
                if prefill is not None and prefill.failure() is not None:
                    raise prefill.failure()  # type: ignore[misc]
                if merging is not None:
                    out = await with_prefill_side(out, merging)
                yield out.replace(engine_id, client_id)
            await read_past_done(main.watched)
        except transport_failures() as error:
            yield error_event(as_upstream_error(error)) + SSE_DONE
        except EnvelopeError as error:  # a broken connection, or the prefill's failure
            yield error_event(error) + SSE_DONE
        finally:
            self._settle(main, prefill=prefill)

    async def _unary(
        self,
        main: Leg,
        client_rid: str,
        disconnected: Disconnected | None,
        prefill: PrefillLeg | None,
    ) -> Answer:
        """A unary client's answer, aborted at once when the client goes away."""
        import asyncio

        reading = asyncio.ensure_future(self._whole(main, prefill))
        try:
            gone = await until_done_or_gone(reading, disconnected, self._poll_s)
        finally:  # also when cancelled (aiohttp cancels a handler whose client left)
            self._settle(main, None if reading.done() else reading, prefill)
        if gone:
            return whole_answer(CLIENT_GONE, JSON, b"")
        try:
            response = reading.result()
        except EnvelopeError as exc:
            return refused(exc, False)
        finished = finalize_response(response, engine=main.engine, client_rid=client_rid)
        return whole_answer(200, JSON, msgspec.json.encode(finished))

    async def _whole(self, main: Leg, prefill: PrefillLeg | None) -> dict[str, Any]:
        """The decode (or aggregated) answer, with the prefill's prompt side."""
        response = await main.response(self._deployment, self.max_bytes)
        if prefill is None:
            return response
        return await prefill.merged(response)
