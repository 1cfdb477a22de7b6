"""msgspec's verdict on a body it cannot decode, as the rule the body breaks.

The typed decode of `ClientRequest` enforces the rules whose check is None in
`rules.RULES` (types, unknown keys, token ids); `translate_validation_error`
reads msgspec's error into that rule's `RequestRejected` (an unknown key in the target's
words, by `contract.Contract.refuse_unknown`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import msgspec

from sglang_envelope.errors.exceptions import RequestRejected
from sglang_envelope.request.fields import (
    TEXT_INPUT_FIELDS,
    RequestFields,
    SamplingParams,
    Watermark,
)
from sglang_envelope.request.rules import reject

__all__ = [
    "DECODE_ERRORS",
    "KNOWN_FIELDS",
    "TEXT_KNOWN_FIELDS",
    "RefuseUnknown",
    "first_unknown_key",
    "translate_validation_error",
]

#: Words the refusal of an unknown key: `(path, key)` -> its `RequestRejected`.
RefuseUnknown = Callable[[str, str], RequestRejected]

# msgspec's verdicts: "<what> - at `$.<path>`"; the path is absent at the top level. The
# path holds only field names, indices and `[...]`, never client text, so it is read
# from the end; an unknown key is found in the body itself (`first_unknown_key`),
# since a key may hold text that looks like a path.
_AT = re.compile(
    r"^(?P<what>.*?)(?: - at (?P<key>`key` in )?`(?P<path>\$[\w.\[\]]*)`)?$", re.DOTALL
)
_EXPECTED = re.compile(r"^Expected `(?P<expected>[^`]*)`, got `(?P<got>[^`]*)`$")
_UNKNOWN = re.compile(r"^Object contains unknown field `", re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<key>[^`]*)`$")
_TOKEN_LIST_ITEM = re.compile(r"^input_ids\[\d+\]$")
#: What one prompt is in the field that holds a batch (`batched_input`).
_ONE_PROMPT = {"input_ids": "flat list of token ids", "text": "string"}


#: What msgspec raises on a body it cannot decode (RecursionError: nested too deeply;
#: BufferError: a memoryview that is not contiguous).
DECODE_ERRORS = (
    msgspec.ValidationError,
    msgspec.DecodeError,
    RecursionError,
    BufferError,
)

_members = msgspec.json.Decoder(dict[str, msgspec.Raw])

#: Where a struct sits in a client body, and the names it knows.
KNOWN_FIELDS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "": frozenset(RequestFields.__struct_fields__).difference(TEXT_INPUT_FIELDS),
        "sampling_params": frozenset(SamplingParams.__struct_fields__),
        "sampling_params.watermark": frozenset(Watermark.__struct_fields__),
    }
)
#: `KNOWN_FIELDS` of a body for a target with input="text": the text and media fields too.
TEXT_KNOWN_FIELDS: Mapping[str, frozenset[str]] = MappingProxyType(
    {**KNOWN_FIELDS, "": frozenset(RequestFields.__struct_fields__)}
)


def first_unknown_key(
    data: Any, path: str = "", known: Mapping[str, frozenset[str]] = KNOWN_FIELDS
) -> tuple[str, str] | None:
    """The first key in document order that no struct at `path` knows: (path, key).
    `known`: where each struct sits and the names it knows (a client body's by default).
    """
    try:
        members = _members.decode(data)
    except DECODE_ERRORS:
        return None
    names = known.get(path, frozenset())
    for key, value in members.items():
        if key not in names:
            return path, key
        inner = f"{path}.{key}" if path else key
        if inner in known:
            found = first_unknown_key(value, inner, known)
            if found is not None:
                return found
    return None


def translate_validation_error(
    error: Exception,
    *,
    prefix: str = "",
    data: Any = None,
    refuse_unknown: RefuseUnknown | None = None,
    known: Mapping[str, frozenset[str]] = KNOWN_FIELDS,
) -> RequestRejected:
    """msgspec's verdict on a body (or on `prefix`, a part of it) as the rule it breaks.

    `data`, the JSON decoded, locates an unknown key without reading it from the message;
    `refuse_unknown(path, key)` words its refusal (`Contract.refuse_unknown`, for the
    target's contract).
    """
    if isinstance(error, RecursionError):
        return reject("not_json", detail="JSON is nested too deeply")
    if not isinstance(error, msgspec.ValidationError):
        return reject("not_json", detail=str(error))
    match = _AT.match(str(error))
    assert match is not None  # the pattern matches any text
    what = match["what"]
    path = _joined(prefix, match["path"])
    if match["key"]:
        return reject(
            "invalid_value", path=path or "body", detail=f"keys must be strings; {what}"
        )
    if _UNKNOWN.match(str(error)):
        # The first unknown key, found in the body itself; else read from the message.
        found = first_unknown_key(data, "", known) if data is not None else None
        if found is not None and refuse_unknown is not None:
            return refuse_unknown(*found)
        return reject("invalid_value", path=path or "body", detail=what)
    if missing := _MISSING.match(what):
        if not path and missing["key"] == "input_ids":
            return reject("missing_input_ids")
        return reject("invalid_value", path=path or "body", detail=what)
    return _wrong_value(what, path)


def _joined(prefix: str, raw: str | None) -> str:
    """msgspec's path (`$`, `$.a.b`, `$[0]`, or None at the top level) after `prefix`."""
    path = (raw or "$").removeprefix("$").removeprefix(".")
    if path.startswith("["):
        return prefix + path
    return ".".join(part for part in (prefix, path) if part)


def _wrong_value(what: str, path: str) -> RequestRejected:
    """The refusal of a value of the wrong type or out of range at `path` ("": body)."""
    expected = _EXPECTED.match(what)
    if not path:
        return reject("not_object", got=expected["got"] if expected else what)
    if path == "text" and expected and expected["got"] == "array":
        return _batched("text")
    if _TOKEN_LIST_ITEM.match(path):
        # A list first is a batch (the gate's rule); a list later, a wrong item.
        if expected and expected["got"] == "array" and path == "input_ids[0]":
            return _batched("input_ids")
        if not expected:
            return reject("token_id_out_of_range", path=path)
    if expected:
        return reject(
            "wrong_type", path=path, expected=expected["expected"], got=expected["got"]
        )
    return reject("invalid_value", path=path, detail=what)


def _batched(key: str) -> RequestRejected:
    batch = "decode a batch with decode_sequences"
    return reject("batched_input", key=key, one=_ONE_PROMPT[key], batch=batch)
