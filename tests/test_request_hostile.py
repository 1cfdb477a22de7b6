"""Hostile input to the request side raises the library's errors, never a crash."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    Bootstrap,
    EnvelopeError,
    RequestRejected,
    Role,
    build_engine_request,
    decode_client_request,
    decode_envelope,
    decode_sequences,
    to_worker_envelope,
)
from tests.strategies import DEPLOYMENT, HOSTILE_BODIES, client_requests, json_values


def _decode_or_reject(body: Any) -> None:
    try:
        decode_sequences(body)
    except RequestRejected as rejected:
        assert rejected.code and rejected.message
    try:
        request = decode_client_request(body)
    except RequestRejected as rejected:
        assert rejected.code and rejected.message
        return
    envelope = to_worker_envelope(request, rid="r")
    for role in Role:
        bootstrap = None if role is Role.AGGREGATED else Bootstrap("h", 1, 1)
        try:
            engine = build_engine_request(
                envelope,
                deployment=DEPLOYMENT,
                input_ids=request.input_ids,
                role=role,
                bootstrap=bootstrap,
            )
        except RequestRejected as rejected:  # n > 1 on a leg of a pair
            assert role is not Role.AGGREGATED and rejected.code == "parallel_sampling"
            continue
        assert msgspec.json.decode(engine.to_json()) == engine.to_dict()


@pytest.mark.parametrize("body", HOSTILE_BODIES, ids=range(len(HOSTILE_BODIES)))
def test_hostile_bodies_are_rejected_or_accepted_cleanly(body: bytes) -> None:
    _decode_or_reject(body)
    try:
        decode_envelope(b'{"rid": "r", "request": ' + body + b"}")
    except RequestRejected as rejected:
        assert rejected.code


@given(st.binary(max_size=256))
def test_random_bytes(body: bytes) -> None:
    _decode_or_reject(body)
    try:
        decode_envelope(body)
    except RequestRejected as rejected:
        assert rejected.code


@given(json_values)
def test_any_json_value(value: Any) -> None:
    _decode_or_reject(msgspec.json.encode(value))
    _decode_or_reject(value)


@given(client_requests(), st.text(max_size=20), json_values)
def test_any_value_in_any_field(body: dict[str, Any], key: str, value: Any) -> None:
    field = key if len(key) % 2 else next(iter(body))
    _decode_or_reject({**body, field: value})
    sampling = {**(body.get("sampling_params") or {}), key: value}
    _decode_or_reject({**body, "sampling_params": sampling})


@pytest.mark.parametrize(
    "body",
    [
        {"input_ids": [1], "rid": "\ud800"},
        {"input_ids": [1], "sampling_params": {"temperature": float("nan")}},
        {"input_ids": [object()]},
        {"input_ids": [1], 5: 3},
        "\ud800",
        42,
        None,
    ],
    ids=["surrogate", "nan", "object", "int-key", "surrogate-text", "int", "none"],
)
def test_python_values_json_cannot_carry(body: Any) -> None:
    with pytest.raises(RequestRejected):
        decode_client_request(body)


@given(
    input_ids=json_values,
    role=st.sampled_from(["aggregated", "decode", "prefill", "router", ""]) | json_values,
    port=st.integers(-(2**70), 2**70),
    room=st.integers(-(2**70), 2**70),
)
def test_build_engine_request_with_hostile_arguments(
    input_ids: Any, role: Any, port: int, room: int
) -> None:
    envelope = to_worker_envelope(decode_client_request({"input_ids": [1]}), rid="r")
    try:
        bootstrap = Bootstrap("h", port, room)
        build_engine_request(
            envelope, deployment=DEPLOYMENT, input_ids=input_ids, role=role, bootstrap=bootstrap
        )
    except EnvelopeError as error:
        assert str(error)
