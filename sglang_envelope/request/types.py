"""The client's request: SGLang's native token-input `/generate` body, decoded and checked.

`ClientRequest` mirrors the single-request form of SGLang 0.5.23's
`GenerateReqInput`, limited to the fields a client may set (see `rules.py` for
which fields are whose). Types follow SGLang's HTTP contract gate
(`sglang/api/v1/api_types.py`) where it has the field, and the dataclass where
it does not. Decoding is one typed msgspec pass; a failure is translated into
`RequestRejected` by `decode_errors.translate_validation_error`.

Every `ClientRequest` that exists has passed every rule of its `target`, and
holds nothing but its declared fields (no `__dict__`): one decoded by
`decode_client_request` is made from the typed decode's values once every rule
was applied to them (`_from_checked`); one made any other way (by hand, by
`msgspec.structs.replace`, by a decoder of the caller's) is checked when it is
made, by encoding it (its passed keys included) and decoding the result as a
client body for its target, and takes the decoded copy's values. Its
containers are immutable (tuples, frozen structs, and `msgspec.Raw` for JSON
objects and free-form values, checked without being built: `limits`), so a
checked request stays as checked.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import msgspec
from msgspec import Raw

from sglang_envelope.errors.exceptions import EnvelopeError
from sglang_envelope.releases.target import Target
from sglang_envelope.request.body import as_json
from sglang_envelope.request.checks import is_given
from sglang_envelope.request.contract import (
    Contract,
    contract_for,
    prepare_checks,
)
from sglang_envelope.request.decode_errors import (
    DECODE_ERRORS,
    KNOWN_FIELDS,
    translate_validation_error,
)
from sglang_envelope.request.fields import RequestFields, SamplingParams, TokenId, Watermark
from sglang_envelope.request.limits import (
    DEFAULT_LIMITS,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_INPUT_IDS,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_JSON_ITEMS,
    REQUEST_RAW_FIELDS,
    SAMPLING_RAW_FIELDS,
    Limits,
    check_free_form,
    make_limits,
    raw_check,
)
from sglang_envelope.request.rules import DEFAULT_TARGET, FIELD_OWNERS, NULL_AS_ABSENT, reject

__all__ = [
    "ClientRequest",
    "RequestFields",
    "SamplingParams",
    "Watermark",
    "decode_client_request",
]


class PassedFields(NamedTuple):
    """Keys no table knows, passed through unchanged: `(key, JSON)` pairs, in body order."""

    top_level: tuple[tuple[str, Raw], ...] = ()
    sampling_params: tuple[tuple[str, Raw], ...] = ()


NO_PASSED_FIELDS = PassedFields()


class _Wire(RequestFields, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A client body as the typed decode reads it, before any rule: never handed out."""


class _Checked(NamedTuple):
    """What a decode that applied every rule hands `ClientRequest` (as its
    `passed_fields`, replaced at once): the target checked and the keys passed."""

    target: Target
    passed: PassedFields


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
        checked: object = self.passed_fields
        if type(checked) is _Checked:  # made by _from_checked: the rules were applied
            if self.target is not checked.target:
                msgspec.structs.force_setattr(self, "target", checked.target)
            msgspec.structs.force_setattr(self, "passed_fields", checked.passed)
            return
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
        return (_decoded, (request_json(self), self.target))


#: The fields of a client body, in order: `ClientRequest`'s without its own two.
CLIENT_FIELDS = RequestFields.__struct_fields__
_NOT_JSON = ("target", "passed_fields")
assert ClientRequest.__struct_fields__ == (*CLIENT_FIELDS, *_NOT_JSON)


_astuple = msgspec.structs.astuple
_CHECKED = _Checked(DEFAULT_TARGET, NO_PASSED_FIELDS)


def _from_checked(wire: _Wire, target: Target, passed: PassedFields) -> ClientRequest:
    """The `ClientRequest` of a body every rule of `target` was applied to."""
    checked = _CHECKED if passed is NO_PASSED_FIELDS and target is DEFAULT_TARGET else None
    # positional, as a request is made on every decode (keywords cost about 3 us more)
    return ClientRequest(*_astuple(wire), target, checked or _Checked(target, passed))  # type: ignore[call-arg]


_raw_members = msgspec.json.Decoder(dict[str, Raw])
_json = msgspec.json.Encoder()


def with_passed_fields(data: bytes, passed: PassedFields) -> bytes:
    """JSON object bytes `data` with the passed keys added back (sampling ones inside
    `sampling_params`)."""
    if passed is NO_PASSED_FIELDS or passed == NO_PASSED_FIELDS:
        return data
    members = _raw_members.decode(data)
    if passed.sampling_params:
        inner = members.get("sampling_params")
        params = {} if inner is None or inner == Raw(b"null") else _raw_members.decode(inner)
        params.update(passed.sampling_params)
        members["sampling_params"] = Raw(_json.encode(params))
    members.update(passed.top_level)
    return _json.encode(members)


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


def _raw_to_value(value: Any) -> Any:
    if isinstance(value, Raw):
        return msgspec.json.decode(value)
    raise TypeError(f"cannot encode a {type(value).__name__}")


def _decoded(body: bytes, target: Target) -> ClientRequest:
    return decode_client_request(body, target=target)


def _check_made(request: ClientRequest) -> ClientRequest:
    """The request made by hand, checked as the client body it stands for (its passed
    keys included) for its target, and decoded into private copies."""
    target, passed = request.target, request.passed_fields
    contract_of(target)  # EnvelopeError when it is not a Target
    if type(passed) is not PassedFields or not all(map(_are_pairs, passed)):
        raise EnvelopeError("passed_fields must be a PassedFields of (str, JSON) pairs")
    try:
        plain = msgspec.to_builtins(request, enc_hook=_raw_to_value)
        for name in _NOT_JSON:
            plain.pop(name, None)
        top, sampling = msgspec.to_builtins(passed, enc_hook=_raw_to_value)
    except (TypeError, ValueError, OverflowError, RecursionError, *DECODE_ERRORS) as error:
        raise reject(
            "not_json", detail=f"a field holds a value JSON cannot carry: {error}"
        ) from None
    if sampling:
        inner = plain.get("sampling_params")
        plain["sampling_params"] = {**(inner if isinstance(inner, dict) else {}), **dict(sampling)}
    plain.update(top)
    return decode_client_request(plain, target=target)


def _are_pairs(pairs: object) -> bool:
    return type(pairs) is tuple and all(
        type(p) is tuple and len(p) == 2 and type(p[0]) is str for p in pairs
    )


# --- decoding -------------------------------------------------------------------

_decoder = msgspec.json.Decoder(_Wire)
KNOWN_FIELDS[""] = frozenset(CLIENT_FIELDS)
KNOWN_FIELDS["sampling_params"] = frozenset(SamplingParams.__struct_fields__)
KNOWN_FIELDS["sampling_params.watermark"] = frozenset(Watermark.__struct_fields__)
prepare_checks(
    {field.name: field.default for field in msgspec.structs.fields(_Wire)},
    {field.name: field.default for field in msgspec.structs.fields(SamplingParams)},
    tuple((field.path, raw_check(field, "")) for field in REQUEST_RAW_FIELDS),
    tuple((field.path, raw_check(field, "sampling_params.")) for field in SAMPLING_RAW_FIELDS),
)
_DEFAULT_CONTRACT = contract_for(DEFAULT_TARGET)
assert not _DEFAULT_CONTRACT.splits  # the default target refuses keys no table knows
#: Keys some table knows: a typed field's, or one only the serving system sets.
_KNOWN_TOP = frozenset(CLIENT_FIELDS) | frozenset(FIELD_OWNERS)
_KNOWN_SAMPLING = frozenset(SamplingParams.__struct_fields__)


def contract_of(target: object) -> Contract:
    """The compiled rules of `target`; `EnvelopeError` when it is not a `Target`."""
    if target is DEFAULT_TARGET:
        return _DEFAULT_CONTRACT
    if type(target) is not Target:
        raise EnvelopeError(f"target must be a Target, got {type(target).__name__}")
    if target == DEFAULT_TARGET:  # a `Target()` of the caller's: compared, not hashed
        return _DEFAULT_CONTRACT
    return contract_for(target)


def _split_unknown(data: Any, limits: Limits, contract: Contract) -> tuple[Any, PassedFields]:
    """The body without the keys no typed field holds that the target passes through,
    and those keys (bounded as free-form JSON).

    A body that is not a JSON object is returned as is, for the typed decode's verdict.
    """
    pass_top, pass_sampling = contract.passes
    try:
        members = _raw_members.decode(data)
    except DECODE_ERRORS:
        return data, NO_PASSED_FIELDS
    top = [
        (k, v)
        for k, v in members.items()
        if k not in _KNOWN_TOP and (pass_top is None or k in pass_top)
    ]
    sampling: list[tuple[str, Raw]] = []
    inner = members.get("sampling_params")
    if inner is not None and bytes(inner)[:1] == b"{":
        try:
            params = _raw_members.decode(inner)
        except DECODE_ERRORS:
            params = {}
        sampling = [
            (k, v)
            for k, v in params.items()
            if k not in _KNOWN_SAMPLING and (pass_sampling is None or k in pass_sampling)
        ]
        if sampling:
            passing = {k for k, _ in sampling}
            kept = {k: v for k, v in params.items() if k not in passing}
            members["sampling_params"] = Raw(_json.encode(kept))
    if not top and not sampling:
        return data, NO_PASSED_FIELDS
    for prefix, pairs in (("", top), ("sampling_params.", sampling)):
        for key, value in pairs:
            check_free_form(value, prefix + key, limits, object_only=False)
    for key, _ in top:
        del members[key]
    return _json.encode(members), PassedFields(tuple(top), tuple(sampling))


def _check_input_ids(ids: tuple[int, ...], limits: Limits) -> None:
    if len(ids) > limits.max_input_ids:
        raise reject("too_many_input_ids", size=len(ids), limit=limits.max_input_ids)
    if limits.max_token_id is not None and ids and max(ids) > limits.max_token_id:
        index = next(i for i, token_id in enumerate(ids) if token_id > limits.max_token_id)
        raise reject("token_out_of_vocab", index=index, id=ids[index], limit=limits.max_token_id)


# --- large bodies ---------------------------------------------------------------

#: Bodies longer than this decode `input_ids` a chunk at a time (`_decode_large`).
LARGE_BODY_BYTES = 1 << 20
#: About how many bytes of `input_ids` each chunk holds.
_CHUNK_BYTES = 1 << 18
#: `_Wire` with `input_ids` left as the client's JSON bytes.
_LeanRequest = msgspec.defstruct(
    "_LeanRequest",
    [
        (f.name, Raw if f.name == "input_ids" else f.type)
        if f.required
        else (f.name, Raw if f.name == "input_ids" else f.type, f.default)
        for f in msgspec.structs.fields(_Wire)
    ],
    kw_only=True,
    forbid_unknown_fields=True,
    frozen=True,
)
_lean_decoder = msgspec.json.Decoder(_LeanRequest)
_id_chunk = msgspec.json.Decoder(list[TokenId])
_IDS_KEY = b'"input_ids"'


class _Counted:
    """Items whose count is known: `tuple()` allocates its result once, at that size."""

    __slots__ = ("count", "items")

    def __init__(self, items: Iterator[int], count: int) -> None:
        self.items, self.count = items, count

    def __iter__(self) -> Iterator[int]:
        return self.items

    def __length_hint__(self) -> int:
        return self.count


def int_chunks(
    body: bytes, start: int, end: int, decoder: msgspec.json.Decoder[list[int]] = _id_chunk
) -> Iterator[list[int]]:
    """The integers of the JSON array `body[start:end]` (well-formed: it was decoded
    before), a list of them a chunk cut at a comma, each read by `decoder` (token ids
    by default); `ValueError` when a chunk is not what `decoder` reads (a cut inside a
    string or an inner array makes one that is not JSON)."""
    position, last = start + 1, end - 1  # past "[", and at "]"
    while True:
        cut = body.find(b",", min(position + _CHUNK_BYTES, last), last)
        final = cut < 0
        try:
            yield decoder.decode(b"[" + body[position : last if final else cut] + b"]")
        except DECODE_ERRORS:
            raise ValueError("not an array of token ids") from None
        if final:
            return
        position = cut + 1


def _decode_large(body: bytes) -> _Wire | None:
    """A large body decoded without holding all its token ids twice (msgspec builds a
    tuple through a list): the ids a chunk at a time into a tuple sized once.

    None when this path is not sure of the result (an error, or a key it cannot
    see as written): the typed decode then gives the verdict. `input_ids` must be
    written once, and the body hold no `\\u` escape (which could spell the key
    again), so the lean decode reads the one value the typed decode would.
    """
    if body.count(_IDS_KEY) != 1 or b"\\u" in body:
        return None
    try:
        lean = _lean_decoder.decode(body)
    except DECODE_ERRORS:
        return None
    raw: Raw = lean.input_ids  # type: ignore[attr-defined]  # a field of _LeanRequest
    size = len(raw)
    start = body.find(b"[", body.index(_IDS_KEY))
    if start < 0 or memoryview(body)[start : start + size] != memoryview(raw):
        return None
    count = body.count(b",", start, start + size) + 1
    chunks = int_chunks(body, start, start + size)
    try:
        ids = tuple(_Counted(itertools.chain.from_iterable(chunks), count))
    except ValueError:
        return None
    fields = msgspec.structs.asdict(lean)
    fields["input_ids"] = ids
    return _Wire(**fields)  # checked by the caller, like a decoded one


def _typed_decode(body: bytes | Raw, contract: Contract) -> _Wire:
    """The typed decode of a body (a large one through `_decode_large`), its checks left
    to the caller; a failure as SGLang's refusal."""
    try:
        if len(body) <= LARGE_BODY_BYTES:
            request: _Wire = _decoder.decode(body)
        else:  # an envelope's request is a Raw: read as bytes
            large = body if type(body) is bytes else bytes(body)
            request = _decode_large(large) or _decoder.decode(body)
    except DECODE_ERRORS as error:
        without = _without_null_fields(body)
        if without is None:
            raise translate_validation_error(error, data=body, contract=contract) from None
        return _typed_decode(without, contract)
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


#: A body of at most LARGE_BODY_BYTES is within every default bound: the default size,
#: and the default count of token ids (each takes two bytes or more).
assert LARGE_BODY_BYTES <= DEFAULT_MAX_BODY_BYTES and LARGE_BODY_BYTES // 2 < DEFAULT_MAX_INPUT_IDS


def decode_with_limits(
    data: object, limits: Limits, contract: Contract = _DEFAULT_CONTRACT
) -> ClientRequest:
    """`decode_client_request` with its bounds and target already checked."""
    max_body_bytes, max_input_ids, _, _, max_token_id = limits  # a field read costs a call
    passed = NO_PASSED_FIELDS
    # The usual body, bytes within the bound for a target that passes no key, needs no
    # more than this test.
    if type(data) is bytes and len(data) <= max_body_bytes and not contract.splits:
        body: Any = data
    else:
        body = as_json(data, max_body_bytes)
        if contract.splits:
            body, passed = _split_unknown(body, limits, contract)
    wire = _typed_decode(body, contract)
    if len(wire.input_ids) > max_input_ids or max_token_id is not None:
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
    """Decode and check a client's `/generate` body (JSON bytes or text, or a parsed mapping).

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
        max_body_bytes is DEFAULT_MAX_BODY_BYTES  # the defaults, not passed: nothing to check
        and max_input_ids is DEFAULT_MAX_INPUT_IDS
        and max_json_depth is DEFAULT_MAX_JSON_DEPTH
        and max_json_items is DEFAULT_MAX_JSON_ITEMS
        and max_token_id is None
    ):
        if contract is _DEFAULT_CONTRACT and type(body) is bytes and len(body) <= LARGE_BODY_BYTES:
            # The usual call: only the typed decode and the checks are left to do.
            wire = _typed_decode(body, contract)
            contract.check(wire, DEFAULT_LIMITS)
            return _from_checked(wire, DEFAULT_TARGET, NO_PASSED_FIELDS)
        return decode_with_limits(body, DEFAULT_LIMITS, contract)
    limits = make_limits(
        max_body_bytes, max_input_ids, max_json_depth, max_json_items, max_token_id
    )
    return decode_with_limits(body, limits, contract)
