"""No way around the rules: values built by hand, routing, vocabulary and free-form bounds.

Every path to an `EngineRequest` applies every rule, however its inputs were
made: a `ClientRequest`, `WorkerEnvelope` or `Routing` built by hand is checked
when made, and what the caller holds is never shared.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    Bootstrap,
    ClientRequest,
    EngineRequest,
    EnvelopeError,
    RequestRejected,
    Role,
    Routing,
    SamplingParams,
    Target,
    WorkerEnvelope,
    build_engine_request,
    decode_client_request,
    decode_envelope,
    encode_envelope,
    to_worker_envelope,
)
from sglang_envelope.cli.main import main
from sglang_envelope.request.fields import NULL_AS_ABSENT, OWNED_BOOLEANS
from sglang_envelope.types import EngineBody
from tests.strategies import DEPLOYMENT, hand_built_fields, hostile_python_values

FIXTURE = Path(__file__).parent / "fixtures" / "request_conformance.jsonl"
CASES = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()[1:]]
FIELDS = set(ClientRequest.__struct_fields__)
BOOTSTRAP = Bootstrap("10.0.0.7", 8998, 4242, prefill_dp_rank=3)
OUTPUT_FLAT: dict[str, Any] = {
    "input_ids": [1, 2],
    "stream": False,
    "return_logprob": True,
    "top_logprobs_num": 2,
    "return_flat_raw_output_top_logprobs": True,
}


def _envelope(body: dict[str, Any], rid: str = "r-1") -> WorkerEnvelope:
    return to_worker_envelope(decode_client_request(body), rid=rid)


def _build(envelope: WorkerEnvelope, role: Role, **kwargs: Any) -> EngineRequest:
    bootstrap = kwargs.pop("bootstrap", BOOTSTRAP)
    bootstrap = None if role is Role.AGGREGATED else bootstrap
    return build_engine_request(
        envelope,
        deployment=DEPLOYMENT,
        input_ids=envelope.request.input_ids,
        role=role,
        bootstrap=bootstrap,
        **kwargs,
    )


# --- structs built by hand are held to the rules --------------------------------------


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        (
            {"input_ids": [1], "stream": True, "return_flat_raw_output_top_logprobs": True},
            "output_flat_with_stream",
        ),
        ({"input_ids": [1], "sampling_params": {"n": None}}, "n_null"),
        ({"input_ids": [1], "sampling_params": {"bogus": 1}}, "unknown_sampling_param"),
        ({"input_ids": []}, "empty_input_ids"),
        ({"input_ids": [2**32]}, "token_id_out_of_range"),
        ({"input_ids": [1], "stream": "yes"}, "wrong_type"),
        ({"input_ids": [1], "priority": math.nan}, "invalid_value"),  # names `priority`
        ({"input_ids": [1], "session_params": {"x": object()}}, "not_json"),
        (
            {"input_ids": [1], "session_id": "s", "session_params": {}},
            "session_id_with_session_params",
        ),
    ],
)
def test_a_client_request_built_by_hand_is_checked_when_made(
    fields: dict[str, Any], code: str
) -> None:
    with pytest.raises(RequestRejected) as caught:
        ClientRequest(**fields)
    assert caught.value.code == code


def test_replace_is_checked_like_construction() -> None:
    request = decode_client_request(OUTPUT_FLAT)
    with pytest.raises(RequestRejected, match="does not support stream=True"):
        msgspec.structs.replace(request, stream=True)


def test_a_request_built_by_hand_equals_the_decoded_one() -> None:
    fields: dict[str, Any] = {**OUTPUT_FLAT, "sampling_params": {"max_new_tokens": None}}
    by_hand = ClientRequest(**fields)
    decoded = decode_client_request({**OUTPUT_FLAT, "sampling_params": {"max_new_tokens": None}})
    assert by_hand == decoded
    assert by_hand.input_ids == (1, 2)


@pytest.mark.parametrize(
    "target",
    [Target(), Target(input="text"), Target(unknown_fields="pass"), Target(sglang="0.5.22")],
)
def test_what_the_library_makes_is_the_public_class_and_checked_when_replaced(
    target: Target,
) -> None:
    """The decode and the build make their results without a second check, then hand out
    `ClientRequest` and `EngineRequest` themselves: replacing a field of either is
    checked like construction."""
    body: dict[str, Any] = {**OUTPUT_FLAT}
    if target.unknown_fields == "pass":
        body["carried"] = 1
    request = decode_client_request(body, target=target)
    envelope = decode_envelope(
        encode_envelope(to_worker_envelope(request, rid="r-1")), target=target
    )
    engine = _build(envelope, Role.DECODE)
    assert type(request) is ClientRequest
    assert type(envelope.request) is ClientRequest
    assert type(engine) is EngineRequest
    assert envelope.request == request
    with pytest.raises(RequestRejected, match="does not support stream=True"):
        msgspec.structs.replace(envelope.request, stream=True)
    with pytest.raises(EnvelopeError, match="only by build_engine_request"):
        msgspec.structs.replace(engine, role=Role.PREFILL)


@pytest.mark.parametrize("rid", ["", None, 7, "r-\ud800"])
def test_a_worker_envelope_built_by_hand_needs_a_rid(rid: Any) -> None:
    with pytest.raises(EnvelopeError, match="rid must be a non-empty UTF-8 string"):
        WorkerEnvelope(rid=rid, request=decode_client_request(OUTPUT_FLAT))


def test_an_engine_body_is_not_a_client_request() -> None:
    engine = _build(_envelope(OUTPUT_FLAT), Role.DECODE)
    assert not isinstance(engine.body, ClientRequest)
    with pytest.raises(EnvelopeError, match="request must be a ClientRequest, got EngineBody"):
        to_worker_envelope(engine.body, rid="r-2")  # type: ignore[arg-type]
    with pytest.raises(EnvelopeError, match="request must be a ClientRequest"):
        WorkerEnvelope(rid="r-2", request=engine.body)  # type: ignore[arg-type]


def test_an_engine_request_is_made_only_by_build_engine_request() -> None:
    engine = _build(_envelope(OUTPUT_FLAT), Role.AGGREGATED)
    with pytest.raises(EnvelopeError, match="only by build_engine_request"):
        EngineRequest(Role.AGGREGATED, EngineBody(input_ids=(1,), rid="", stream=True))
    with pytest.raises(EnvelopeError, match="only by build_engine_request"):
        msgspec.structs.replace(engine, role=Role.PREFILL)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (
            lambda: to_worker_envelope(None, rid="r"),  # type: ignore[arg-type]
            "request must be a ClientRequest, got NoneType",
        ),
        (
            lambda: to_worker_envelope({"input_ids": [1]}, rid="r"),  # type: ignore[arg-type]
            "request must be a ClientRequest, got dict",
        ),
        (
            lambda: encode_envelope(object()),  # type: ignore[arg-type]
            "envelope must be a WorkerEnvelope, got object",
        ),
        (
            lambda: build_engine_request(
                _envelope(OUTPUT_FLAT),
                deployment=DEPLOYMENT,
                input_ids=[1],
                role="aggregated",
                routing={"dp_rank": 1},  # type: ignore[arg-type]
            ),
            "routing must be a Routing, got dict",
        ),
    ],
)
def test_caller_mistakes_name_the_argument(call: Any, words: str) -> None:
    with pytest.raises(EnvelopeError, match=words):
        call()


def test_frozen_means_frozen() -> None:
    ids: Any = [1, 2, 3]
    sampling: Any = {"max_new_tokens": 4, "stop": ["a"]}
    session: Any = {"id": "s", "history": [1]}
    request = ClientRequest(input_ids=ids, sampling_params=sampling, session_params=session)
    envelope = to_worker_envelope(request, rid="r")
    engines = [_build(envelope, role) for role in Role]
    before = [engine.to_json() for engine in engines]
    ids.clear()
    sampling["stop"].append(7)
    sampling["n"] = 5
    session["history"].append(object())
    assert [engine.to_json() for engine in engines] == before
    assert request.input_ids == (1, 2, 3)
    # nothing reachable from a request can be changed in place
    assert type(request.input_ids) is tuple
    assert type(request.sampling_params.stop) is msgspec.Raw  # type: ignore[union-attr]
    assert type(request.session_params) is msgspec.Raw
    with pytest.raises(AttributeError):
        request.stream = True  # type: ignore[misc]


# --- Hypothesis: arbitrary values in structs built by hand ----------------------------


def _wire_equivalent(request: ClientRequest) -> ClientRequest:
    """The same request, had its JSON come over the wire."""
    return decode_client_request(msgspec.json.encode(request))


def _json_kind(value: Any) -> str:
    return type(value).__name__


def _sglang_accepted_kinds() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """The JSON kind of every key, and of every `sampling_params` key, in the engine
    requests SGLang 0.5.23 accepted (the fixture's replayed verdicts)."""
    top: dict[str, set[str]] = {}
    sampling: dict[str, set[str]] = {}
    for case in CASES:
        for entry in case.get("engine", ()):
            if "refused" in entry:  # a prefill/decode leg of n > 1 samples: never sent
                continue
            verdicts = entry["sglang"]
            if not (verdicts["normalize"]["ok"] and verdicts["gate"]["ok"]):
                continue
            for key, value in entry["request"].items():
                top.setdefault(key, set()).add(_json_kind(value))
            for key, value in (entry["request"].get("sampling_params") or {}).items():
                sampling.setdefault(key, set()).add(_json_kind(value))
    return top, sampling


ACCEPTED_KINDS, ACCEPTED_SAMPLING_KINDS = _sglang_accepted_kinds()


def _sglang_would_accept(request: dict[str, Any]) -> None:
    """What SGLang's replayed verdicts show it accepts: keys and value kinds it accepted,
    and none of the requests its normalize_batch_and_arguments() refuses."""
    for key, value in request.items():
        assert _json_kind(value) in ACCEPTED_KINDS.get(key, ()), (key, value)
    for key, value in (request.get("sampling_params") or {}).items():
        assert _json_kind(value) in ACCEPTED_SAMPLING_KINDS.get(key, ()), (key, value)
    assert request["input_ids"] and request.get("rid")
    assert not (request.get("return_flat_raw_output_top_logprobs") and request["stream"])
    flat = request.get("return_flat_raw_top_logprobs")
    assert (
        not request.get("return_flat_raw_top_logprobs_b64")
        or flat
        or (request.get("return_flat_raw_output_top_logprobs"))
    )
    assert not (flat and request.get("multi_item_delimiter_indices") is not None)
    assert not (request.get("session_id") is not None and request.get("session_params"))
    assert (request.get("sampling_params") or {}).get("n", 1) == 1


@given(hand_built_fields(), hostile_python_values, st.sampled_from(list(Role)))
def test_structs_built_by_hand_never_get_past_the_rules(
    fields: dict[str, Any], rid: Any, role: Role
) -> None:
    """Whatever the fields: EnvelopeError, or engine requests SGLang accepts (by its
    replayed verdicts) and equal to those the same request off the wire gives."""
    try:
        request = ClientRequest(**fields)
        envelope = WorkerEnvelope(rid=rid, request=request)
    except EnvelopeError:
        return
    wire = decode_envelope(encode_envelope(envelope))
    assert wire == envelope
    assert _wire_equivalent(request) == request
    for routing in (None, Routing(priority=1, labels={"a": "b"})):
        built = _build(envelope, role, routing=routing)
        assert built.to_json() == _build(wire, role, routing=routing).to_json()
        _sglang_would_accept(built.to_dict())


def _hand_built_body(body: dict[str, Any]) -> bool:
    return "input_ids" in body and set(body) <= FIELDS


@pytest.mark.parametrize(
    "case", [case for case in CASES if _hand_built_body(case["body"])], ids=lambda case: case["id"]
)
def test_hand_built_fixture_bodies_meet_sglangs_verdicts(case: dict[str, Any]) -> None:
    """Each fixture body built by hand: refused with the same rule, or SGLang accepts every
    engine request built from it (the recorded requests, with SGLang's recorded verdicts)."""
    if not case["library"]["accepted"]:
        with pytest.raises(RequestRejected) as caught:
            ClientRequest(**case["body"])
        assert caught.value.code == case["library"]["code"]
        return
    envelope = WorkerEnvelope(rid=case["rid"], request=ClientRequest(**case["body"]))
    recorded = case["bootstrap"]
    bootstrap = Bootstrap(
        recorded["host"], recorded["port"], recorded["room"], recorded["prefill_dp_rank"]
    )
    routing = None if case["routing"] is None else Routing(**case["routing"])
    for entry in case["engine"]:
        if "refused" in entry:
            with pytest.raises(RequestRejected) as refused:
                _build(envelope, Role(entry["role"]), bootstrap=bootstrap, routing=routing)
            assert refused.value.code == entry["refused"]["code"] == "parallel_sampling"
            continue
        built = _build(envelope, Role(entry["role"]), bootstrap=bootstrap, routing=routing)
        assert built.to_dict() == entry["request"]
        assert entry["sglang"]["normalize"]["ok"] and entry["sglang"]["gate"]["ok"]


# --- Routing: what the serving system decides ------------------------------------------


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"dp_rank": -1}, "routing.dp_rank must be an integer in [0, 2147483647], got -1"),
        ({"dp_rank": True}, "routing.dp_rank must be an integer"),
        ({"dp_rank": "1"}, "routing.dp_rank must be an integer"),
        ({"priority": 2**63}, "routing.priority must be an integer in [-9223372036854775808,"),
        ({"priority": 1.5}, "routing.priority must be an integer"),
        ({"lora_path": ""}, "routing.lora_path must be a non-empty UTF-8 string"),
        ({"lora_path": 3}, "routing.lora_path must be a non-empty UTF-8 string"),
        ({"trace_header": ["a"]}, "routing.trace_header must be a mapping of str to str"),
        ({"trace_header": {"a": 1}}, "routing.trace_header values must be UTF-8 strings"),
        ({"labels": {1: "a"}}, "routing.labels keys must be UTF-8 strings"),
        ({"labels": {"a": "\ud800"}}, "routing.labels values must be UTF-8 strings"),
    ],
)
def test_routing_is_checked_when_made(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(EnvelopeError) as caught:
        Routing(**fields)
    assert str(caught.value).startswith(words)


def test_routing_sets_the_serving_system_fields_and_wins_over_the_client() -> None:
    envelope = _envelope({**OUTPUT_FLAT, "lora_path": "client", "priority": 1})
    labels = {"tenant": "t"}
    routing = Routing(
        dp_rank=5, trace_header={"traceparent": "x"}, lora_path="router", priority=-2, labels=labels
    )
    labels["tenant"] = "changed later"
    out = _build(envelope, Role.DECODE, routing=routing).to_dict()
    assert out["routed_dp_rank"] == 5  # decode's own rank
    assert out["disagg_prefill_dp_rank"] == 3  # where it fetches the KV cache from
    assert out["external_trace_header"] == {"traceparent": "x"}
    assert (out["lora_path"], out["priority"]) == ("router", -2)
    assert out["custom_labels"] == {"tenant": "t"}
    with pytest.raises(TypeError):
        routing.labels["tenant"] = "x"  # type: ignore[index]


def test_prefill_is_routed_to_the_prefill_rank() -> None:
    envelope = _envelope(OUTPUT_FLAT)
    out = _build(envelope, Role.PREFILL).to_dict()
    assert out["routed_dp_rank"] == out["disagg_prefill_dp_rank"] == 3
    same = _build(envelope, Role.PREFILL, routing=Routing(dp_rank=3)).to_dict()
    assert same == out
    no_rank = Bootstrap("h", 1, 1)
    assert "routed_dp_rank" not in _build(envelope, Role.PREFILL, bootstrap=no_rank).to_dict()


@pytest.mark.parametrize("bootstrap", [BOOTSTRAP, Bootstrap("h", 1, 1)])
def test_prefill_routes_as_dynamo_does(bootstrap: Bootstrap) -> None:
    """The prefill leg runs on the bootstrap's prefill rank; without one, on the router's
    rank (Dynamo's `prefill_uses_selected_prefill_dp_rank`)."""
    routing = Routing(dp_rank=7)
    with_rank = msgspec.structs.replace(bootstrap, prefill_dp_rank=3)
    without = msgspec.structs.replace(bootstrap, prefill_dp_rank=None)
    body = _build(_envelope(OUTPUT_FLAT), Role.PREFILL, bootstrap=with_rank, routing=routing)
    assert body.to_dict()["routed_dp_rank"] == 3
    body = _build(_envelope(OUTPUT_FLAT), Role.PREFILL, bootstrap=without, routing=routing)
    assert body.to_dict()["routed_dp_rank"] == 7
    assert "disagg_prefill_dp_rank" not in body.to_dict()
    body = _build(_envelope(OUTPUT_FLAT), Role.AGGREGATED, routing=routing)
    assert body.to_dict()["routed_dp_rank"] == 7


def test_a_client_may_not_set_metric_labels() -> None:
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({"input_ids": [1], "custom_labels": {"model_name": "x"}})
    assert (caught.value.code, caught.value.field) == ("orchestrator_field", "custom_labels")


# --- token ids the model does not have --------------------------------------------------


def test_token_ids_past_the_vocabulary_are_refused() -> None:
    body = {"input_ids": [5, 99, 100, 7, 101]}
    for decode in (
        lambda: decode_client_request(body, max_token_id=99),
        lambda: decode_envelope(
            msgspec.json.encode({"rid": "r", "request": body}), max_token_id=99
        ),
    ):
        with pytest.raises(RequestRejected) as caught:
            decode()
        error = caught.value
        assert (error.code, error.field) == ("token_out_of_vocab", "input_ids[2]")
        assert error.message == "input_ids[2] is 100, past the model's largest token id 99"
    assert decode_client_request(body, max_token_id=101).input_ids == (5, 99, 100, 7, 101)


@pytest.mark.parametrize("bound", [-1, 1.5, "9"])
def test_max_token_id_must_be_an_integer(bound: Any) -> None:
    with pytest.raises(EnvelopeError, match="max_token_id must be an integer >= 0"):
        decode_client_request({"input_ids": [1]}, max_token_id=bound)


# --- free-form JSON is bounded ----------------------------------------------------------


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def test_a_deep_watermark_is_bounded_before_it_is_read() -> None:
    # SGLang refuses any watermark key but three; the bound comes first all the same.
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({"input_ids": [1], "watermark": {"x": _nested(32)}})
    assert (caught.value.code, caught.value.field) == ("json_too_deep", "watermark")


@pytest.mark.parametrize("where", ["sampling_params.custom_params", "session_params.x"])
def test_free_form_depth_is_bounded(where: str) -> None:
    top, _, key = where.partition(".")

    def body(depth: int) -> dict[str, Any]:
        value = {key: _nested(depth - 1)} if top != "sampling_params" else _nested(depth)
        if top == "sampling_params":
            return {"input_ids": [1], "sampling_params": {key: value}}
        return {"input_ids": [1], top: value}

    decode_client_request(body(32))
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(body(33))
    field = "sampling_params.custom_params" if top == "sampling_params" else top
    assert (caught.value.code, caught.value.field) == ("json_too_deep", field)
    decode_client_request(body(40), max_json_depth=40)


def test_free_form_items_are_bounded() -> None:
    body = {"input_ids": [1], "sampling_params": {"custom_params": [[]] * 100_000}}
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(body)
    assert caught.value.code == "json_too_many_items"
    assert caught.value.field == "sampling_params.custom_params"
    decode_client_request(body, max_json_items=200_001)
    small = {"input_ids": [1], "watermark": {"a": list(range(10))}}
    with pytest.raises(RequestRejected, match=r"watermark holds more than 5 JSON items"):
        decode_client_request(small, max_json_items=5)


def test_free_form_text_that_looks_like_brackets_is_not_counted() -> None:
    text = '[{"k": "' + "[" * 100 + '\\"]"}]'
    body = b'{"input_ids": [1], "sampling_params": {"custom_params": ' + text.encode() + b"}}"
    decode_client_request(body)


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        (b"[1e400]", "Number out of range"),
        (b"[" + b"1" * 4301 + b"]", "Number out of range"),
        (b'["\xff"]', "Invalid UTF-8"),
    ],
)
def test_free_form_values_json_readers_refuse_are_refused(value: bytes, detail: str) -> None:
    body = b'{"input_ids": [1], "sampling_params": {"custom_params": ' + value + b"}}"
    with pytest.raises(RequestRejected, match=detail) as caught:
        decode_client_request(body)
    assert caught.value.field == "sampling_params.custom_params"


# --- sizes are counted in bytes, before any work --------------------------------------


def test_a_memoryview_is_bounded_by_its_bytes() -> None:
    data = memoryview(b'{"input_ids": [1]}' + b" " * 14).cast("Q")
    assert len(data) == 4
    with pytest.raises(RequestRejected, match="request body is 32 bytes; the limit is 20"):
        decode_client_request(data, max_body_bytes=20)  # type: ignore[arg-type]
    wire = memoryview(b'{"rid": "r", "request": {"input_ids": [1]}}' + b" " * 5).cast("Q")
    with pytest.raises(RequestRejected, match="request body is 48 bytes; the limit is 40"):
        decode_envelope(wire, max_body_bytes=40)  # type: ignore[arg-type]


def test_a_mapping_is_bounded_before_it_is_encoded() -> None:
    shared: list[Any] = [1] * 8
    for _ in range(40):  # 2**40 values as JSON: refused at once, never encoded
        shared = [shared, shared]
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({"input_ids": [1], "sampling_params": {"custom_params": shared}})
    assert caught.value.code == "body_too_large"


def test_a_mapping_is_walked_once_per_object_not_per_repetition() -> None:
    shared: list[Any] = [1] * 8
    for _ in range(200):  # 2**200 values as JSON, 201 lists in memory: walked as 201
        shared = [shared, shared]
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({"input_ids": [1], "session_params": {"a": shared}})
    assert caught.value.code == "body_too_large"
    endless: list[Any] = [1]
    endless.append(endless)
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({"input_ids": [1], "session_params": {"a": endless}})
    assert caught.value.code == "body_too_large"


def test_text_is_bounded_before_it_is_encoded() -> None:
    with pytest.raises(RequestRejected, match="the limit is 10"):
        decode_client_request(" " * 11, max_body_bytes=10)


# --- messages name the right field ------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        (
            b'{"input_ids": [1], "x - at `$.sampling_params`": 1}',
            "unknown_field",
            "x - at `$.sampling_params`",
        ),
        (
            b'{"input_ids": [1], "x` - at `$.sampling_params": 1}',
            "unknown_field",
            "x` - at `$.sampling_params",
        ),
        (
            b'{"input_ids": [1], "sampling_params": {"y` - at `$": 1}}',
            "unknown_sampling_param",
            "sampling_params.y` - at `$",
        ),
        (
            b'{"input_ids": [1], "sampling_logprobs_mode": "a - at `$.rid`"}',
            "invalid_value",
            "sampling_logprobs_mode",
        ),
    ],
)
def test_keys_that_look_like_paths_name_only_themselves(body: bytes, code: str, field: str) -> None:
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(body)
    assert (caught.value.code, caught.value.field) == (code, field)


@pytest.mark.parametrize("key", ["max_new_tokens", "temperature", "stop", "top_p"])
def test_a_sampling_key_at_the_top_level_gets_a_hint(key: str) -> None:
    with pytest.raises(RequestRejected, match=rf"did you mean `sampling_params\.{key}`\?"):
        decode_client_request({"input_ids": [1], key: 1})


@pytest.mark.parametrize("key", ["input_ids", "sampling_params", "stream"])
def test_envelope_errors_name_envelope_fields(key: str) -> None:
    wire = msgspec.json.encode({"rid": "r", "request": {"input_ids": [1]}, key: [1]})
    with pytest.raises(RequestRejected) as caught:
        decode_envelope(wire)
    message = caught.value.message
    assert f"unknown field `{key}`: a worker envelope has only `rid` and `request`" in message
    assert "did you mean" not in message


def test_a_role_formats_as_its_value() -> None:
    assert (f"{Role.DECODE}", str(Role.PREFILL), f"{Role.AGGREGATED:>11}") == (
        "decode",
        "prefill",
        " aggregated",
    )


# --- the command line -----------------------------------------------------------------


def _normalize(argv: list[str], body: bytes, capsysbinary: Any, monkeypatch: Any) -> Any:
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(body)))
    code = main(["normalize", "--vocab-size", "151936", *argv])
    return code, json.loads(capsysbinary.readouterr().out)


PREFILL = ["--role", "prefill", "--bootstrap-host", "h", "--bootstrap-room", "1"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ([*PREFILL, "--bootstrap-port", "0"], "--bootstrap-port must be an integer in [1, 65535]"),
        ([*PREFILL, "--bootstrap-port", "1", "--prefill-dp-rank", "-1"], "--prefill-dp-rank must"),
        (["--role", "aggregated", "--max-token-id", "-1"], "--max-token-id must be an integer"),
        (["--role", "aggregated", "--prefill-dp-rank", "1"], "role 'aggregated' takes no"),
    ],
)
def test_normalize_names_its_options(
    argv: list[str], words: str, capsysbinary: Any, monkeypatch: Any
) -> None:
    code, out = _normalize(argv, b'{"input_ids": [1]}', capsysbinary, monkeypatch)
    assert code == 2
    assert out["error"]["message"].startswith(words)


def test_normalize_routes_and_bounds_the_vocabulary(capsysbinary: Any, monkeypatch: Any) -> None:
    argv = [*PREFILL, "--bootstrap-port", "1", "--prefill-dp-rank", "4", "--rid", "r"]
    code, out = _normalize(argv, b'{"input_ids": [1, 2]}', capsysbinary, monkeypatch)
    assert code == 0
    assert out["body"]["routed_dp_rank"] == out["body"]["disagg_prefill_dp_rank"] == 4
    argv = ["--role", "aggregated", "--dp-rank", "6", "--max-token-id", "2"]
    code, out = _normalize(argv, b'{"input_ids": [1, 2]}', capsysbinary, monkeypatch)
    assert (code, out["body"]["routed_dp_rank"]) == (0, 6)
    code, out = _normalize(argv, b'{"input_ids": [1, 3]}', capsysbinary, monkeypatch)
    assert (code, out["error"]["code"], out["error"]["field"]) == (
        2,
        "token_out_of_vocab",
        "input_ids[1]",
    )


def test_normalize_help_explains_the_role(capsys: Any) -> None:
    with pytest.raises(SystemExit):
        main(["normalize", "--help"])
    text = capsys.readouterr().out
    assert "disaggregated pair" in text
    assert "--max-token-id" in text and "--dp-rank" in text and "--prefill-dp-rank" in text


def test_the_request_examples_in_the_api_docs_run() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text("utf-8")
    section = text[text.index("## Request side") : text.index("## Response side")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/api.md", "exec"), {})


def test_what_is_built_survives_pickle_and_copy() -> None:
    import copy
    import pickle

    envelope = _envelope({**OUTPUT_FLAT, "session_params": {"id": "s"}})
    engine = _build(envelope, Role.PREFILL, routing=Routing(labels={"a": "b"}))
    for value in (envelope, envelope.request, engine):
        assert pickle.loads(pickle.dumps(value)) == value
        assert copy.deepcopy(value) == value
    assert pickle.loads(pickle.dumps(engine)).to_json() == engine.to_json()


# --- what SGLang reads as absent, and what stops it ---------------------------------------


@pytest.mark.parametrize("field", sorted(NULL_AS_ABSENT))
def test_a_null_sglang_reads_as_absent_is_absent(field: str) -> None:
    """SGLang 0.5.23 serves `{field: null}` for each of these (checked live): so does the
    library, and the engine request leaves the field out."""
    request = decode_client_request({"input_ids": [1, 2], field: None})
    assert request == decode_client_request({"input_ids": [1, 2]})
    assert field not in _build(to_worker_envelope(request, rid="r"), Role.AGGREGATED).to_dict()
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({"input_ids": [1, 2], field: "x"})
    assert caught.value.field == field


@pytest.mark.parametrize("field", OWNED_BOOLEANS)
def test_a_null_boolean_sglang_types_is_refused(field: str) -> None:
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({"input_ids": [1], field: None})
    assert caught.value.field == field


def test_areal_s_body_is_served() -> None:
    body = b'{"input_ids": [1, 2], "image_data": null, "sampling_params": {"max_new_tokens": 4}}'
    assert decode_client_request(body).input_ids == (1, 2)
    wire = msgspec.json.encode({"rid": "r", "request": msgspec.json.decode(body)})
    assert decode_envelope(wire).request.input_ids == (1, 2)


@pytest.mark.parametrize("start", [-2, -100])
def test_a_logprob_start_that_stops_the_scheduler_is_refused(start: int) -> None:
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({"input_ids": [1, 2], "return_logprob": True,
                               "logprob_start_len": start})  # fmt: skip
    assert (caught.value.code, caught.value.field) == (
        "logprob_start_len_below_minus_one",
        "logprob_start_len",
    )
    # Without logprobs SGLang ignores it, and so does the library.
    decode_client_request({"input_ids": [1, 2], "logprob_start_len": start})


def test_a_logprob_start_past_the_prompt_is_refused_in_sglang_words() -> None:
    body = {"input_ids": [1, 2, 3], "return_logprob": True, "logprob_start_len": 4}
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(body)
    assert caught.value.message == (
        "req.logprob_start_len=4 is higher than the number of input tokens "
        "len(req.origin_input_ids)=3. Please use a smaller logprob_start_len."
    )
    request = decode_client_request({**body, "logprob_start_len": 3})  # the prompt's length
    with pytest.raises(RequestRejected, match="logprob_start_len=3 is higher"):
        build_engine_request(  # the ids a worker sends are checked again
            to_worker_envelope(request, rid="r"), input_ids=[1, 2], role="aggregated",
            deployment=DEPLOYMENT,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("body", "accept"),
    [
        (OUTPUT_FLAT, "application/json"),
        ({"input_ids": [1]}, "application/json"),
        ({"input_ids": [1], "stream": True}, "text/event-stream"),
    ],
)
def test_the_engine_request_says_which_headers_to_send(body: Any, accept: str) -> None:
    engine = _build(_envelope(body), Role.AGGREGATED)
    assert engine.headers == {"Content-Type": "application/json", "Accept": accept}
    engine.headers["Accept"] = "x"  # a new dict each time
    assert engine.headers["Accept"] == accept


@pytest.mark.parametrize("penalty", [1e-50, 1e-40, 9.9e-21])
def test_a_repetition_penalty_that_overflows_the_logits_is_refused(penalty: float) -> None:
    """Found by the live fuzz: SGLang divides float32 logits by it, and sampling then stops
    every SGLang process."""
    body = {"input_ids": [250, 275], "sampling_params": {"repetition_penalty": penalty}}
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(body)
    assert caught.value.code == "repetition_penalty_overflows_logits"
    decode_client_request({**body, "sampling_params": {"repetition_penalty": 1e-20}})


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"sampling_params": {"logit_bias": {"86": 3e38}, "top_k": 10}},
         "logit_bias_overflows_logits"),
        ({"sampling_params": {"logit_bias": {"86": -1.5e30}}}, "logit_bias_overflows_logits"),
        ({"token_indices_to_pool": [1]}, "token_indices_to_pool_unsafe"),
        ({"token_indices_to_pool": []}, "token_indices_to_pool_unsafe"),
        ({"sampling_params": {"stop_regex": "("}}, "stop_regex_invalid"),
        ({"sampling_params": {"stop_regex": ["a+", "[z"]}}, "stop_regex_invalid"),
    ],
)  # fmt: skip
def test_bodies_the_live_fuzz_found_stopping_sglang_are_refused(
    body: dict[str, Any], code: str
) -> None:
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({"input_ids": [5, 6, 7], **body})
    assert caught.value.code == code


@pytest.mark.parametrize("sampling", [{"top_k": 2**31}, {"top_k": 2**40, "temperature": 0.7}])
def test_a_top_k_past_int32_is_refused_it_stops_every_sglang_process(
    sampling: dict[str, Any],
) -> None:
    """Seen on a live server: SGLang's sampler puts top_k in an int32 tensor."""
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({"input_ids": [5, 6], "sampling_params": sampling})
    assert (caught.value.code, caught.value.field) == (
        "top_k_overflows_int32",
        "sampling_params.top_k",
    )
    assert str(sampling["top_k"]) in caught.value.message


def test_a_top_k_within_int32_or_a_greedy_one_is_accepted() -> None:
    for sampling in ({"top_k": 2**31 - 1}, {"top_k": 2**40, "temperature": 0}):
        decode_client_request({"input_ids": [5, 6], "sampling_params": sampling})


def test_what_is_inside_those_bounds_is_accepted() -> None:
    for body in (
        {"sampling_params": {"logit_bias": {"86": 1e30, "7": -100}}},
        {"token_indices_to_pool": None},
        {"sampling_params": {"stop_regex": ["a+", "b|c"]}},
    ):
        decode_client_request({"input_ids": [5, 6, 7], **body})


# --- no state outside the declared fields ---------------------------------------------

ROUTED = (("routed_dp_rank", msgspec.Raw(b"7")), ("bootstrap_host", msgspec.Raw(b'"evil"')))


def test_a_client_request_has_no_writable_dict() -> None:
    """Its target and passed keys are declared fields, as frozen as the rest: there is no
    `__dict__` to put serving-system fields or another target in."""
    from sglang_envelope.request.passed import PassedFields

    request = decode_client_request(OUTPUT_FLAT)
    with pytest.raises(AttributeError):
        request.__dict__["passed_fields"] = PassedFields(top_level=ROUTED)
    with pytest.raises(AttributeError):
        request.__dict__["target"] = Target(sglang="0.5.21")
    with pytest.raises(AttributeError):
        request.target = Target(sglang="0.5.21")  # type: ignore[misc]
    assert request.target == Target()
    out = _build(to_worker_envelope(request, rid="r"), Role.AGGREGATED).to_dict()
    assert "bootstrap_host" not in out and "routed_dp_rank" not in out


def test_passed_fields_and_target_given_by_hand_are_checked() -> None:
    from sglang_envelope.request.passed import PassedFields

    for top in (ROUTED[:1], ROUTED[1:]):
        with pytest.raises(RequestRejected):
            ClientRequest(input_ids=[1], passed_fields=PassedFields(top_level=top))  # type: ignore[arg-type]
        request = decode_client_request(OUTPUT_FLAT)
        with pytest.raises(RequestRejected):
            msgspec.structs.replace(request, passed_fields=PassedFields(top_level=top))
    with pytest.raises(EnvelopeError, match="passed_fields must be a PassedFields"):
        ClientRequest(input_ids=[1], passed_fields=(("x", 1),))  # type: ignore[arg-type]
    with pytest.raises(EnvelopeError, match="target must be a Target"):
        ClientRequest(input_ids=[1], target="0.5.21")  # type: ignore[arg-type]
    # Another target is that target's rules: 0.5.21 has no output-flat logprobs.
    with pytest.raises(RequestRejected):
        ClientRequest(**OUTPUT_FLAT, target=Target(sglang="0.5.21"))
    old = ClientRequest(input_ids=(1,), target=Target(sglang="0.5.21"))
    assert old.target == Target(sglang="0.5.21") and old.input_ids == (1,)
    assert old == decode_client_request(b'{"input_ids": [1]}', target=Target(sglang="0.5.21"))


class _Lying(bytearray):
    """A body whose `__len__` runs code of the caller's and lies about its size."""

    made: ClassVar[list[Any]] = []

    def __len__(self) -> int:
        try:  # a request that breaks three rules, made while the body is decoded
            fields = {**OUTPUT_FLAT, "input_ids": (), "stream": True}
            self.made.append(ClientRequest(**fields, sampling_params={"n": 8}))  # type: ignore[arg-type]
        except RequestRejected as error:
            self.made.append(error)
        return 10


def test_a_lying_len_neither_skips_the_rules_nor_the_size_bound() -> None:
    _Lying.made.clear()
    body = _Lying(msgspec.json.encode({"input_ids": [1] * 493}))
    assert bytearray.__len__(body) == 1001
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(body, max_body_bytes=100)  # type: ignore[arg-type]
    assert caught.value.code == "body_too_large"
    small = _Lying(msgspec.json.encode({"input_ids": [1]}))
    assert decode_client_request(small).input_ids == (1,)  # type: ignore[arg-type]
    assert len(small) == 10  # the lie, told outside any decode
    assert _Lying.made and all(isinstance(made, RequestRejected) for made in _Lying.made)


@pytest.mark.parametrize("given", [lambda buffer: buffer, memoryview], ids=["bytearray", "view"])
def test_an_envelope_decoded_from_a_callers_buffer_does_not_change_with_it(given: Any) -> None:
    # A request's JSON fields are views of the bytes it was decoded from: an envelope given
    # in the caller's mutable buffer is copied first, or writing to the buffer later would
    # change a checked request (here its stop into a number, which the rules refuse).
    request = decode_client_request(b'{"input_ids":[1,2],"sampling_params":{"stop":["ab"]}}')
    buffer = bytearray(encode_envelope(to_worker_envelope(request, rid="r1")))
    envelope = decode_envelope(given(buffer))
    at = buffer.index(b'"ab"')
    buffer[at : at + 4] = b"1234"
    params = envelope.request.sampling_params
    assert isinstance(params, SamplingParams) and isinstance(params.stop, msgspec.Raw)
    assert bytes(params.stop) == b'["ab"]'
    assert envelope == decode_envelope(encode_envelope(envelope))
    # A buffer msgspec cannot read stays refused as the malformed envelope it was.
    doubled = bytearray(2 * len(buffer))
    doubled[::2] = buffer
    spread: Any = memoryview(doubled)[::2]
    with pytest.raises(RequestRejected, match="not C-contiguous") as refused:
        decode_envelope(spread)
    assert refused.value.code == "invalid_envelope"
