"""One engine request on its way: what was sent, where, and its answer as it is read."""

from __future__ import annotations

from typing import Any

from sglang_envelope.request.deployment import Deployment
from sglang_envelope.request.engine import EngineRequest
from sglang_envelope.response.aggregate import parse_unary
from sglang_envelope.response.aiter import aggregate_sse_async
from sglang_envelope.serve.transport import (
    TRANSPORT_FAILURES,
    Transport,
    as_upstream_error,
    check_reply,
)
from sglang_envelope.serve.watch import WatchedReply, read_all, read_past_done

__all__ = ["Leg"]


class Leg:
    """An engine request sent with `transport`, and SGLang's answer to it (`watched`)."""

    __slots__ = ("engine", "transport", "watched")

    def __init__(self, engine: EngineRequest, transport: Transport, watched: WatchedReply) -> None:
        self.engine = engine
        self.transport = transport
        self.watched = watched

    @classmethod
    async def send(cls, engine: EngineRequest, transport: Transport) -> Leg:
        """Send `engine`; `UpstreamError` when the transport fails."""
        try:
            reply = await transport.generate(engine.to_json(), engine.headers)
        except TRANSPORT_FAILURES as error:
            raise as_upstream_error(error) from error
        return cls(engine, transport, WatchedReply(check_reply(reply), streamed=engine.stream))

    @property
    def status(self) -> int:
        return self.watched.reply.status

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
        except TRANSPORT_FAILURES as error:
            raise as_upstream_error(error) from error
