"""A `Transport` over an ``httpx.AsyncClient`` (the ``[httpx]`` extra).

    transport = HttpxTransport("http://127.0.0.1:30000")
    service = Service(transport, deployment=deployment)

httpx's failures become `UpstreamError`: a timeout 504, any other transport
failure (refused, reset, broken mid-answer) 502.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from sglang_envelope.errors.exceptions import UpstreamError
from sglang_envelope.serve.transport import EngineReply, json_headers

__all__ = ["HttpxTransport"]

#: No read timeout: SGLang may queue a request, or pause a stream, for long.
DEFAULT_TIMEOUT = httpx.Timeout(None, connect=5.0)


def _upstream(error: httpx.HTTPError) -> UpstreamError:
    if isinstance(error, httpx.TimeoutException):
        return UpstreamError(
            f"SGLang did not answer in time: {type(error).__name__}", 504
        )
    return UpstreamError(f"SGLang could not be reached: {type(error).__name__}: {error}")


class HttpxTransport:
    """SGLang at `base_url` over `client` (its own when None, closed by `aclose`)."""

    __slots__ = ("_client", "_owned")

    def __init__(self, base_url: str, *, client: httpx.AsyncClient | None = None) -> None:
        self._owned = client is None
        self._client = client or httpx.AsyncClient(
            base_url=base_url, timeout=DEFAULT_TIMEOUT
        )
        if client is not None and not str(client.base_url):
            self._client.base_url = httpx.URL(base_url)

    async def generate(self, body: bytes, headers: Mapping[str, str]) -> EngineReply:
        request = self._client.build_request(
            "POST", "/generate", content=body, headers=json_headers(headers)
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as error:
            raise _upstream(error) from error
        return EngineReply(
            response.status_code,
            _chunks(response),
            response.aclose,
            dict(response.headers),
        )

    async def abort(self, body: bytes) -> int:
        try:
            response = await self._client.post(
                "/abort_request", content=body, headers=json_headers({})
            )
        except httpx.HTTPError as error:
            raise _upstream(error) from error
        return response.status_code

    async def get(self, path: str) -> tuple[int, bytes]:
        """GET `path` (``/get_server_info``, ``/v1/loads``): the status and the body."""
        try:
            response = await self._client.get(path)
        except httpx.HTTPError as error:
            raise _upstream(error) from error
        return response.status_code, response.content

    async def aclose(self) -> None:
        """Close the client, when the transport made it."""
        if self._owned:
            await self._client.aclose()

    async def __aenter__(self) -> HttpxTransport:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


async def _chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in response.aiter_raw():
            yield chunk
    except httpx.HTTPError as error:
        raise _upstream(error) from error
