"""One engine request on its way: what was sent, where, and its answer as it is read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sglang_envelope.request.deployment import Deployment
from sglang_envelope.request.engine import EngineRequest
from sglang_envelope.response.aggregate import parse_unary
from sglang_envelope.response.aiter import aggregate_sse_async
from sglang_envelope.serve.transport import (
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
    `watched` when the answer's head arrives, or ends in `UpstreamError`.
    """

    __slots__ = ("engine", "sending", "transport", "watched")

    def __init__(
        self,
        engine: EngineRequest,
        transport: Transport,
        wire: tuple[bytes, Mapping[str, str]] | None = None,
    ) -> None:
        """Send `engine` with `transport`: as `wire` (a body and its headers), else as
        `engine.to_json()` and `engine.headers`."""
        import asyncio

        self.engine = engine
        self.transport = transport
        self.watched = WatchedReply(streamed=engine.stream)
        body, headers = wire or (engine.to_json(), engine.headers)
        self.sending: asyncio.Future[None] = asyncio.ensure_future(
            self._send(body, headers)
        )

    async def _send(self, body: bytes, headers: Mapping[str, str]) -> None:
        try:
            reply = await self.transport.generate(body, headers)
        except transport_failures() as error:
            raise as_upstream_error(error) from error
        self.watched.attach(check_reply(reply))

    @property
    def status(self) -> int:
        """SGLang's HTTP status (once `sending` has ended well)."""
        return self.watched.status

    async def response(self, deployment: Deployment, max_bytes: int) -> dict[str, Any]:
        """SGLang's whole answer, as one response (an internal stream aggregated).

        Raises SGLang's error as `EngineError` (an error body, with its status,
        or an error frame), and `ResponseError` for an answer that breaks the
        contract.
        """
        watched = self.watched
        try:
            if self.status != 200 or not self.engine.stream:
                body = await read_all(watched, max_bytes)
                return dict(parse_unary(body, status=self.status))
            incremental = deployment.incremental_streaming_output
            response = await aggregate_sse_async(
                watched, incremental=incremental, max_bytes=max_bytes
            )
            await read_past_done(watched)
            return dict(response)
        except transport_failures() as error:
            raise as_upstream_error(error) from error
