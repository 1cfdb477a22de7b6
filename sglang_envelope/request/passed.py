"""Keys no release table knows, passed through unchanged: split from a body, added back.

A target with `unknown_fields="pass"` lets a body carry keys for a newer SGLang.
`split_unknown` takes them out of the body before the typed decode (bounded as
free-form JSON) and `with_passed_fields` writes them back into the JSON the
request is sent as.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec
from msgspec import Raw

from sglang_envelope.request.contract import Contract
from sglang_envelope.request.decode_errors import DECODE_ERRORS
from sglang_envelope.request.fields import FIELD_OWNERS, RequestFields, SamplingParams
from sglang_envelope.request.limits import Limits, check_free_form

__all__ = [
    "NO_PASSED_FIELDS",
    "PassedFields",
    "is_passed_fields",
    "raw_value",
    "split_unknown",
    "with_passed_fields",
    "with_passed_values",
]


class PassedFields(NamedTuple):
    """Keys no table knows, passed through: `(key, JSON)` pairs, in body order."""

    top_level: tuple[tuple[str, Raw], ...] = ()
    sampling_params: tuple[tuple[str, Raw], ...] = ()


NO_PASSED_FIELDS = PassedFields()
#: Keys some table knows: a typed field's, or one only the serving system sets.
_KNOWN_TOP = frozenset(RequestFields.__struct_fields__) | frozenset(FIELD_OWNERS)
_KNOWN_SAMPLING = frozenset(SamplingParams.__struct_fields__)
_raw_members = msgspec.json.Decoder(dict[str, Raw])
_any_json = msgspec.json.Decoder()
_json = msgspec.json.Encoder()


def is_passed_fields(value: object) -> bool:
    """Whether `value` is a `PassedFields` of `(str, ...)` pairs (the values are checked
    as JSON by the caller)."""
    return type(value) is PassedFields and all(
        type(pairs) is tuple
        and all(type(p) is tuple and len(p) == 2 and type(p[0]) is str for p in pairs)
        for pairs in value
    )


def with_passed_fields(data: bytes, passed: PassedFields) -> bytes:
    """JSON object bytes `data` with the passed keys added back (sampling ones inside
    `sampling_params`)."""
    if passed is NO_PASSED_FIELDS or passed == NO_PASSED_FIELDS:
        return data
    members = _raw_members.decode(data)
    if passed.sampling_params:
        inner = members.get("sampling_params")
        params = (
            {} if inner is None or inner == Raw(b"null") else _raw_members.decode(inner)
        )
        params.update(passed.sampling_params)
        members["sampling_params"] = Raw(_json.encode(params))
    members.update(passed.top_level)
    return _json.encode(members)


def raw_value(value: object) -> Any:
    """`msgspec.to_builtins`' hook: a value held as `Raw` JSON, decoded."""
    if type(value) is Raw:
        return _any_json.decode(value)
    raise TypeError(f"cannot encode a {type(value).__name__}")


def with_passed_values(plain: dict[str, Any], passed: PassedFields) -> dict[str, Any]:
    """`with_passed_fields` for a body as plain values (`msgspec.to_builtins`): `plain`
    with the passed keys' values added back."""
    top, sampling = msgspec.to_builtins(passed, enc_hook=raw_value)
    if sampling:
        inner = plain.get("sampling_params")
        plain["sampling_params"] = {
            **(inner if isinstance(inner, dict) else {}),
            **dict(sampling),
        }
    plain.update(top)
    return plain


def split_unknown(
    data: Any, limits: Limits, contract: Contract
) -> tuple[Any, PassedFields]:
    """The body without the keys no typed field holds that the target passes through,
    and those keys (bounded as free-form JSON).

    A body that is not a JSON object is returned as is, for the typed decode's verdict.
    """
    pass_top, pass_sampling = contract.passes
    try:
        members = _raw_members.decode(data)
    except DECODE_ERRORS:
        return data, NO_PASSED_FIELDS
    top = _passing(members, _KNOWN_TOP, pass_top)
    sampling = _split_sampling(members, pass_sampling)
    if not top and not sampling:
        return data, NO_PASSED_FIELDS
    for prefix, pairs in (("", top), ("sampling_params.", sampling)):
        for key, value in pairs:
            check_free_form(value, prefix + key, limits, object_only=False)
    for key, _ in top:
        del members[key]
    return _json.encode(members), PassedFields(tuple(top), tuple(sampling))


def _passing(
    members: dict[str, Raw], known: frozenset[str], passes: frozenset[str] | None
) -> list[tuple[str, Raw]]:
    """The members no typed field holds that the target passes (`passes` None: all)."""
    return [
        (k, v)
        for k, v in members.items()
        if k not in known and (passes is None or k in passes)
    ]


def _split_sampling(
    members: dict[str, Raw], passes: frozenset[str] | None
) -> list[tuple[str, Raw]]:
    """The `sampling_params` keys that pass, taken out of `members["sampling_params"]`."""
    inner = members.get("sampling_params")
    if inner is None or bytes(inner)[:1] != b"{":
        return []
    params = _raw_members.decode(inner)  # valid: msgspec checked it as the body's member
    sampling = _passing(params, _KNOWN_SAMPLING, passes)
    if sampling:
        passing = {k for k, _ in sampling}
        kept = {k: v for k, v in params.items() if k not in passing}
        members["sampling_params"] = Raw(_json.encode(kept))
    return sampling
