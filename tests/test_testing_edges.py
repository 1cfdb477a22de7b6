"""The fake engine's HTTP edges, driven as an ASGI app with hand-made messages: bodies without a
``Content-Length``, clients gone before their body, bodies it cannot read, bad aborts, lifespan."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import pytest

from sglang_envelope.testing import FakeEngine
from sglang_envelope.testing.requests import split_many

JSON_TYPE = (b"content-type", b"application/json")
Message = MutableMapping[str, Any]


class Exchange:
    """One ASGI request: the messages the app receives, in order, then none (the client
    waits); what the app sent; how many messages it asked for."""

    def __init__(self, messages: list[Message]) -> None:
        self.incoming = list(messages)
        self.sent: list[Message] = []
        self.reads = 0

    async def receive(self) -> Message:
        self.reads += 1
        if self.incoming:
            return self.incoming.pop(0)
        await asyncio.Future()  # nothing more from this client, until the app stops asking
        raise AssertionError("unreachable")

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int | None:
        starts = [m["status"] for m in self.sent if m["type"] == "http.response.start"]
        return starts[0] if starts else None

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


def chunk(data: bytes, more: bool = False) -> Message:
    return {"type": "http.request", "body": data, "more_body": more}


def post(
    engine: FakeEngine,
    path: str,
    messages: list[Message],
    headers: list[tuple[bytes, bytes]] | None = None,
) -> Exchange:
    """POST to `engine` in process: the client sends `messages`, then waits."""
    exchange = Exchange(messages)
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [JSON_TYPE] if headers is None else headers,
        "query_string": b"",
    }
    asyncio.run(asyncio.wait_for(engine(scope, exchange.receive, exchange.send), 5))
    return exchange


def pydantic_refusal(message: str) -> dict[str, Any]:
    return {
        "object": "error",
        "message": message,
        "type": "Bad Request",
        "param": None,
        "code": 400,
    }


def test_a_body_sent_without_a_content_length_is_read_to_its_end_and_served() -> None:
    engine = FakeEngine()
    parts = [b'{"input_ids": [5, 6], ', b'"sampling_params": {"max_new_tokens": 3}}']
    exchange = post(engine, "/generate", [chunk(parts[0], more=True), chunk(parts[1])])
    assert exchange.status == 200
    answer = json.loads(exchange.body)
    assert len(answer["output_ids"]) == 3 and answer["meta_info"]["prompt_tokens"] == 2
    assert list(engine.requests) == [b"".join(parts)]
    assert [outcome.ending for outcome in engine.outcomes] == ["length"]


def test_a_body_without_a_content_length_that_grows_past_the_bound_is_refused_unread() -> None:
    engine = FakeEngine(max_body_bytes=64)
    parts = [chunk(b"x" * 40, more=True), chunk(b"x" * 40, more=True), chunk(b"x" * 40)]
    exchange = post(engine, "/generate", parts)
    assert exchange.status == 413
    assert json.loads(exchange.body) == {
        "error": {"message": "request body is 80 bytes; the limit is 64"}
    }
    assert exchange.reads == 2, "nothing past the bound is read"
    assert list(engine.requests) == [] and list(engine.outcomes) == []


def test_a_client_gone_before_its_generate_body_is_counted_and_answered_nothing() -> None:
    engine = FakeEngine()
    exchange = post(engine, "/generate", [{"type": "http.disconnect"}])
    assert exchange.sent == [] and engine.disconnects == 1
    assert list(engine.requests) == [] and engine.running == 0


def test_a_client_gone_before_its_abort_body_aborts_nothing() -> None:
    engine = FakeEngine()
    exchange = post(engine, "/abort_request", [{"type": "http.disconnect"}])
    assert exchange.sent == [] and list(engine.aborts) == []
    assert engine.disconnects == 0, "only a generation's client is counted"


def test_a_serving_system_field_of_the_wrong_type_is_refused_as_pydantic_refuses_it() -> None:
    engine = FakeEngine()
    exchange = post(engine, "/generate", [chunk(b'{"input_ids": [5, 6], "bootstrap_port": "x"}')])
    assert exchange.status == 400
    message = "wrong type: Expected `int | null`, got `str` - at `$.bootstrap_port`"
    assert json.loads(exchange.body) == pydantic_refusal(message)
    assert engine.running == 0 and list(engine.outcomes) == []


def test_an_unknown_key_holding_bytes_that_are_not_utf8_is_refused_as_not_json() -> None:
    engine = FakeEngine()
    exchange = post(engine, "/generate", [chunk(b'{"zzz": "\xff", "input_ids": [5]}')])
    assert exchange.status == 400
    message = "request body is not valid JSON: Invalid UTF-8 encoded string"
    assert json.loads(exchange.body) == pydantic_refusal(message)
    assert list(engine.outcomes) == []


@pytest.mark.parametrize(
    "body", [b'{"text": ["a", "b"], "x": "\xff"}', b'{"input_ids": [[5], [6]], "x": "\xff"}']
)
def test_a_batch_shaped_body_that_is_not_json_is_left_to_the_one_sequence_refusal(
    body: bytes,
) -> None:
    assert split_many(body, 320) is None
    engine = FakeEngine()
    exchange = post(engine, "/generate", [chunk(body)])
    assert exchange.status == 400 and b'"error"' in exchange.body
    assert engine.running == 0 and list(engine.outcomes) == []


def test_an_abort_body_over_its_bound_is_refused_as_pydantic_refuses_it() -> None:
    engine = FakeEngine()
    headers = [JSON_TYPE, (b"content-length", b"70000")]
    exchange = post(engine, "/abort_request", [chunk(b"{}")], headers)
    assert exchange.status == 400 and exchange.reads == 0, "refused by its declared size"
    message = "request body is 70000 bytes; the limit is 65536"
    assert json.loads(exchange.body) == pydantic_refusal(message)
    assert list(engine.aborts) == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{rid", "JSON is malformed: object keys must be strings (byte 1)"),
        (b'{"rid": 5}', "Expected `str | null`, got `int` - at `$.rid`"),
        (b'{"abort_all": 2}', "Expected `bool`, got `int` - at `$.abort_all`"),
        (b'{"abort_all": " yes"}', "Expected `bool`, got `str` - at `$.abort_all`"),
        (b'{"abort_all": null}', "Expected `bool`, got `null` - at `$.abort_all`"),
        (
            b'{"rid": "a", "abort_message": 5}',
            "Expected `str | null`, got `int` - at `$.abort_message`",
        ),
        (
            b'{"rid": "a", "http_worker_ipc": 5}',
            "Expected `str | null`, got `int` - at `$.http_worker_ipc`",
        ),
        (
            b'{"rid": "a", "finished_reason": 5}',
            "Expected `object | null`, got `int` - at `$.finished_reason`",
        ),
        (
            b'{"rid": "a", "weight_versions": [1]}',
            "Expected `object`, got `int` - at `$.weight_versions[0]`",
        ),
    ],
)
def test_an_abort_body_sglang_cannot_parse_is_refused_as_pydantic_refuses_it(
    body: bytes, message: str
) -> None:
    engine = FakeEngine()
    exchange = post(engine, "/abort_request", [chunk(body)])
    assert exchange.status == 400
    assert json.loads(exchange.body) == pydantic_refusal(f"abort_request body: {message}")
    assert list(engine.aborts) == []


def test_a_lifespan_message_the_fake_does_not_know_is_ignored() -> None:
    engine = FakeEngine()
    incoming: list[Message] = [
        {"type": "lifespan.startup"},
        {"type": "lifespan.unknown"},
        {"type": "lifespan.shutdown"},
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return incoming.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(asyncio.wait_for(engine({"type": "lifespan"}, receive, send), 5))
    assert sent == [{"type": "lifespan.startup.complete"}, {"type": "lifespan.shutdown.complete"}]
    assert incoming == []


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/abort_request", b'{"abort_all": true}'),
        ("/pause_generation", b'{"mode": "in_place"}'),
        ("/continue_generation", b"{}"),
    ],
)
@pytest.mark.parametrize("content_type", [None, b"text/plain"])
def test_a_control_body_sent_as_no_json_is_refused_as_fastapi_refuses_it(
    path: str, body: bytes, content_type: bytes | None
) -> None:
    engine = FakeEngine()
    if path == "/continue_generation":  # a paused engine, to see it stays paused
        assert post(engine, "/pause_generation", [chunk(b"{}")]).status == 200
    headers = [] if content_type is None else [(b"content-type", content_type)]
    exchange = post(engine, path, [chunk(body)], headers)
    assert exchange.status == 400
    message = f"{path[1:]} body must be sent as Content-Type: application/json"
    assert json.loads(exchange.body) == pydantic_refusal(message)
    assert engine.paused == (path == "/continue_generation"), "nothing paused or continued"
    assert list(engine.aborts) == []


@pytest.mark.parametrize(
    ("value", "aborts"),
    [
        ("yes", True),
        ("On", True),
        ("t", True),
        ("1", True),
        (1, True),
        (1.0, True),
        ("no", False),
        ("OFF", False),
        ("f", False),
        (0, False),
        (0.0, False),
    ],
)
def test_abort_all_is_read_as_pydantic_s_lax_mode_reads_a_bool(value: Any, aborts: bool) -> None:
    engine = FakeEngine(frame_delay=0.01)
    generate = b'{"input_ids": [5], "rid": "r", "sampling_params": {"max_new_tokens": 500}}'
    abort = json.dumps({"abort_all": value}).encode()

    async def main() -> tuple[Exchange, Exchange]:
        running = Exchange([chunk(generate)])
        scope = {"type": "http", "method": "POST", "path": "/generate", "headers": [JSON_TYPE]}
        task = asyncio.ensure_future(engine(scope, running.receive, running.send))
        while engine.running == 0:
            await asyncio.sleep(0.005)
        sent = Exchange([chunk(abort)])
        await engine({**scope, "path": "/abort_request"}, sent.receive, sent.send)
        await asyncio.sleep(0.05)
        task.cancel()
        return running, sent

    running, sent = asyncio.run(asyncio.wait_for(main(), 5))
    assert sent.status == 200 and list(engine.aborts) == [{"abort_all": value}]
    assert (running.status == 200) == aborts, "an abort ends the generation at once"


def test_a_continue_body_reads_torch_empty_cache_as_pydantic_s_lax_mode_does() -> None:
    engine = FakeEngine()
    assert post(engine, "/pause_generation", [chunk(b'{"mode": "retract"}')]).status == 200
    refused = post(engine, "/continue_generation", [chunk(b'{"torch_empty_cache": 2}')])
    assert refused.status == 400 and engine.paused
    message = "ContinueReq body: Expected `bool`, got `int` - at `$.torch_empty_cache`"
    assert json.loads(refused.body) == pydantic_refusal(message)
    served = post(engine, "/continue_generation", [chunk(b'{"torch_empty_cache": "no"}')])
    assert served.status == 200 and not engine.paused
