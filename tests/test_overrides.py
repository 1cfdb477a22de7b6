"""`header_overrides`: the client's own body and the override headers are the engine request."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    Bootstrap,
    Deployment,
    EnvelopeError,
    Role,
    Routing,
    Service,
    Target,
    build_engine_request,
    decode_client_request,
    to_worker_envelope,
)
from sglang_envelope.request.engine import OVERRIDE_HEADERS, EngineBody, header_overrides
from tests.serve_fakes import Recording
from tests.strategies import client_requests

DEPLOYMENT = Deployment(vocab_size=None)
#: SGLang's own casts (srt/entrypoints/request_headers.py): every field is a str or an int.
CASTS = {"rid": str, "bootstrap_host": str}


def as_sglang_reads(body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    """`body` parsed, then each override header set as SGLang's `apply_header_overrides` does."""
    fields: dict[str, Any] = json.loads(body)
    for name, header in OVERRIDE_HEADERS.items():
        if header in headers:
            fields[name] = CASTS.get(name, int)(headers[header])
    return fields


def built(body: bytes, role: Role, routing: Routing | None = None) -> tuple[Any, Any]:
    request = decode_client_request(body, target=Target(unknown_fields="pass"))
    envelope = to_worker_envelope(request, rid="0123456789abcdef0123456789abcdef")
    bootstrap = None if role is Role.AGGREGATED else Bootstrap("10.0.0.1", 8998, 77, 1)
    engine = build_engine_request(
        envelope, input_ids=request.input_ids, role=role, deployment=DEPLOYMENT,
        bootstrap=bootstrap, routing=routing,
    )  # fmt: skip
    return engine, request


#: The engine body's defaults: what a key left out of a body means (None for SGLang's own).
DEFAULTS = {
    field.name: None if field.default is msgspec.NODEFAULT else field.default
    for field in msgspec.structs.fields(EngineBody)
} | {"stream": False}


def same_request(got: dict[str, Any], engine: Any) -> bool:
    """What SGLang reads is the engine request (absent, null and default being alike)."""
    expected = engine.to_dict()

    def read(fields: dict[str, Any], key: str) -> Any:
        value = fields.get(key)
        return DEFAULTS.get(key) if value is None else value

    return all(read(got, key) == read(expected, key) for key in set(got) | set(expected))


@given(
    client_requests(),
    st.sampled_from([Role.AGGREGATED, Role.DECODE, Role.PREFILL]),
    st.sampled_from([None, Routing(dp_rank=0), Routing(priority=3), Routing(labels={"a": "b"})]),
)
def test_the_headers_make_sglang_read_the_engine_request(
    request_fields: dict[str, Any], role: Role, routing: Routing | None
) -> None:
    body = msgspec.json.encode(request_fields)
    engine, request = built(body, role, routing)
    headers = header_overrides(engine, request)
    if headers is not None:
        assert same_request(as_sglang_reads(body, headers), engine)
        assert headers["Content-Type"] == "application/json"


def test_which_requests_the_headers_carry() -> None:
    stream = b'{"rid": "client", "input_ids": [1, 2], "stream": true}'
    flat = b'{"input_ids": [1, 2], "return_flat_raw_output_top_logprobs": true}'
    unary = b'{"input_ids": [1, 2]}'
    assert header_overrides(*built(stream, Role.AGGREGATED)) is not None
    assert header_overrides(*built(flat, Role.DECODE)) is not None
    # A unary client is asked unary where the server's mode is not known: the headers carry it.
    assert header_overrides(*built(unary, Role.AGGREGATED)) is not None
    assert header_overrides(*built(stream, Role.PREFILL)) is None, "the prefill leg's changes"
    labelled = built(stream, Role.AGGREGATED, Routing(labels={"a": "b"}))
    assert header_overrides(*labelled) is None, "no header for custom labels"
    headers = header_overrides(*built(stream, Role.DECODE, Routing(dp_rank=2)))
    assert headers is not None
    assert headers["x-override-rid"] == "0123456789abcdef0123456789abcdef"
    assert (headers["x-override-bootstrap-room"], headers["x-override-routed-dp-rank"]) == (
        "77",
        "2",
    )


def test_a_release_without_the_headers_gets_none() -> None:
    body = b'{"input_ids": [1, 2], "stream": true}'
    request = decode_client_request(body, target=Target(sglang="0.5.21"))
    envelope = to_worker_envelope(request, rid="r")
    engine = build_engine_request(
        envelope, input_ids=request.input_ids, role=Role.AGGREGATED, deployment=DEPLOYMENT
    )
    assert header_overrides(engine, request) is None


def test_wrong_arguments_are_refused() -> None:
    with pytest.raises(EnvelopeError, match="EngineRequest"):
        header_overrides(object(), object())  # type: ignore[arg-type]


def test_a_service_with_header_overrides_sends_the_client_s_bytes() -> None:
    body = b'{"rid": "mine", "input_ids": [5, 6], "stream": true}'

    async def main() -> tuple[Recording, bytes]:
        transport = Recording()
        deployment = Deployment(vocab_size=None, incremental_streaming_output=False)
        async with Service(transport, deployment=deployment, header_overrides=True) as svc:
            answer = await svc.generate(body)
            return transport, b"".join([chunk async for chunk in answer.body])

    transport, written = asyncio.run(main())
    ((sent, headers),) = transport.sent
    assert sent == body and "x-override-rid" in headers
    assert written.count(b'"id":"mine"') == 2


def test_a_body_given_as_a_mapping_is_encoded_not_sent_as_it_is() -> None:
    async def main() -> Recording:
        transport = Recording()
        deployment = Deployment(vocab_size=None, incremental_streaming_output=False)
        async with Service(transport, deployment=deployment, header_overrides=True) as svc:
            answer = await svc.generate({"input_ids": [5], "stream": True})
            [chunk async for chunk in answer.body]
        return transport

    ((sent, headers),) = asyncio.run(main()).sent
    assert type(sent) is bytes and "x-override-rid" not in headers
