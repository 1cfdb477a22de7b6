"""One engine request on its way: what was sent, where, and its answer as it is read."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from sglang_envelope.errors.exceptions import EnvelopeError, UpstreamError
from sglang_envelope.request.deployment import Deployment
from sglang_envelope.request.engine import EngineRequest
from sglang_envelope.response.aggregate import aggregate_sse_async, parse_unary
from sglang_envelope.serve.transport import (
    Slots,
    Transport,
    as_upstream_error,
    check_reply,
    transport_failures,
)
from sglang_envelope.serve.watch import WatchedReply, read_all, read_past_done

if TYPE_CHECKING:
    import asyncio

__all__ = ["Leg"]


class Leg:
    """An engine request, sent with `transport` as soon as it is made, and its answer.

    `sending` is the task that sends it; it attaches SGLang's answer to
    `watched` when the answer's head arrives, or ends in `UpstreamError`. `sent`
    is done when `sending` is, or when the leg is stopped (`stop`): what the
    client's answer waits for. With `idle_s`, SGLang has that long to send the
    head, and each chunk after it (`WatchedReply`), else `UpstreamError` 504.
    """

    __slots__ = (
        "dispatched",
        "engine",
        "sending",
        "sent",
        "stopped",
        "transport",
        "watched",
    )

    def __init__(
        self,
        engine: EngineRequest,
        transport: Transport,
        wire: tuple[bytes, Mapping[str, str]] | None = None,
        idle_s: float | None = None,
    ) -> None:
        """Send `engine` with `transport`: as `wire` (a body and its headers), else as
        `engine.to_json()` and `engine.headers`."""
        import asyncio

        self.engine = engine
        self.transport = transport
        self.watched = WatchedReply(streamed=engine.stream, idle_s=idle_s)
        #: Why the leg was stopped before its answer came (`stop`).
        self.stopped: EnvelopeError | None = None
        #: Whether it was handed to the transport: a leg still waiting for a connection
        #: has not reached SGLang, and never will once cancelled.
        self.dispatched = False
        body, headers = wire or (engine.to_json(), engine.headers)
        #: Once it is done, `failure()` says why the answer cannot be read (None: it can).
        self.sent: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sending: asyncio.Future[None] = asyncio.ensure_future(
            self._send(body, headers, idle_s)
        )
        self.sending.add_done_callback(self._mark_sent)

    async def _send(
        self, body: bytes, headers: Mapping[str, str], idle_s: float | None
    ) -> None:
        """Take a connection (the transport's `Slots`, when it has them), send, and attach
        SGLang's answer; the connection is freed when the answer is closed."""
        import asyncio

        slots = getattr(self.transport, "slots", None)
        release = await slots.take() if isinstance(slots, Slots) else None
        self.dispatched = True
        timer = None
        if idle_s is not None:
            silent = UpstreamError(f"SGLang sent nothing for {idle_s:g} s", 504)
            timer = asyncio.get_running_loop().call_later(idle_s, self.stop, silent)
        try:
            reply = check_reply(await self.transport.generate(body, headers))
        except BaseException as error:
            if release is not None:
                release()
            if isinstance(error, asyncio.CancelledError) and self.stopped is not None:
                raise self.stopped from None
            if isinstance(error, transport_failures()):
                raise as_upstream_error(error) from error
            raise
        finally:
            if timer is not None:
                timer.cancel()
        if release is not None:
            reply = msgspec.structs.replace(reply, close=_then(reply.close, release))
        self.watched.attach(reply)

    def _mark_sent(self, sending: asyncio.Future[None]) -> None:
        if not self.sent.done():
            self.sent.set_result(None)

    def stop(self, error: EnvelopeError) -> None:
        """Stop the leg with `error` (never suspends): its `failure()` is `error` unless
        its answer's head has come, `sent` is done, and a reader of the answer gets
        `error` (`WatchedReply.stop`). A send still waiting for a connection is cancelled
        (never dispatched); one SGLang has is left to run, so that the abort that follows
        sees the answer end (`WatchedReply.drain`), then releases it."""
        if not self.sending.done():
            self.stopped = error
            if not self.dispatched:
                self.sending.cancel()
            self._mark_sent(self.sending)
        self.watched.stop(error)

    def failure(self) -> BaseException | None:
        """Why the answer cannot be read, once `sent` is done: the error the leg was
        stopped with before the answer's head came, else the send's failure (None when
        the head came)."""
        import asyncio

        if self.stopped is not None:
            return self.stopped
        if not self.sending.done():
            return None
        if self.sending.cancelled():
            return asyncio.CancelledError()
        return self.sending.exception()

    async def response(self, deployment: Deployment, max_bytes: int) -> dict[str, Any]:
        """SGLang's whole answer, as one response (a prefill leg's stream aggregated).

        Raises SGLang's error as `EngineError` (an error body, with its status,
        or an error frame), and `ResponseError` for an answer that breaks the
        contract.
        """
        watched = self.watched
        try:
            if watched.status != 200 or not self.engine.stream:
                body = await read_all(watched, max_bytes)
                return dict(parse_unary(body, status=watched.status))
            incremental = deployment.incremental_streaming_output
            response = await aggregate_sse_async(
                watched, incremental=incremental, max_bytes=max_bytes
            )
            await read_past_done(watched)
            return dict(response)
        except transport_failures() as error:
            raise as_upstream_error(error) from error


def _then(
    close: Callable[[], Awaitable[None]], release: Callable[[], None]
) -> Callable[[], Awaitable[None]]:
    """`close`, then `release` (the answer's connection closed, then its slot freed)."""

    async def closed() -> None:
        try:
            await close()
        finally:
            release()

    return closed
