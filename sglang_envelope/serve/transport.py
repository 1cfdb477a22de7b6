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
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec

from sglang_envelope.errors.exceptions import EnvelopeError, UpstreamError, show_value
from sglang_envelope.request.engine import OVERRIDE_HEADERS

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "CONTROL_TIMEOUT_S",
    "DEFAULT_CONNECTIONS",
    "DEFAULT_POOL_WAIT_S",
    "POOL_RETRY_AFTER_S",
    "EngineReply",
    "Slots",
    "Transport",
    "as_upstream_error",
    "check_adapter_arguments",
    "control_connections",
    "json_headers",
    "overridden",
    "transport_failures",
]

#: How many engine requests a transport of the adapters has open to one SGLang server at
#: once: the size of its generate pool (`Slots`). Its aborts have a lane of their own.
DEFAULT_CONNECTIONS: Final = 256
#: How long an engine request waits for a free generate connection; past it the client
#: is answered 503 with ``Retry-After`` (`POOL_RETRY_AFTER_S`).
DEFAULT_POOL_WAIT_S: Final = 30.0
#: The ``Retry-After`` of a 503 for a full generate pool, in seconds.
POOL_RETRY_AFTER_S: Final = 1
#: The bound on one abort (or GET) over a transport's control lane: connect, write, read.
CONTROL_TIMEOUT_S: Final = 5.0


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


def check_adapter_arguments(
    base_url: object, lanes: Mapping[str, tuple[object, tuple[type, ...]]]
) -> None:
    """Raise `EnvelopeError` naming the first of an adapter's arguments that is wrong:
    `base_url` not a non-empty str, or a lane's client (name -> the value and the types
    it may have) that is neither None nor of its types."""
    if type(base_url) is not str or not base_url:
        raise EnvelopeError(
            "base_url: expected SGLang's URL, a non-empty str, got "
            + show_value(base_url)
        )
    for name, (value, kinds) in lanes.items():
        if value is not None and not isinstance(value, kinds):
            expected = " or ".join(
                f"{kind.__module__.split('.')[0]}.{kind.__name__}" for kind in kinds
            )
            raise EnvelopeError(
                f"{name} must be None or an {expected}, got {type(value).__name__}"
            )


#: The override headers whose value SGLang's HTTP server takes as text; it reads every
#: other one as an int.
_TEXT_OVERRIDES: Final = frozenset({"rid", "bootstrap_host"})


def overridden(fields: dict[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
    """An engine request's `fields` with those that an ``x-override-*`` of `headers`
    (`header_overrides`) sets, set as SGLang's HTTP server sets them."""
    for name, header in OVERRIDE_HEADERS.items():
        value = headers.get(header)
        if value is not None:
            fields[name] = value if name in _TEXT_OVERRIDES else int(value)
    return fields


def control_connections(connections: int) -> int:
    """The connections of a transport's control lane (aborts, GETs) beside `connections`
    for generations: an eighth of them, at least 8. Never shared with generations, so an
    abort never waits behind the generations it would free."""
    return max(8, connections // 8)


class Slots:
    """A transport's generate connections: at most `connections` engine requests at once.

    One more waits at most `wait_s` for a free one, then fails with the service's
    own `UpstreamError` 503 and ``Retry-After``; one whose client leaves meanwhile is
    cancelled while it waits, so it is never dispatched. Raises `EnvelopeError`
    naming the argument for `connections` not an int >= 1, `wait_s` not seconds >= 0.
    """

    __slots__ = ("_free", "connections", "wait_s")

    def __init__(self, connections: int, wait_s: float) -> None:
        import asyncio

        if type(connections) is not int or connections < 1:
            raise EnvelopeError(
                f"connections: expected an int >= 1, got {show_value(connections)}"
            )
        if type(wait_s) not in (int, float) or not 0 <= wait_s < float("inf"):
            raise EnvelopeError(
                f"pool_wait_s: expected finite seconds >= 0, got {show_value(wait_s)}"
            )
        self.connections = connections
        self.wait_s = float(wait_s)
        self._free = asyncio.Semaphore(connections)

    async def take(self) -> Callable[[], None]:
        """Take a connection, waiting at most `wait_s`: its release (frees it once)."""
        import asyncio

        free = self._free
        if not free.locked():
            await free.acquire()
            return _once(free)
        # Not `asyncio.wait_for`: before Python 3.12 it swallows a cancellation that comes
        # in the turn its acquire succeeds, and the send of a client gone would go out.
        acquiring = asyncio.ensure_future(free.acquire())
        try:
            await asyncio.wait([acquiring], timeout=self.wait_s)
        except BaseException:  # cancelled: a connection granted meanwhile goes back
            if acquiring.done() and not acquiring.cancelled():
                free.release()
            acquiring.cancel()
            raise
        if not acquiring.done():
            acquiring.cancel()  # one granted meanwhile goes back (Semaphore.acquire)
            raise UpstreamError(
                f"all {self.connections} connections to SGLang stayed busy for "
                f"{self.wait_s:g} s",
                503,
                retry_after_s=POOL_RETRY_AFTER_S,
            )
        return _once(free)


def _once(free: asyncio.Semaphore) -> Callable[[], None]:
    """`free.release`, which does something the first time only."""
    taken = [True]

    def release() -> None:
        if taken:
            taken.clear()
            free.release()

    return release


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
