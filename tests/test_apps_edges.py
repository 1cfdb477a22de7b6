"""docs/frontend.md's apps at their edges: what they read of a request, and their start.

Each app runs as its reader runs it, against a `FakeEngine` under uvicorn. A
request body is bounded before it is read: a ``Content-Length`` over 16 MiB is
refused before a byte of the body is sent, a chunked body as soon as it passes
16 MiB (the clients here send no more than that, and wait), and a valid body of
2 MiB (past aiohttp's own 1 MiB default) is served. A body sent as
``text/plain`` is refused as SGLang refuses it. At start each app describes
its server from ``GET /get_server_info`` and the model's ``config.json``, or
stops, saying what to pass, when it is told no vocabulary.
"""

from __future__ import annotations

import json
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from sglang_envelope.limits import DEFAULT_MAX_BODY_BYTES
from sglang_envelope.testing import FakeEngine
from tests.apps import APPS, failed_start, running_app, serving

READ_S = 10.0
CHUNK = 1 << 20


@pytest.fixture
def app(app_running: tuple[str, FakeEngine, str]) -> tuple[str, FakeEngine]:
    """(the app's URL, its engine) of the session's app (conftest.py), the engine's
    requests cleared for this test."""
    url, engine, _ = app_running
    engine.requests.clear()
    return url, engine


def exchange(url: str, head: list[str], parts: list[bytes]) -> tuple[int, bytes]:
    """POST /generate over a socket: `head`'s header lines, then `parts` as they are, then
    wait (sending nothing more) for the answer: its status and body."""
    host, port = url.removeprefix("http://").split(":")
    lines = ["POST /generate HTTP/1.1", f"Host: {host}", *head]
    with socket.create_connection((host, int(port)), timeout=READ_S) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        for part in parts:
            sock.sendall(part)
        answer = b""
        while b"\r\n\r\n" not in answer or not complete(answer):
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    head_bytes, _, body = answer.partition(b"\r\n\r\n")
    return int(head_bytes.split()[1]), unchunked(head_bytes, body)


def complete(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        return body.endswith(b"0\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def unchunked(head: bytes, body: bytes) -> bytes:
    if b"transfer-encoding: chunked" not in head.lower():
        return body
    out = b""
    while body:
        size, _, rest = body.partition(b"\r\n")
        length = int(size, 16)
        out, body = out + rest[:length], rest[length + 2 :]
        if length == 0:
            break
    return out


def too_large(size: str) -> dict[str, object]:
    return {"error": {"message": f"request body is {size} bytes; the limit is 16777216"}}


def test_a_content_length_over_the_bound_is_refused_before_the_body_is_sent(
    app: tuple[str, FakeEngine],
) -> None:
    url, engine = app
    size = DEFAULT_MAX_BODY_BYTES + 1
    head = ["Content-Type: application/json", f"Content-Length: {size}"]
    status, body = exchange(url, head, [b'{"input_ids": [5'])  # then nothing: it waits
    assert (status, json.loads(body)) == (413, too_large(str(size)))
    assert list(engine.requests) == []


def test_a_chunked_body_is_cut_once_it_passes_the_bound(app: tuple[str, FakeEngine]) -> None:
    url, engine = app
    head = ["Content-Type: application/json", "Transfer-Encoding: chunked"]
    chunk = b"%x\r\n%s\r\n" % (CHUNK, b" " * CHUNK)
    parts = [b"1\r\n{\r\n", *[chunk] * (DEFAULT_MAX_BODY_BYTES // CHUNK)]  # no end chunk
    status, body = exchange(url, head, parts)
    assert (status, json.loads(body)) == (413, too_large(f"over {DEFAULT_MAX_BODY_BYTES}"))
    assert list(engine.requests) == []


def test_a_valid_body_of_2_mib_is_served(app: tuple[str, FakeEngine]) -> None:
    """aiohttp's own limit (client_max_size, 1 MiB) would refuse it with a plain-text 413."""
    url, engine = app
    body = b'{"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2}' + b" " * 2 * CHUNK
    answer = httpx.post(
        url + "/generate", content=body + b"}", headers={"content-type": "application/json"}
    )
    assert answer.status_code == 200, answer.text[:200]
    assert len(answer.json()["output_ids"]) == 2
    assert len(engine.requests) == 1


def test_a_body_sent_as_text_is_refused_as_sglang_refuses_it(
    app: tuple[str, FakeEngine], app_running: tuple[str, FakeEngine, str]
) -> None:
    (url, engine), sglang = app, app_running[2]
    body = json.dumps({"input_ids": [5, 6, 7], "stream": True}).encode()
    # No type at all is not JSON either, as FastAPI 0.132 and later read it.
    refused = {"as Content-Type: text/plain": {"content-type": "text/plain"}}
    refused["with no Content-Type"] = {}
    for sent, headers in refused.items():
        before = list(engine.requests)
        answer = httpx.post(url + "/generate", content=body, headers=headers)
        assert list(engine.requests) == before  # the service did not send it
        direct = httpx.post(sglang + "/generate", content=body, headers=headers)  # SGLang's
        assert answer.status_code == direct.status_code == 400
        assert answer.headers["content-type"] == direct.headers["content-type"]
        got, want = answer.json(), direct.json()
        assert list(got) == list(want) == ["object", "message", "type", "param", "code"]
        assert {**got, "message": ""} == {**want, "message": ""}
        assert got["message"].endswith(f"got a body sent {sent}")
    # A JSON type with parameters is JSON.
    short = {"input_ids": [5], "sampling_params": {"max_new_tokens": 1}}
    json_type = {"content-type": "application/json; charset=utf-8"}
    answer = httpx.post(url + "/generate", content=json.dumps(short), headers=json_type)
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("name", APPS)
def test_an_app_told_no_vocabulary_stops_at_its_start_saying_what_to_pass(
    tmp_path: Path, name: str
) -> None:
    both_given = {"VOCAB_SIZE": "320", "MODEL_CONFIG": "config.json"}
    (tmp_path / "neither").mkdir()
    (tmp_path / "both").mkdir()
    # The two starts at once, each from a directory of its own (its file, its log).
    with serving(FakeEngine()) as sglang, ThreadPoolExecutor(2) as pool:
        neither = pool.submit(failed_start, name, tmp_path / "neither", sglang, {})
        both_started = pool.submit(failed_start, name, tmp_path / "both", sglang, both_given)
        (code, log), (both, both_log) = neither.result(), both_started.result()
    assert code != 0 and both != 0
    assert "the model's vocabulary is not known" in log and "neither was given" in log
    assert "MODEL_CONFIG and VOCAB_SIZE" in log
    assert "both were given" in both_log


@pytest.mark.parametrize("name", APPS)
def test_an_app_describes_its_server_from_the_server_and_the_model_config(
    tmp_path: Path, name: str
) -> None:
    """The vocabulary from config.json and the context length from /get_server_info:
    what SGLang refuses only after dispatch is refused before it."""
    engine = FakeEngine(vocab_size=300, context_length=64)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(engine.model_config()), encoding="utf-8")
    settings = {"MODEL_CONFIG": str(config)}
    with serving(engine) as sglang, running_app(name, tmp_path, sglang, settings=settings) as url:
        outside = httpx.post(url + "/generate", json={"input_ids": [5, 300]})
        long = httpx.post(url + "/generate", json={"input_ids": [5] * 64})
        refused = list(engine.requests)
        served = httpx.post(url + "/generate", json={"input_ids": [5, 299]})
    assert outside.status_code == long.status_code == 400 and refused == []
    assert "outside the model's vocabulary [0, 300)" in outside.json()["error"]["message"]
    assert "context length (64 tokens)" in long.json()["error"]["message"]
    assert served.status_code == 200 and len(engine.requests) == 1
