"""One /generate response object: its JSON decoding, error bodies and final checks.

A frame is what SGLang writes in one SSE event; a non-streaming body is one
frame, the final one. This module holds the rules that apply to a single
object; `aggregate` applies them along a stream.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from sglang_envelope.errors.exceptions import EngineError, ResponseError, show_value

__all__ = [
    "CONSISTENCY",
    "JSON_TYPES",
    "check_consistency",
    "check_unary_object",
    "decode_frame",
    "decode_json",
    "engine_error",
    "expected",
    "json_type",
]

_DECODER: Final = msgspec.json.Decoder()
_MISSING: Final = object()

JSON_TYPES: Final[dict[type, str]] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    type(None): "null",
}

ABORT_MESSAGE: Final = "Aborted"
"""The message of an abort that gives none (SGLang's ``FINISH_ABORT`` default)."""

CONSISTENCY: Final[tuple[tuple[str, str, str | None], ...]] = (
    # (count key in meta_info, counted array (dotted path), skipped when meta_info has)
    ("completion_tokens", "output_ids", "beam_results"),
    ("output_token_logprobs_length", "meta_info.output_token_logprobs", None),
    ("output_token_sampling_mask_length", "meta_info.output_token_sampling_mask", None),
)
"""The counts a final response states about its own arrays.

SGLang sets each count from the array it sends (``tokenizer_manager``:
``completion_tokens`` from the scheduler's ``len(output_ids)``, the two
``*_length`` keys from the accumulated lists), so a mismatch means frames were
lost or doubled. With beam search, ``completion_tokens`` sums every beam while
``output_ids`` is the best beam's, so that check is skipped there.
"""


def decode_json(data: bytes | bytearray | memoryview, what: str) -> Any:
    """Decode JSON bytes; anything malformed is a `ResponseError` naming `what`."""
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: too deep
        raise ResponseError(f"{what} is not valid JSON: {exc}") from exc


def decode_frame(payload: bytes | bytearray | memoryview) -> dict[str, Any]:
    """The frame one event's data holds; `ResponseError` unless it is a JSON object."""
    value = decode_json(payload, "SSE event data")
    if type(value) is not dict:
        raise ResponseError(
            f"SSE event data: expected a JSON object, got {json_type(value)}"
        )
    return value


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    return JSON_TYPES.get(type(value), type(value).__name__)


def expected(path: str, what: str, value: object) -> ResponseError:
    """The error for `path` holding `value` where `what` was expected."""
    return ResponseError(f"{path}: expected {what}, got {json_type(value)}")


def engine_error(body: dict[str, Any]) -> EngineError | None:
    """The `EngineError` an SGLang error body stands for, or None if `body` is not one.

    SGLang's /generate writes three error shapes (``srt/entrypoints/http_server.py``):
    ``{"error": {"message", "type", "code", "retryable"}}`` in a stream and
    ``{"error": {"message"}}`` for a failed non-streaming request;
    ``{"error": "<text>"}`` when the request breaks the API contract; and
    ``{"object": "error", "message", "type", "code"}`` from its HTTPException
    handler, which is how a non-streaming abort with a status other than 400
    arrives. A missing ``message`` is SGLang's default, the empty string.
    """
    error = body.get("error")
    if error is None:
        if body.get("object") == "error" and "meta_info" not in body:
            return _error_from(body, "")
        return None
    if type(error) is str:
        return EngineError(error)
    if type(error) is not dict:
        raise expected("error", "an object or a string", error)
    return _error_from(error, "error.")


def _error_from(body: dict[str, Any], prefix: str) -> EngineError:
    # Both keys may be left out, as SGLang's own ErrorBody type allows
    # (``sglang/api/v1/api_types.py``: ``message: str = ""``); null is not a string.
    message = body.get("message", "")
    if type(message) is not str:
        raise expected(f"{prefix}message", "a string", message)
    code = body.get("code")
    if code is not None and type(code) is not int:
        raise expected(f"{prefix}code", "an integer or null", code)
    return EngineError(message, code)


def abort_error(finish_reason: dict[str, Any]) -> EngineError | None:
    """The `EngineError` an abort finish reason becomes, or None to return the response.

    SGLang's non-streaming path raises for an abort whose ``status_code`` is
    in [400, 600) and returns every other abort as a normal response
    (``tokenizer_manager._handle_abort_finish_reason``).
    """
    status = finish_reason.get("status_code")
    if status is None:
        return None
    if type(status) is not int:
        raise expected(
            "meta_info.finish_reason.status_code", "an integer or null", status
        )
    if not 400 <= status < 600:
        return None
    message = finish_reason.get("message", ABORT_MESSAGE)
    if type(message) is not str:
        raise expected("meta_info.finish_reason.message", "a string", message)
    return EngineError(message, status)


def check_consistency(
    response: dict[str, Any], meta: dict[str, Any], totals: dict[str, int] | None = None
) -> None:
    """Check every `CONSISTENCY` count against its array, where both are present: the
    array in `response`, or its entries in `totals` (a stream's store counted them)."""
    for count_key, array_path, unless in CONSISTENCY:
        count = meta.get(count_key)
        if totals is None:
            parent_key, _, array_key = array_path.rpartition(".")
            array = (meta if parent_key else response).get(array_key)
        else:
            array = totals.get(array_path)
        if count is None or array is None or (unless is not None and unless in meta):
            continue
        if type(count) is not int:
            raise expected(f"meta_info.{count_key}", "an integer", count)
        if totals is None and type(array) is not list:
            raise expected(array_path, "an array", array)
        entries = array if totals is not None else len(array)
        if count != entries:
            raise ResponseError(
                f"meta_info.{count_key} is {show_value(count)} but {array_path} has "
                f"{entries} entries"
            )


def check_unary_object(response: Any, what: str, meta_path: str = "meta_info") -> None:
    """Check that `response`, `what` in a non-streaming body, is one generation's object:
    a JSON object with a ``meta_info`` object (`ResponseError` naming `what` or
    `meta_path` if not)."""
    if type(response) is not dict:
        raise expected(what, "an object", response)
    meta = response.get("meta_info", _MISSING)
    if meta is _MISSING:
        raise ResponseError(f"{what} has no meta_info")
    if type(meta) is not dict:
        raise expected(meta_path, "an object", meta)
