"""The client's answer, and what the loop reads off the client's bytes."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import NamedTuple

import msgspec

from sglang_envelope.errors.answers import error_response, stream_requested
from sglang_envelope.errors.exceptions import EnvelopeError
from sglang_envelope.request.engine import EngineRequest

__all__ = [
    "Answer",
    "envelope_stream_requested",
    "id_bytes",
    "refused",
    "request_bytes",
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


def whole_answer(status: int, media_type: str, body: bytes) -> Answer:
    return Answer(status, {"content-type": media_type}, _one(body))


def refused(exc: EnvelopeError, stream: bool) -> Answer:
    return whole_answer(*error_response(exc, stream=stream))


def id_bytes(engine: EngineRequest, client_rid: str) -> tuple[bytes, bytes]:
    """The bytes that open a frame's ``meta_info`` under the engine's rid, and the client's.

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
    try:
        raw = msgspec.json.decode(wire, type=_EnvelopeRequest)  # type: ignore[call-overload]
    except (msgspec.DecodeError, TypeError, ValueError):
        return False
    return stream_requested(bytes(raw.request))


def request_bytes(wire: bytes) -> bytes | None:
    """The client's body inside a worker envelope that decoded (``"request"``'s bytes)."""
    try:
        raw = msgspec.json.decode(wire, type=_EnvelopeRequest)
    except (msgspec.DecodeError, TypeError, ValueError):
        return None
    return bytes(raw.request)
