"""What a server reads before serving: a request's type and body (`serve.incoming`), and
its SGLang server's description at start (`read_deployment`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sglang_envelope import (
    Deployment,
    EnvelopeError,
    LimitExceeded,
    RequestRejected,
    Service,
    UpstreamError,
    read_deployment,
)
from sglang_envelope.serve.incoming import json_content_type, read_client_body
from sglang_envelope.testing import FakeEngine

#: Content-Type -> whether FastAPI (SGLang's /generate) parses the body as JSON.
CONTENT_TYPES = {
    None: False,  # FastAPI 0.132 and later: strict by default
    "": False,
    "application/json": True,
    "Application/JSON; charset=utf-8": True,
    "application/vnd.api+json": True,
    " application/json ": True,
    "text/plain": False,
    "application/x-www-form-urlencoded": False,
    "multipart/form-data; boundary=x": False,
    "application/json/x": False,
    "json": False,
    "text/json": False,
}


@pytest.mark.parametrize(("value", "parsed"), list(CONTENT_TYPES.items()))
def test_a_content_type_is_json_as_fastapi_reads_it(value: str | None, parsed: bool) -> None:
    assert json_content_type(value) is parsed


class Chunks:
    """A body's chunks, counting how many were read."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)
        self.read = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            self.read += 1
            yield chunk


JSON = {"content-type": "application/json"}


def read(headers: dict[str, str], chunks: Chunks, limit: int = 10) -> bytes:
    return asyncio.run(read_client_body(headers, chunks, max_body_bytes=limit))


def test_a_body_is_read_whole_within_the_bound() -> None:
    chunks = Chunks(b'{"a"', b": 1}")
    assert read({"Content-Type": "application/json"}, chunks) == b'{"a": 1}'
    assert chunks.read == 2


def test_a_declared_length_over_the_bound_is_refused_before_a_chunk_is_read() -> None:
    chunks = Chunks(b"{}")
    with pytest.raises(RequestRejected) as caught:
        read({**JSON, "content-length": "11"}, chunks)
    assert (caught.value.code, chunks.read) == ("body_too_large", 0)
    assert str(caught.value) == "request body is 11 bytes; the limit is 10"
    with pytest.raises(RequestRejected, match=r"request body is 9{20} bytes"):
        read({**JSON, "content-length": "9" * 5000}, Chunks())  # past int()'s 4,300 digits


def test_a_body_without_a_length_is_read_no_further_than_the_bound() -> None:
    chunks = Chunks(b"x" * 6, b"x" * 6, b"x" * 6)
    with pytest.raises(RequestRejected) as caught:
        read(JSON, chunks)
    assert (caught.value.code, chunks.read) == ("body_too_large", 2)
    assert str(caught.value) == "request body is over 10 bytes; the limit is 10"


def test_a_type_sglang_does_not_parse_is_refused_before_a_chunk_is_read() -> None:
    chunks = Chunks(b"{}")
    with pytest.raises(RequestRejected) as caught:
        read({"CONTENT-TYPE": "text/plain", "Content-Length": "2"}, chunks)
    assert (caught.value.code, caught.value.field, chunks.read) == ("not_object", None, 0)
    assert str(caught.value) == (
        "request body must be a JSON object, got a body sent as Content-Type: text/plain"
    )
    with pytest.raises(RequestRejected) as caught:
        read({"Content-Length": "2"}, chunks)  # no type: FastAPI 0.132 and later
    assert (caught.value.code, chunks.read) == ("not_object", 0)
    assert str(caught.value).endswith("got a body sent with no Content-Type")


@pytest.mark.parametrize("limit", [-1, "10", 1.5, None])
def test_a_bound_of_the_wrong_type_is_an_envelope_error(limit: Any) -> None:
    with pytest.raises(EnvelopeError, match="max_body_bytes"):
        read({}, Chunks(), limit)


def test_the_service_answers_a_refusal_before_reading_as_sglang_and_closes() -> None:
    async def main(headers: dict[str, str], chunks: Chunks) -> tuple[int, Any, bytes]:
        async with Service(FakeTransport(), deployment=Deployment(vocab_size=320)) as svc:
            answer = await svc.generate_request(headers, chunks)
            return answer.status, answer.headers, b"".join([c async for c in answer.body])

    status, headers, body = asyncio.run(main({"content-type": "text/html"}, Chunks(b"{}")))
    assert status == 400 and headers == {"content-type": "application/json", "connection": "close"}
    assert list(json.loads(body)) == ["object", "message", "type", "param", "code"]
    big = {**JSON, "content-length": str(32 << 20)}
    status, headers, body = asyncio.run(main(big, Chunks()))
    assert status == 413 and headers["connection"] == "close"
    assert json.loads(body) == {
        "error": {"message": "request body is 33554432 bytes; the limit is 16777216"}
    }


class FakeTransport:
    """A transport that must not be reached."""

    async def generate(self, body: bytes, headers: Any) -> Any:
        raise AssertionError("reached the engine")

    async def abort(self, body: bytes) -> int:
        raise AssertionError("reached the engine")


async def _silent() -> dict[str, Any]:
    await asyncio.sleep(10)
    return {"type": "http.request"}


@pytest.mark.parametrize(
    ("headers", "chunks", "options", "message"),
    [
        (None, Chunks(b"{}"), {}, r"^headers must be a mapping, got NoneType$"),
        ([("content-type", "application/json")], Chunks(), {}, r"^headers must be a mapping"),
        (JSON, b"{}", {}, r"^chunks must be an async iterable of bytes, got bytes$"),
        (JSON, Chunks("{}"), {}, r"^chunks must be bytes, got str$"),  # type: ignore[arg-type]
        (JSON, Chunks(b"{}"), {"receive": 3}, r"^receive must be a callable or None, got int$"),
        (
            JSON,
            Chunks(b"{}"),
            {"disconnected": True},
            r"^disconnected must be a callable or None, got bool$",
        ),
        (
            JSON,
            Chunks(b"{}"),
            {"disconnected": bool, "receive": _silent},
            r"^generate_request takes disconnected or receive, not both$",
        ),
    ],
)
def test_a_request_argument_of_the_wrong_type_is_named(
    headers: Any, chunks: Any, options: dict[str, Any], message: str
) -> None:
    """The caller's mistakes raise `EnvelopeError` naming the argument, never Python's
    `TypeError` or `AttributeError`, nor a 499 as if the client had gone (a `receive` that
    is not callable)."""

    async def main() -> None:
        async with Service(FakeTransport(), deployment=Deployment(vocab_size=320)) as svc:
            await svc.generate_request(headers, chunks, **options)

    with pytest.raises(EnvelopeError, match=message):
        asyncio.run(main())


def test_a_disconnected_test_that_is_not_callable_is_named() -> None:
    async def main() -> None:
        async with Service(FakeTransport(), deployment=Deployment(vocab_size=320)) as svc:
            await svc.generate(b'{"input_ids": [1]}', disconnected=1)  # type: ignore[arg-type]

    with pytest.raises(EnvelopeError, match=r"^disconnected must be a callable or None, got int$"):
        asyncio.run(main())


class Info:
    """A transport's `get`: SGLang's /get_server_info as the fake writes it, or `answer`."""

    def __init__(self, answer: tuple[int, bytes] | None = None, **options: Any) -> None:
        self.engine = FakeEngine(**options)
        self.answer = answer
        self.paths: list[str] = []

    def get_body(self) -> bytes:
        return json.dumps(self.engine.server_info()).encode()

    async def get(self, path: str) -> tuple[int, bytes]:
        self.paths.append(path)
        return self.answer or (200, self.get_body())


def describe(server: Any, **given: Any) -> Deployment:
    return asyncio.run(read_deployment(server, **given))


def test_the_deployment_is_the_server_s_own_with_its_vocabulary(tmp_path: Path) -> None:
    info = Info(vocab_size=300, context_length=64, routed_experts_shape=(2, 4))
    config = json.dumps(info.engine.model_config()).encode()
    path = tmp_path / "config.json"
    path.write_bytes(config)
    expected = Deployment.from_server_info(info.get_body(), model_config=config)
    assert describe(info, model_config=config) == expected
    assert describe(info, model_config=str(path)) == describe(info, model_config=path) == expected
    assert expected.context_length == 64 and expected.routed_experts_shape == (2, 4)
    stated = describe(info, vocab_size="300")
    assert stated == Deployment.from_server_info(
        info.get_body(), model_config=b'{"vocab_size": 300}'
    )
    assert describe(info, vocab_size=300) == stated
    assert describe(info, vocab_size=" None ").vocab_size is None
    assert info.paths == ["/get_server_info"] * 6


@pytest.mark.parametrize(
    "given", [{}, {"vocab_size": ""}, {"vocab_size": 320, "model_config": b"{}"}]
)
def test_no_vocabulary_or_two_is_refused_saying_what_to_pass_before_asking(
    given: dict[str, Any],
) -> None:
    info = Info()
    with pytest.raises(EnvelopeError, match="pass model_config, the path of the model's"):
        describe(info, **given)
    assert info.paths == []


@pytest.mark.parametrize("vocab", ["0", "-3", "many", "1e5", "12345678901234", 0, True, 3.0])
def test_a_stated_vocabulary_is_a_positive_integer_or_none(vocab: Any) -> None:
    with pytest.raises(EnvelopeError, match="vocab_size: expected an integer >= 1 or 'none'"):
        describe(Info(), vocab_size=vocab)


def test_what_cannot_be_read_is_named(tmp_path: Path) -> None:
    with pytest.raises(EnvelopeError, match=r"model_config: cannot read .*nothing\.json"):
        describe(Info(), model_config=str(tmp_path / "nothing.json"))
    with pytest.raises(EnvelopeError, match="model_config must be bytes or a path"):
        describe(Info(), model_config=42)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (4 << 20) + b"{}")
    with pytest.raises(LimitExceeded):
        describe(Info(), model_config=big)
    with pytest.raises(EnvelopeError, match="model_config has no vocab_size"):
        describe(Info(), model_config=b"{}")
    with pytest.raises(EnvelopeError, match="server must have an async get"):
        describe(object(), vocab_size=5)


def test_a_server_that_answers_otherwise_is_named() -> None:
    with pytest.raises(UpstreamError, match="answered GET /get_server_info with 404") as caught:
        describe(Info((404, b'{"detail":"Not Found"}')), vocab_size=5)
    assert caught.value.status == 502
    with pytest.raises(EnvelopeError, match="server_info is not valid JSON"):
        describe(Info((200, b"<html>")), vocab_size=5)
    with pytest.raises(LimitExceeded):
        describe(Info((200, b" " * (4 << 20) + b"{}")), vocab_size=5)


class Returning:
    """A server whose `get` returns `answer` (awaited when `awaitable`)."""

    def __init__(self, answer: Any, awaitable: bool = True) -> None:
        self.answer, self.awaitable = answer, awaitable

    def get(self, path: str) -> Any:
        async def got() -> Any:
            return self.answer

        return got() if self.awaitable else self.answer


@pytest.mark.parametrize(
    ("server", "message"),
    [
        (Returning((200, "{}")), r"^server\.get must return \(status, body\), an int and bytes"),
        (Returning((200,)), r"^server\.get must return \(status, body\)"),
        (Returning(b"{}"), r"^server\.get must return \(status, body\)"),
        (Returning((200, b"{}"), awaitable=False), r"^server\.get must return an awaitable"),
    ],
)
def test_a_server_whose_get_returns_another_shape_is_named(server: Any, message: str) -> None:
    """A `get` of the caller's that returns anything but an awaitable of (status, bytes)
    is an `EnvelopeError` naming it, never Python's `TypeError` or `ValueError`."""
    with pytest.raises(EnvelopeError, match=message):
        describe(server, vocab_size=5)
