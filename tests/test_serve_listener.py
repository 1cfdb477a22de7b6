"""A client's departure heard on its ASGI ``receive`` (`generate_request(receive=...)`):
at once, never polled, and a departure already known is never dispatched."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from sglang_envelope import CLIENT_GONE, EnvelopeError
from tests.serve_fakes import (
    QUICK_DRAIN,
    FakeTransport,
    Script,
    read,
    run,
    service,
    simple_stream,
    unary_body,
)

FLAT = b'{"input_ids": [5, 6], "return_flat_raw_output_top_logprobs": true}'
STREAM = b'{"input_ids": [5, 6], "stream": true}'
JSON = {"content-type": "application/json"}
Receive = Callable[[], Awaitable[dict[str, Any]]]


async def body_of(body: bytes) -> AsyncIterator[bytes]:
    yield body


def receiving(gone: asyncio.Event, calls: list[str]) -> Receive:
    """An ASGI ``receive`` after the body: ``http.disconnect`` once `gone` is set."""

    async def receive() -> dict[str, Any]:
        calls.append("receive")
        try:
            await gone.wait()
        except asyncio.CancelledError:
            calls.append("cancelled")
            raise
        return {"type": "http.disconnect"}

    return receive


def slow_unary(request: dict[str, Any]) -> Script:
    return Script(chunks=[unary_body()], first_delay_s=3.0)


def test_a_unary_client_heard_leaving_is_answered_and_aborted_at_once() -> None:
    """No polling: `disconnect_poll_s` is a minute, the abort goes within milliseconds."""

    async def main() -> tuple[int, float, FakeTransport]:
        transport = FakeTransport(slow_unary)
        gone = asyncio.Event()
        loop = asyncio.get_running_loop()
        async with service(transport, disconnect_poll_s=60, abort_policy=QUICK_DRAIN) as svc:
            asking = svc.generate_request(JSON, body_of(FLAT), receive=receiving(gone, []))
            answering = asyncio.ensure_future(asking)
            await asyncio.sleep(0.2)
            left = loop.time()
            gone.set()
            answer = await answering
            return answer.status, transport.abort_times[0] - left, transport

    status, took, transport = run(main())
    assert status == CLIENT_GONE and took < 0.1
    assert len(transport.requests) == 1 and len(transport.aborts) == 1


def test_a_client_gone_before_dispatch_is_never_dispatched() -> None:
    async def main() -> tuple[int, FakeTransport]:
        transport = FakeTransport(slow_unary)
        gone = asyncio.Event()
        gone.set()  # the server knows already: its receive answers at once
        async with service(transport) as svc:
            answer = await svc.generate_request(JSON, body_of(FLAT), receive=receiving(gone, []))
            return answer.status, transport

    status, transport = run(main())
    assert status == CLIENT_GONE and transport.requests == [] and transport.aborts == []


def test_a_stream_stops_listening_once_answered_and_is_relayed() -> None:
    async def main() -> tuple[int, bytes, list[str]]:
        transport = FakeTransport(lambda request: Script(chunks=simple_stream()))
        calls: list[str] = []
        async with service(transport) as svc:
            receive = receiving(asyncio.Event(), calls)
            answer = await svc.generate_request(JSON, body_of(STREAM), receive=receive)
            await asyncio.sleep(0)
            return answer.status, await read(answer), calls

    status, data, calls = run(main())
    assert status == 200 and data.endswith(b"data: [DONE]\n\n")
    assert calls == ["receive", "cancelled"]


def test_a_receive_that_fails_is_a_client_gone() -> None:
    async def main() -> tuple[int, FakeTransport]:
        transport = FakeTransport(slow_unary)

        async def broken() -> dict[str, Any]:
            await asyncio.sleep(0.1)
            raise OSError("the connection broke")

        async with service(transport, abort_policy=QUICK_DRAIN) as svc:
            answer = await svc.generate_request(JSON, body_of(FLAT), receive=broken)
            return answer.status, transport

    status, transport = run(main())
    assert status == CLIENT_GONE and len(transport.aborts) == 1


def test_disconnected_and_receive_together_are_the_caller_s_mistake() -> None:
    async def main() -> None:
        async with service(FakeTransport(slow_unary)) as svc:
            await svc.generate_request(
                JSON,
                body_of(FLAT),
                disconnected=lambda: False,
                receive=receiving(asyncio.Event(), []),
            )

    with pytest.raises(EnvelopeError, match="disconnected or receive, not both"):
        run(main())
