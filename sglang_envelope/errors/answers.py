"""Errors answered as SGLang 0.5.23's /generate does: status, content type and body.

SGLang refuses a body in one of three layers of ``srt/entrypoints/http_server.py``,
each with its own answer (recorded live: ``tests/fixtures/live_refusals.jsonl``):

- FastAPI's parse of `GenerateReqInput` (pydantic): 400 ``application/json``
  ``{"object": "error", "message", "type": "Bad Request", "param": null, "code": 400}``;
- the API contract gate (``generate_contract_error``): 400 ``application/json``
  ``{"error": "<text>"}``;
- a ValueError of the tokenizer manager (the engine): for a unary client 400
  ``application/json`` ``{"error": {"message"}}`` (``_create_error_response``);
  for a streaming client 200 ``text/event-stream; charset=utf-8``, one frame
  ``data: {"error": {"message", "type": "invalid_request_error", "code",
  "retryable": false}}`` and ``data: [DONE]`` (``stream_results``).

The first two answer both modes alike. `REFUSAL_LAYERS` and `FIELD_LAYERS`
say which layer refuses a body that breaks each rule (`error_response`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, NamedTuple

import msgspec

from sglang_envelope.errors.exceptions import (
    EnvelopeError,
    RequestRejected,
    UpstreamError,
)

__all__ = [
    "FIELD_LAYERS",
    "REFUSAL_LAYERS",
    "ErrorAnswer",
    "error_event",
    "error_frame",
    "error_response",
    "stream_requested",
]

#: The layer of SGLang's /generate that refuses a body.
Layer = Literal["pydantic", "gate", "engine"]


class ErrorAnswer(NamedTuple):
    """The HTTP answer to a failed request: what to write to the client, as is."""

    status: int
    content_type: str
    body: bytes


JSON: Final = "application/json"
#: What Starlette's StreamingResponse(media_type="text/event-stream") sends.
EVENT_STREAM: Final = "text/event-stream; charset=utf-8"
_DONE: Final = b"data: [DONE]\n\n"

#: Rule code -> the layer of SGLang 0.5.23's /generate (over HTTP) that refuses a body
#: breaking it. A code not listed is refused by the engine, or served by SGLang where
#: the library refuses it on purpose: both are answered in the engine's shape.
REFUSAL_LAYERS: Final[Mapping[str, Layer]] = {
    "not_json": "pydantic",
    "not_object": "pydantic",
    "wrong_type": "pydantic",
    "invalid_value": "pydantic",
    "unknown_nested_field": "gate",
    "unknown_sampling_param": "gate",
}

#: For the rules in `FIELD_RULES`, the layer by the field at fault, where it is not the
#: rule's: the field's path with its indices left out; ``x.*`` is any field inside ``x``.
#: The longest match wins. pydantic types the top-level fields but `watermark`; the
#: gate types what is inside `sampling_params`; only the engine reads `watermark`.
FIELD_LAYERS: Final[Mapping[str, Layer]] = {
    "sampling_params.*": "gate",
    "max_thinking_tokens": "gate",  # an int to pydantic, a u64 to the gate
    "watermark": "engine",
    "watermark.*": "engine",
}
FIELD_RULES: Final = frozenset(("wrong_type", "invalid_value"))

_ENCODER: Final = msgspec.json.Encoder()


def refusal_layer(exc: RequestRejected) -> Layer:
    """The layer of SGLang that refuses what `exc` refuses
    (`REFUSAL_LAYERS`, `FIELD_LAYERS`)."""
    code: object = exc.code
    if type(code) is not str:  # a hand-built rejection
        return "engine"
    field: object = exc.field
    if code in FIELD_RULES and type(field) is str:
        parts = field.split("[", 1)[0].split(".")
        insides = [".".join(parts[:end]) + ".*" for end in range(len(parts) - 1, 0, -1)]
        for key in (".".join(parts), *insides):  # the longest match first
            if key in FIELD_LAYERS:
                return FIELD_LAYERS[key]
    return REFUSAL_LAYERS.get(code, "engine")


def _status_and_error(exc: EnvelopeError, detail: bool) -> tuple[int, dict[str, Any]]:
    """The status, and the error object of SGLang's stream frame (`detail`: with rule)."""
    if not isinstance(exc, EnvelopeError):
        raise EnvelopeError(f"exc must be an EnvelopeError, got {type(exc).__name__}")
    status = exc.status
    error: dict[str, Any] = {
        "message": _json_text(str(exc)),
        "type": exc.error_type,
        "code": status,
        "retryable": exc.retryable,
    }
    if detail and isinstance(exc, RequestRejected):
        error["type"] = _json_text(str(getattr(exc, "code", "")))
        field = getattr(exc, "field", None)
        error["param"] = None if field is None else _json_text(str(field))
    return status, error


def _json_text(text: str) -> str:
    """`text`, with any lone surrogate (which JSON cannot carry) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def error_response(
    exc: EnvelopeError, *, stream: bool | None = None, detail: bool = False
) -> ErrorAnswer:
    """What SGLang's /generate would have sent a client whose request failed with `exc`.

    `stream` is the client's mode (None: unary; see `stream_requested`). A
    `RequestRejected` is answered as the layer of SGLang that refuses that rule
    (`REFUSAL_LAYERS`); every other exception, and a rule only the library
    keeps, in the engine's shape: ``{"error": {"message"}}`` with its status for
    a unary client, 200 and SGLang's error frame then ``data: [DONE]`` for a
    streaming one. `detail` gives, in either mode, the status and
    ``application/json`` body ``{"error": {"message", "type", "code",
    "retryable", "param"}}`` with the rule's code as ``type`` and its field as
    ``param`` (a `RequestRejected`'s; the others' as the frame). Raises
    `EnvelopeError` when `exc` is not a library exception, or `stream` or
    `detail` is not a bool.
    """
    for name, flag in (
        ("stream", False if stream is None else stream),
        ("detail", detail),
    ):
        if type(flag) is not bool:
            raise EnvelopeError(f"{name}: expected a bool, got {type(flag).__name__}")
    status, error = _status_and_error(exc, detail)
    if detail:
        return ErrorAnswer(status, JSON, _ENCODER.encode({"error": error}))
    layer = refusal_layer(exc) if isinstance(exc, RequestRejected) else "engine"
    message = error["message"]
    if layer == "gate":
        return ErrorAnswer(400, JSON, _ENCODER.encode({"error": message}))
    if layer == "pydantic":
        body = {
            "object": "error",
            "message": message,
            "type": "Bad Request",
            "param": None,
        }
        return ErrorAnswer(400, JSON, _ENCODER.encode({**body, "code": 400}))
    # body_too_large (413) and an unreachable SGLang (502, 503, 504): no stream was begun
    kept_status = isinstance(exc, UpstreamError) or (
        isinstance(exc, RequestRejected) and status != 400
    )
    if stream and not kept_status:
        return ErrorAnswer(200, EVENT_STREAM, _frame(error) + _DONE)
    return ErrorAnswer(status, JSON, _ENCODER.encode({"error": {"message": message}}))


def _frame(error: dict[str, Any]) -> bytes:
    return b"data: " + _ENCODER.encode({"error": error}) + b"\n\n"


def error_frame(exc: EnvelopeError, *, detail: bool = False) -> dict[str, Any]:
    """SGLang's error object for a streaming request failed with `exc`:
    ``{"error": {"message", "type", "code", "retryable"}}``, the frame `error_event`
    writes, for a caller that relays frames as objects (an in-process engine's).
    Raises `EnvelopeError` when `exc` is not a library exception."""
    return {"error": _status_and_error(exc, detail)[1]}


def error_event(exc: EnvelopeError, *, detail: bool = False) -> bytes:
    """The SSE error frame of a streaming request failed with `exc`, as SGLang writes it.

    ``data: {"error": {"message", "type", "code", "retryable"}}\\n\\n``: for
    an `EngineError` and a `RequestRejected` SGLang's own frame (``type``
    ``invalid_request_error``, ``code`` the status); `detail` gives a
    `RequestRejected`'s rule code as ``type`` and adds its field as ``param``.
    SGLang ends its stream with ``data: [DONE]`` after it: send `SSE_DONE` next.
    Raises `EnvelopeError` when `exc` is not a library exception.
    """
    return _frame(_status_and_error(exc, detail)[1])


class _Mode(msgspec.Struct):
    stream: msgspec.Raw = msgspec.Raw(b"false")


_MODE: Final = msgspec.json.Decoder(_Mode)


def stream_requested(body: bytes | str | Mapping[str, Any]) -> bool:
    """True when a client's /generate body asks for a stream, as SGLang reads it:
    ``"stream": true``.

    Read leniently, for answering a request that may not have decoded: False
    for a body that is not a JSON object (or is nested too deeply to read), or
    whose ``"stream"`` is anything but ``true``. SGLang answers in the client's
    mode only in the engine's layer, which a body reaches with ``"stream"``
    true, false, null or absent. Never raises.
    """
    if isinstance(body, Mapping):
        return body.get("stream") is True
    try:
        return bytes(_MODE.decode(body).stream) == b"true"
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, TypeError):
        return False
