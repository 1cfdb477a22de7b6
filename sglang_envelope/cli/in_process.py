"""A transport to an ASGI app called in this process, with no HTTP client: the demo's.

`InProcess(app)` is a `Transport` (and has the ``get`` `read_deployment` asks
through) whose requests are calls of the ASGI 3 `app`, `FakeEngine` in the
demo: the request's body is given at once, the answer's messages are read as
the app sends them, and closing the answer tells the app its client left
(``http.disconnect``), as a server does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from sglang_envelope import EngineReply, UpstreamError

__all__ = ["InProcess"]

Message = MutableMapping[str, Any]
App = Callable[
    [Message, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
    Awaitable[None],
]


def _scope(method: str, path: str, headers: Mapping[str, str], size: int) -> Message:
    raw = [(name.lower().encode(), value.encode()) for name, value in headers.items()]
    raw.append((b"content-length", str(size).encode()))
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": raw,
        "client": ("127.0.0.1", 0),
        "server": ("sglang", 80),
    }


class InProcess:
    """The ASGI 3 `app`, called in this process, as a transport to SGLang."""

    __slots__ = ("_app",)

    def __init__(self, app: App) -> None:
        self._app = app

    async def generate(self, body: bytes, headers: Mapping[str, str]) -> EngineReply:
        return await self._call("POST", "/generate", body, headers)

    async def abort(self, body: bytes) -> int:
        status, _ = await self._whole("POST", "/abort_request", body)
        return status

    async def get(self, path: str) -> tuple[int, bytes]:
        """GET `path`: the status and the body."""
        return await self._whole("GET", path, b"")

    async def _whole(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        headers = {"content-type": "application/json"}
        reply = await self._call(method, path, body, headers)
        try:
            return reply.status, b"".join([chunk async for chunk in reply.chunks])
        finally:
            await reply.close()

    async def _call(
        self, method: str, path: str, body: bytes, headers: Mapping[str, str]
    ) -> EngineReply:
        import asyncio

        sent: asyncio.Queue[Message | None] = asyncio.Queue()
        left = asyncio.Event()
        unread = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> Message:
            if unread:
                return unread.pop()
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            sent.put_nowait(message)

        scope = _scope(method, path, headers, len(body))
        call = asyncio.ensure_future(self._app(scope, receive, send))
        call.add_done_callback(lambda _: sent.put_nowait(None))
        start = await sent.get()
        if start is None:
            call.result()  # the app's own failure, if it raised
            raise UpstreamError(f"the app answered nothing to {method} {path}")

        async def chunks() -> AsyncIterator[bytes]:
            while (message := await sent.get()) is not None:
                yield bytes(message.get("body", b""))
                if not message.get("more_body", False):
                    return

        async def close() -> None:
            left.set()
            await call

        names = {k.decode().lower(): v.decode() for k, v in start.get("headers", ())}
        return EngineReply(start["status"], chunks(), close, names)
