"""A prefill/decode pair, served as one request.

SGLang's disaggregated serving takes the same body, with one bootstrap room,
on both servers at once; the decode server's answer is the client's. Three
facts, seen on a real pair, shape this module:

- both answers must be read to the end: a prefill connection closed early
  aborts the prefill leg, and the decode leg then waits for its timeout
  (300 s). `PrefillLeg` reads the prefill answer to its end in a task;
- a leg that fails leaves the other waiting for that same timeout, so the
  other leg is aborted at once: the decode leg when the prefill fails (here),
  the prefill leg when the decode leg fails (the service, when it settles);
- the decode answer carries the prompt logprobs empty, where an aggregated
  server carries them in every frame and in the unary answer, and the prompt rows
  of ``routed_experts`` as zeros: `with_prefill_side` puts the prefill's into each
  decode frame (`merge_prefill`).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

import msgspec

from sglang_envelope.errors.exceptions import EnvelopeError
from sglang_envelope.request.deployment import Deployment
from sglang_envelope.request.engine import EngineRequest, Role, build_engine_request
from sglang_envelope.request.envelope import WorkerEnvelope
from sglang_envelope.request.routing import Bootstrap, Routing
from sglang_envelope.response.merge import merge_prefill
from sglang_envelope.response.sse import SseDecoder, encode_sse
from sglang_envelope.serve.legs import Leg
from sglang_envelope.serve.transport import Transport

if TYPE_CHECKING:
    import asyncio

__all__ = ["PrefillLeg", "PrefillServer", "engine_requests", "with_prefill_side"]


class PrefillServer(msgspec.Struct, frozen=True):
    """The prefill server of a pair: its transport, and where its KV cache is handed over.

    `bootstrap_host` and `bootstrap_port` are the prefill server's
    ``--disaggregation-bootstrap-port`` address; each request gets a room of its
    own (63 random bits, as SGLang's router draws them).
    """

    transport: Transport
    bootstrap_host: str
    bootstrap_port: int

    def bootstrap(self, prefill_dp_rank: int | None = None) -> Bootstrap:
        """A new `Bootstrap` for one request,
        checked (`EnvelopeError` names the field)."""
        room = secrets.randbits(63)
        return Bootstrap(self.bootstrap_host, self.bootstrap_port, room, prefill_dp_rank)


def engine_requests(
    envelope: WorkerEnvelope,
    deployment: Deployment,
    *,
    prefill: PrefillServer | None,
    transport: Transport,
    routing: Routing | None,
    prefill_dp_rank: int | None,
) -> list[tuple[EngineRequest, Transport]]:
    """The engine requests to send for `envelope`, each with its transport: one
    aggregated request over `transport` without a `prefill` server, else the prefill
    leg, then the decode leg (over `transport`), meeting at one bootstrap room."""
    if prefill is None:
        legs: tuple[tuple[Role, Transport], ...] = ((Role.AGGREGATED, transport),)
        bootstrap = None
    else:
        legs = ((Role.PREFILL, prefill.transport), (Role.DECODE, transport))
        bootstrap = prefill.bootstrap(prefill_dp_rank)
    return [
        (
            build_engine_request(
                envelope,
                input_ids=envelope.request.input_ids,
                role=role,
                deployment=deployment,
                bootstrap=bootstrap,
                routing=routing,
            ),
            to,
        )
        for role, to in legs
    ]


class PrefillLeg:
    """The prefill leg of one request: its answer read to the end, in a task, and the
    shape of one position's routed experts (`Deployment.routed_experts_shape`)."""

    __slots__ = ("leg", "reading", "routed_experts_shape")

    def __init__(
        self,
        leg: Leg,
        reading: asyncio.Future[dict[str, Any]],
        routed_experts_shape: tuple[int, int] | None,
    ) -> None:
        self.leg = leg
        self.reading = reading
        self.routed_experts_shape = routed_experts_shape

    def failure(self) -> BaseException | None:
        """The prefill's failure, once it has ended in one
        (None while it runs or after success)."""
        if not self.reading.done() or self.reading.cancelled():
            return None
        return self.reading.exception()

    async def merged(self, decode_response: dict[str, Any]) -> dict[str, Any]:
        """A decode frame or answer with the prefill's prompt side (`merge_prefill`);
        raises the prefill's failure (`EngineError`, `UpstreamError`, ...)."""
        import asyncio

        return merge_prefill(
            await asyncio.shield(self.reading),
            decode_response,
            routed_experts_start_len=self.leg.engine.body.routed_experts_start_len,
            routed_experts_shape=self.routed_experts_shape,
        )


async def with_prefill_side(events: bytes, prefill: PrefillLeg) -> bytes:
    """`events` (whole SSE events), each frame with the prefill's prompt side.

    Frames without ``meta_info`` (SGLang's error frames) and ``[DONE]`` are
    kept as they are; the prefill's answer is awaited only for a frame that
    carries output.
    """
    decoder = SseDecoder(max_event_bytes=max(len(events), 1))
    out: list[bytes] = []
    try:
        frames = decoder.feed(events)
    except EnvelopeError:  # not the relay's own writing: leave it as it is
        return events
    for frame in frames:
        if type(frame.get("meta_info")) is dict:
            frame = await prefill.merged(frame)
        out.append(encode_sse(frame))
    if decoder.done:
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)
