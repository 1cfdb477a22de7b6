"""An SSE stream over a real socket (127.0.0.1 only), read with the standard library."""

from __future__ import annotations

import http.client
import http.server
import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sglang_envelope import SseDecoder, StreamAggregator, aggregate_sse

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
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
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
