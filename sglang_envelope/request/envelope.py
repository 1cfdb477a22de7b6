"""The worker envelope: what a frontend hands a worker, and its JSON wire form.

The envelope is the client's request, unchanged (its stream mode included),
plus the request id the frontend resolved. A worker never trusts its input:
`decode_envelope` runs the client request through every rule again, and an
envelope made by hand is checked when it is made.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from sglang_envelope.errors.exceptions import EnvelopeError, show_value
from sglang_envelope.releases.target import Target
from sglang_envelope.request.decode_errors import (
    DECODE_ERRORS,
    KNOWN_FIELDS,
    first_unknown_key,
    translate_validation_error,
)
from sglang_envelope.request.limits import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_INPUT_IDS,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_JSON_ITEMS,
    make_limits,
)
from sglang_envelope.request.passed import NO_PASSED_FIELDS
from sglang_envelope.request.rules import DEFAULT_TARGET, reject
from sglang_envelope.request.types import (
    ClientRequest,
    contract_of,
    decode_with_limits,
    request_json,
)

__all__ = ["WorkerEnvelope", "decode_envelope", "encode_envelope", "to_worker_envelope"]


def is_utf8(text: str) -> bool:
    """False for text with lone surrogates, which JSON on the wire cannot carry."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_text(value: object, name: str) -> None:
    """Raise `EnvelopeError` naming `name` unless `value` is a non-empty UTF-8 string.

    A rid must not be empty: SGLang aborts requests by rid prefix, so an empty id
    would match every request on the server.
    """
    if type(value) is not str or not value or not (value.isascii() or is_utf8(value)):
        raise EnvelopeError(
            f"{name} must be a non-empty UTF-8 string, got {show_value(value)}"
        )


class WorkerEnvelope(msgspec.Struct, frozen=True, kw_only=True):
    """A client request on its way to a worker.

    `rid` is the id the frontend resolved (never empty); `request` is the
    client's request exactly as decoded, so `stream` is the client's own mode,
    and `target` the target it was checked for. Checked when made:
    `EnvelopeError` names the field.
    """

    rid: str
    request: ClientRequest

    def __post_init__(self) -> None:
        if type(self.request) is not ClientRequest:
            got = type(self.request).__name__
            raise EnvelopeError(f"request must be a ClientRequest, got {got}")
        rid = self.rid
        if type(rid) is not str or not rid or not rid.isascii():  # else nothing to check
            check_text(rid, "rid")

    @property
    def stream(self) -> bool:
        """The stream mode the client asked for."""
        return bool(self.request.stream)

    @property
    def target(self) -> Target:
        """The target the request was checked for (its wire form does not carry it)."""
        return self.request.target


class _WireEnvelope(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    rid: Annotated[str, msgspec.Meta(min_length=1)]
    request: msgspec.Raw


#: The envelope's own keys, where `first_unknown_key` looks for one it does not know.
_ENVELOPE_FIELDS = {"envelope": frozenset(_WireEnvelope.__struct_fields__)}
_encoder = msgspec.json.Encoder()
_wire_decoder = msgspec.json.Decoder(_WireEnvelope)


def to_worker_envelope(request: ClientRequest, *, rid: str) -> WorkerEnvelope:
    """Wrap `request` for a worker under the frontend's request id `rid`.

    The client's stream mode is kept as sent. Raises `EnvelopeError` naming
    the argument when `request` is not a `ClientRequest` (an engine body is
    not one) or `rid` is not a non-empty UTF-8 string.
    """
    return WorkerEnvelope(rid=rid, request=request)  # checked when made


def encode_envelope(envelope: WorkerEnvelope) -> bytes:
    """The envelope's wire form: `{"rid": ..., "request": {...}}` as JSON bytes.

    Raises `EnvelopeError` when `envelope` is not a `WorkerEnvelope`.
    """
    if type(envelope) is not WorkerEnvelope:
        raise EnvelopeError(
            f"envelope must be a WorkerEnvelope, got {type(envelope).__name__}"
        )
    request = envelope.request
    if request.passed_fields is NO_PASSED_FIELDS and request.target is DEFAULT_TARGET:
        # The request's own two fields are left out, as defaults.
        return _encoder.encode(envelope)
    return _encoder.encode(
        _WireEnvelope(envelope.rid, msgspec.Raw(request_json(request)))
    )


def _envelope_error(error: Exception, data: Any) -> Exception:
    """msgspec's verdict on the envelope itself, in the envelope's words."""
    found = None
    if isinstance(error, msgspec.ValidationError) and str(error).startswith(
        "Object contains unknown field"
    ):
        found = first_unknown_key(data, "envelope", _ENVELOPE_FIELDS)
    if found is not None:
        key = found[1]
        detail = f"unknown field `{key}`: a worker envelope has only `rid` and `request`"
        if key in KNOWN_FIELDS[""]:
            detail += f"; `{key}` belongs in `request`, the client's request"
        return reject("invalid_envelope", detail=detail)
    return reject("invalid_envelope", detail=translate_validation_error(error).message)


def decode_envelope(
    data: bytes | str,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_input_ids: int = DEFAULT_MAX_INPUT_IDS,
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
    max_json_items: int = DEFAULT_MAX_JSON_ITEMS,
    max_token_id: int | None = None,
    target: Target = DEFAULT_TARGET,
) -> WorkerEnvelope:
    """Decode an envelope from its wire form, checking the request against every rule.

    The bounds and `target` are `decode_client_request`'s: the worker names the
    SGLang it serves, and the request is checked for it. Raises
    `RequestRejected`: code `invalid_envelope` when the envelope itself is
    malformed, else the code of the rule the enclosed request breaks.
    """
    contract = contract_of(target)
    limits = make_limits(
        max_body_bytes, max_input_ids, max_json_depth, max_json_items, max_token_id
    )
    wire_bytes = _envelope_bytes(data, limits.max_body_bytes)
    try:
        wire = _wire_decoder.decode(wire_bytes)
    except DECODE_ERRORS as error:
        raise _envelope_error(error, wire_bytes) from None
    if not is_utf8(wire.rid):
        raise reject("invalid_envelope", detail="rid must be valid UTF-8")
    request = decode_with_limits(wire.request, limits, contract)
    return WorkerEnvelope(rid=wire.rid, request=request)


def _envelope_bytes(data: object, limit: int) -> bytes | bytearray | memoryview:
    if isinstance(data, str):
        if len(data) > limit:  # each character is at least one byte
            raise reject("body_too_large", size=len(data), limit=limit)
        try:
            data = data.encode("utf-8")
        except UnicodeEncodeError as error:
            raise reject("invalid_envelope", detail=f"not valid JSON: {error}") from None
    elif not isinstance(data, (bytes, bytearray, memoryview)):
        detail = f"expected bytes or str, got {type(data).__name__}"
        raise reject("invalid_envelope", detail=detail)
    elif type(data) is not bytes:
        # The request's JSON fields are held as views of these bytes (`msgspec.Raw`): a
        # caller's bytearray or memoryview is copied, so that changing it cannot change
        # a request that was checked. A buffer msgspec cannot read is left to its
        # refusal. Its size is read from the buffer, never from a `__len__` of its own.
        with memoryview(data) as view:
            if view.nbytes > limit:
                raise reject("body_too_large", size=view.nbytes, limit=limit)
            return view.tobytes() if view.c_contiguous else data
    if len(data) > limit:
        raise reject("body_too_large", size=len(data), limit=limit)
    return data
