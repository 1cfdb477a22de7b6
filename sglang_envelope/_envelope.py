"""The worker envelope: what a frontend hands a worker, and its JSON wire form.

The envelope is the client's request, unchanged (its stream mode included),
plus the request id the frontend resolved. A worker never trusts its input:
`decode_envelope` runs the client request through every rule again.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from sglang_envelope._errors import EnvelopeError
from sglang_envelope._request import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_INPUT_IDS,
    ClientRequest,
    decode_client_request,
)
from sglang_envelope._rules import DECODE_ERRORS, reject, translate_validation_error

__all__ = ["WorkerEnvelope", "decode_envelope", "encode_envelope", "to_worker_envelope"]

RequestId = Annotated[str, msgspec.Meta(min_length=1)]


class WorkerEnvelope(msgspec.Struct, frozen=True, kw_only=True):
    """A client request on its way to a worker.

    `rid` is the id the frontend resolved (never empty); `request` is the
    client's request exactly as decoded, so `stream` is the client's own mode.
    """

    rid: RequestId
    request: ClientRequest

    @property
    def stream(self) -> bool:
        """The stream mode the client asked for."""
        return bool(self.request.stream)


class _WireEnvelope(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    rid: RequestId
    request: msgspec.Raw


_encoder = msgspec.json.Encoder()
_wire_decoder = msgspec.json.Decoder(_WireEnvelope)


def _is_utf8(text: str) -> bool:
    """False for text with lone surrogates, which JSON on the wire cannot carry."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def to_worker_envelope(request: ClientRequest, *, rid: str) -> WorkerEnvelope:
    """Wrap `request` for a worker under the frontend's request id `rid`.

    The client's stream mode is kept as sent. Raises `EnvelopeError` when `rid`
    is empty: SGLang aborts requests by rid prefix, so an empty id would match
    every request on the server.
    """
    if not isinstance(rid, str) or not rid or not _is_utf8(rid):
        raise EnvelopeError(f"rid must be a non-empty UTF-8 string, got {rid!r:.60}")
    return WorkerEnvelope(rid=rid, request=request)


def encode_envelope(envelope: WorkerEnvelope) -> bytes:
    """The envelope's wire form: `{"rid": ..., "request": {...}}` as JSON bytes."""
    return _encoder.encode(envelope)


def decode_envelope(
    data: bytes | str,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_input_ids: int = DEFAULT_MAX_INPUT_IDS,
) -> WorkerEnvelope:
    """Decode an envelope from its wire form, checking the request against every rule.

    The bounds are `decode_client_request`'s. Raises `RequestRejected`: code
    `invalid_envelope` when the envelope itself is malformed, else the code of
    the rule the enclosed request breaks.
    """
    if isinstance(data, str):  # bounded and decoded as UTF-8, as a client body is
        try:
            data = data.encode("utf-8")
        except UnicodeEncodeError as error:
            raise reject("invalid_envelope", detail=f"not valid JSON: {error}") from None
    elif not isinstance(data, (bytes, bytearray, memoryview)):
        detail = f"expected bytes or str, got {type(data).__name__}"
        raise reject("invalid_envelope", detail=detail)
    if len(data) > max_body_bytes:
        raise reject("body_too_large", size=len(data), limit=max_body_bytes)
    try:
        wire = _wire_decoder.decode(data)
    except DECODE_ERRORS as error:
        inner = translate_validation_error(error)
        raise reject("invalid_envelope", detail=inner.message) from None
    request = decode_client_request(
        wire.request, max_body_bytes=max_body_bytes, max_input_ids=max_input_ids
    )
    return WorkerEnvelope(rid=wire.rid, request=request)
