"""The rules per target: fields a release lacks, its gate or none, its words, and where a
checked request may go."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sglang_envelope import (
    Bootstrap,
    EnvelopeError,
    RequestRejected,
    Role,
    Target,
    build_engine_request,
    decode_client_request,
    decode_envelope,
    encode_envelope,
    to_worker_envelope,
)
from sglang_envelope.request.contract import contract_for
from sglang_envelope.request.rules import DEFAULT_TARGET
from tests.strategies import DEPLOYMENT
from tests.test_target import _fake_sglang

OLD_HTTP, OLD_ENGINE = Target(sglang="0.5.21"), Target(sglang="0.5.21", transport="engine")
MID_HTTP = Target(sglang="0.5.22")
NEW_ENGINE = Target(transport="engine")
PASS = Target(unknown_fields="pass")


def _refusal(body: dict[str, Any], target: Target) -> RequestRejected:
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(json.dumps(body).encode(), target=target)
    return caught.value


def _body(**fields: Any) -> dict[str, Any]:
    return {"input_ids": [1, 2, 3], **fields}


def test_the_default_target_is_the_one_every_call_had() -> None:
    body = b'{"input_ids": [1], "sampling_params": {"temperature": 0.5}}'
    assert decode_client_request(body) == decode_client_request(body, target=Target())
    assert decode_client_request(body).target == Target()
    assert contract_for(Target(sglang="0.5.22")) is contract_for(Target(sglang="0.5.22"))


@pytest.mark.parametrize("target", [OLD_HTTP, OLD_ENGINE])
@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_body(return_flat_raw_output_top_logprobs=True), "return_flat_raw_output_top_logprobs"),
        (_body(watermark={"enabled": True}), "watermark"),
        (_body(sampling_params={"watermark": {"enabled": True}}), "sampling_params.watermark"),
    ],
)
def test_a_field_the_release_lacks_is_refused_on_both_transports(
    target: Target, body: dict[str, Any], field: str
) -> None:
    error = _refusal(body, target)
    assert (error.code, error.field) == ("needs_newer_sglang", field)
    assert error.message == f"{field} needs SGLang 0.5.22 or later; this target is 0.5.21"


def test_an_unset_field_the_release_lacks_is_no_refusal() -> None:
    request = decode_client_request(
        b'{"input_ids": [1], "return_flat_raw_output_top_logprobs": false}', target=OLD_ENGINE
    )
    engine = build_engine_request(
        to_worker_envelope(request, rid="r"),
        deployment=DEPLOYMENT,
        input_ids=[1],
        role="aggregated",
    )
    assert "return_flat_raw_output_top_logprobs" not in engine.to_dict()


@pytest.mark.parametrize(
    ("target", "verdict"),
    [
        (OLD_HTTP, None),  # no gate; SamplingParams has it
        (NEW_ENGINE, None),
        (Target(sglang="0.5.22", transport="engine"), None),
        (MID_HTTP, "unknown_sampling_param"),  # the gate refuses it
        (DEFAULT_TARGET, "unknown_sampling_param"),
    ],
)
def test_ebnf_full_assistant_follows_the_gate(target: Target, verdict: str | None) -> None:
    body = _body(sampling_params={"ebnf_full_assistant": True})
    if verdict is None:
        request = decode_client_request(json.dumps(body).encode(), target=target)
        assert request.sampling_params.ebnf_full_assistant is True  # type: ignore[union-attr]
    else:
        error = _refusal(body, target)
        assert error.code == verdict
        assert error.message.startswith("unknown field `ebnf_full_assistant`, expected one of ")


@pytest.mark.parametrize(
    ("target", "code", "message"),
    [
        (DEFAULT_TARGET, "unsupported_sampling_param", "Unexpected keyword argument 'choice'"),
        (NEW_ENGINE, "unexpected_sampling_param", "Unexpected keyword argument 'choice'"),
        (MID_HTTP, "unknown_sampling_param", "unknown field `choice`, expected one of "),
    ],
)
def test_choice_is_refused_in_each_releases_words(target: Target, code: str, message: str) -> None:
    error = _refusal(_body(sampling_params={"choice": ["a"]}), target)
    assert (error.code, error.field) == (code, "sampling_params.choice")
    assert error.message.startswith(message)


def test_an_unknown_key_is_refused_in_the_words_of_the_target() -> None:
    engine = _refusal(_body(sampling_params={"zz": 1}), NEW_ENGINE)
    assert (engine.code, engine.message) == (
        "unexpected_sampling_param",
        "Unexpected keyword argument 'zz'",
    )
    top = _refusal(_body(zz=1), MID_HTTP)
    assert top.message.startswith("unknown field `zz`: SGLang 0.5.22's GenerateReqInput")


def test_priority_range_is_checked_from_0_5_22_only() -> None:
    body = _body(priority=2**63)
    assert decode_client_request(json.dumps(body), target=OLD_ENGINE).priority == 2**63
    assert _refusal(body, MID_HTTP).code == "priority_out_of_range"


def test_a_request_goes_only_where_it_was_checked() -> None:
    request = decode_client_request(b'{"input_ids": [1]}', target=OLD_ENGINE)
    envelope = to_worker_envelope(request, rid="r")
    assert envelope.target == OLD_ENGINE
    build_engine_request(envelope, deployment=DEPLOYMENT, input_ids=[1], role="aggregated")
    build_engine_request(
        envelope, deployment=DEPLOYMENT, input_ids=[1], role="aggregated", target=OLD_ENGINE
    )
    with pytest.raises(EnvelopeError, match=r"checked for SGLang 0\.5\.21 over engine"):
        build_engine_request(
            envelope, deployment=DEPLOYMENT, input_ids=[1], role="aggregated", target=Target()
        )
    with pytest.raises(EnvelopeError, match="target must be a Target"):
        build_engine_request(
            envelope,
            deployment=DEPLOYMENT,
            input_ids=[1],
            role="aggregated",
            target="0.5.21",  # type: ignore[arg-type]
        )


def test_a_worker_checks_the_envelope_for_its_own_target() -> None:
    request = decode_client_request(
        b'{"input_ids": [1], "sampling_params": {"ebnf_full_assistant": true}}',
        target=NEW_ENGINE,
    )
    wire = encode_envelope(to_worker_envelope(request, rid="r"))
    assert decode_envelope(wire, target=NEW_ENGINE).target == NEW_ENGINE
    with pytest.raises(RequestRejected) as caught:
        decode_envelope(wire)  # the default target's gate refuses the key
    assert caught.value.code == "unknown_sampling_param"


@pytest.mark.parametrize("bad", ["0.5.23", None, 1])
def test_a_target_that_is_not_a_target_is_an_envelope_error(bad: object) -> None:
    with pytest.raises(EnvelopeError, match=r"^target must be a Target"):
        decode_client_request(b'{"input_ids": [1]}', target=bad)  # type: ignore[arg-type]
    with pytest.raises(EnvelopeError, match=r"^target must be a Target"):
        decode_envelope(b'{"rid": "r", "request": {"input_ids": [1]}}', target=bad)  # type: ignore[arg-type]


PASSING = (
    b'{"input_ids": [1], "new_thing": {"a": [1, 2]}, '
    b'"sampling_params": {"temperature": 0.5, "new_knob": 3}}'
)


def test_pass_lets_unknown_keys_through_unchanged_to_the_engine() -> None:
    request = decode_client_request(PASSING, target=PASS)
    assert [k for k, _ in request.passed_fields.top_level] == ["new_thing"]
    wire = encode_envelope(to_worker_envelope(request, rid="r"))
    envelope = decode_envelope(wire, target=PASS)
    for role, bootstrap in (("aggregated", None), ("prefill", Bootstrap("h", 1, 2))):
        body = build_engine_request(
            envelope,
            deployment=DEPLOYMENT,
            input_ids=[1],
            role=role,  # type: ignore[arg-type]
            bootstrap=bootstrap,
        ).to_dict()
        assert body["new_thing"] == {"a": [1, 2]}
        assert body["sampling_params"]["new_knob"] == 3
        assert body["sampling_params"]["temperature"] == 0.5


def test_pass_still_refuses_serving_system_fields_and_bounds_what_passes() -> None:
    assert _refusal(_body(bootstrap_room=5), PASS).code == "orchestrator_field"
    deep: Any = 0
    for _ in range(40):
        deep = [deep]
    error = _refusal(_body(new_thing=deep), PASS)
    assert (error.code, error.field) == ("json_too_deep", "new_thing")
    assert _refusal(json.loads(PASSING), Target()).code == "unknown_field"


def test_the_installed_sglang_gives_the_exact_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_sglang(tmp_path, monkeypatch)
    target = Target.installed()
    request = decode_client_request(
        b'{"input_ids": [1], "brand_new_field": 7, "sampling_params": {"brand_new_knob": 1}}',
        target=target,
    )
    engine = build_engine_request(
        to_worker_envelope(request, rid="r"),
        deployment=DEPLOYMENT,
        input_ids=[1],
        role=Role.AGGREGATED,
    )
    assert msgspec.json.decode(engine.to_json())["brand_new_field"] == 7
    error = _refusal(_body(stream=True), target)  # the installed GenerateReqInput lacks it
    assert error.code == "unknown_field"
    assert (
        error.message
        == "unknown field `stream`: SGLang 0.5.23's GenerateReqInput has no such field"
    )
    assert _refusal(_body(other=1), target).code == "unknown_field"


@pytest.mark.parametrize(
    ("target", "body"),
    [
        (NEW_ENGINE, {"input_ids": [1, 2], "sampling_params": {"ebnf_full_assistant": True}}),
        (PASS, {"input_ids": [1], "new_thing": [1], "sampling_params": {"new_key": {"a": 1}}}),
    ],
)
def test_a_copied_or_pickled_request_keeps_its_target(target: Target, body: Any) -> None:
    import copy
    import pickle

    request = decode_client_request(msgspec.json.encode(body), target=target)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        copies = [copy.copy(request), copy.deepcopy(request)]
        copies.append(pickle.loads(pickle.dumps(request, protocol)))
        copies.append(pickle.loads(pickle.dumps(to_worker_envelope(request, rid="r"))).request)
        for same in copies:
            assert same == request
            assert same.target == target
            assert same.passed_fields == request.passed_fields
