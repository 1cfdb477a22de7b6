"""The serving loop: a client's body in, the client's answer out, over the caller's transport.

`Service` is made once, at a server's start, with the caller's `Transport` to
SGLang and the SGLang server's `Deployment`. `Service.generate` takes a
client's ``POST /generate`` body (a frontend and worker in one process: the
rules are checked once); `Service.generate_envelope` takes a worker envelope
off the wire (checked again: never trust the wire). Each returns an `Answer`:
a status, headers and an async body, the bytes SGLang itself would have sent
this client.

- It sends SGLang the engine request for the deployment's role, and chooses
  the relay (a streaming client), the aggregation of an internal stream (a
  unary client) or the unary answer (output-flat, which SGLang builds only on
  a unary answer).
- SGLang's status and error bodies are carried through (`error_response`); a
  transport that fails is answered 502 or 504 (`UpstreamError`), and mid-stream
  with SGLang's error frame and ``data: [DONE]``.
- The engine runs under a request id of the service's own (32 hex digits,
  fixed width: SGLang matches aborts by prefix), and the client gets its own
  rid back, in every frame and in the unary answer.
- A client that goes away is aborted at once, in a task of its own
  (`Aborts`): a streaming body closed or cancelled, or `disconnected()`
  turning true while a unary answer is awaited. The answer is read to its end
  meanwhile, and the connection released.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final, NamedTuple

import msgspec

from sglang_envelope.cancel.plan import AbortPolicy
from sglang_envelope.errors.answers import (
    EVENT_STREAM,
    JSON,
    error_event,
    error_response,
    stream_requested,
)
from sglang_envelope.errors.exceptions import EnvelopeError, ResponseError
from sglang_envelope.releases.target import Target
from sglang_envelope.request.deployment import Deployment
from sglang_envelope.request.engine import EngineRequest, Role, build_engine_request
from sglang_envelope.request.envelope import WorkerEnvelope, decode_envelope, to_worker_envelope
from sglang_envelope.request.routing import Routing
from sglang_envelope.request.types import decode_client_request
from sglang_envelope.response.aggregate import DEFAULT_MAX_BYTES, parse_unary
from sglang_envelope.response.aiter import aggregate_sse_async
from sglang_envelope.response.finalize import finalize_response
from sglang_envelope.response.relay import relay_sse_async
from sglang_envelope.response.sse import SSE_DONE
from sglang_envelope.response.types import GenerateResponse
from sglang_envelope.serve.aborts import AbortReport, Aborts
from sglang_envelope.serve.transport import (
    TRANSPORT_FAILURES,
    Transport,
    as_upstream_error,
    check_reply,
)
from sglang_envelope.serve.watch import WatchedReply

__all__ = ["CLIENT_GONE", "Answer", "Service"]

#: The status of an answer to a client that went away (nginx's "client closed request").
CLIENT_GONE: Final = 499
_encode = msgspec.json.encode


class Answer(NamedTuple):
    """The client's answer: write `status` and `headers`, then every chunk of `body`."""

    status: int
    headers: Mapping[str, str]
    body: AsyncIterator[bytes]

    @property
    def media_type(self) -> str:
        return self.headers["content-type"]


async def _one(body: bytes) -> AsyncIterator[bytes]:
    yield body


def _answer(status: int, media_type: str, body: bytes) -> Answer:
    return Answer(status, {"content-type": media_type}, _one(body))


def _refused(exc: EnvelopeError, stream: bool) -> Answer:
    return _answer(*error_response(exc, stream=stream))


def new_rid() -> str:
    """A request id for the engine: 32 lowercase hex digits, unique."""
    return uuid.uuid4().hex


class Service:
    """One SGLang server (or prefill/decode pair), served to clients."""

    __slots__ = (
        "_aborts", "_client_incremental", "_deployment", "_new_rid", "_poll_s",
        "_routing", "_target", "_transport", "max_bytes",
    )  # fmt: skip

    def __init__(
        self,
        transport: Transport,
        *,
        deployment: Deployment,
        target: Target = Target(),  # noqa: B008 -- frozen, so sharing is safe
        routing: Routing | None = None,
        abort_policy: AbortPolicy = AbortPolicy(),  # noqa: B008
        on_abort: AbortReport | None = None,
        client_incremental: bool = False,
        rid: Callable[[], str] = new_rid,
        disconnect_poll_s: float = 0.1,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if not isinstance(deployment, Deployment):
            raise EnvelopeError(f"deployment must be a Deployment, got {type(deployment).__name__}")
        for name, method in (("generate", "generate"), ("abort", "abort")):
            if not callable(getattr(transport, method, None)):
                raise EnvelopeError(f"transport must have an async {name}() method")
        if not isinstance(abort_policy, AbortPolicy):
            raise EnvelopeError(
                f"abort_policy must be an AbortPolicy, got {type(abort_policy).__name__}"
            )
        self._transport = transport
        self._deployment = deployment
        self._target = target
        self._routing = routing
        self._aborts = Aborts(abort_policy, on_abort)
        self._client_incremental = client_incremental
        self._new_rid = rid
        self._poll_s = disconnect_poll_s
        self.max_bytes = max_bytes

    async def __aenter__(self) -> Service:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Wait for the aborts still under way (each ends by its plan's deadline)."""
        await self._aborts.wait()

    @property
    def aborts_pending(self) -> int:
        """How many aborts (and releases of answers) are still under way."""
        return self._aborts.pending

    async def generate(
        self,
        body: bytes,
        *,
        disconnected: Callable[[], Awaitable[bool]] | None = None,
        routing: Routing | None = None,
    ) -> Answer:
        """The answer to a client's ``POST /generate`` `body`, checked once.

        `disconnected` is the framework's test for a client gone (Starlette's
        ``request.is_disconnected``), polled while a unary answer is awaited.
        `routing` is what the router decided for this request (the service's
        own when None).
        """
        try:
            request = decode_client_request(body, target=self._target)
            envelope = to_worker_envelope(request, rid=self._new_rid())
        except EnvelopeError as exc:
            return _refused(exc, stream_requested(body))
        return await self.answer(
            envelope, client_rid=request.rid or envelope.rid,
            disconnected=disconnected, routing=routing,
        )  # fmt: skip

    async def generate_envelope(
        self,
        wire: bytes,
        *,
        disconnected: Callable[[], Awaitable[bool]] | None = None,
        routing: Routing | None = None,
    ) -> Answer:
        """The answer to a worker envelope off the wire (`encode_envelope`), checked again.

        The client gets back its own rid, or the frontend's when it sent none.
        """
        try:
            envelope = decode_envelope(wire, target=self._target)
            client_rid = envelope.request.rid or envelope.rid
            owned = to_worker_envelope(envelope.request, rid=self._new_rid())
        except EnvelopeError as exc:
            return _refused(exc, _envelope_stream_requested(wire))
        return await self.answer(
            owned, client_rid=client_rid, disconnected=disconnected, routing=routing
        )

    async def answer(
        self,
        envelope: WorkerEnvelope,
        *,
        client_rid: str,
        disconnected: Callable[[], Awaitable[bool]] | None = None,
        routing: Routing | None = None,
    ) -> Answer:
        """The answer to `envelope`, run under `envelope.rid`, given back as `client_rid`."""
        try:
            engine = build_engine_request(
                envelope, input_ids=envelope.request.input_ids, role=Role.AGGREGATED,
                deployment=self._deployment, routing=routing or self._routing,
            )  # fmt: skip
            watched = await self._send(engine)
        except EnvelopeError as exc:
            return _refused(exc, envelope.stream)
        if watched.reply.status != 200:
            return await self._engine_refused(watched, envelope.stream)
        if envelope.stream:
            body = self._relayed(engine, watched, client_rid)
            return Answer(200, {"content-type": EVENT_STREAM}, body)
        return await self._unary(engine, watched, client_rid, disconnected)

    async def _send(self, engine: EngineRequest) -> WatchedReply:
        try:
            reply = await self._transport.generate(engine.to_json(), engine.headers)
        except TRANSPORT_FAILURES as error:
            raise as_upstream_error(error) from error
        return WatchedReply(check_reply(reply), streamed=engine.stream)

    async def _engine_refused(self, watched: WatchedReply, stream: bool) -> Answer:
        """SGLang's error answer (not 200), as the client's mode has it."""
        try:
            body = await _read_all(watched, self.max_bytes)
            parse_unary(body, status=watched.reply.status)  # raises SGLang's error
            error: EnvelopeError = ResponseError(f"SGLang answered {watched.reply.status}")
        except EnvelopeError as exc:
            error = exc
        finally:
            await watched.release()
        return _refused(error, stream)

    async def _relayed(
        self, engine: EngineRequest, watched: WatchedReply, client_rid: str
    ) -> AsyncIterator[bytes]:
        """SGLang's stream, relayed in the client's mode under the client's rid."""
        engine_id, client_id = _id_bytes(engine, client_rid)
        try:
            async for out in relay_sse_async(
                watched,
                incremental=self._deployment.incremental_streaming_output,
                client_incremental=self._client_incremental,
                max_bytes=self.max_bytes,
            ):
                yield out.replace(engine_id, client_id)
            await _read_past_done(watched)
        except TRANSPORT_FAILURES as error:  # the connection broke mid-answer
            yield error_event(as_upstream_error(error)) + SSE_DONE
        finally:
            self._settle(engine, watched)

    def _settle(
        self, engine: EngineRequest, watched: WatchedReply, reading: asyncio.Task[Any] | None = None
    ) -> None:
        """Abort an answer not read to its end, else release it (never suspends)."""
        if watched.finished.is_set():
            self._aborts.release(watched)
        else:
            self._aborts.start(engine, watched, self._transport, reading)

    async def _unary(
        self,
        engine: EngineRequest,
        watched: WatchedReply,
        client_rid: str,
        disconnected: Callable[[], Awaitable[bool]] | None,
    ) -> Answer:
        """A unary client's answer, aborted at once when the client goes away."""
        reading = asyncio.ensure_future(self._read_unary(engine, watched))
        try:
            gone = await _until_done_or_gone(reading, disconnected, self._poll_s)
        except BaseException:  # cancelled (aiohttp cancels a handler whose client left)
            self._settle(engine, watched, None if reading.done() else reading)
            raise
        if gone:
            self._settle(engine, watched, reading)
            return _answer(CLIENT_GONE, JSON, b"")
        self._settle(engine, watched)
        try:
            response = reading.result()
        except TRANSPORT_FAILURES as error:
            return _refused(as_upstream_error(error), False)
        except EnvelopeError as exc:
            return _refused(exc, False)
        finished = finalize_response(dict(response), engine=engine, client_rid=client_rid)
        return _answer(200, JSON, _encode(finished))

    async def _read_unary(self, engine: EngineRequest, watched: WatchedReply) -> GenerateResponse:
        if engine.stream:
            incremental = self._deployment.incremental_streaming_output
            response = await aggregate_sse_async(
                watched, incremental=incremental, max_bytes=self.max_bytes
            )
            await _read_past_done(watched)
            return response
        return parse_unary(await _read_all(watched, self.max_bytes))


def _id_bytes(engine: EngineRequest, client_rid: str) -> tuple[bytes, bytes]:
    """The bytes that open a frame's ``meta_info`` under the engine's rid, and the client's.

    SGLang writes ``id`` first in ``meta_info``; inside a JSON string a quote is
    escaped, so these bytes occur only where SGLang put them.
    """
    return (
        b'"meta_info":{"id":' + _encode(engine.body.rid),
        b'"meta_info":{"id":' + _encode(client_rid),
    )


async def _read_past_done(watched: WatchedReply) -> None:
    """After SGLang's ``[DONE]``, its answer ends: read on until it does, or a byte comes."""
    async for _ in watched:
        return  # more after [DONE]: the answer is left unfinished, and aborted


async def _read_all(watched: WatchedReply, max_bytes: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for chunk in watched:
        size += len(chunk)
        if size > max_bytes:
            raise ResponseError(f"SGLang's answer is over max_bytes ({max_bytes} bytes)")
        parts.append(chunk)
    return b"".join(parts)


async def _until_done_or_gone(
    reading: asyncio.Future[Any],
    disconnected: Callable[[], Awaitable[bool]] | None,
    poll_s: float,
) -> bool:
    """Wait for `reading`; True as soon as `disconnected()` says the client went away."""
    if disconnected is None:
        await asyncio.wait([reading])
        return False
    while not reading.done():
        await asyncio.wait([reading], timeout=poll_s)
        if not reading.done() and await disconnected():
            return True
    return False


class _EnvelopeRequest(msgspec.Struct):
    request: msgspec.Raw = msgspec.Raw(b"{}")


def _envelope_stream_requested(wire: object) -> bool:
    """The client's mode, read from an envelope that did not decode (never raises)."""
    try:
        raw = msgspec.json.decode(wire, type=_EnvelopeRequest)  # type: ignore[call-overload]
    except (msgspec.DecodeError, TypeError, ValueError):
        return False
    return stream_requested(bytes(raw.request))
