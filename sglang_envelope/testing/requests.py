"""What the fake engine reads from a request: its body, bounded, and the request SGLang serves.

`check_generate` decodes a ``POST /generate`` body with the library's own
`decode_client_request` and checks it on the fake's `Deployment`, so the fake
refuses what SGLang 0.5.23 refuses, in SGLang's words where the library has
them (the library's checks are recorded against a live server). It serves
what a worker sends that a client may not: the serving system's fields
(``bootstrap_*``, ``routed_dp_rank``, ...), and keys ``GenerateReqInput``
does not know, which SGLang ignores.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import msgspec

from sglang_envelope.errors.exceptions import RequestRejected
from sglang_envelope.request.deployment import Deployment, check_engine_body
from sglang_envelope.request.engine import EngineBody
from sglang_envelope.request.fields import RequestFields
from sglang_envelope.request.rules import (
    FIELD_OWNERS,
    GENERATE_REQ_INPUT_FIELDS,
    ORCHESTRATOR_FIELD,
    reject,
)
from sglang_envelope.request.types import ClientRequest, decode_client_request

__all__ = ["ClientGone", "Receive", "Send", "check_generate", "json_content", "read_body"]

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: The codes of rules the library keeps for clients but a worker's engine request may break.
_SERVED_CODES: Final = frozenset(("orchestrator_field", "unknown_field"))
_CLIENT_COUNT: Final = len(RequestFields.__struct_fields__)


class ClientGone(Exception):
    """The client disconnected before its body was read."""


class _Orchestration(msgspec.Struct):
    """The serving system's fields SGLang's checks read, typed as ``GenerateReqInput`` has them."""

    bootstrap_host: str | None = None
    bootstrap_port: int | None = None
    bootstrap_room: int | None = None
    disagg_prefill_dp_rank: int | None = None
    routed_dp_rank: int | None = None


def json_content(headers: list[tuple[bytes, bytes]]) -> bool:
    """True when ``Content-Type`` is JSON (``application/json`` or ``application/*+json``),
    which FastAPI requires before it parses a body."""
    for name, value in headers:
        if name.lower() == b"content-type":
            kind = value.split(b";", 1)[0].strip().lower()
            return kind == b"application/json" or (
                kind.startswith(b"application/") and kind.endswith(b"+json")
            )
    return False


def _declared_size(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length" and value.isdigit() and len(value) < 20:
            return int(value)
    return None


async def read_body(
    receive: Receive, headers: list[tuple[bytes, bytes]], limit: int
) -> bytes | RequestRejected:
    """The request's body, or the rejection of one over `limit` bytes (read no further).
    Raises `ClientGone` when the client disconnects first."""
    declared = _declared_size(headers)
    if declared is not None and declared > limit:
        return reject("body_too_large", size=declared, limit=limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = bytes(message.get("body", b""))
        size += len(chunk)
        if size > limit:
            return reject("body_too_large", size=size, limit=limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _served_part(body: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """The body's client fields, and the serving system's (unknown keys left out)."""
    try:
        mapping = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError) as error:
        raise reject("not_json", detail=str(error)) from None
    if not isinstance(mapping, dict):
        raise reject("not_object", got=type(mapping).__name__)
    known = set(GENERATE_REQ_INPUT_FIELDS)
    client = {
        key: value
        for key, value in mapping.items()
        if key in known and FIELD_OWNERS.get(key) != ORCHESTRATOR_FIELD
    }
    served = {k: v for k, v in mapping.items() if FIELD_OWNERS.get(k) == ORCHESTRATOR_FIELD}
    return client, served


def _orchestration(served: dict[str, Any]) -> _Orchestration:
    try:
        return msgspec.convert(served, _Orchestration)
    except msgspec.ValidationError as error:
        raise RequestRejected("wrong_type", None, f"wrong type: {error}") from None


def check_generate(body: bytes, deployment: Deployment, max_body_bytes: int) -> ClientRequest:
    """The request `body` asks for; raises `RequestRejected` for
    a body SGLang refuses (and for what the library refuses on purpose: text or
    batched input, parallel sampling, JSON past the library's bounds)."""
    served: dict[str, Any] = {}
    try:
        request = decode_client_request(body, max_body_bytes=max_body_bytes)
    except RequestRejected as rejected:
        if rejected.code not in _SERVED_CODES:
            raise
        client, served = _served_part(body)
        request = decode_client_request(client, max_body_bytes=max_body_bytes)
    routing = _orchestration(served)
    fields = msgspec.structs.astuple(request)[:_CLIENT_COUNT]
    engine_body = msgspec.structs.replace(
        EngineBody(*fields), routed_dp_rank=routing.routed_dp_rank
    )
    check_engine_body(deployment, engine_body)
    return request
