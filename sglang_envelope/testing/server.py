"""The fake engine's HTTP side: responses, server info, and the controls besides
``/generate``: ``/abort_request``, ``/v1/loads``, pause and continue generation.

``/abort_request`` follows SGLang 0.5.23 with one tokenizer worker
(``TokenizerManager.abort_request``, then ``Scheduler.abort_request``): an
empty rid without ``abort_all`` is ignored; a rid no running request has is
ignored (the tokenizer manager knows only exact rids); a rid already aborted
once is ignored; otherwise the scheduler aborts every running request whose
rid starts with it (``req.rid.startswith(recv_req.rid)``), so an abort of
``"a"`` also ends ``"ab"`` while ``"a"`` runs. ``abort_all`` aborts them all.
The scheduler ends only the requests dispatched to it: one that arrived while
generation was paused waits in the tokenizer manager until it is continued, so an
abort meanwhile is lost (one by rid still marks the rid, so later ones are ignored).
Every one answers 200 with an empty body. A control's body is read as SGLang's
pydantic parse (lax mode) reads it: ``"yes"``, ``"on"`` or ``1`` is a true
``abort_all``, and a field of ``AbortReq`` of another type (``rid: 5``) is refused.

The rollout controls are SGLang 0.5.23's (`entrypoints/v1_loads.py`,
`http_server.py`, `TokenizerManager.pause_generation`):

- ``GET /v1/loads`` answers one load per DP rank in SGLang's shape, every
  dispatched generation counted as running on rank 0 (a paused one too, retracted
  or not: the fake's loads count no queue), with the sections a live server
  writes (``memory``, ``disaggregation``, ``queues``), reading ``include``,
  ``dp_rank`` and ``format=prometheus`` as ``v1_loads.py`` and
  ``LoadSnapshot.to_dict`` do;
- ``POST /pause_generation`` reads ``{"mode": "abort" | "retract" |
  "in_place"}`` (default ``"abort"``): ``"abort"`` aborts every running
  generation, ``"retract"`` moves the dispatched ones to the waiting queue (an
  abort there is answered at once, by ``_handle_abort_req``), ``"in_place"`` keeps
  them in the running batch (an abort there is answered once continued); in every
  mode no generation makes a token until ``POST /continue_generation``, which
  reads ``{"torch_empty_cache": bool}``.
  Both answer 200 with SGLang's ``{"message": ..., "status": "ok"}``.

A control's body not sent as JSON (``application/json`` or ``application/*+json``)
is refused as FastAPI refuses it: 400 in pydantic's shape, nothing done.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator, Mapping, MutableSequence
from datetime import datetime, timezone
from typing import Any, Final, Literal, NamedTuple, Protocol, TypeVar
from urllib.parse import parse_qsl

import msgspec

from sglang_envelope.errors.answers import EVENT_STREAM
from sglang_envelope.testing.requests import (
    ClientGone,
    Message,
    Receive,
    Send,
    json_content,
    read_body,
)

__all__ = [
    "JSON",
    "NOT_JSON_MESSAGE",
    "ROUTES",
    "SERVER_INFO",
    "answer",
    "body_chunk",
    "lifespan",
    "loads_answer",
    "not_found",
    "refuse",
    "serve_control",
    "stream_start",
]

JSON: Final = "application/json"
NOT_JSON_MESSAGE: Final = (
    "request body must be a JSON object sent as Content-Type: application/json"
)
_ENCODE = msgspec.json.Encoder().encode

#: ``GET /get_server_info`` keys a live 0.5.23 server
#: (``tests/fixtures/live_server_info.json``) writes, with its values; `FakeEngine` sets
#: the ones its options decide.
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


async def answer(
    send: Send,
    status: int,
    content_type: str | None,
    body: bytes,
    head: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    """A whole response, as Starlette's `Response` sends it (`head`: headers before
    its own)."""
    headers = [*head, (b"content-length", str(len(body)).encode())]
    if content_type is not None:
        headers.append((b"content-type", content_type.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def body_chunk(send: Send, data: bytes, *, more: bool) -> None:
    """One part of a response's body (`more`: another follows)."""
    await send({"type": "http.response.body", "body": data, "more_body": more})


async def refuse(send: Send, status: int, content_type: str, body: bytes) -> None:
    """A refusal as SGLang sends it: a streaming client's (``text/event-stream``)
    through Starlette's `StreamingResponse`, with no ``Content-Length``; another
    whole."""
    if content_type == EVENT_STREAM and status == 200:
        await stream_start(send)
        await body_chunk(send, body, more=False)
    else:
        await answer(send, status, content_type, body)


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


#: The fake's routes: each path, and the methods SGLang serves it by.
ROUTES: Final = {
    "/generate": ("POST", "PUT"),
    "/abort_request": ("POST",),
    "/get_server_info": ("GET",),
    "/server_info": ("GET",),
    "/health": ("GET",),
    "/health_generate": ("GET",),
    "/ready": ("GET",),
    "/v1/loads": ("GET",),
    "/pause_generation": ("POST",),
    "/continue_generation": ("POST",),
}


def _redirect(scope: Message, path: str) -> bytes:
    """The URL Starlette redirects to: `path` on the host the client asked, with the
    query (``starlette.datastructures.URL``)."""
    scheme = scope.get("scheme", "http")
    host = next((v for k, v in scope["headers"] if k.lower() == b"host"), None)
    if host is None:
        name, port = scope.get("server") or ("localhost", None)
        default = port in (None, 443 if scheme == "https" else 80)
        host = (name if default else f"{name}:{port}").encode()
    query = scope.get("query_string", b"")
    url = b"%s://%s%s" % (scheme.encode(), host, path.encode())
    return url + b"?" + query if query else url


async def not_found(send: Send, scope: Message) -> None:
    """FastAPI's 404, its 405 (with ``Allow``) for a route the fake serves by another
    method, or Starlette's 307 to a route's path for it with a trailing slash."""
    path = scope["path"]
    bare = path.rstrip("/")
    if path in ROUTES:
        allow = ((b"allow", ", ".join(ROUTES[path]).encode()),)
        await answer(send, 405, JSON, b'{"detail":"Method Not Allowed"}', allow)
    elif path != bare and bare in ROUTES:
        location = ((b"location", _redirect(scope, bare)),)
        await answer(send, 307, None, b"", location)
    else:
        await answer(send, 404, JSON, b'{"detail":"Not Found"}')


class AbortBody(NamedTuple):
    """One ``/abort_request`` body: as sent (decoded JSON), and read."""

    value: Any
    rid: str
    abort_all: bool


def pydantic_error(message: str) -> tuple[int, str, bytes]:
    body = {"object": "error", "message": message, "type": "Bad Request", "param": None}
    return 400, JSON, _ENCODE({**body, "code": 400})


class _Control(msgspec.Struct):
    """The fields of SGLang's ``BaseReq``, which every control body may carry."""

    rid: str | None = None
    http_worker_ipc: str | None = None


class _Span(msgspec.Struct):
    """SGLang's ``WeightVersionSpan``."""

    version: str
    start: int
    end: int


class _AbortReq(_Control):
    """SGLang's ``AbortReq``, as ``/abort_request`` parses it."""

    abort_all: bool = False
    finished_reason: dict[str, str | int | list[int] | None] | None = None
    abort_message: str | None = None
    weight_versions: list[_Span] | None = None


class _PauseReq(_Control):
    mode: Literal["abort", "retract", "in_place"] = "abort"


class _ContinueReq(_Control):
    torch_empty_cache: bool = True


#: The words pydantic's lax mode reads as a bool, in any case (SGLang parses a control
#: body with it); it reads the numbers 0 and 1 as one too.
_LAX_BOOLS: Final = {
    **dict.fromkeys(("1", "on", "t", "true", "y", "yes"), True),
    **dict.fromkeys(("0", "off", "f", "false", "n", "no"), False),
}
_BOOL_FIELDS: Final = frozenset(("abort_all", "torch_empty_cache"))
_C = TypeVar("_C", bound=_Control)


def _lax_bool(value: Any) -> Any:
    """A bool field's value as pydantic's lax mode reads it (else as it is: refused)."""
    if isinstance(value, str):
        return _LAX_BOOLS.get(value.lower(), value)
    if type(value) in (int, float) and value in (0, 1):
        return bool(value)
    return value


def _read(body: bytes, kind: type[_C], name: str) -> tuple[Any, _C] | ValueError:
    """`body` decoded, and read as SGLang's parse (pydantic, lax) reads a `kind`; or
    why it refuses it."""
    try:
        value = msgspec.json.decode(body)
        lax = value
        if isinstance(value, dict):
            lax = {k: _lax_bool(v) if k in _BOOL_FIELDS else v for k, v in value.items()}
        return value, msgspec.convert(lax, kind, strict=False)
    except (msgspec.DecodeError, RecursionError) as error:
        return ValueError(f"{name} body: {error}")


def parse_abort(body: bytes) -> AbortBody | ValueError:
    """The abort `body` asks for, or why SGLang's parse refuses it."""
    read = _read(body, _AbortReq, "abort_request")
    if isinstance(read, ValueError):
        return read
    value, abort = read
    return AbortBody(value, abort.rid or "", abort.abort_all)


class _Running(Protocol):
    """A running generation, as the controls that end it see it."""

    abort_sent: bool
    dispatched: bool

    def halt(self, why: Literal["abort", "disconnect"]) -> None: ...

    def pause(self, mode: Literal["abort", "retract", "in_place"]) -> None: ...

    def resume(self) -> None: ...


def abort_order(running: Mapping[str, _Running], abort: AbortBody) -> Iterator[_Running]:
    """The running generations an abort ends, by SGLang's rules
    (`running`: rid -> generation): the scheduler ends only those dispatched to it."""
    scheduled = [(rid, gen) for rid, gen in running.items() if gen.dispatched]
    if abort.abort_all:
        yield from [gen for _, gen in scheduled]
        return
    exact = running.get(abort.rid) if abort.rid else None
    if exact is None or exact.abort_sent:
        return
    exact.abort_sent = True  # by the tokenizer manager, dispatched or not
    yield from [gen for rid, gen in scheduled if rid.startswith(abort.rid)]


PAUSED: Final = b'{"message":"Generation paused successfully.","status":"ok"}'
CONTINUED: Final = b'{"message":"Generation continued successfully.","status":"ok"}'


_CORE: Final[dict[str, Any]] = {
    "timestamp": 0.0,
    "dp_rank": 0,
    "num_running_reqs": 0,
    "num_waiting_reqs": 0,
    "num_waiting_uncached_tokens": 0,
    "num_used_tokens": 0,
    "num_total_tokens": 0,
    "num_active_tokens": 0,
    "num_prealloc_ready_tokens": 0,
    "max_total_num_tokens": 4096,
    "max_running_requests": 4096,
    "token_usage": 0.0,
    "gen_throughput": 0.0,
    "cache_hit_rate": 0.0,
    "utilization": 0.0,
    "total_prefill_uncached_tokens": 0,
    "total_prefill_busy_us": 0,
    "decode_moments": None,
}


#: Each section of a load SGLang writes on the fake's server: its key, its name in
#: ``include``, and its fields (``mode`` is the server's disaggregation mode). The fake
#: has no speculative decoding or LoRA, whose sections SGLang then leaves out.
_SECTIONS: Final[tuple[tuple[str, str, dict[str, Any]], ...]] = (
    (
        "memory",
        "memory",
        {
            "weight_gb": 0.0,
            "kv_cache_gb": 0.0,
            "graph_gb": 0.0,
            "token_capacity": 4096,
        },
    ),
    (
        "disaggregation",
        "disagg",
        {
            "mode": "null",
            "prefill_bootstrap_queue_reqs": 0,
            "prefill_inflight_queue_reqs": 0,
            "decode_prealloc_queue_reqs": 0,
            "decode_transfer_queue_reqs": 0,
            "decode_retracted_queue_reqs": 0,
            "kv_transfer_speed_gb_s": 0.0,
            "kv_transfer_latency_ms": 0.0,
        },
    ),
    (
        "queues",
        "queues",
        {
            "waiting": 0,
            "grammar": 0,
            "paused": 0,
            "retracted": 0,
            "prealloc_ready": 0,
        },
    ),
)
#: The ``include`` names SGLang knows (``LoadSnapshot.VALID_SECTIONS``).
_INCLUDES: Final = frozenset(
    ("core", "memory", "spec", "lora", "disagg", "queues", "all")
)
#: A section's metric prefix in the Prometheus format, where not its key.
_PROMETHEUS_PREFIX: Final = {"speculative": "spec", "disaggregation": "disagg"}
PROMETHEUS: Final = "text/plain; version=0.0.4; charset=utf-8"
#: Starlette's answer to an exception no handler takes.
INTERNAL_ERROR: Final = (500, "text/plain; charset=utf-8", b"Internal Server Error")
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")


class _LoadsQuery(NamedTuple):
    """What a ``/v1/loads`` query asks for: sections (None: all), a rank, a format."""

    include: frozenset[str] | None
    dp_rank: int | None
    prometheus: bool


def _loads_query(query: bytes) -> _LoadsQuery | ValueError:
    """The query as FastAPI reads it (a key's last value), or why it refuses it."""
    params = dict(parse_qsl(query.decode("latin-1"), keep_blank_values=True))
    include, rank = params.get("include"), params.get("dp_rank")
    if rank is not None and not _INTEGER.fullmatch(rank):
        return ValueError(f"dp_rank: Input should be a valid integer, got {rank!r}")
    return _LoadsQuery(
        frozenset(name.strip() for name in include.split(",")) if include else None,
        None if rank is None else int(rank),
        params.get("format") == "prometheus",
    )


def _load(
    rank: int, running: int, mode: str, include: frozenset[str] | None
) -> dict[str, Any]:
    """One rank's load, with the sections `include` asks for."""
    load = {**_CORE, "timestamp": time.time(), "dp_rank": rank}
    load["num_running_reqs"] = running
    for key, name, fields in _SECTIONS:
        if include is None or "all" in include or name in include:
            load[key] = {k: mode if k == "mode" else v for k, v in fields.items()}
    return load


def _prometheus(loads: list[dict[str, Any]]) -> bytes:
    """The loads in Prometheus' text format, as SGLang writes them."""
    samples: dict[str, list[tuple[int, Any]]] = {}
    for load in loads:
        rank = load["dp_rank"]
        for key, value in load.items():
            prefix = _PROMETHEUS_PREFIX.get(key, key)
            pairs = value.items() if isinstance(value, dict) else [("", value)]
            for sub_key, sub_value in pairs:
                if key != "dp_rank" and isinstance(sub_value, (int, float)):
                    name = f"sglang_{prefix}_{sub_key}" if sub_key else f"sglang_{key}"
                    samples.setdefault(name, []).append((rank, sub_value))
    lines = []
    for name, found in samples.items():
        lines.append(f"# TYPE {name} gauge")
        lines.extend(f'{name}{{dp_rank="{rank}"}} {value}' for rank, value in found)
    return ("\n".join(lines) + "\n").encode()


def loads_answer(
    *, running: int, dp_size: int, mode: str, query: bytes
) -> tuple[int, str, bytes]:
    """The ``/v1/loads`` answer to `query`: `running` generations on rank 0 of
    `dp_size`, on a server of disaggregation `mode`."""
    read = _loads_query(query)
    if isinstance(read, ValueError):
        return pydantic_error(str(read))
    ranks = [rank for rank in range(dp_size) if read.dp_rank in (None, rank)]
    include = read.include
    known = include is None or "all" in include or include <= _INCLUDES
    if ranks and not known:  # LoadSnapshot.to_dict raises
        return INTERNAL_ERROR
    loads = [_load(rank, running if rank == 0 else 0, mode, include) for rank in ranks]
    if read.prometheus:
        return 200, PROMETHEUS, _prometheus(loads)
    answer = {
        "timestamp": datetime.now(timezone.utc).isoformat(),
        "version": "0.5.23",
        "accelerator": None,
        "num_accelerators": 1,
        "loads": loads,
    }
    return 200, JSON, _ENCODE(answer)


async def serve_control(
    scope: Message,
    receive: Receive,
    send: Send,
    running: Mapping[str, _Running],
    resumed: asyncio.Event,
    aborts: MutableSequence[Any],
) -> None:
    """``POST /abort_request``, ``/pause_generation`` or ``/continue_generation``, on
    the fake's `running` generations (rid -> generation); `resumed` is cleared while
    generation is paused, and each abort's body, decoded, is appended to `aborts`."""
    try:
        body = await read_body(receive, scope["headers"], 65536)
    except ClientGone:
        return
    path = scope["path"]
    if isinstance(body, Exception):
        read: Any = body
    elif not json_content(scope["headers"]):  # FastAPI parses only a JSON body
        read = ValueError(
            f"{path[1:]} body must be sent as Content-Type: application/json"
        )
    elif path == "/abort_request":
        read = parse_abort(body)
    else:
        kind: type[_Control] = _PauseReq if path == "/pause_generation" else _ContinueReq
        parsed = _read(body, kind, kind.__name__.strip("_"))
        read = parsed if isinstance(parsed, ValueError) else parsed[1]
    if isinstance(read, Exception):
        await answer(send, *pydantic_error(str(read)))
    elif isinstance(read, AbortBody):
        aborts.append(read.value)
        for generation in abort_order(running, read):
            generation.halt("abort")
        await answer(send, 200, None, b"")
    elif isinstance(read, _PauseReq):
        for generation in list(running.values()):
            generation.pause(read.mode)
        if read.mode == "abort":
            for generation in abort_order(running, AbortBody(None, "", True)):
                generation.halt("abort")
        resumed.clear()
        await answer(send, 200, JSON, PAUSED)
    else:
        for generation in running.values():  # the held ones go to the scheduler
            generation.resume()
        resumed.set()
        await answer(send, 200, JSON, CONTINUED)
