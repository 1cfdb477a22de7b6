"""An engine request sent as the client's own body and SGLang's override headers.

SGLang 0.5.22 and 0.5.23, run with ``SGLANG_ENABLE_REQUEST_HEADER_OVERRIDES=1``,
set a few `GenerateReqInput` fields from ``x-override-*`` headers after they
parse the body (``srt/entrypoints/request_headers.py``, applied in
``serve_generate_request``). A worker can then send the client's body bytes as
they came, never encoding a large body again, when the engine request differs
from the client's only in those fields: `header_overrides` says whether it
does, and gives the headers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import msgspec

from sglang_envelope.errors.exceptions import EnvelopeError
from sglang_envelope.request.engine import EngineBody, EngineRequest
from sglang_envelope.request.fields import RequestFields
from sglang_envelope.request.types import ClientRequest

__all__ = ["OVERRIDE_HEADERS", "OVERRIDE_RELEASES", "header_overrides"]

#: Engine body field -> the header SGLang sets it from (``_HEADER_OVERRIDES``).
OVERRIDE_HEADERS: Final[Mapping[str, str]] = {
    "rid": "x-override-rid",
    "bootstrap_host": "x-override-bootstrap-host",
    "bootstrap_port": "x-override-bootstrap-port",
    "bootstrap_room": "x-override-bootstrap-room",
    "routed_dp_rank": "x-override-routed-dp-rank",
    "disagg_prefill_dp_rank": "x-override-disagg-prefill-dp-rank",
    "priority": "x-override-priority",
}
#: The releases whose HTTP server reads the override headers.
OVERRIDE_RELEASES: Final = frozenset({"0.5.22", "0.5.23"})

_CLIENT_FIELDS: Final = frozenset(RequestFields.__struct_fields__)
#: The engine body's own fields, at their defaults (what a client's body leaves out).
_DEFAULTS: Final[Mapping[str, object]] = {
    field.name: field.default
    for field in msgspec.structs.fields(EngineBody)
    if field.name not in _CLIENT_FIELDS
}
#: Fields SGLang reads the same when absent and at this value.
_ABSENT_MEANS: Final[Mapping[str, object]] = {"stream": False}


def header_overrides(
    engine: EngineRequest, request: ClientRequest
) -> dict[str, str] | None:
    """The headers that send `request`'s own body as `engine` (None when they cannot).

    `engine` must have been built from `request` (`build_engine_request`). The
    headers are `engine.headers` and one ``x-override-*`` header for each
    field where the two differ; None when a field differs that no header sets
    (a prefill leg's stream mode and sampling, a routing label) or that a header
    cannot carry (a rid that is not ASCII), and when the target's release reads no
    override headers. The server
    must run with ``SGLANG_ENABLE_REQUEST_HEADER_OVERRIDES=1``. Raises
    `EnvelopeError` for arguments of the wrong type.
    """
    if not isinstance(engine, EngineRequest) or not isinstance(request, ClientRequest):
        raise EnvelopeError(
            "header_overrides takes an EngineRequest and its ClientRequest"
        )
    if (
        request.target.sglang not in OVERRIDE_RELEASES
        or engine.passed != request.passed_fields
    ):
        return None
    body = engine.body
    headers = engine.headers
    for name in body.__struct_fields__:
        value = getattr(body, name)
        start = getattr(request, name) if name in _CLIENT_FIELDS else _DEFAULTS[name]
        if start is None:
            start = _ABSENT_MEANS.get(name)
        if value is start or value == start:
            continue
        header = OVERRIDE_HEADERS.get(name)
        text = value if type(value) is str else str(value) if type(value) is int else None
        if header is None or text is None or not text.isascii():
            return None  # no header sets it, or none can carry it
        headers[header] = text
    return headers
