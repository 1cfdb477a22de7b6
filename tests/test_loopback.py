"""An SSE stream over a real socket (127.0.0.1 only), read with the standard library."""

from __future__ import annotations

import asyncio
import http.client
import http.server
import json
import random
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sglang_envelope import GenerateResponse, ResponseError, aggregate_sse, aggregate_sse_async
from sglang_envelope.stream import SseDecoder, StreamAggregator, aiter_frames

FIXTURES = Path(__file__).parent / "fixtures" / "sse_responses.jsonl"


def sglang_transcript() -> tuple[bytes, dict[str, Any]]:
    """A stream SGLang's own handler wrote (see scripts/make_sse_fixtures.py) and its answer."""
    for line in FIXTURES.read_text().splitlines():
        case = json.loads(line)
        if case["name"] == "every_delta_key_incremental":
            return case["body"].encode(), case["expected"]
    raise AssertionError("fixture missing")


class TranscriptHandler(http.server.BaseHTTPRequestHandler):
    """Streams `transcript` in small writes of irregular size, flushing each."""

    transcript = b""
    protocol_version = "HTTP/1.0"  # the body runs to the end of the connection, as a raw stream

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        rng = random.Random(7)
        data = self.transcript
        at = 0
        while at < len(data):
            size = rng.choice([1, 2, 3, 5, 8, 13, 64, 500])
            self.wfile.write(data[at : at + size])
            self.wfile.flush()
            at += size
            if rng.random() < 0.05:
                time.sleep(0.001)  # let the client see a partial event

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, int]]:
    handler = type("Handler", (TranscriptHandler,), {"transcript": sglang_transcript()[0]})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # shutdown() waits for serve_forever's next poll: 0.5 s by default.
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def post_and_read(host: str, port: int) -> Iterator[bytes]:
    """The response body as the socket delivers it: whatever each recv returns."""
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request(
            "POST",
            "/generate",
            body=b'{"input_ids": [1], "stream": true}',
            headers={"Content-Type": "application/json"},
        )
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type") == "text/event-stream"
        while chunk := response.read1(4096):
            yield chunk
    finally:
        connection.close()


def test_sse_over_a_loopback_socket(server: tuple[str, int]) -> None:
    expected = sglang_transcript()[1]
    decoder = SseDecoder()
    aggregator = StreamAggregator()
    reads = 0
    for chunk in post_and_read(*server):
        reads += 1
        for frame in decoder.feed(chunk):
            aggregator.add(frame)
    decoder.close()
    assert decoder.done
    assert reads > 1  # the stream did arrive in pieces
    assert aggregator.result() == expected
    assert aggregate_sse(post_and_read(*server)) == expected


# --- the same stream, read by asyncio's own streams ---


async def serve_transcript(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, transcript: bytes
) -> None:
    """An HTTP/1.0 SSE answer in writes of irregular size, drained one by one."""
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
    rng = random.Random(11)
    at = 0
    while at < len(transcript):
        size = rng.choice([1, 2, 3, 5, 8, 13, 37, 500])
        writer.write(transcript[at : at + size])
        await writer.drain()
        at += size
    writer.close()


async def read_body(port: int) -> AsyncIterator[bytes]:
    """The response body of POST /generate as the loopback socket delivers it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /generate HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 200") and b"text/event-stream" in head
        while chunk := await reader.read(37):
            yield chunk
    finally:
        writer.close()
        await writer.wait_closed()


async def against_a_loopback_server(
    transcript: bytes, client: Callable[[int], Awaitable[Any]]
) -> Any:
    server = await asyncio.start_server(
        lambda r, w: serve_transcript(r, w, transcript), "127.0.0.1", 0
    )
    try:
        port = server.sockets[0].getsockname()[1]
        return await asyncio.wait_for(client(port), timeout=10)
    finally:
        server.close()
        await server.wait_closed()


def test_async_readers_over_a_loopback_socket() -> None:
    transcript, expected = sglang_transcript()
    decoder = SseDecoder()
    frames = decoder.feed(transcript)
    decoder.close()

    async def both(port: int) -> tuple[list[dict[str, Any]], GenerateResponse]:
        read = [frame async for frame in aiter_frames(read_body(port))]
        return read, await aggregate_sse_async(read_body(port))

    read, response = asyncio.run(against_a_loopback_server(transcript, both))
    assert read == frames
    assert response == expected


def test_async_errors_over_a_loopback_socket() -> None:
    transcript = sglang_transcript()[0]
    cut = transcript[: len(transcript) // 2]

    async def aggregate(port: int) -> GenerateResponse:
        return await aggregate_sse_async(read_body(port))

    with pytest.raises(ResponseError, match=r"without a terminal frame|inside an event"):
        asyncio.run(against_a_loopback_server(cut, aggregate))
