"""The fake engine's HTTP side: responses, ``/abort_request``'s rules, server info.

``/abort_request`` follows SGLang 0.5.23 with one tokenizer worker
(``TokenizerManager.abort_request``, then ``Scheduler.abort_request``): an
empty rid without ``abort_all`` is ignored; a rid no running request has is
ignored (the tokenizer manager knows only exact rids); a rid already aborted
once is ignored; otherwise the scheduler aborts every running request whose
rid starts with it (``req.rid.startswith(recv_req.rid)``), so an abort of
``"a"`` also ends ``"ab"`` while ``"a"`` runs. ``abort_all`` aborts them all.
Every one answers 200 with an empty body.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final, NamedTuple, Protocol

import msgspec

from sglang_envelope.errors.answers import EVENT_STREAM
from sglang_envelope.testing.requests import Receive, Send

__all__ = [
    "JSON",
    "NOT_JSON_MESSAGE",
    "AbortBody",
    "abort_order",
    "answer",
    "body_chunk",
    "lifespan",
    "not_found",
    "parse_abort",
    "pydantic_error",
    "server_info",
    "stream_start",
]

JSON: Final = "application/json"
NOT_JSON_MESSAGE: Final = (
    "request body must be a JSON object sent as Content-Type: application/json"
)
_ENCODE = msgspec.json.Encoder().encode

#: ``GET /get_server_info`` keys a live 0.5.23 server
#: (``tests/fixtures/live_server_info.json``) writes, with its values; `server_info` sets
#: the ones the fake's options decide.
SERVER_INFO: Final[Mapping[str, Any]] = {
    "model_path": "fake-sglang-model",
    "tokenizer_path": "fake-sglang-model",
    "skip_tokenizer_init": False,
    "context_length": 1024,
    "dp_size": 1,
    "tp_size": 1,
    "allow_auto_truncate": False,
    "enable_custom_logit_processor": False,
    "enable_strict_thinking": False,
    "enable_return_hidden_states": False,
    "return_hidden_states_mode": None,
    "incremental_streaming_output": False,
    "speculative_algorithm": None,
    "disaggregation_mode": "null",
    "enable_return_routed_experts": False,
    "weight_version": "default",
    "status": "ready",
    "max_total_num_tokens": 4096,
    "max_req_input_len": 1018,
    "version": "0.5.23",
}


def server_info(
    *,
    context_length: int,
    dp_size: int,
    incremental: bool,
    disaggregation_mode: str = "null",
    routed_experts: bool = False,
) -> dict[str, Any]:
    """The fake's ``/get_server_info`` body (`SERVER_INFO` with its own settings)."""
    info = dict(SERVER_INFO)
    info.update(
        context_length=context_length,
        dp_size=dp_size,
        incremental_streaming_output=incremental,
        disaggregation_mode=disaggregation_mode,
        enable_return_routed_experts=routed_experts,
        # SGLang keeps room for the decode tokens a request may still need.
        max_req_input_len=max(1, context_length - 6),
    )
    return info


async def answer(send: Send, status: int, content_type: str | None, body: bytes) -> None:
    """A whole response, as Starlette's `Response` sends it."""
    headers = [(b"content-length", str(len(body)).encode())]
    if content_type is not None:
        headers.append((b"content-type", content_type.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def body_chunk(send: Send, data: bytes, *, more: bool) -> None:
    """One part of a response's body (`more`: another follows)."""
    await send({"type": "http.response.body", "body": data, "more_body": more})


async def lifespan(receive: Receive, send: Send) -> None:
    """The ASGI lifespan protocol: startup and shutdown, with nothing to do."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def stream_start(send: Send) -> None:
    """The head of an SSE answer, as Starlette's `StreamingResponse` sends it."""
    headers = [(b"content-type", EVENT_STREAM.encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})


async def not_found(send: Send, path: str, method: str) -> None:
    """FastAPI's 404 or 405 for a route the fake does not serve."""
    routes = {
        "/generate": "POST",
        "/abort_request": "POST",
        "/get_server_info": "GET",
        "/server_info": "GET",
        "/health": "GET",
        "/v1/loads": "GET",
        "/pause_generation": "POST",
        "/continue_generation": "POST",
    }
    if path in routes and routes[path] != method:
        await answer(send, 405, JSON, b'{"detail":"Method Not Allowed"}')
    else:
        await answer(send, 404, JSON, b'{"detail":"Not Found"}')


class _AbortReq(msgspec.Struct):
    """The fields of SGLang's `AbortReq` that ``/abort_request`` reads."""

    rid: str | None = ""
    abort_all: bool = False


class AbortBody(NamedTuple):
    """One ``/abort_request`` body: as sent (decoded JSON), and read."""

    value: Any
    rid: str
    abort_all: bool


def pydantic_error(message: str) -> tuple[int, str, bytes]:
    body = {"object": "error", "message": message, "type": "Bad Request", "param": None}
    return 400, JSON, _ENCODE({**body, "code": 400})


def parse_abort(
    body: bytes | Exception, is_json: bool
) -> AbortBody | tuple[int, str, bytes]:
    """The abort `body` asks for, or the 400 answer SGLang's parse gives a bad one."""
    if isinstance(body, Exception):
        return pydantic_error(str(body))
    if not is_json:
        return pydantic_error(
            "abort_request body must be sent as Content-Type: application/json"
        )
    try:
        value = msgspec.json.decode(body)
        read = msgspec.convert(value, _AbortReq)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as error:
        return pydantic_error(f"abort_request body: {error}")
    return AbortBody(value, read.rid or "", read.abort_all)


class _Abortable(Protocol):
    abort_sent: bool


def abort_order(running: Mapping[str, Any], abort: AbortBody) -> Iterator[Any]:
    """The running generations an abort ends, by SGLang's rules
    (`running`: rid -> generation)."""
    if abort.abort_all:
        yield from list(running.values())
        return
    exact: _Abortable | None = running.get(abort.rid) if abort.rid else None
    if exact is None or exact.abort_sent:
        return
    exact.abort_sent = True
    yield from [gen for rid, gen in running.items() if rid.startswith(abort.rid)]
