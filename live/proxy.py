"""A recording proxy in front of a live SGLang: what reached the engine, and what it answered.

The apps under test are pointed at the proxy (``SGLANG_URL``); it forwards
``/generate`` and ``/abort_request`` to SGLang as they come, and records each
generation's bytes and when it ended, and each abort's body and when it came.
``GET /get_server_info``, which an app asks once at its start, is forwarded as it is.
It runs under uvicorn in a thread of the test process.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.apps import serving

_FINISH = re.compile(rb'"finish_reason":\{"type":"(\w+)"')


@dataclass
class Generation:
    """One engine request as SGLang answered it."""

    rid: str
    body: dict[str, object]
    started: float
    data: bytearray = field(default_factory=bytearray)
    ended: float | None = None

    @property
    def finish_type(self) -> str | None:
        """The type of the answer's last finish reason (``"abort"``, ``"length"``, ...)."""
        found = _FINISH.findall(bytes(self.data))
        return found[-1].decode() if found else None


class Recorder:
    """The proxy's app and its records."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.generations: list[Generation] = []
        self.aborts: list[tuple[float, dict[str, object]]] = []
        routes = [
            Route("/generate", self.generate, methods=["POST"]),
            Route("/abort_request", self.abort, methods=["POST"]),
            Route("/get_server_info", self.server_info, methods=["GET"]),
        ]
        self.app = Starlette(routes=routes)
        # The proxy must queue nothing of its own: generations get as many connections as
        # come (httpx's default pool, 100, would hold the 101st request back), and aborts and
        # GETs a client of their own, so an abort never waits in the pool behind the
        # generations it is meant to end.
        unbounded = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        self.client = httpx.AsyncClient(
            base_url=upstream, timeout=httpx.Timeout(None), limits=unbounded
        )
        self.control = httpx.AsyncClient(base_url=upstream, timeout=httpx.Timeout(30.0))

    async def generate(self, request: Request) -> StreamingResponse:
        body = await request.body()
        parsed = json.loads(body)
        generation = Generation(str(parsed.get("rid")), parsed, time.monotonic())
        self.generations.append(generation)
        upstream = await self.client.send(
            self.client.build_request(
                "POST", "/generate", content=body, headers={"content-type": "application/json"}
            ),
            stream=True,
        )

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_raw():
                    generation.data += chunk
                    yield chunk
            finally:
                generation.ended = time.monotonic()
                await upstream.aclose()

        media = upstream.headers.get("content-type", "application/json")
        return StreamingResponse(chunks(), upstream.status_code, media_type=media)

    async def abort(self, request: Request) -> Response:
        body = await request.body()
        self.aborts.append((time.monotonic(), json.loads(body)))
        answer = await self.control.post(
            "/abort_request", content=body, headers={"content-type": "application/json"}
        )
        return Response(answer.content, answer.status_code)

    async def server_info(self, request: Request) -> Response:
        answer = await self.control.get("/get_server_info")
        return Response(answer.content, answer.status_code, media_type="application/json")

    def wait_ended(self, count: int = 1, timeout: float = 15.0) -> list[Generation]:
        """The generations, once `count` of them have ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ended = [g for g in self.generations if g.ended is not None]
            if len(ended) >= count:
                return ended
            time.sleep(0.02)
        raise AssertionError(f"{count} generation(s) did not end within {timeout} s")


@contextlib.contextmanager
def recording(upstream: str) -> Iterator[tuple[Recorder, str]]:
    """A recording proxy to `upstream`, running; yields it and its URL."""
    recorder = Recorder(upstream)
    with serving(recorder.app) as url:
        yield recorder, url
