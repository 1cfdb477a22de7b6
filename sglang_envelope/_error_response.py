"""Errors as SGLang's /generate writes them: an HTTP status and body, or one SSE frame.

SGLang's ``srt/entrypoints/http_server.py`` writes a failed streaming request
as one ``data: {"error": {"message", "type", "code", "retryable"}}`` frame
(``stream_results``: ``type`` is ``"invalid_request_error"``, ``code`` the
HTTP status, ``retryable`` false), then ``data: [DONE]``; a failed
non-streaming request as that status and ``{"error": {"message"}}``
(``_create_error_response``). `error_response` and `error_event` write every
library exception the same way, with the status `ERROR_STATUSES` gives it. The
unary body carries the same four keys as the frame (SGLang's own has only
``message``), so a client reads the same object either way and the status
survives a relay; a `RequestRejected` adds its field as ``param`` (the name
SGLang's OpenAI-style ``ErrorResponse`` gives it) and its rule code as ``type``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, NamedTuple

import msgspec

from sglang_envelope._errors import (
    EngineError,
    EnvelopeError,
    LimitExceeded,
    RequestRejected,
    ResponseError,
)

__all__ = ["ERROR_STATUSES", "ErrorStatus", "error_event", "error_response"]


class ErrorStatus(NamedTuple):
    """How one exception class is answered."""

    #: The HTTP status, unless the exception has its own (`OWN_STATUSES`).
    status: int
    #: The ``type`` of the error object; None: the exception's rule code.
    type: str | None


#: SGLang's type for every error its /generate writes in a stream.
SGLANG_ERROR_TYPE: Final = "invalid_request_error"

#: Exception class -> its answer; a class not listed takes its nearest listed base's.
ERROR_STATUSES: Final[dict[type[EnvelopeError], ErrorStatus]] = {
    RequestRejected: ErrorStatus(400, None),  # 413 for body_too_large
    EngineError: ErrorStatus(500, SGLANG_ERROR_TYPE),  # SGLang's own status when it gave one
    LimitExceeded: ErrorStatus(502, "limit_exceeded"),
    ResponseError: ErrorStatus(502, "response_error"),
    EnvelopeError: ErrorStatus(500, "envelope_error"),
}

#: Rule codes answered with a status other than 400.
REJECTION_STATUSES: Final[dict[str, int]] = {"body_too_large": 413}

_ENCODER: Final = msgspec.json.Encoder()


def _rejection_status(exc: RequestRejected) -> int:
    code: object = exc.code
    return REJECTION_STATUSES.get(code, 400) if type(code) is str else 400


def _engine_status(exc: EngineError) -> int:
    code = exc.code
    return code if type(code) is int and 400 <= code < 600 else 500


#: Exception class -> its own status, read from the exception.
OWN_STATUSES: Final[dict[type[EnvelopeError], Callable[[Any], int]]] = {
    RequestRejected: _rejection_status,
    EngineError: _engine_status,
}


def _answer(exc: EnvelopeError) -> tuple[int, dict[str, Any]]:
    if not isinstance(exc, EnvelopeError):
        raise EnvelopeError(f"exc must be an EnvelopeError, got {type(exc).__name__}")
    cls = next(cls for cls in type(exc).__mro__ if cls in ERROR_STATUSES)
    status, kind = ERROR_STATUSES[cls]
    own_status = OWN_STATUSES.get(cls)
    if own_status is not None:
        status = own_status(exc)
    if kind is None:
        kind = _json_text(str(getattr(exc, "code", "")))
    error: dict[str, Any] = {
        "message": _json_text(str(exc)),
        "type": kind,
        "code": status,
        "retryable": False,
    }
    if isinstance(exc, RequestRejected):
        error["param"] = None if exc.field is None else _json_text(str(exc.field))
    return status, {"error": error}


def _json_text(text: str) -> str:
    """`text`, with any lone surrogate (which JSON cannot carry) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def error_response(exc: EnvelopeError) -> tuple[int, bytes]:
    """The HTTP status and JSON body that answer a non-streaming request failed with `exc`.

    The body is ``{"error": {"message", "type", "code", "retryable"}}`` (plus
    ``param`` for a `RequestRejected`), ``code`` being the status; see
    `ERROR_STATUSES`. Raises `EnvelopeError` when `exc` is not a library exception.
    """
    status, body = _answer(exc)
    return status, _ENCODER.encode(body)


def error_event(exc: EnvelopeError) -> bytes:
    """The SSE error frame for a streaming request failed with `exc`, as SGLang writes one.

    ``data: {"error": {...}}\\n\\n``, the same object as `error_response`'s
    body. SGLang ends its stream with ``data: [DONE]`` after it: send
    `SSE_DONE` next. Raises `EnvelopeError` when `exc` is not a library exception.
    """
    _, body = _answer(exc)
    return b"data: " + _ENCODER.encode(body) + b"\n\n"
