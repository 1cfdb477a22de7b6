"""A `Transport` over an ``aiohttp.ClientSession`` (the ``[aiohttp]`` extra).

    transport = AiohttpTransport("http://127.0.0.1:30000")
    service = Service(transport, deployment=deployment)

aiohttp's failures become `UpstreamError`: a timeout 504, any other client
failure (refused, reset, broken mid-answer) 502. The session is made on first
use, inside the running event loop, as aiohttp requires.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from aiohttp import web

from sglang_envelope.errors.exceptions import UpstreamError
from sglang_envelope.serve.service import Service
from sglang_envelope.serve.transport import EngineReply, json_headers

__all__ = ["AiohttpTransport", "respond"]

#: No read timeout: SGLang may queue a request, or pause a stream, for long.
DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=5.0)
_FAILURES = (aiohttp.ClientError, asyncio.TimeoutError)


def _upstream(error: BaseException) -> UpstreamError:
    if isinstance(error, asyncio.TimeoutError):
        return UpstreamError(
            f"SGLang did not answer in time: {type(error).__name__}", 504
        )
    return UpstreamError(f"SGLang could not be reached: {type(error).__name__}: {error}")


class AiohttpTransport:
    """SGLang at `base_url` over `session` (its own when None, closed by `aclose`)."""

    __slots__ = ("_base_url", "_owned", "_session")

    def __init__(
        self, base_url: str, *, session: aiohttp.ClientSession | None = None
    ) -> None:
        self._base_url = base_url.rstrip("/")
        self._owned = session is None
        self._session = session

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=DEFAULT_TIMEOUT)
        return self._session

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
            async with self._client().post(
                self._base_url + "/abort_request", data=body, headers=json_headers({})
            ) as response:
                await response.read()
                return response.status
        except _FAILURES as error:
            raise _upstream(error) from error

    async def get(self, path: str) -> tuple[int, bytes]:
        """GET `path` (``/get_server_info``, ``/v1/loads``): the status and the body."""
        try:
            async with self._client().get(self._base_url + path) as response:
                return response.status, await response.read()
        except _FAILURES as error:
            raise _upstream(error) from error

    async def aclose(self) -> None:
        """Close the session, when the transport made it."""
        if self._owned and self._session is not None:
            await self._session.close()

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
    lingering time). A client that goes away is aborted: while a unary answer
    is awaited, once its connection is closed; mid-stream, when a write to it
    fails.
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
    try:
        await response.prepare(request)
        async for chunk in answer.body:
            await response.write(chunk)
        await response.write_eof()
    finally:
        await answer.body.aclose()
    return response
