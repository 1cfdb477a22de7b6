"""A `Transport` over an ``httpx.AsyncClient`` (the ``[httpx]`` extra).

    transport = HttpxTransport("http://127.0.0.1:30000")
    service = Service(transport, deployment=deployment)

`connections` sizes it: that many engine requests at once over the generate
pool (`Slots`; one more waits `pool_wait_s`, then its client gets the service's
503 with ``Retry-After``), and aborts (and GETs) over a lane of their own,
`control_connections(connections)` connections each bounded by
`CONTROL_TIMEOUT_S`, so an abort never waits behind the generations it frees.
The lane's own client is httpx's sync client, each request in a thread of its
own: a serving loop saturated by its clients holds up neither an abort's
connection nor its write (an async client needs a dozen turns of its loop for a
new connection, and a saturated loop's turn takes tens to hundreds of ms).
The generate connections are spread over clients of at most `CLIENT_CONNECTIONS`
each, a request sent with the client that has the fewest open: httpcore's pool
(1.0.9) scans all its connections, and each idle one against all of them, at
every request and every answer released, so one pool of 256 costs a loaded
server most of its CPU. httpx's failures become `UpstreamError`: a timeout 504,
any other transport failure (refused, reset, broken mid-answer) 502.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import httpx

from sglang_envelope.errors.exceptions import UpstreamError
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

__all__ = ["HttpxTransport"]

#: The most generate connections one ``httpx.AsyncClient`` of the transport's own holds.
CLIENT_CONNECTIONS: Final = 16

#: No read timeout: SGLang may queue a request, or pause a stream, for long (the
#: service's `idle_timeout_s` bounds the silence instead).
DEFAULT_TIMEOUT = httpx.Timeout(None, connect=5.0)


def _upstream(error: httpx.HTTPError) -> UpstreamError:
    if isinstance(error, httpx.TimeoutException):
        return UpstreamError(
            f"SGLang did not answer in time: {type(error).__name__}", 504
        )
    return UpstreamError(f"SGLang could not be reached: {type(error).__name__}: {error}")


class HttpxTransport:
    """SGLang at `base_url` over `client` (clients of its own when None, closed by
    `aclose`).

    Aborts and GETs go over `abort_client`; when None, over a client of the
    transport's own for `base_url`, or over `client` itself when `client` is given
    (then size its pool beyond `connections`, or pass `abort_client`). A client of
    the caller's made without a base URL is given `base_url`.
    """

    __slots__ = ("_clients", "_lane", "_open", "_owned", "slots")

    def __init__(
        self,
        base_url: str,
        *,
        client: httpx.AsyncClient | None = None,
        abort_client: httpx.AsyncClient | httpx.Client | None = None,
        connections: int = DEFAULT_CONNECTIONS,
        pool_wait_s: float = DEFAULT_POOL_WAIT_S,
    ) -> None:
        check_adapter_arguments(
            base_url,
            {
                "client": (client, (httpx.AsyncClient,)),
                "abort_client": (abort_client, (httpx.AsyncClient, httpx.Client)),
            },
        )
        #: The generate connections, taken by the serving loop before each send.
        self.slots = Slots(connections, pool_wait_s)
        self._owned: list[httpx.AsyncClient] = []
        aborts: httpx.Client | httpx.AsyncClient
        if client is None:
            count = -(-connections // CLIENT_CONNECTIONS)
            each = -(-connections // count)
            limits = httpx.Limits(max_connections=each, max_keepalive_connections=each)
            tls = httpx.create_ssl_context()  # one for all: each takes 40 ms to make
            self._owned = [
                httpx.AsyncClient(
                    base_url=base_url, timeout=DEFAULT_TIMEOUT, limits=limits, verify=tls
                )
                for _ in range(count)
            ]
            lane = httpx.Limits(max_connections=control_connections(connections))
            aborts = abort_client or httpx.Client(
                base_url=base_url, timeout=CONTROL_TIMEOUT_S, limits=lane, verify=tls
            )
        else:
            aborts = abort_client or client
        for given in (client, abort_client):
            if given is not None and not str(given.base_url):  # SGLang's, unless its own
                given.base_url = httpx.URL(base_url)
        self._clients = [client] if client is not None else list(self._owned)
        #: How many answers each client has open (sent and not yet closed).
        self._open = [0] * len(self._clients)
        owned = aborts is not abort_client and aborts is not client
        self._lane = _Lane(aborts, control_connections(connections), owned=owned)

    async def generate(self, body: bytes, headers: Mapping[str, str]) -> EngineReply:
        opened = self._open
        index = opened.index(min(opened))  # the client with the fewest answers open
        client = self._clients[index]
        request = client.build_request(
            "POST", "/generate", content=body, headers=json_headers(headers)
        )
        opened[index] += 1
        try:
            response = await client.send(request, stream=True)
        except BaseException as error:
            opened[index] -= 1
            if isinstance(error, httpx.HTTPError):
                raise _upstream(error) from error
            raise
        return EngineReply(
            response.status_code,
            _chunks(response),
            _closing(response, opened, index),
            dict(response.headers),
        )

    async def abort(self, body: bytes) -> int:
        response = await self._lane.request("POST", "/abort_request", body)
        return response.status_code

    async def get(self, path: str) -> tuple[int, bytes]:
        """GET `path` (``/get_server_info``, ``/v1/loads``): the status and the body."""
        response = await self._lane.request("GET", path)
        return response.status_code, response.content

    async def aclose(self) -> None:
        """Close the clients the transport made (and its lane's thread)."""
        for client in self._owned:
            await client.aclose()
        await self._lane.aclose()

    async def __aenter__(self) -> HttpxTransport:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


class _Lane:
    """Aborts and GETs over `client`: a sync one (the transport's own), each request in
    a thread, at most `threads` at once, begun as needed; or an async one, on the
    serving loop; httpx's failures as `UpstreamError`. `aclose` waits for the threads,
    then closes `client` when it is `owned` (the transport's own)."""

    __slots__ = ("_client", "_owned", "_threads")

    def __init__(
        self, client: httpx.Client | httpx.AsyncClient, threads: int, *, owned: bool
    ) -> None:
        self._client = client
        self._owned = owned
        self._threads = (
            ThreadPoolExecutor(threads, thread_name_prefix="sglang-envelope aborts")
            if isinstance(client, httpx.Client)
            else None
        )

    async def request(
        self, method: str, path: str, body: bytes | None = None
    ) -> httpx.Response:
        headers = None if body is None else json_headers({})
        client = self._client
        try:
            if isinstance(client, httpx.AsyncClient):
                return await client.request(method, path, content=body, headers=headers)
            sent = functools.partial(
                client.request, method, path, content=body, headers=headers
            )
            return await asyncio.get_running_loop().run_in_executor(self._threads, sent)
        except httpx.HTTPError as error:
            raise _upstream(error) from error

    async def aclose(self) -> None:
        client = self._client
        if isinstance(client, httpx.Client) and self._threads is not None:
            stop = functools.partial(self._threads.shutdown, cancel_futures=True)
            await asyncio.get_running_loop().run_in_executor(None, stop)
            if self._owned:
                client.close()


async def _chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in response.aiter_raw():
            yield chunk
    except httpx.HTTPError as error:
        raise _upstream(error) from error


def _closing(
    response: httpx.Response, opened: list[int], index: int
) -> Callable[[], Awaitable[None]]:
    """`response.aclose`, which then counts the answer closed on its client, once."""
    counted = [True]

    async def close() -> None:
        try:
            await response.aclose()
        finally:
            if counted:
                counted.clear()
                opened[index] -= 1

    return close
