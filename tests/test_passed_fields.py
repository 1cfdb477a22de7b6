"""Keys no table knows, passed through for a target with `unknown_fields="pass"`."""

from __future__ import annotations

import json

import pytest
from msgspec import Raw

from sglang_envelope import (
    ClientRequest,
    Deployment,
    RequestRejected,
    SamplingParams,
    Target,
    build_engine_request,
    decode_client_request,
    encode_envelope,
    to_worker_envelope,
)
from sglang_envelope.request.passed import PassedFields

PASS = Target(unknown_fields="pass")
ANY_VOCABULARY = Deployment(vocab_size=None)


def engine_body(request: ClientRequest) -> dict[str, object]:
    envelope = to_worker_envelope(request, rid="r")
    engine = build_engine_request(
        envelope, input_ids=request.input_ids, role="aggregated", deployment=ANY_VOCABULARY
    )
    body: dict[str, object] = json.loads(engine.to_json())
    return body


@pytest.mark.parametrize("body", [b"[1]", b'"text"', b"7"])
def test_a_body_that_is_no_object_gets_the_same_verdict_when_keys_pass(body: bytes) -> None:
    verdicts = []
    for target in (Target(), PASS):
        with pytest.raises(RequestRejected) as caught:
            decode_client_request(body, target=target)
        verdicts.append((caught.value.code, caught.value.message))
    assert verdicts[0] == verdicts[1]
    assert verdicts[0][0] == "not_object"


def test_a_top_level_key_passes_and_known_sampling_params_stay_typed() -> None:
    body = b'{"input_ids": [1], "new_top": {"a": 1}, "sampling_params": {"temperature": 0.5}}'
    request = decode_client_request(body, target=PASS)
    assert [(key, bytes(value)) for key, value in request.passed_fields.top_level] == [
        ("new_top", b'{"a": 1}')
    ]
    assert request.passed_fields.sampling_params == ()
    assert isinstance(request.sampling_params, SamplingParams)
    assert request.sampling_params.temperature == 0.5
    sent = engine_body(request)
    assert sent["new_top"] == {"a": 1}
    assert sent["sampling_params"] == {"temperature": 0.5}


def test_a_request_made_by_hand_keeps_its_passed_sampling_keys() -> None:
    passed = PassedFields(sampling_params=(("new_key", Raw(b"[1, 2]")),))
    request = ClientRequest(input_ids=(1,), target=PASS, passed_fields=passed)
    assert [(k, bytes(v)) for k, v in request.passed_fields.sampling_params] == [
        ("new_key", b"[1,2]")
    ]
    assert json.loads(encode_envelope(to_worker_envelope(request, rid="y"))) == {
        "rid": "y",
        "request": {"input_ids": [1], "sampling_params": {"new_key": [1, 2]}},
    }
    assert engine_body(request)["sampling_params"] == {"new_key": [1, 2]}


def test_a_request_made_by_hand_merges_passed_and_typed_sampling_keys() -> None:
    passed = PassedFields(sampling_params=(("new_key", Raw(b"true")),))
    typed = decode_client_request(b'{"input_ids": [1], "sampling_params": {"top_k": 4}}')
    request = ClientRequest(
        input_ids=(1,), sampling_params=typed.sampling_params, target=PASS, passed_fields=passed
    )
    assert isinstance(request.sampling_params, SamplingParams)
    assert request.sampling_params.top_k == 4
    assert engine_body(request)["sampling_params"] == {"top_k": 4, "new_key": True}
