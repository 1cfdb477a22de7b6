"""The request side: client request -> worker envelope -> engine request, rule by rule."""

from __future__ import annotations

import functools
from typing import Any, Literal

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    Bootstrap,
    ClientRequest,
    EnvelopeError,
    RequestRejected,
    Role,
    Target,
    WorkerEnvelope,
    build_engine_request,
    decode_client_request,
    decode_envelope,
    encode_envelope,
    to_worker_envelope,
)
from sglang_envelope.request.fields import FIELD_OWNERS, TEXT_INPUT_FIELDS
from sglang_envelope.request.rules import GENERATE_REQ_INPUT_FIELDS
from tests.strategies import (
    DEPLOYMENT,
    ORCHESTRATOR_VALUES,
    bootstraps,
    client_requests,
    rejected_requests,
    request_ids,
    roles,
    token_ids,
)

SEED = {
    "input_ids": [1, 2],
    "stream": False,
    "return_logprob": True,
    "top_logprobs_num": 2,
    "return_flat_raw_output_top_logprobs": True,
}
BOOTSTRAP = Bootstrap("10.0.0.7", 8998, 4242)
DEFAULTS = {field.name: field.default for field in msgspec.structs.fields(ClientRequest)}
OUTPUT_FLAT = "return_flat_raw_output_top_logprobs"
PROMPT_FLAT = "return_flat_raw_top_logprobs"
B64 = "return_flat_raw_top_logprobs_b64"


def _engine(body: dict[str, Any], role: Role, rid: str = "rid-1") -> dict[str, Any]:
    envelope = to_worker_envelope(decode_client_request(body), rid=rid)
    bootstrap = None if role is Role.AGGREGATED else BOOTSTRAP
    request = build_engine_request(
        envelope,
        deployment=DEPLOYMENT,
        input_ids=envelope.request.input_ids,
        role=role,
        bootstrap=bootstrap,
    )
    return request.to_dict()


# --- the case this library exists for ---


def test_seed_request_keeps_stream_false_through_the_envelope() -> None:
    envelope = to_worker_envelope(decode_client_request(msgspec.json.encode(SEED)), rid="r")
    assert envelope.stream is False
    assert decode_envelope(encode_envelope(envelope)).stream is False


@pytest.mark.parametrize("role", [Role.AGGREGATED, Role.DECODE])
def test_seed_request_is_unary_for_aggregated_and_decode(role: Role) -> None:
    body = _engine(SEED, role)
    assert body["stream"] is False
    assert body[OUTPUT_FLAT] is True


def test_seed_request_streams_one_token_without_output_flat_for_prefill() -> None:
    body = _engine(SEED, Role.PREFILL)
    assert body["stream"] is True
    assert OUTPUT_FLAT not in body
    assert body["sampling_params"] == {"n": 1, "max_new_tokens": 1}


def test_seed_request_with_stream_true_is_rejected_in_sglangs_words() -> None:
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({**SEED, "stream": True})
    assert caught.value.code == "output_flat_with_stream"
    assert caught.value.field == OUTPUT_FLAT
    assert str(caught.value) == (
        "return_flat_raw_output_top_logprobs is only set on the finished response "
        "and does not support stream=True."
    )


# --- decoding keeps what the client sent ---


@given(client_requests())
def test_accepted_request_keeps_every_field_as_sent(body: dict[str, Any]) -> None:
    for form in (body, msgspec.json.encode(body), msgspec.json.encode(body).decode()):
        request = decode_client_request(form)
        kept = msgspec.json.decode(msgspec.json.encode(request))
        for key, value in body.items():  # a value equal to SGLang's default is left out
            assert kept.get(key, DEFAULTS[key]) == value, key


@given(client_requests(), request_ids)
def test_envelope_keeps_client_stream_mode_and_round_trips(body: dict[str, Any], rid: str) -> None:
    envelope = to_worker_envelope(decode_client_request(body), rid=rid)
    assert envelope.stream is bool(body.get("stream"))
    assert envelope.rid == rid
    assert decode_envelope(encode_envelope(envelope)) == envelope


@given(rejected_requests())
def test_rejected_request_names_its_rule(case: tuple[dict[str, Any], str]) -> None:
    body, code = case
    for form in (body, msgspec.json.encode(body)):
        with pytest.raises(RequestRejected) as caught:
            decode_client_request(form)
        assert caught.value.code == code
        assert caught.value.message == str(caught.value)
        assert caught.value.message


@given(rejected_requests(), request_ids)
def test_worker_reapplies_every_rule_to_an_envelope(
    case: tuple[dict[str, Any], str], rid: str
) -> None:
    body, code = case
    wire = msgspec.json.encode({"rid": rid, "request": body})
    with pytest.raises(RequestRejected) as caught:
        decode_envelope(wire)
    assert caught.value.code == code


@pytest.mark.parametrize(
    ("wire", "detail"),
    [
        (b'{"request": {"input_ids": [1]}}', "rid"),
        (b'{"rid": "", "request": {"input_ids": [1]}}', "length >= 1"),
        (b'{"rid": "r", "request": {"input_ids": [1]}, "x": 1}', "unknown field `x`"),
        (b"[]", "object"),
        (b"{", "truncated"),
    ],
)
def test_malformed_envelope_is_rejected(wire: bytes, detail: str) -> None:
    with pytest.raises(RequestRejected) as caught:
        decode_envelope(wire)
    assert caught.value.code in {"invalid_envelope"}
    assert detail in caught.value.message


@pytest.mark.parametrize(
    ("body", "code", "field", "words"),
    [
        (b"not json", "not_json", None, "not valid JSON"),
        (b"[1, 2]", "not_object", None, "got array"),
        (b'"text"', "not_object", None, "got str"),
        ({"input_ids": [1], "retrun_logprob": True}, "unknown_field", "retrun_logprob",
         "did you mean `return_logprob`"),
        ({"input_ids": [1], "bootstrap_room": 5}, "orchestrator_field", "bootstrap_room",
         "only by the serving system"),
        ({"text": "hi"}, "not_token_input", "text", "one token-input request"),
        ({"input_ids": [[1, 2]]}, "batched_input", "input_ids", "decode_sequences"),
        ({"input_ids": [1, -2]}, "token_id_out_of_range", "input_ids[1]", "[0, 2^32)"),
        ({"input_ids": [1], "top_logprobs_num": "5"}, "wrong_type", "top_logprobs_num",
         "expected int | null, got str"),
        ({"input_ids": [1], "sampling_params": {"temperature": "hot"}}, "wrong_type",
         "sampling_params.temperature", "expected int | float | null, got str"),
        ({"input_ids": [1], "sampling_params": {"max_tokens": 5}}, "unknown_sampling_param",
         "sampling_params.max_tokens", "unknown field `max_tokens`, expected one of"),
        ({"input_ids": [1], "sampling_params": {"watermark": {"bad": 1}}},
         "unknown_nested_field", "sampling_params.watermark.bad", "unknown field `bad`"),
        ({"input_ids": [1], "sampling_params": {"n": 3, "beam_width": 2}}, "n_over_beam_width",
         "sampling_params.n", "n (3) cannot exceed beam_width (2)."),
        ({"input_ids": [1], "sampling_params": {"n": None}}, "n_null",
         "sampling_params.n", "got null"),
        ({"input_ids": [1], "sampling_params": {"choice": ["a"]}}, "unsupported_sampling_param",
         "sampling_params.choice", "Unexpected keyword argument 'choice'"),
        ({"input_ids": [1], "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens_negative",
         "sampling_params.max_new_tokens", "max_new_tokens must be at least 0, got -1."),
        ({"input_ids": [1], "sampling_params": {"min_new_tokens": -2}}, "min_new_tokens_negative",
         "sampling_params.min_new_tokens", "must be in [0, max_new_tokens], got -2."),
        ({"input_ids": [], "return_flat_raw_top_logprobs_b64": True}, "b64_without_flat", B64,
         "requires return_flat_raw_top_logprobs"),
        ({"input_ids": [1], "sampling_params": {"min_new_tokens": 129}},
         "min_new_tokens_over_max", "sampling_params.min_new_tokens",
         "min_new_tokens must be in [0, max_new_tokens(128)], got 129."),
        ({"input_ids": [1], B64: True}, "b64_without_flat", B64,
         "return_flat_raw_top_logprobs_b64 requires return_flat_raw_top_logprobs "
         "or return_flat_raw_output_top_logprobs."),
        ({"input_ids": [1], PROMPT_FLAT: True, "multi_item_delimiter_indices": [3]},
         "flat_with_multi_item", PROMPT_FLAT, "does not support multi-item scoring"),
        ({"input_ids": [1], "session_id": "a", "session_params": {"id": "a"}},
         "session_id_with_session_params", "session_id",
         "session_id and session_params cannot both be set."),
    ],
)  # fmt: skip
def test_each_rule_reports_code_field_and_words(
    body: bytes | dict[str, Any], code: str, field: str | None, words: str
) -> None:
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(body)
    assert (caught.value.code, caught.value.field) == (code, field)
    assert words in caught.value.message


def test_min_new_tokens_up_to_an_explicit_unlimited_max_is_accepted() -> None:
    body = {"input_ids": [1], "sampling_params": {"min_new_tokens": 500, "max_new_tokens": None}}
    encoded = msgspec.json.encode(decode_client_request(body).sampling_params)
    assert msgspec.json.decode(encoded) == body["sampling_params"]


def test_body_and_input_ids_are_bounded() -> None:
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(b'{"input_ids": [1, 2, 3]}', max_body_bytes=10)
    assert caught.value.code == "body_too_large"
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({"input_ids": [1, 2, 3]}, max_input_ids=2)
    assert (caught.value.code, caught.value.field) == ("too_many_input_ids", "input_ids")


def test_every_sglang_field_is_either_the_clients_or_owned() -> None:
    client_fields = set(ClientRequest.__struct_fields__) - {"target", "passed_fields"}
    token_fields = client_fields - set(TEXT_INPUT_FIELDS)
    assert token_fields.isdisjoint(FIELD_OWNERS)
    assert token_fields | set(FIELD_OWNERS) == set(GENERATE_REQ_INPUT_FIELDS)
    # the text and media fields are the token-input target's to refuse, a text target's to take
    assert set(TEXT_INPUT_FIELDS) <= {k for k, v in FIELD_OWNERS.items() if v == "not_token_input"}


# --- the engine request, per role ---


@given(client_requests(), roles, bootstraps, request_ids, token_ids)
def test_engine_request_follows_the_role_table(
    body: dict[str, Any], role: Role, bootstrap: Bootstrap, rid: str, ids: list[int]
) -> None:
    envelope = to_worker_envelope(decode_client_request(body), rid=rid)
    given_bootstrap = None if role is Role.AGGREGATED else bootstrap
    build = functools.partial(
        build_engine_request,
        envelope,
        deployment=DEPLOYMENT,
        input_ids=ids,
        role=role,
        bootstrap=given_bootstrap,
    )
    start = body.get("logprob_start_len")
    if body.get("return_logprob") and start is not None and start > len(ids):
        with pytest.raises(RequestRejected, match="logprob_start_len="):  # the ids sent
            build()
        return
    if body.get("return_routed_experts") and body.get("routed_experts_start_len", 0) > len(ids):
        with pytest.raises(RequestRejected, match="routed_experts_start_len="):  # likewise
            build()
        return
    engine = build()
    out = engine.to_dict()
    assert out == msgspec.json.decode(engine.to_json())
    assert (out["rid"], out["input_ids"], engine.rid) == (rid, ids, rid)
    output_flat = bool(body.get(OUTPUT_FLAT))
    prompt_flat = bool(body.get(PROMPT_FLAT))
    if role is Role.PREFILL:
        assert out["stream"] is True
        assert OUTPUT_FLAT not in out
        assert out.get(PROMPT_FLAT, False) is prompt_flat
        assert out.get(B64, False) is (bool(body.get(B64)) and prompt_flat)
        expected = {k: v for k, v in (body.get("sampling_params") or {}).items()}
        expected.pop("min_new_tokens", None)
        assert out["sampling_params"] == {**expected, "n": 1, "max_new_tokens": 1}
    else:
        assert out["stream"] is (body.get("stream") is True)  # the client's mode
        assert out.get(OUTPUT_FLAT, False) is output_flat
        assert out.get(B64, False) is bool(body.get(B64))
        assert out.get("sampling_params") == body.get("sampling_params")
    assert engine.stream is out["stream"]
    assert engine.accept == ("text/event-stream" if engine.stream else "application/json")
    bootstrap_fields = {
        k: out.get(k)
        for k in ("bootstrap_host", "bootstrap_port", "bootstrap_room", "disagg_prefill_dp_rank")
    }
    if given_bootstrap is None:
        assert set(bootstrap_fields.values()) == {None}
    else:
        assert bootstrap_fields == {
            "bootstrap_host": bootstrap.host,
            "bootstrap_port": bootstrap.port,
            "bootstrap_room": bootstrap.room,
            "disagg_prefill_dp_rank": bootstrap.prefill_dp_rank,
        }
    untouched = set(body) - {"rid", "input_ids", "stream", "sampling_params", OUTPUT_FLAT, B64}
    for key in untouched:
        assert out.get(key, body[key]) == body[key], key


@given(client_requests(), bootstraps, request_ids, st.sampled_from([Role.DECODE, "decode"]))
def test_a_decode_workers_usual_call_builds_what_any_call_builds(
    body: dict[str, Any], bootstrap: Bootstrap, rid: str, role: Role | Literal["decode"]
) -> None:
    envelope = to_worker_envelope(decode_client_request(body), rid=rid)
    ids = envelope.request.input_ids
    assert ids is not None
    usual = build_engine_request(
        envelope, deployment=DEPLOYMENT, input_ids=ids, role=role, bootstrap=bootstrap
    )
    spelled_out = build_engine_request(
        envelope,
        deployment=DEPLOYMENT,
        input_ids=list(ids),
        role=Role.DECODE,
        bootstrap=bootstrap,
        target=envelope.target,
    )
    assert usual == spelled_out
    assert usual.role is Role.DECODE
    assert usual.to_json() == spelled_out.to_json()


@given(
    st.dictionaries(
        st.sampled_from(sorted(ORCHESTRATOR_VALUES)) | st.text(max_size=12),
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        max_size=6,
    ),
    client_requests(),
    roles,
)
def test_a_client_never_injects_serving_system_fields(
    extra: dict[str, Any], body: dict[str, Any], role: Role
) -> None:
    hostile = {**body, **extra}
    try:
        out = _engine(hostile, role)
    except RequestRejected as rejected:
        assert rejected.code
        return
    for key in FIELD_OWNERS:
        if role is Role.AGGREGATED or key not in {
            "bootstrap_host",
            "bootstrap_port",
            "bootstrap_room",
            "disagg_prefill_dp_rank",
        }:
            assert key not in out, key
        else:
            assert out.get(key) in {None, *msgspec.structs.astuple(BOOTSTRAP)}, key


@pytest.mark.parametrize("role", [Role.DECODE, Role.PREFILL])
def test_disaggregated_roles_need_a_bootstrap(role: Role) -> None:
    envelope = to_worker_envelope(decode_client_request(SEED), rid="r")
    with pytest.raises(EnvelopeError, match="needs a Bootstrap"):
        build_engine_request(envelope, deployment=DEPLOYMENT, input_ids=[1], role=role)


def test_aggregated_takes_no_bootstrap() -> None:
    envelope = to_worker_envelope(decode_client_request(SEED), rid="r")
    with pytest.raises(EnvelopeError, match="takes no Bootstrap"):
        build_engine_request(
            envelope,
            deployment=DEPLOYMENT,
            input_ids=[1],
            role=Role.AGGREGATED,
            bootstrap=BOOTSTRAP,
        )


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"role": "router"}, "role must be one of"),
        ({"input_ids": []}, "input_ids cannot be empty"),
        ({"input_ids": [1, -1]}, "input_ids"),
        ({"input_ids": ["1"]}, "input_ids"),
        ({"bootstrap": "10.0.0.7:8998"}, "bootstrap must be a Bootstrap"),
    ],
)
def test_caller_mistakes_raise_envelope_error(kwargs: dict[str, Any], words: str) -> None:
    envelope = to_worker_envelope(decode_client_request(SEED), rid="r")
    arguments: dict[str, Any] = {"input_ids": [1], "role": "decode", "bootstrap": BOOTSTRAP}
    with pytest.raises(EnvelopeError, match=words):
        build_engine_request(envelope, deployment=DEPLOYMENT, **{**arguments, **kwargs})


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (("h", 0, 1), "bootstrap.port must be an integer in [1, 65535], got 0"),
        (("h", 80, -1), "bootstrap.room must be an integer in [0, 9223372036854775807], got -1"),
        (("h", 80, 1, -2), "bootstrap.prefill_dp_rank must be an integer in"),
        (("h", True, 1), "bootstrap.port must be an integer"),
        (("h", 80, 10**5000), "bootstrap.room must be an integer in [0, 9223372036854775807], got"),
        (("", 80, 1), "bootstrap.host must be a non-empty UTF-8 string, got ''"),
        ((None, 80, 1), "bootstrap.host must be a non-empty UTF-8 string, got None"),
        (("\ud800", 80, 1), "bootstrap.host must be a non-empty UTF-8 string"),
    ],
)
def test_bootstrap_is_checked_when_made(arguments: tuple[Any, ...], words: str) -> None:
    with pytest.raises(EnvelopeError) as caught:
        Bootstrap(*arguments)
    assert str(caught.value).startswith(words)


@pytest.mark.parametrize(
    "bounds",
    [
        {"max_body_bytes": None},
        {"max_input_ids": -1},
        {"max_body_bytes": 1.5},
        {"max_input_ids": -(10**5000)},
    ],
)
def test_bounds_must_be_integers(bounds: dict[str, Any]) -> None:
    with pytest.raises(EnvelopeError, match="must be an integer >= 0"):
        decode_client_request(SEED, **bounds)


@pytest.mark.parametrize("rid", ["", None, 7, "req-\ud800"])
def test_envelope_needs_a_non_empty_rid(rid: Any) -> None:
    with pytest.raises(EnvelopeError, match="rid"):
        to_worker_envelope(decode_client_request(SEED), rid=rid)


def test_worker_envelope_is_frozen() -> None:
    envelope = to_worker_envelope(decode_client_request(SEED), rid="r")
    assert isinstance(envelope, WorkerEnvelope)
    with pytest.raises(AttributeError):
        envelope.rid = "other"  # type: ignore[misc]


@pytest.mark.parametrize("grammar", ["json_schema", "regex", "ebnf", "structural_tag"])
def test_min_new_tokens_with_a_grammar_is_refused_and_either_alone_accepted(grammar: str) -> None:
    value = '{"type": "object"}' if grammar in ("json_schema", "structural_tag") else "a"
    both = {"input_ids": [1], "sampling_params": {"min_new_tokens": 5, grammar: value}}
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(both)
    assert (caught.value.code, caught.value.field) == (
        "min_new_tokens_with_grammar",
        "sampling_params.min_new_tokens",
    )
    assert caught.value.message.startswith(f"min_new_tokens (5) is not accepted with {grammar}:")
    decode_client_request({"input_ids": [1], "sampling_params": {grammar: value}})
    decode_client_request({"input_ids": [1], "sampling_params": {"min_new_tokens": 5}})
    decode_client_request(
        {"input_ids": [1], "sampling_params": {"min_new_tokens": 0, grammar: value}}
    )


@given(client_requests(), roles, bootstraps, st.booleans())
def test_to_dict_is_the_json_body_s_data_without_a_round_trip(
    body: dict[str, Any], role: Role, bootstrap: Bootstrap, unknown: bool
) -> None:
    """What `GenerateReqInput(**engine.to_dict())` takes in-process is what SGLang's HTTP
    server decodes from `to_json()`: the same data, lists for arrays (never tuples)."""
    target = Target(unknown_fields="pass") if unknown else Target()
    if unknown:
        body = {**body, "a_new_field": {"x": [1]}}
        body["sampling_params"] = {**body.get("sampling_params", {}), "a_new_param": 2}
    envelope = to_worker_envelope(decode_client_request(body, target=target), rid="r")
    try:
        engine = build_engine_request(
            envelope,
            deployment=DEPLOYMENT,
            input_ids=envelope.request.input_ids,
            role=role,
            bootstrap=None if role is Role.AGGREGATED else bootstrap,
        )
    except RequestRejected:
        return  # a rule of the role (n > 1 on a pair leg)
    data = engine.to_dict()
    assert data == msgspec.json.decode(engine.to_json())
    assert type(data["input_ids"]) is list and data is not engine.to_dict()
    assert not any(type(value) is tuple for value in data.values())
