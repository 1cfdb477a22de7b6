"""The bounds one decode applies, and the checks of the fields held as JSON bytes.

A request's free-form and list fields (`session_params`, `custom_params`,
`stop`, `logit_bias`, ...) are kept as the client's JSON bytes (`msgspec.Raw`),
never built as Python objects. Each is checked here without building it: a
`RawField` row names its path and the shape it takes, matched on the bytes
(`bytes.translate`, one regular expression), and a free-form value is scanned
token by token against `Limits.max_json_depth` and `Limits.max_json_items`,
stopping at the first bound passed, so the work is bounded by the bounds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import msgspec
from msgspec import Raw

from sglang_envelope.errors.exceptions import EnvelopeError
from sglang_envelope.request.decode_errors import (
    DECODE_ERRORS,
    translate_validation_error,
)
from sglang_envelope.request.rules import reject

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_INPUT_IDS",
    "DEFAULT_MAX_JSON_DEPTH",
    "DEFAULT_MAX_JSON_ITEMS",
    "REQUEST_RAW_FIELDS",
    "SAMPLING_RAW_FIELDS",
    "TEXT_RAW_FIELDS",
    "Limits",
    "RawField",
    "check_bound",
    "check_free_form",
    "make_limits",
    "raw_check",
]

#: Largest request body `decode_client_request` parses (16 MiB).
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
#: Longest `input_ids` `decode_client_request` accepts (one million tokens).
DEFAULT_MAX_INPUT_IDS = 1_000_000
#: Deepest nesting accepted in a field that takes free-form JSON.
DEFAULT_MAX_JSON_DEPTH = 32
#: Most items (each `[`, `{` and `,` counts one) in a field that takes free-form JSON.
DEFAULT_MAX_JSON_ITEMS = 100_000


class Limits(NamedTuple):
    """The bounds one decode applies."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_input_ids: int = DEFAULT_MAX_INPUT_IDS
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    max_json_items: int = DEFAULT_MAX_JSON_ITEMS
    max_token_id: int | None = None


DEFAULT_LIMITS = Limits()


def check_bound(name: str, bound: object, *, optional: bool = False) -> None:
    """Raise `EnvelopeError` unless `bound` is an int >= 0 (or None, when `optional`)."""
    if optional and bound is None:
        return
    if type(bound) is not int or bound < 0:
        got = "a negative integer" if type(bound) is int else type(bound).__name__
        raise EnvelopeError(f"{name} must be an integer >= 0, got {got}")


def make_limits(*bounds: Any) -> Limits:
    """The `Limits` of these bounds, in `Limits` order; checked, an `EnvelopeError`
    naming a bad one."""
    if bounds == DEFAULT_LIMITS:  # the common call: the defaults need no checking
        return DEFAULT_LIMITS
    for name, bound in zip(Limits._fields, bounds, strict=True):
        check_bound(name, bound, optional=name == "max_token_id")
    return Limits(*bounds)


#: The tokens of well-formed JSON whose escaped quotes and backslashes are removed: a
#: string, an opening bracket, a closing one, a comma, a colon, or a scalar. No group
#: repeats, so matching keeps no state per character.
_TOKENS = re.compile(rb'("[^"]*")|([\[{])|([\]}])|(,)|(:)|([^ \t\n\r"\[\]{},:]+)')
_STR = 1
_OPEN = 2
_CLOSE = 3
_COMMA = 4
_COLON = 5
_SCALAR = 6
#: msgspec, SGLang's JSON reader, refuses integers longer than this.
_MAX_INT_DIGITS = 4300
#: What a JSON value's first byte says it is.
_JSON_KINDS = {ord("{"): "object", ord("["): "array", ord('"'): "str", ord("t"): "bool"}
_JSON_KINDS |= {ord("f"): "bool", ord("n"): "null"}
_WHITESPACE = b" \t\n\r"
_NUMBER_START = frozenset(b"-0123456789")


def _check_utf8(data: bytes, path: str) -> None:
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            detail = "Invalid UTF-8 encoded string"
            raise reject("invalid_value", path=path, detail=detail) from None


def _number_in_range(text: bytes) -> bool:
    if len(text) < 16 and b"e" not in text and b"E" not in text:
        return True
    if text.lstrip(b"-").isdigit():
        return len(text.lstrip(b"-")) <= _MAX_INT_DIGITS
    try:
        return math.isfinite(float(text))
    except ValueError:  # not a number msgspec would have let through
        return False


class _Shape(NamedTuple):
    """What a scanned value may hold beyond its outermost container."""

    nested: bool  # containers inside it
    scalars: bool  # numbers, true, false, null
    string_values: bool  # strings as values (not only as keys)


_FREE_FORM = _Shape(nested=True, scalars=True, string_values=True)
_STRINGS = _Shape(nested=False, scalars=False, string_values=True)
_NUMBERS_BY_KEY = _Shape(nested=False, scalars=True, string_values=False)


def _scan(data: bytes, path: str, limits: Limits, shape: _Shape) -> bool:
    """Scan well-formed JSON bytes without building them: False when they do not have
    `shape`; `RequestRejected` past a bound or for a number out of range.

    Stops at the first bound passed, so the work is bounded by the bounds.
    """
    depth = items = 0
    after_colon = False
    max_depth = limits.max_json_depth
    max_items = limits.max_json_items
    for token in _TOKENS.finditer(data.replace(b"\\\\", b"").replace(b'\\"', b"")):
        which = token.lastindex
        if which == _STR:
            if after_colon and not shape.string_values:
                return False
        elif which == _SCALAR:
            if not shape.scalars:
                return False
            text = token[_SCALAR]
            if text[0] in _NUMBER_START:
                if not _number_in_range(text):
                    raise reject("invalid_value", path=path, detail="Number out of range")
            elif not shape.string_values:  # true, false, null where a number goes
                return False
        elif which == _CLOSE:
            depth -= 1
        elif which != _COLON:  # an opening bracket, or a comma
            items += 1
            if items > max_items:
                raise reject("json_too_many_items", path=path, limit=max_items)
            if which == _OPEN:
                depth += 1
                if depth > 1 and not shape.nested:
                    return False
                if depth > max_depth:
                    raise reject("json_too_deep", path=path, limit=max_depth)
        after_colon = which == _COLON
    return True


def check_free_form(raw: Raw, path: str, limits: Limits, *, object_only: bool) -> None:
    """Refuse a free-form value nested deeper or holding more items than `limits` allow,
    or holding what JSON readers refuse (invalid UTF-8, numbers out of range)."""
    data = bytes(raw)
    kind = _JSON_KINDS.get(data[0], "number") if data else "nothing"
    if object_only and kind not in ("object", "null"):
        raise reject("wrong_type", path=path, expected="object | null", got=kind)
    _check_utf8(data, path)
    _scan(data, path, limits, _FREE_FORM)


# Shapes, matched on well-formed JSON bytes without building them.
_LONG_INT = re.compile(rb"\d{19}")


def _int_array(data: bytes, path: str, limits: Limits) -> bool:
    """An array of integers of at most 18 digits: nothing else is left once the
    characters they are made of are deleted (`bytes.translate`, no Python loop)."""
    if data.translate(None, b"0123456789-," + _WHITESPACE) != b"[]":
        return False
    return _LONG_INT.search(data) is None


def _str_array(data: bytes, path: str, limits: Limits) -> bool:
    return data[:1] == b"[" and _scan(data, path, limits, _STRINGS)


def _str_or_array(data: bytes, path: str, limits: Limits) -> bool:
    return data[:1] == b'"' or _str_array(data, path, limits)


def _number_object(data: bytes, path: str, limits: Limits) -> bool:
    return data[:1] == b"{" and _scan(data, path, limits, _NUMBERS_BY_KEY)


class RawField(NamedTuple):
    """A field held as the client's JSON bytes, and how it is checked.

    `shape` is the JSON the field takes, matched on the bytes without building
    them (None: free-form, bounded by depth and items instead); a value that
    does not match is decoded as `typed` for msgspec's own verdict (and taken
    when msgspec accepts it, as with an integer of 19 digits or more).
    """

    path: str
    shape: Callable[[bytes, str, Limits], bool] | None
    typed: Any
    objects_only: bool = False


#: Every `RawField` of the request, then of its `sampling_params`.
REQUEST_RAW_FIELDS = (
    RawField("token_ids_logprob", _int_array, tuple[int, ...] | None),
    RawField("session_params", None, dict[str, Any] | None, objects_only=True),
    RawField("watermark", None, dict[str, Any] | None, objects_only=True),
    RawField("multi_item_delimiter_indices", _int_array, tuple[int, ...] | None),
    RawField("token_indices_to_pool", _int_array, tuple[int, ...] | None),
)
#: The media fields held as JSON bytes: checked only for a target with input="text".
TEXT_RAW_FIELDS = tuple(
    RawField(name, None, Any, objects_only=name.endswith(("_config", "_kwargs")))
    for name in (
        "image_data",
        "video_data",
        "audio_data",
        "mm_hashes",
        "mm_content_hashes",
        "video_config",
        "modalities",
        "images_config",
        "mm_processor_kwargs",
    )
)
SAMPLING_RAW_FIELDS = (
    RawField("stop", _str_or_array, str | tuple[str, ...] | None),
    RawField("stop_token_ids", _int_array, tuple[int, ...] | None),
    RawField("stop_regex", _str_or_array, str | tuple[str, ...] | None),
    RawField("logit_bias", _number_object, dict[str, float] | None),
    RawField("custom_params", None, Any),
    RawField("choice", _str_array, tuple[str, ...] | None),
)


def raw_check(field: RawField, prefix: str) -> Callable[[Raw, Limits], None]:
    """The check of `field` (at `prefix`, as ``sampling_params.``): its JSON bytes held
    within a decode's limits, of the shape it takes, or refused as msgspec refuses it."""
    path = prefix + field.path

    def check(raw: Raw, limits: Limits) -> None:
        if field.shape is None:
            check_free_form(raw, path, limits, object_only=field.objects_only)
            return
        data = bytes(raw)
        if data == b"null" or field.shape(data, path, limits):
            _check_utf8(data, path)
            return
        try:
            msgspec.json.decode(data, type=field.typed)
        except DECODE_ERRORS as error:
            raise translate_validation_error(error, prefix=path) from None

    return check
