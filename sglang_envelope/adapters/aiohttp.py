"""A `Transport` over an ``aiohttp.ClientSession`` (the ``[aiohttp]`` extra).

    transport = AiohttpTransport("http://127.0.0.1:30000")
    service = Service(transport, deployment=deployment)

`connections` sizes it as it sizes `HttpxTransport`: the generate pool
(`Slots`), and a lane of its own for aborts and GETs. aiohttp's failures become
`UpstreamError`: a timeout 504, any other client failure (refused, reset,
broken mid-answer) 502. The sessions are made on first use, inside the running
event loop, as aiohttp requires.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from aiohttp import web

from sglang_envelope.errors.exceptions import UpstreamError
from sglang_envelope.serve.service import Service
from sglang_envelope.serve.transport import (
    CONTROL_TIMEOUT_S,
    DEFAULT_CONNECTIONS,
    DEFAULT_POOL_WAIT_S,
    EngineReply,
    Slots,
    check_adapter_arguments,
    control_connections,
    json_headers,
)
from sglang_envelope.serve.watch import until_done_or_gone

__all__ = ["AiohttpTransport", "respond"]

#: No read timeout: SGLang may queue a request, or pause a stream, for long (the
#: service's `idle_timeout_s` bounds the silence instead).
DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=5.0)
_FAILURES = (aiohttp.ClientError, asyncio.TimeoutError)


def _upstream(error: BaseException) -> UpstreamError:
    if isinstance(error, asyncio.TimeoutError):
        return UpstreamError(
            f"SGLang did not answer in time: {type(error).__name__}", 504
        )
    return UpstreamError(f"SGLang could not be reached: {type(error).__name__}: {error}")


class AiohttpTransport:
    """SGLang at `base_url` over `session` (its own when None, closed by `aclose`).

    Aborts and GETs go over `abort_session`; when None, over a session of the
    transport's own, or over `session` itself when `session` is given (then size
    its connector beyond `connections`, or pass `abort_session`).
    """

    __slots__ = (
        "_base_url",
        "_connections",
        "_control",
        "_owned",
        "_owned_control",
        "_session",
        "slots",
    )

    def __init__(
        self,
        base_url: str,
        *,
        session: aiohttp.ClientSession | None = None,
        abort_session: aiohttp.ClientSession | None = None,
        connections: int = DEFAULT_CONNECTIONS,
        pool_wait_s: float = DEFAULT_POOL_WAIT_S,
    ) -> None:
        sessions = (aiohttp.ClientSession,)
        check_adapter_arguments(
            base_url,
            {"session": (session, sessions), "abort_session": (abort_session, sessions)},
        )
        self._base_url = base_url.rstrip("/")
        #: The generate connections, taken by the serving loop before each send.
        self.slots = Slots(connections, pool_wait_s)
        self._connections = connections
        self._owned = session is None
        self._owned_control = session is None and abort_session is None
        self._session = session
        self._control = abort_session or session

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._connections)
            self._session = aiohttp.ClientSession(
                timeout=DEFAULT_TIMEOUT, connector=connector
            )
        return self._session

    def _control_lane(self) -> aiohttp.ClientSession:
        if self._control is None:
            connector = aiohttp.TCPConnector(limit=control_connections(self._connections))
            timeout = aiohttp.ClientTimeout(total=CONTROL_TIMEOUT_S)
            self._control = aiohttp.ClientSession(timeout=timeout, connector=connector)
        return self._control

    async def generate(self, body: bytes, headers: Mapping[str, str]) -> EngineReply:
        url = self._base_url + "/generate"
        try:
            response = await self._client().post(
                url, data=body, headers=json_headers(headers)
            )
        except _FAILURES as error:
            raise _upstream(error) from error

        async def close() -> None:
            response.release()

        return EngineReply(
            response.status, _chunks(response), close, dict(response.headers)
        )

    async def abort(self, body: bytes) -> int:
        try:
            async with self._control_lane().post(
                self._base_url + "/abort_request", data=body, headers=json_headers({})
            ) as response:
                await response.read()
                return response.status
        except _FAILURES as error:
            raise _upstream(error) from error

    async def get(self, path: str) -> tuple[int, bytes]:
        """GET `path` (``/get_server_info``, ``/v1/loads``): the status and the body."""
        try:
            async with self._control_lane().get(self._base_url + path) as response:
                return response.status, await response.read()
        except _FAILURES as error:
            raise _upstream(error) from error

    async def aclose(self) -> None:
        """Close the sessions the transport made."""
        if self._owned and self._session is not None:
            await self._session.close()
        if self._owned_control and self._control is not None:
            await self._control.close()

    async def __aenter__(self) -> AiohttpTransport:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


async def _chunks(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    try:
        async for chunk in response.content.iter_any():
            yield chunk
    except _FAILURES as error:
        raise _upstream(error) from error


async def respond(request: web.Request, service: Service) -> web.StreamResponse:
    """Serve one ``POST /generate`` with `service`, in an aiohttp handler.

    The body is read by `Service.generate_request`, within the library's bound
    (16 MiB), not aiohttp's ``client_max_size`` (1 MiB by default), which only
    ``request.read()`` applies. A refusal before the body was read to its end
    closes the connection (aiohttp would otherwise read the rest, for up to its
    lingering time). A client that goes away is aborted, whether or not anything
    is being written to it: its connection is watched (every
    `Service.disconnect_poll_s`) while the answer is awaited and while it is
    written, so a hang-up during a stall of SGLang's is noticed too (aiohttp
    itself learns of it only on a failed write).
    """

    def disconnected() -> bool:
        transport = request.transport
        return transport is None or transport.is_closing()

    answer = await service.generate_request(
        request.headers, request.content.iter_any(), disconnected=disconnected
    )
    response = web.StreamResponse(status=answer.status, headers=dict(answer.headers))
    if not request.content.is_eof():
        response.force_close()

    async def write() -> None:
        await response.prepare(request)
        async for chunk in answer.body:
            await response.write(chunk)
        await response.write_eof()

    writing = asyncio.ensure_future(write())
    try:
        gone = await until_done_or_gone(writing, disconnected, service.disconnect_poll_s)
    finally:
        writing.cancel()  # a client gone: the answer stops, and SGLang's is aborted
        await asyncio.gather(writing, return_exceptions=True)
        await answer.body.aclose()
    if not gone:
        writing.result()  # a failed write raises here, as aiohttp's own would
    return response
