"""The client's request: SGLang's native token-input `/generate` body, decoded, checked.

`ClientRequest` mirrors the single-request form of SGLang 0.5.23's
`GenerateReqInput`, limited to the fields a client may set (`fields.py`), typed as
SGLang's HTTP contract gate types them (`sglang/api/v1/api_types.py`) where it has
the field, and as the dataclass does where it does not. Decoding is one typed msgspec
pass; a failure is read as the rule it breaks (`decode_errors`).

Every `ClientRequest` that exists has passed every rule of its `target`. Made
any way (by hand, by `msgspec.structs.replace`, by a decoder of the caller's), it
is checked when made, as the client body it stands for (`_check_made`), and takes
the decoded copy's values. The decode's own request is made from values every
rule was already applied to, as a `_Decoded` (which skips that check) that becomes
a `ClientRequest` at once (`_from_checked`). Its containers are immutable (tuples,
frozen structs, `msgspec.Raw`), so a checked request stays as checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import msgspec
from msgspec import Raw

from sglang_envelope.errors.exceptions import EnvelopeError
from sglang_envelope.releases.target import Target
from sglang_envelope.request.body import LARGE_BODY_BYTES, as_json
from sglang_envelope.request.body import decode_large as _decode_large
from sglang_envelope.request.checks import is_given
from sglang_envelope.request.contract import Contract, contract_for
from sglang_envelope.request.decode_errors import (
    DECODE_ERRORS,
    KNOWN_FIELDS,
    TEXT_KNOWN_FIELDS,
    translate_validation_error,
)
from sglang_envelope.request.fields import (
    NULL_AS_ABSENT,
    REQUEST_DEFAULTS,
    TEXT_INPUT_FIELDS,
    RequestFields,
    SamplingParams,
    TokenId,
    Watermark,
    token_input_struct,
)
from sglang_envelope.request.limits import (
    DEFAULT_LIMITS,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_INPUT_IDS,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_JSON_ITEMS,
    Limits,
    make_limits,
)
from sglang_envelope.request.passed import (
    NO_PASSED_FIELDS,
    PassedFields,
    is_passed_fields,
    raw_value,
    split_unknown,
    with_passed_fields,
    with_passed_values,
)
from sglang_envelope.request.rules import DEFAULT_TARGET, reject

__all__ = [
    "ClientRequest",
    "RequestFields",
    "SamplingParams",
    "Watermark",
    "decode_client_request",
]


#: A token-input client body as the typed decode reads it, before any rule (never handed
#: out): `RequestFields` without `text` and the media fields, which it refuses as unknown
#: keys (`fields.FIELD_OWNERS`), and with `input_ids` required.
_Wire = token_input_struct("_Wire", tuple[TokenId, ...])


class _TextWire(RequestFields, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A client body for a target with input="text", before any rule: never handed out."""


#: What a token-input request holds in the text and media fields: their defaults.
_NO_TEXT = tuple(REQUEST_DEFAULTS[name] for name in TEXT_INPUT_FIELDS)


class ClientRequest(RequestFields, frozen=True, forbid_unknown_fields=True):
    """One native `/generate` request with token input, as the client sent it.

    Fields left out by the client keep SGLang's defaults and are left out again
    when the request is encoded; a field the client set is kept as set, an
    explicit `"stream": false` included. Every instance has passed every rule
    of its `target` (see the module's docstring): one made by hand is checked
    for its `target` (the default one unless given) and raises
    `RequestRejected` for a broken rule.
    """

    #: The target whose rules this request was checked against (not part of its JSON).
    target: Target = DEFAULT_TARGET
    #: Keys the tables do not know, kept as sent (a target with `unknown_fields="pass"`).
    passed_fields: PassedFields = NO_PASSED_FIELDS

    def __post_init__(self) -> None:
        made = _check_made(self)
        for name in self.__struct_fields__:
            msgspec.structs.force_setattr(self, name, getattr(made, name))

    def __copy__(self) -> ClientRequest:
        """The request itself: it is immutable."""
        return self

    def __deepcopy__(self, memo: object) -> ClientRequest:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its JSON and target, and decoded again for that target."""
        return (partial(decode_client_request, target=self.target), (request_json(self),))


#: `ClientRequest`'s own two fields, after those of a client body: not part of its JSON.
_NOT_JSON = ("target", "passed_fields")
assert ClientRequest.__struct_fields__ == (*RequestFields.__struct_fields__, *_NOT_JSON)


class _Decoded(ClientRequest, frozen=True, forbid_unknown_fields=True):
    """A `ClientRequest` being made by `_from_checked` from values every rule was applied
    to: it skips the check, and is made a `ClientRequest` before it is handed out."""

    def __post_init__(self) -> None:
        pass


_astuple = msgspec.structs.astuple


def _from_checked(wire: Any, target: Target, passed: PassedFields) -> ClientRequest:
    """The `ClientRequest` of a body (`_Wire` or `_TextWire`) every rule of `target` was
    applied to."""
    # Positional, as a request is made on every decode (a keyword is looked up among the
    # fields), from one tuple: `*a, *b` would build a list and copy it into a tuple.
    if type(wire) is _Wire:  # token input: the text and media fields at their defaults
        tail: tuple[Any, ...] = (*_NO_TEXT, target, passed)
    else:  # text input: the body has every field
        tail = (target, passed)
    request = _Decoded(*(_astuple(wire) + tail))
    msgspec.structs.force_setattr(request, "__class__", ClientRequest)
    return request


_raw_members = msgspec.json.Decoder(dict[str, Raw])
_json = msgspec.json.Encoder()


def request_json(request: ClientRequest) -> bytes:
    """The request as the client body it stands for: its JSON, without its target, with
    the keys it passes."""
    data = _json.encode(request)
    if request.target is DEFAULT_TARGET and request.passed_fields is NO_PASSED_FIELDS:
        return data  # both left out, as their defaults
    members = _raw_members.decode(data)
    for name in _NOT_JSON:
        members.pop(name, None)
    return with_passed_fields(_json.encode(members), request.passed_fields)


def _check_made(request: ClientRequest) -> ClientRequest:
    """The request made by hand, checked as the client body it stands for (its passed
    keys included) for its target, and decoded into private copies."""
    target = request.target
    passed = request.passed_fields
    contract_of(target)  # EnvelopeError when it is not a Target
    if not is_passed_fields(passed):
        raise EnvelopeError("passed_fields must be a PassedFields of (str, JSON) pairs")
    try:
        plain = msgspec.to_builtins(request, enc_hook=raw_value)
        for name in _NOT_JSON:
            plain.pop(name, None)
        if request.input_ids is None and target.input == "tokens":
            # First, as a token-input body refuses a null one.
            plain = {"input_ids": None, **plain}
        plain = with_passed_values(plain, passed)
    except (TypeError, ValueError, OverflowError, *DECODE_ERRORS) as error:
        raise reject(
            "not_json", detail=f"a field holds a value JSON cannot carry: {error}"
        ) from None
    return decode_client_request(plain, target=target)


# --- decoding -------------------------------------------------------------------

_decoder = msgspec.json.Decoder(_Wire)
_text_decoder = msgspec.json.Decoder(_TextWire)
_DEFAULT_CONTRACT = contract_for(DEFAULT_TARGET)
assert not _DEFAULT_CONTRACT.splits  # the default target refuses keys no table knows


def contract_of(target: object) -> Contract:
    """The compiled rules of `target`; `EnvelopeError` when it is not a `Target`."""
    if target is DEFAULT_TARGET:
        return _DEFAULT_CONTRACT
    if type(target) is not Target:
        raise EnvelopeError(f"target must be a Target, got {type(target).__name__}")
    if target == DEFAULT_TARGET:  # a `Target()` of the caller's: compared, not hashed
        return _DEFAULT_CONTRACT
    return contract_for(target)


def _check_input_ids(ids: tuple[int, ...], limits: Limits) -> None:
    if len(ids) > limits.max_input_ids:
        raise reject("too_many_input_ids", size=len(ids), limit=limits.max_input_ids)
    limit = limits.max_token_id
    if limit is not None and ids and max(ids) > limit:
        index = next(i for i, token_id in enumerate(ids) if token_id > limit)
        raise reject("token_out_of_vocab", index=index, id=ids[index], limit=limit)


def _typed_decode(body: bytes | Raw, contract: Contract, decoder: Any = _decoder) -> Any:
    """The typed decode of a body, its checks left to the caller; a failure as SGLang's
    refusal (a large token-input body is read by `body.decode_large`)."""
    try:
        if len(body) <= LARGE_BODY_BYTES or decoder is not _decoder:
            request = decoder.decode(body)
        else:  # an envelope's request is a Raw: read as bytes
            fields = _decode_large(body if type(body) is bytes else bytes(body))
            request = _decoder.decode(body) if fields is None else _Wire(**fields)
    except DECODE_ERRORS as error:
        without = _without_null_fields(body)
        if without is None:
            known = KNOWN_FIELDS if decoder is _decoder else TEXT_KNOWN_FIELDS
            raise translate_validation_error(
                error, data=body, refuse_unknown=contract.refuse_unknown, known=known
            ) from None
        return _typed_decode(without, contract, decoder)
    return request


def _without_null_fields(body: Any) -> bytes | None:
    """The body without the top-level nulls SGLang reads as absent (`NULL_AS_ABSENT`),
    or None when it has none: they are dropped, as if the client had left them out."""
    try:
        members = _raw_members.decode(body)
    except DECODE_ERRORS:
        return None
    nulls = [k for k, v in members.items() if k in NULL_AS_ABSENT and not is_given(v)]
    if not nulls:
        return None
    for key in nulls:
        del members[key]
    return _json.encode(members)


def decode_with_limits(
    data: object, limits: Limits, contract: Contract = _DEFAULT_CONTRACT
) -> ClientRequest:
    """`decode_client_request` with its bounds and target already checked."""
    passed = NO_PASSED_FIELDS
    # The usual body, bytes within the bound for a target that passes no key, needs no
    # more than this test.
    max_body_bytes = limits.max_body_bytes
    if type(data) is bytes and len(data) <= max_body_bytes and not contract.splits:
        body: Any = data
    else:
        body = as_json(data, max_body_bytes)
        if contract.splits:
            body, passed = split_unknown(body, limits, contract)
    if contract.text_input:
        wire = _typed_decode(body, contract, _text_decoder)
        if wire.input_ids is not None:
            _check_input_ids(wire.input_ids, limits)
    else:
        wire = _typed_decode(body, contract)
        if len(wire.input_ids) > limits.max_input_ids or limits.max_token_id is not None:
            _check_input_ids(wire.input_ids, limits)
    contract.check(wire, limits)  # the raw fields' bounds, then the rules
    return _from_checked(wire, contract.target, passed)


def decode_client_request(
    body: bytes | str | Mapping[str, Any],
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_input_ids: int = DEFAULT_MAX_INPUT_IDS,
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
    max_json_items: int = DEFAULT_MAX_JSON_ITEMS,
    max_token_id: int | None = None,
    target: Target = DEFAULT_TARGET,
) -> ClientRequest:
    """Decode and check a client's `/generate` body: JSON bytes or text, or a mapping.

    `target` is the SGLang release and transport the request is for (default:
    SGLang 0.5.23 over HTTP): its fields, `sampling_params` keys and SGLang's own
    checks of that release, in its words. The request records it (`.target`).

    Every bound is applied before the work it bounds: the body's size in bytes
    (a mapping's before it is encoded), the number of token ids, the nesting
    depth and item count of each free-form JSON field, and, when
    `max_token_id` is given, the largest token id (the model's vocabulary).
    A mapping is held to what JSON can carry (string keys, finite numbers).
    Raises `RequestRejected` naming the broken rule (`docs/contract.md`), and
    `EnvelopeError` for a bound that is not an integer >= 0 or a `target` that
    is not a `Target`.
    """
    contract = contract_of(target)
    if (
        max_body_bytes
        is DEFAULT_MAX_BODY_BYTES  # the defaults, not passed: nothing to check
        and max_input_ids is DEFAULT_MAX_INPUT_IDS
        and max_json_depth is DEFAULT_MAX_JSON_DEPTH
        and max_json_items is DEFAULT_MAX_JSON_ITEMS
        and max_token_id is None
    ):
        if (
            contract is _DEFAULT_CONTRACT
            and type(body) is bytes
            and len(body) <= LARGE_BODY_BYTES
        ):
            # The usual call: only the typed decode and the checks are left to do.
            wire = _typed_decode(body, contract)
            contract.check(wire, DEFAULT_LIMITS)
            return _from_checked(wire, DEFAULT_TARGET, NO_PASSED_FIELDS)
        return decode_with_limits(body, DEFAULT_LIMITS, contract)
    limits = make_limits(
        max_body_bytes, max_input_ids, max_json_depth, max_json_items, max_token_id
    )
    return decode_with_limits(body, limits, contract)
