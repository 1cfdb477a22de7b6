"""Conformance with SGLang 0.5.23's own request checks, replayed from a golden fixture.

`tests/fixtures/request_conformance.jsonl` was made by
`scripts/make_request_fixtures.py` against the SGLang oracle
(`scripts/oracle/setup.sh`): for every client body it holds the library's
verdict and SGLang's verdicts (`GenerateReqInput.normalize_batch_and_arguments()`,
the HTTP contract gate `GenerateRequest.from_json_value`, and for information
`SamplingParams.verify()`), and for every accepted body the engine request of
each role with SGLang's verdicts on its JSON form. SGLang is not needed here.

"SGLang accepts" below means: normalize and the gate both accept.

When the library changes what it accepts or builds, the pinning tests fail
until the fixture is regenerated:

    /tmp/dev/bin/python scripts/make_request_fixtures.py
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from sglang_envelope import (
    Bootstrap,
    RequestRejected,
    Role,
    Routing,
    build_engine_request,
    decode_client_request,
    decode_envelope,
    encode_envelope,
    to_worker_envelope,
)
from sglang_envelope.request.fields import FIELD_OWNERS
from sglang_envelope.request.rules import RULES
from sglang_envelope.request.sequences import samples_per_prompt
from tests.strategies import DEPLOYMENT

FIXTURE = Path(__file__).parent / "fixtures" / "request_conformance.jsonl"
REGENERATE = (
    "regenerate tests/fixtures/request_conformance.jsonl (scripts/make_request_fixtures.py)"
)

Body = dict[str, Any]
Case = dict[str, Any]


def _load() -> tuple[Body, list[Case]]:
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    meta: Body = json.loads(lines[0])["meta"]
    return meta, [json.loads(line) for line in lines[1:]]


META, CASES = _load()
CASES_BY_ID = {case["id"]: case for case in CASES}
ACCEPTED = [case for case in CASES if case["library"]["accepted"]]


def _key(body: Body) -> str:
    return json.dumps(body, sort_keys=True)


def _sglang_accepts(verdicts: Body) -> bool:
    return bool(verdicts["normalize"]["ok"] and verdicts["gate"]["ok"])


@functools.cache
def _live_verdict(case_id: str) -> Body:
    """The library's verdict on the case's body today, as the fixture records verdicts."""
    body = CASES_BY_ID[case_id]["body"]
    try:
        decode_client_request(json.dumps(body).encode())
    except RequestRejected as error:
        return {
            "accepted": False,
            "code": error.code,
            "field": error.field,
            "message": error.message,
        }
    return {"accepted": True}


def _fanned_out(case: Case) -> bool:
    """Whether the case's prefill/decode legs were refused: n > 1 samples, fanned out."""
    return any("refused" in entry for entry in case["engine"])


def _sent(case: Case) -> list[Body]:
    """The engine requests built for a case (a refused leg is never sent)."""
    return [entry for entry in case["engine"] if "request" in entry]


def _bootstrap(recorded: Body) -> Bootstrap:
    return Bootstrap(
        host=recorded["host"],
        port=recorded["port"],
        room=recorded["room"],
        prefill_dp_rank=recorded["prefill_dp_rank"],
    )


# --- The tables: every place the library and SGLang part ways --------------------------

#: Library codes that are SGLang's own ValueErrors from normalize_batch_and_arguments(),
#: which the library must refuse with SGLang's words.
SGLANG_RULE_CODES = frozenset(
    {
        "output_flat_with_stream",
        "b64_without_flat",
        "flat_with_multi_item",
        "session_id_with_session_params",
        "empty_input_ids",
    }
)

#: Codes of the typed decode, which runs before those rules: when a body also has a
#: type or ownership problem, the library names that one, and its words are its own.
TYPED_DECODE_CODES = frozenset(
    {
        "missing_input_ids",
        "batched_input",
        "token_id_out_of_range",
        "wrong_type",
        "invalid_value",
        "not_token_input",
        "orchestrator_field",
        "unknown_field",
        "unknown_sampling_param",
        "unknown_nested_field",
    }
)

#: Deliberate: bodies SGLang accepts that the library refuses, by rule, and why.
STRICTER_BY_DESIGN: dict[str, str] = {
    "token_indices_to_pool_unsafe": (
        "A running SGLang 0.5.23 indexes the positions it computed with it, which a cached "
        "prefix shortens: any value can stop every SGLang process (seen live)."
    ),
    "sampling_logprobs_mode_without_mask": (
        "SGLang's tokenizer manager refuses it after dispatch (_validate_one_request, "
        "after the checks this fixture records); the library refuses it before, in its words."
    ),
    "orchestrator_field": (
        "Only the serving system sets these (disaggregation bootstrap, DP routing, KV hints, "
        "server bookkeeping); from a client they would steer or impersonate the serving system."
    ),
    "not_token_input": (
        "The endpoint takes one token-input request: text, embeddings and multimodal input "
        "(which SGLang would use instead of, or next to, input_ids) are refused."
    ),
    "batched_input": (
        "One request per call: a list of id lists is a batch, and SGLang answers a batch "
        "with a list."
    ),
    "token_id_out_of_range": (
        "Not a token id (negative, or 2^32 and up): SGLang's request checks pass it on to "
        "the model unchecked; the library refuses it before dispatch."
    ),
    "wrong_type": (
        "Typed where SGLang checks nothing: fields the gate does not know (the flat flags, "
        "return_routed_experts, conversation_id, no_logs, multi_item_delimiter_indices) take "
        "GenerateReqInput's annotation for one request, and batch forms (a list rid, lora_path "
        "or token_ids_logprob, a non-object session_params) are refused. The untyped dataclass "
        "lets these through to truthiness checks and later stages."
    ),
    "invalid_value": (
        "sampling_logprobs_mode outside the annotation's Literal['selected', 'support']."
    ),
    "n_over_beam_width": (
        "SGLang's scheduler refuses it after dispatch (beam_search/coordinator.py, "
        "validate_and_init), in these words; the library refuses it before dispatch."
    ),
    "min_new_tokens_over_max": (
        "SGLang refuses it too, in SamplingParams.verify() after tokenization, with the same "
        "text (test_sampling_verify_rules_use_sglang_verify_text); the library refuses it "
        "before dispatch."
    ),
    "min_new_tokens_negative": (
        "SGLang refuses it too, in SamplingParams.verify() after dispatch, with the same text; "
        "the library refuses it before dispatch."
    ),
    "max_new_tokens_negative": (
        "SGLang refuses it too, in SamplingParams.verify() after dispatch, with the same text; "
        "the library refuses it before dispatch."
    ),
    "json_too_deep": (
        "Free-form JSON (custom_params, session_params, watermark) is bounded in depth "
        "(default 32 levels) so that no body costs more than its size to decode and encode; "
        "SGLang reads any depth Python's JSON reader can."
    ),
    "unsupported_sampling_param": (
        "sampling_params.choice passes SGLang's gate and normalization, but 0.5.23's runtime "
        "SamplingParams has no such argument and the tokenizer manager fails with a TypeError "
        "after dispatch; the library refuses it before dispatch."
    ),
}


class Known(NamedTuple):
    """A body on which the library and SGLang disagree, not on purpose: a known bug to fix."""

    body: Body
    reason: str


_SESSION_GAP = (
    "DELIBERATE (request rule 2: input_ids is a non-empty list): SGLang accepts empty "
    "input_ids when session_params names a session (the session's history supplies the "
    "prompt); the library's empty_input_ids rule refuses it."
)
#: Bodies SGLang accepts that the library refuses with a rule SGLang also has, on purpose.
KNOWN_GAPS: tuple[Known, ...] = (
    Known({"input_ids": [], "session_params": {"id": "s1"}}, _SESSION_GAP),
    Known(
        {"input_ids": [], "session_params": {"id": "s1", "offset": 3}, "stream": True},
        _SESSION_GAP,
    ),
)

#: Bodies the library accepts that SGLang refuses. None: an explicit
#: `sampling_params.n = null`, which SGLang's gate reads as 1 but normalization fails on
#: with a TypeError, is refused by n_null.
KNOWN_ACCEPTED_BUT_REFUSED: tuple[Known, ...] = ()
#: The engine requests of those bodies that SGLang refuses, by role.
KNOWN_ENGINE_REFUSALS: dict[str, frozenset[str]] = {
    _key(known.body): frozenset({"aggregated", "decode"}) for known in KNOWN_ACCEPTED_BUT_REFUSED
}


class RuleOrder(NamedTuple):
    """A body breaking two of SGLang's rules, where the library names another one first."""

    body: Body
    ours: str
    sglang: str


#: The library checks SGLang's rules in SGLang's order, but refuses empty input_ids even
#: when session_params names a session (where SGLang skips that check): there SGLang
#: names the next rule.
KNOWN_RULE_ORDER: tuple[RuleOrder, ...] = (
    RuleOrder(
        {"input_ids": [], "session_id": "s", "session_params": {"id": "s"}},
        ours="empty_input_ids",
        sglang="session_id_with_session_params",
    ),
)

_SGLANG_TEMPLATED = {rule.code for rule in RULES if rule.template is not None}
_GAPS = {_key(known.body) for known in KNOWN_GAPS}
_LOOSER = {_key(known.body) for known in KNOWN_ACCEPTED_BUT_REFUSED}
_ORDER = {_key(entry.body): entry for entry in KNOWN_RULE_ORDER}
CASES_BY_BODY = {_key(case["body"]): case for case in CASES}


def _sglang_rule_messages() -> dict[str, str]:
    """SGLang's message for each of its rules, from the cases where the two agree."""
    messages: dict[str, str] = {}
    for case in CASES:
        normalize, ours = case["sglang"]["normalize"], case["library"]
        if ours["accepted"] or normalize["ok"] or ours["code"] not in SGLANG_RULE_CODES:
            continue
        if normalize["message"] == ours["message"]:
            messages[ours["code"]] = normalize["message"]
    return messages


# --- The fixture itself ------------------------------------------------------------------


def test_fixture_header_matches_its_cases() -> None:
    assert META["sglang_version"] == "0.5.23"
    assert META["cases"] == len(CASES)
    assert META["accepted"] == len(ACCEPTED)
    engine = [entry for case in ACCEPTED for entry in case["engine"] if "request" in entry]
    assert META["engine_requests"] == len(engine)
    assert len(CASES_BY_ID) == len(CASES), "case ids repeat"
    assert len(CASES_BY_BODY) == len(CASES), "bodies repeat"
    assert FIXTURE.stat().st_size < 2_000_000


def test_corpus_is_varied() -> None:
    kinds = {case["kind"] for case in CASES}
    assert kinds >= {
        "seed",
        "flat-matrix",
        "sampling",
        "rid",
        "optional",
        "orchestrator-field",
        "not-token-input",
        "input-ids",
        "unknown-key",
        "wrong-type",
        "unknown-sampling-key",
        "parallel-sampling",
        "min-over-max",
        "session",
        "multi-item",
        "two-rules",
        "null-as-absent",
    }
    assert len(CASES) >= 300
    assert len(ACCEPTED) >= 200
    # stream true/false/absent/null x each flat flag true/false/absent
    assert sum(case["kind"] == "flat-matrix" for case in CASES) == 4 * 3**3
    # every field a client may not send is tried, and refused by its rule
    refused = {
        (key, case["library"]["code"])
        for case in CASES
        for key in case["body"]
        if key in FIELD_OWNERS and not case["library"]["accepted"]
    }
    assert set(FIELD_OWNERS.items()) <= refused
    # each of SGLang's rules is met at least once, in SGLang's words
    assert set(_sglang_rule_messages()) == SGLANG_RULE_CODES
    # the seed case (stream=false with output-flat, the request layers used to break) is accepted
    seed = CASES_BY_BODY[
        _key(
            {
                "input_ids": [1, 2],
                "stream": False,
                "return_logprob": True,
                "top_logprobs_num": 2,
                "return_flat_raw_output_top_logprobs": True,
            }
        )
    ]
    assert seed["library"] == {"accepted": True}


# --- Pinning: the library today is the library the fixture saw ---------------------------


@pytest.mark.parametrize("case_id", [case["id"] for case in CASES])
def test_library_verdict_is_the_recorded_one(case_id: str) -> None:
    assert _live_verdict(case_id) == CASES_BY_ID[case_id]["library"], REGENERATE


@pytest.mark.parametrize("case_id", [case["id"] for case in ACCEPTED])
def test_engine_requests_are_rebuilt_exactly(case_id: str) -> None:
    case = CASES_BY_ID[case_id]
    request = decode_client_request(json.dumps(case["body"]).encode())
    envelope = to_worker_envelope(request, rid=case["rid"])
    # what a worker gets: the envelope's wire form, decoded again
    received = decode_envelope(encode_envelope(envelope))
    bootstrap = _bootstrap(case["bootstrap"])
    assert [entry["role"] for entry in case["engine"]] == [role.value for role in Role]
    for entry in case["engine"]:
        assert "error" not in entry, f"building the {entry['role']} request failed: {entry}"
        role = Role(entry["role"])
        role_bootstrap = None if role is Role.AGGREGATED else bootstrap
        routing = None if case["routing"] is None else Routing(**case["routing"])
        for source in (envelope, received):
            build = functools.partial(
                build_engine_request,
                source,
                deployment=DEPLOYMENT,
                input_ids=source.request.input_ids,
                role=role,
                bootstrap=role_bootstrap,
                routing=routing,
            )
            if "refused" in entry:  # a prefill/decode leg carries one sequence
                n = request.sampling_params.n  # type: ignore[union-attr]
                assert role is not Role.AGGREGATED and isinstance(n, int) and n > 1
                with pytest.raises(RequestRejected) as refused:
                    build()
                assert refused.value.code == entry["refused"]["code"] == "parallel_sampling"
                continue
            built = build()
            assert built.to_dict() == entry["request"], f"{role.value}: {REGENERATE}"
            assert json.loads(built.to_json()) == entry["request"], role.value


# --- (a) every engine request passes both of SGLang's checks -----------------------------


def test_engine_requests_pass_sglang() -> None:
    refused: dict[str, set[str]] = {}
    for case in ACCEPTED:
        one = samples_per_prompt(decode_client_request(json.dumps(case["body"]).encode())) == 1
        for entry in _sent(case):
            verdicts = entry["sglang"]
            if not _sglang_accepts(verdicts):
                refused.setdefault(_key(case["body"]), set()).add(entry["role"])
                continue
            # SGLang saw the request as built: one prompt (of n samples), in the stream mode
            # the role chose
            assert verdicts["normalize"]["stream"] == entry["request"]["stream"], case["id"]
            assert verdicts["normalize"]["is_single"] is one, case["id"]
    assert refused == {key: set(roles) for key, roles in KNOWN_ENGINE_REFUSALS.items()}


def test_every_role_is_exercised() -> None:
    prefill = [entry["request"] for case in ACCEPTED for entry in _sent(case)[2:]]
    decode = [entry["request"] for case in ACCEPTED for entry in _sent(case)[1:2]]
    assert len(prefill) == len(decode) == len(ACCEPTED) - sum(_fanned_out(c) for c in ACCEPTED)
    # the roles differ where the contract says they do
    assert all(request["stream"] is True for request in prefill)
    assert all(request["sampling_params"]["max_new_tokens"] == 1 for request in prefill)
    assert any(request["stream"] is False for request in decode)
    assert any("disagg_prefill_dp_rank" in request for request in decode)
    assert any("disagg_prefill_dp_rank" not in request for request in decode)


def test_every_routing_combination_reaches_sglang_for_every_role() -> None:
    """Each of the 32 combinations of Routing fields, in each role, passes SGLang's checks."""
    seen: set[tuple[str, frozenset[str]]] = set()
    for case in ACCEPTED:
        fields = frozenset(case["routing"] or ())
        for entry in _sent(case):
            assert _sglang_accepts(entry["sglang"]), (case["id"], entry["role"])
            seen.add((entry["role"], fields))
            routing, request = case["routing"] or {}, entry["request"]
            if "trace_header" in routing:
                assert request["external_trace_header"] == routing["trace_header"]
            if "labels" in routing:
                assert request["custom_labels"] == routing["labels"]
            for name in ("lora_path", "priority"):
                if name in routing:
                    assert request[name] == routing[name], "the router's value wins"
    combinations = {
        frozenset(name for bit, name in enumerate(Routing.__struct_fields__) if mask >> bit & 1)
        for mask in range(32)
    }
    assert seen == {(role.value, fields) for role in Role for fields in combinations}


def test_prefill_is_routed_to_the_prefill_rank_as_sglang_routes_it() -> None:
    """SGLang's own prefill payload sets routed_dp_rank to the prefill rank; so does prefill."""
    payloads = META["prefill_rank_payloads"]
    assert len(payloads) >= 3
    for pair in payloads:
        decode, sglang = pair["decode_request"], pair["sglang_prefill_payload"]
        request = decode_client_request({"input_ids": decode["input_ids"]})
        envelope = to_worker_envelope(request, rid=decode["rid"])
        bootstrap = Bootstrap(
            decode["bootstrap_host"],
            decode["bootstrap_port"],
            decode["bootstrap_room"],
            prefill_dp_rank=decode["disagg_prefill_dp_rank"],
        )
        prefill = build_engine_request(
            envelope,
            deployment=DEPLOYMENT,
            input_ids=request.input_ids,
            role=Role.PREFILL,
            bootstrap=bootstrap,
        ).to_dict()
        keys = [
            *("rid", "bootstrap_host", "bootstrap_port", "bootstrap_room"),
            *("routed_dp_rank", "disagg_prefill_dp_rank"),
        ]
        assert {key: prefill[key] for key in keys} == {key: sglang[key] for key in keys}
    # a case where decode's own rank differs: prefill still goes to the prefill rank
    assert any(
        pair["decode_request"]["routed_dp_rank"] != pair["sglang_prefill_payload"]["routed_dp_rank"]
        for pair in payloads
    )


def test_every_prefill_request_runs_on_the_rank_decode_reads_from() -> None:
    for case in ACCEPTED:
        if _fanned_out(case):
            continue
        prefill = case["engine"][2]["request"]
        rank = case["bootstrap"]["prefill_dp_rank"]
        assert prefill.get("routed_dp_rank") == rank == prefill.get("disagg_prefill_dp_rank")


# --- (b) SGLang's stream/flat/Base64/session refusals are the library's, word for word -----


def test_sglang_rule_refusals_are_refused_in_sglang_words() -> None:
    for case in CASES:
        normalize = case["sglang"]["normalize"]
        if normalize["ok"] or normalize["error"] != "ValueError":
            continue
        ours = _live_verdict(case["id"])
        assert not ours["accepted"], f"{case['id']}: SGLang refuses {case['body']}: {normalize}"
        order = _ORDER.get(_key(case["body"]))
        if ours["code"] in SGLANG_RULE_CODES and order is None:
            assert ours["message"] == normalize["message"], case["id"]
        elif order is None:
            assert ours["code"] in TYPED_DECODE_CODES, case["id"]


def test_library_sglang_rule_refusals_are_sglangs() -> None:
    for case in CASES:
        ours = _live_verdict(case["id"])
        if ours["accepted"] or ours["code"] not in SGLANG_RULE_CODES:
            continue
        body = _key(case["body"])
        if body in _GAPS or body in _ORDER:
            continue
        normalize = case["sglang"]["normalize"]
        assert not normalize["ok"], f"{case['id']}: SGLang accepts {case['body']}"
        assert (normalize["error"], normalize["message"]) == ("ValueError", ours["message"])


def test_known_rule_order_differences_hold() -> None:
    messages = _sglang_rule_messages()
    for entry in KNOWN_RULE_ORDER:
        case = CASES_BY_BODY[_key(entry.body)]
        normalize = case["sglang"]["normalize"]
        assert normalize["message"] == messages[entry.sglang], entry
        ours = _live_verdict(case["id"])
        assert ours["code"] == entry.ours, entry
        assert ours["message"] != normalize["message"], f"fixed? drop it from the table: {entry}"


@pytest.mark.parametrize(
    "code", ["min_new_tokens_over_max", "min_new_tokens_negative", "max_new_tokens_negative"]
)
def test_sampling_verify_rules_use_sglang_verify_text(code: str) -> None:
    seen = 0
    for case in CASES:
        ours = _live_verdict(case["id"])
        if ours["accepted"] or ours["code"] != code:
            continue
        seen += 1
        sampling = case["sglang"]["sampling"]
        assert sampling == {"ok": False, "error": "ValueError", "message": ours["message"]}
    assert seen >= 1


# --- (c) what the library accepts, SGLang accepts; what it refuses on purpose --------------


def test_accepted_bodies_are_accepted_by_sglang() -> None:
    refused = set()
    for case in CASES:
        if _live_verdict(case["id"])["accepted"] and not _sglang_accepts(case["sglang"]):
            refused.add(_key(case["body"]))
    assert refused == _LOOSER


def test_refusing_what_sglang_accepts_is_justified() -> None:
    gaps = set()
    for case in CASES:
        ours = _live_verdict(case["id"])
        if ours["accepted"] or not _sglang_accepts(case["sglang"]):
            continue
        sampling = case["sglang"]["sampling"]
        if _key(case["body"]) in _GAPS:
            gaps.add(_key(case["body"]))
        elif sampling is not None and not sampling["ok"]:
            # SamplingParams refuses it after dispatch: the library refuses it before.
            assert ours["message"] == sampling["message"], case["id"]
        elif ours["code"] in _SGLANG_TEMPLATED:
            # One of SGLang's checks after dispatch (tests/test_release_conformance.py).
            continue
        else:
            assert ours["code"] in STRICTER_BY_DESIGN, f"{case['id']}: {case['body']} -> {ours}"
    assert gaps == _GAPS, "a known gap is closed: drop it from KNOWN_GAPS"


@pytest.mark.parametrize("code", sorted(STRICTER_BY_DESIGN))
def test_each_deliberate_difference_is_exercised(code: str) -> None:
    assert any(
        not case["library"]["accepted"]
        and case["library"]["code"] == code
        and _sglang_accepts(case["sglang"])
        for case in CASES
    ), f"no case shows SGLang accepting what {code} refuses"


def test_known_tables_name_fixture_cases() -> None:
    bodies = [known.body for known in (*KNOWN_GAPS, *KNOWN_ACCEPTED_BUT_REFUSED)]
    bodies += [entry.body for entry in KNOWN_RULE_ORDER]
    for body in bodies:
        assert _key(body) in CASES_BY_BODY, f"not in the fixture: {body}"


def test_no_accepted_body_is_refused_by_sampling_params_later() -> None:
    # SGLang's SamplingParams checks that need only the request are made before dispatch.
    for case in CASES:
        sampling = case["sglang"]["sampling"]
        if _live_verdict(case["id"])["accepted"] and sampling is not None:
            assert sampling["ok"], f"{case['id']}: SamplingParams refuses {case['body']}"


def test_nulls_sglang_reads_as_absent_are_accepted_as_sglang_accepts_them() -> None:
    cases = [case for case in CASES if case["kind"] == "null-as-absent"]
    assert len(cases) >= 5
    for case in cases:
        assert case["library"] == {"accepted": True}, case["id"]
        assert case["sglang"]["normalize"]["ok"] and case["sglang"]["gate"]["ok"], case["id"]
