"""The client's answer, and what the loop reads off the client's bytes."""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import NamedTuple

import msgspec

from sglang_envelope.errors.answers import error_response, stream_requested
from sglang_envelope.errors.exceptions import EnvelopeError, UpstreamError
from sglang_envelope.releases.target import Target
from sglang_envelope.request.engine import EngineRequest
from sglang_envelope.request.sequences import decode_sequences
from sglang_envelope.request.types import ClientRequest

__all__ = [
    "Answer",
    "check_target",
    "client_request",
    "envelope_stream_requested",
    "id_bytes",
    "new_rid",
    "refused",
    "refused_unread",
    "request_bytes",
    "started",
    "stream_of",
    "whole_answer",
]

_encode = msgspec.json.encode


class Answer(NamedTuple):
    """The client's answer: write `status` and `headers`, then every chunk of `body`."""

    status: int
    headers: Mapping[str, str]
    body: AsyncGenerator[bytes, None]

    @property
    def media_type(self) -> str:
        return self.headers["content-type"]


async def _one(body: bytes) -> AsyncGenerator[bytes, None]:
    yield body


async def started(body: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
    """`body` run to its first ``yield``, an empty chunk that is dropped: a body closed
    (or dropped, which asyncio closes) before its first chunk is read then still runs its
    ``finally``, which a generator never started does not."""
    await anext(body)
    return body


def whole_answer(status: int, media_type: str, body: bytes) -> Answer:
    return Answer(status, {"content-type": media_type}, _one(body))


def refused(exc: EnvelopeError, stream: bool) -> Answer:
    """The client's answer to `exc`, in its mode: with ``Retry-After`` when `exc` says
    when to try again (an `UpstreamError` of the service's own 503)."""
    status, media_type, body = error_response(exc, stream=stream)
    headers = {"content-type": media_type}
    if isinstance(exc, UpstreamError) and exc.retry_after_s is not None:
        headers["retry-after"] = str(exc.retry_after_s)
    return Answer(status, headers, _one(body))


def refused_unread(exc: EnvelopeError) -> Answer:
    """SGLang's answer to a request refused before its body was read to its end (its
    type, its size), with ``connection: close``: the server reads no more of it."""
    status, media_type, body = error_response(exc)
    headers = {"content-type": media_type, "connection": "close"}
    return Answer(status, headers, _one(body))


def new_rid() -> str:
    """A request id for the engine: 32 lowercase hex digits, unique."""
    return uuid.uuid4().hex


def client_request(
    body: object, target: Target
) -> ClientRequest | tuple[ClientRequest, ...]:
    """The client's request: `body` decoded for `target` by `decode_sequences` (a
    batch: its one-sample requests, `Sequences.samples()`), or a `ClientRequest`
    (`check_target`)."""
    if type(body) is ClientRequest:
        return body
    sequences = decode_sequences(body, target=target)  # type: ignore[arg-type]
    return sequences.samples() if sequences.batch else sequences.requests[0]


def check_target(body: object, target: Target) -> None:
    """Raise `EnvelopeError` for a `ClientRequest` made for another target than `target`:
    the caller's mistake, not the client's."""
    if type(body) is ClientRequest and body.target != target:
        raise EnvelopeError(
            f"request.target: the request was made for {body.target!r}, "
            f"the service serves {target!r}"
        )


def stream_of(body: object) -> bool:
    """The client's mode, read from a body that may not decode (never raises)."""
    if type(body) is ClientRequest:
        return body.stream is True
    return stream_requested(body)  # type: ignore[arg-type]


def id_bytes(engine: EngineRequest, client_rid: str) -> tuple[bytes, bytes]:
    """The bytes opening a frame's ``meta_info`` under the engine's rid, and the client's.

    SGLang writes ``id`` first in ``meta_info``; inside a JSON string a quote is
    escaped, so these bytes occur only where SGLang put them.
    """
    return (
        b'"meta_info":{"id":' + _encode(engine.body.rid),
        b'"meta_info":{"id":' + _encode(client_rid),
    )


class _EnvelopeRequest(msgspec.Struct):
    request: msgspec.Raw = msgspec.Raw(b"{}")


def envelope_stream_requested(wire: object) -> bool:
    """The client's mode, read from an envelope that did not decode (never raises)."""
    request = request_bytes(wire)
    return request is not None and stream_requested(request)


def request_bytes(wire: object) -> bytes | None:
    """The client's body inside a worker envelope (``"request"``'s bytes; None when the
    envelope is not a JSON object, never raises)."""
    try:
        raw = msgspec.json.decode(  # type: ignore[call-overload]
            wire, type=_EnvelopeRequest
        )
    except (msgspec.DecodeError, TypeError, ValueError):
        return None
    return bytes(raw.request)
