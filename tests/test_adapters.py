"""The httpx and aiohttp transports, and aiohttp's `respond`, against real servers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web

from sglang_envelope import Deployment, EngineReply, EnvelopeError, Service, UpstreamError
from sglang_envelope.adapters.aiohttp import AiohttpTransport, respond
from sglang_envelope.adapters.httpx import HttpxTransport
from sglang_envelope.testing import FakeEngine
from tests.apps import closed_port, free_port, serving
from tests.serve_fakes import QUICK_DRAIN

DEPLOYMENT = Deployment(vocab_size=320)
BODY = {"rid": "mine", "input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 3}}
Make = Callable[[str], Any]
KINDS: list[Make] = [HttpxTransport, AiohttpTransport]


@pytest.fixture(scope="module")
def engine_url() -> Iterator[tuple[FakeEngine, str]]:
    engine = FakeEngine()
    with serving(engine) as url:
        yield engine, url


@contextlib.contextmanager
def silent_server(reply: bytes | None) -> Iterator[str]:
    """A TCP server that reads a request, writes `reply` (None: nothing) and hangs up."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                if reply is None:
                    stop.wait(3)
                else:
                    conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


async def read(answer: Any) -> bytes:
    return b"".join([chunk async for chunk in answer.body])


@pytest.mark.parametrize("make", KINDS)
def test_a_transport_serves_both_modes_and_aborts(
    make: Make, engine_url: tuple[FakeEngine, str]
) -> None:
    _, url = engine_url

    async def main() -> tuple[bytes, bytes, int, int]:
        async with make(url) as transport, Service(transport, deployment=DEPLOYMENT) as svc:
            unary = await read(await svc.generate(json.dumps(BODY).encode()))
            stream = await read(await svc.generate(json.dumps({**BODY, "stream": True}).encode()))
            status, info = await transport.get("/get_server_info")
            aborted = await transport.abort(b'{"rid":"none"}')
            assert "context_length" in json.loads(info)
            return unary, stream, status, aborted

    unary, stream, status, aborted = asyncio.run(main())
    assert json.loads(unary)["meta_info"]["id"] == "mine"
    assert stream.endswith(b"data: [DONE]\n\n") and b'"id":"mine"' in stream
    assert (status, aborted) == (200, 200)


@pytest.mark.parametrize("make", KINDS)
def test_an_unreachable_sglang_is_an_upstream_error(make: Make) -> None:
    async def main(down: str) -> list[UpstreamError]:
        errors = []
        async with make(down) as transport:
            for name, args in (("generate", (b"{}", {})), ("abort", (b"{}",)), ("get", ("/",))):
                with pytest.raises(UpstreamError) as caught:
                    await getattr(transport, name)(*args)
                errors.append(caught.value)
        return errors

    with closed_port() as port:  # nothing listens there
        errors = asyncio.run(main(f"http://127.0.0.1:{port}"))
    assert [error.status for error in errors] == [502, 502, 502]


def test_aclose_leaves_the_caller_s_sessions_open() -> None:
    """A session or client the caller passes, for generation, aborts or both, is still
    open after `aclose`, once each lane has been used."""

    async def used(transport: Any) -> None:
        async with transport:
            for name, args in (("generate", (b"{}", {})), ("get", ("/",))):
                with pytest.raises(UpstreamError):
                    await getattr(transport, name)(*args)

    async def main(down: str) -> list[str]:
        left_closed = []
        session = aiohttp.ClientSession()
        client = httpx.AsyncClient()
        for given in ("session", "abort_session"), ("session",), ("abort_session",):
            sessions: dict[str, Any] = dict.fromkeys(given, session)
            await used(AiohttpTransport(down, **sessions))
            if session.closed:
                left_closed.append(f"aiohttp {given}")
            names = tuple(name.replace("session", "client") for name in given)
            clients: dict[str, Any] = dict.fromkeys(names, client)
            await used(HttpxTransport(down, **clients))
            if client.is_closed:
                left_closed.append(f"httpx {names}")
        await session.close()
        await client.aclose()
        return left_closed

    with closed_port() as port:  # nothing listens there
        assert asyncio.run(main(f"http://127.0.0.1:{port}")) == []


WRONG_ARGUMENTS: list[tuple[Make, Any, dict[str, Any], str]] = [
    (HttpxTransport, None, {}, r"^base_url: expected SGLang's URL, a non-empty str, got None$"),
    (AiohttpTransport, "", {}, r"^base_url: expected SGLang's URL, a non-empty str, got ''$"),
    (HttpxTransport, "http://x", {"client": 3}, r"^client must be None or an httpx\.AsyncClient"),
    (
        HttpxTransport,
        "http://x",
        {"abort_client": aiohttp},
        r"^abort_client must be None or an httpx\.AsyncClient or httpx\.Client, got module$",
    ),
    (
        AiohttpTransport,
        "http://x",
        {"session": object()},
        r"^session must be None or an aiohttp\.ClientSession, got object$",
    ),
    (AiohttpTransport, "http://x", {"abort_session": 1}, r"^abort_session must be None"),
]


@pytest.mark.parametrize(("kind", "base_url", "given", "message"), WRONG_ARGUMENTS)
def test_an_adapter_s_argument_of_the_wrong_type_is_named(
    kind: Make, base_url: Any, given: dict[str, Any], message: str
) -> None:
    """Each adapter names a wrong argument with `EnvelopeError` when it is made, never
    Python's `TypeError` or `AttributeError`, then or at its first request."""

    async def main() -> None:
        kind(base_url, **given)

    with pytest.raises(EnvelopeError, match=message):
        asyncio.run(main())


def test_aclose_leaves_a_caller_s_sync_abort_client_open(
    engine_url: tuple[FakeEngine, str],
) -> None:
    """A caller's `httpx.Client` as `abort_client` (the sync lane, each abort in a thread,
    as the transport's own) carries the aborts, and is still open after `aclose`."""
    engine, url = engine_url
    mine = httpx.Client()

    async def main() -> int:
        async with HttpxTransport(url, abort_client=mine) as transport:
            return await transport.abort(b'{"rid": "a-sync-lane"}')

    assert asyncio.run(main()) == 200 and {"rid": "a-sync-lane"} in list(engine.aborts)
    assert not mine.is_closed
    mine.close()


@pytest.mark.parametrize("given", [("abort_client",), ("client", "abort_client")])
def test_a_caller_s_client_without_a_base_url_reaches_sglang(
    engine_url: tuple[FakeEngine, str], given: tuple[str, ...]
) -> None:
    """A caller's `httpx.AsyncClient` made without a base URL, for aborts or for both
    lanes, sends to the transport's `base_url`: its aborts reach SGLang."""
    engine, url = engine_url

    async def main() -> tuple[int, int]:
        clients: dict[str, Any] = {name: httpx.AsyncClient() for name in given}
        async with HttpxTransport(url, **clients) as transport:
            status = await transport.abort(b'{"rid": "a-caller-s-lane"}')
            info, _ = await transport.get("/get_server_info")
        for client in clients.values():
            await client.aclose()
        return status, info

    assert asyncio.run(main()) == (200, 200)
    assert {"rid": "a-caller-s-lane"} in list(engine.aborts)


def test_a_timeout_is_an_upstream_error_504() -> None:
    async def main(transport: Any) -> UpstreamError:
        async with transport:
            with pytest.raises(UpstreamError) as caught:
                await transport.generate(b"{}", {})
        return caught.value

    with silent_server(None) as url:
        client = httpx.AsyncClient(base_url=url, timeout=0.1)
        assert asyncio.run(main(HttpxTransport(url, client=client))).status == 504
        asyncio.run(client.aclose())

        async def with_session() -> UpstreamError:
            session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.1))
            async with session:
                return await main(AiohttpTransport(url, session=session))

        assert asyncio.run(with_session()).status == 504


BROKEN = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    b'20\r\ndata: {"text":"x","output_ids":'
)


@pytest.mark.parametrize("make", KINDS)
def test_a_connection_broken_mid_answer_is_an_upstream_error(make: Make) -> None:
    async def main(url: str) -> UpstreamError:
        async with make(url) as transport:
            reply: EngineReply = await transport.generate(b"{}", {})
            with pytest.raises(UpstreamError) as caught:
                async for _ in reply.chunks:
                    pass
            await reply.close()
        return caught.value

    with silent_server(BROKEN) as url:
        assert asyncio.run(main(url)).status == 502


def test_respond_serves_an_aiohttp_request(engine_url: tuple[FakeEngine, str]) -> None:
    _, url = engine_url

    async def main() -> tuple[httpx.Response, httpx.Response]:
        transport = HttpxTransport(url)
        service = Service(transport, deployment=DEPLOYMENT)

        async def handler(request: web.Request) -> web.StreamResponse:
            return await respond(request, service)

        try:
            async with (
                aiohttp_serving(handler) as app_url,
                httpx.AsyncClient(base_url=app_url) as client,
            ):
                unary = await client.post("/generate", json=BODY)
                stream = await client.post("/generate", json={**BODY, "stream": True})
        finally:
            await service.aclose()
            await transport.aclose()
        return unary, stream

    unary, stream = asyncio.run(main())
    assert unary.status_code == 200 and unary.json()["meta_info"]["id"] == "mine"
    assert stream.headers["content-type"].startswith("text/event-stream")


class Wrong:
    """A transport whose generate returns something else than an EngineReply."""

    async def generate(self, body: bytes, headers: Any) -> Any:
        return (200, b"")

    async def abort(self, body: bytes) -> int:
        return 200


def test_a_transport_returning_no_engine_reply_is_the_server_s_bug() -> None:
    async def main() -> tuple[int, bytes]:
        # No engine answer is seen to end: the default policy's repeats (1.55 s) would be
        # waited out at the close.
        async with Service(Wrong(), deployment=DEPLOYMENT, abort_policy=QUICK_DRAIN) as svc:
            answer = await svc.generate(json.dumps(BODY).encode())
            return answer.status, await read(answer)

    status, body = asyncio.run(main())
    assert status == 500 and b"EngineReply" in body


def test_an_envelope_refused_answers_in_its_client_s_mode() -> None:
    async def main(wire: bytes) -> tuple[int, str]:
        svc = Service(Wrong(), deployment=DEPLOYMENT)
        answer = await svc.generate_envelope(wire)
        return answer.status, answer.media_type

    stream = b'{"rid": "f", "request": {"text": "hi", "stream": true}}'
    assert asyncio.run(main(stream)) == (200, "text/event-stream; charset=utf-8")
    assert asyncio.run(main(b'{"rid": "f", "request": {"text": "hi"}}'))[0] == 400
    assert asyncio.run(main(b"not json"))[0] == 400


@contextlib.asynccontextmanager
async def strict_upstream(seen: list[list[tuple[str, str]]]) -> AsyncIterator[str]:
    """SGLang's /generate on aiohttp's server, which refuses a request with a header
    such as Content-Type twice (400 "Duplicate 'Content-Type' header found"); each
    request's headers are recorded in `seen`. It answers one token, as SGLang writes it."""

    async def generate(request: web.Request) -> web.StreamResponse:
        seen.append(list(request.headers.items()))
        body = json.loads(await request.read())
        meta = {"id": body["rid"], "finish_reason": {"type": "length", "length": 1}}
        answer = json.dumps({"text": "hi", "output_ids": [7], "meta_info": meta}).encode()
        if body["stream"]:
            sse = b"data: " + answer + b"\n\ndata: [DONE]\n\n"
            return web.Response(body=sse, content_type="text/event-stream")
        return web.Response(body=answer, content_type="application/json")

    async with aiohttp_serving(generate) as url:
        yield url


@contextlib.asynccontextmanager
async def aiohttp_serving(
    generate: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> AsyncIterator[str]:
    """`generate` as ``POST /generate`` of an aiohttp server on loopback; its base URL."""
    app = web.Application()
    app.router.add_post("/generate", generate)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("make", KINDS)
def test_a_strict_upstream_gets_each_header_once(make: Make) -> None:
    """An aiohttp-based SGLang (or proxy) refuses a duplicate Content-Type: each header is
    sent once, with the engine request's own spelling or not."""
    seen: list[list[tuple[str, str]]] = []

    async def main() -> list[tuple[int, bytes]]:
        async with strict_upstream(seen) as url, make(url) as transport:
            service = Service(transport, deployment=DEPLOYMENT)
            answers = []
            for body in (BODY, {**BODY, "stream": True}):
                answer = await service.generate(json.dumps(body).encode())
                answers.append((answer.status, await read(answer)))
            await service.aclose()
            return answers

    (unary, stream) = asyncio.run(main())
    assert unary[0] == stream[0] == 200, (unary, stream)
    assert json.loads(unary[1])["meta_info"]["id"] == "mine"
    assert stream[1].endswith(b"data: [DONE]\n\n")
    assert len(seen) == 2
    for headers in seen:
        names = [name.lower() for name, _ in headers]
        assert sorted(names) == sorted(set(names)), headers
        assert ("content-type", "application/json") in [(n.lower(), v) for n, v in headers]


def test_httpx_spreads_its_connections_over_small_pools_each_answer_counted_once(
    engine_url: tuple[FakeEngine, str],
) -> None:
    """40 connections: three clients of 14. Every stream open at once runs at the engine
    (none waits in a full client's pool while another has room), also after answers
    closed twice; every answer closed, or send failed, leaves its client's count."""
    engine, url = engine_url
    long = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 1000}}
    stream = json.dumps({**long, "stream": True}).encode()

    async def opened(transport: HttpxTransport, count: int) -> list[EngineReply]:
        replies = [transport.generate(stream, {}) for _ in range(count)]
        return list(await asyncio.gather(*replies))

    async def main() -> tuple[int, int, list[int], list[int]]:
        async with HttpxTransport(url, connections=40) as transport:
            replies = await opened(transport, 40)
            first = engine.running
            for reply in replies[:20]:
                await reply.close()
                await reply.close()  # a second close frees nothing more
            replies[:20] = await opened(transport, 20)
            second = engine.running
            for reply in replies:
                await reply.close()
            closed = list(transport._open)
        async with HttpxTransport(url, connections=40) as refused:
            refused._clients[0].base_url = httpx.URL("http://127.0.0.1:1")
            with pytest.raises(UpstreamError):
                await refused.generate(stream, {})
            return first, second, closed, refused._open

    first, second, closed, failed = asyncio.run(asyncio.wait_for(main(), 30))
    assert (first, second) == (40, 40)
    assert closed == failed == [0, 0, 0]


def lane_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("sglang-envelope aborts")]


def test_httpx_aborts_go_out_while_the_serving_loop_is_busy(
    engine_url: tuple[FakeEngine, str],
) -> None:
    """The transport's own abort lane runs in threads of its own: an abort reaches SGLang
    while the serving loop is held up (here blocked outright), and `aclose` ends them."""
    engine, url = engine_url

    async def main() -> tuple[int, int, int]:
        async with HttpxTransport(url) as transport:
            before = len(engine.aborts)
            aborting = asyncio.ensure_future(transport.abort(b'{"rid": "lane-1"}'))
            await asyncio.sleep(0)  # the abort handed to its lane
            deadline = time.monotonic() + 5
            while len(engine.aborts) == before and time.monotonic() < deadline:
                time.sleep(0.01)  # the serving loop does not turn
            reached = len(engine.aborts) - before
            status = await aborting
            running = len(lane_threads())
        return reached, status, running

    reached, status, running = asyncio.run(main())
    assert (reached, status, running) == (1, 200, 1)
    assert lane_threads() == []


def test_httpx_with_a_client_of_the_caller_s_aborts_on_the_serving_loop(
    engine_url: tuple[FakeEngine, str],
) -> None:
    engine, url = engine_url

    async def main() -> int:
        async with httpx.AsyncClient(base_url=url) as client:
            transport = HttpxTransport(url, client=client)
            status = await transport.abort(b'{"rid": "lane-2"}')
            assert lane_threads() == []
            await transport.aclose()
        return status

    assert asyncio.run(main()) == 200
    assert engine.aborts[-1] == {"rid": "lane-2"}
