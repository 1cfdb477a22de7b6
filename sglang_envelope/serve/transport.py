"""The caller's transport to one SGLang server: the only I/O the serving loop does.

A transport is two async callables, as a `Protocol`: `generate` posts an
engine request to ``/generate`` and returns SGLang's answer as it arrives
(`EngineReply`), `abort` posts an ``/abort_request`` body and returns the
status. `sglang_envelope.adapters.httpx` and `sglang_envelope.adapters.aiohttp`
implement it; any object with the two methods does.

A transport raises `UpstreamError` when SGLang cannot be reached or times out.
The loop also takes the standard library's ``OSError``, ``EOFError`` and
``TimeoutError`` (``asyncio.TimeoutError`` too, a class of its own before
Python 3.11) as transport failures, so a hand-written transport over asyncio
streams needs no mapping of its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Protocol

import msgspec

from sglang_envelope.errors.exceptions import EnvelopeError, UpstreamError

__all__ = [
    "EngineReply",
    "Transport",
    "as_upstream_error",
    "json_headers",
    "transport_failures",
]


class EngineReply(msgspec.Struct, frozen=True):
    """SGLang's answer to one engine request, as it arrives."""

    #: The HTTP status SGLang sent.
    status: int
    #: The answer's body, chunk by chunk (any chunking).
    chunks: AsyncIterator[bytes]
    #: Releases the connection; called once, after the body was read or given up on.
    close: Callable[[], Awaitable[None]]
    #: SGLang's response headers, names in lower case.
    headers: Mapping[str, str] = msgspec.field(default_factory=dict)


class Transport(Protocol):
    """One SGLang server, as the serving loop reaches it."""

    async def generate(self, body: bytes, headers: Mapping[str, str]) -> EngineReply:
        """POST `body` (the engine request's JSON) to ``/generate`` with `headers`."""
        ...

    async def abort(self, body: bytes) -> int:
        """POST `body` to ``/abort_request``; return the HTTP status."""
        ...


def json_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """`headers` for a JSON body: each name once, in lower case (HTTP names are
    case-insensitive; of two spellings the last is kept), with ``content-type:
    application/json`` unless `headers` name a content type of their own. A strict
    server (aiohttp's) refuses a request that carries ``Content-Type`` twice."""
    sent = {name.lower(): value for name, value in headers.items()}
    sent.setdefault("content-type", "application/json")
    return sent


def _timeouts() -> tuple[type[BaseException], ...]:
    import asyncio  # the loop runs under asyncio: imported already, and only when needed

    return (TimeoutError, asyncio.TimeoutError)  # one class from Python 3.11 on


def transport_failures() -> tuple[type[BaseException], ...]:
    """What the loop takes as a failed transport when a transport raises it itself (read
    in an ``except`` clause, so only once something was raised)."""
    return (OSError, EOFError, *_timeouts())


def as_upstream_error(error: BaseException) -> UpstreamError:
    """`error`, raised by a transport, as the `UpstreamError` the client is answered."""
    if isinstance(error, UpstreamError):
        return error
    if isinstance(error, _timeouts()):
        return UpstreamError("SGLang did not answer in time", 504)
    return UpstreamError(f"SGLang could not be reached: {type(error).__name__}: {error}")


def check_reply(reply: object) -> EngineReply:
    """`reply`, when a transport's `generate` returned an `EngineReply`."""
    if not isinstance(reply, EngineReply):
        raise EnvelopeError(
            f"transport.generate must return an EngineReply, got {type(reply).__name__}"
        )
    if type(reply.status) is not int or not 100 <= reply.status <= 599:
        raise EnvelopeError(
            f"EngineReply.status: expected an HTTP status, got {reply.status!r}"
        )
    return reply
