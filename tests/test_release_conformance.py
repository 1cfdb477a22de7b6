"""Each target's verdicts agree with its SGLang release's own, replayed from a golden fixture.

`tests/fixtures/release_conformance.jsonl` holds, for every body, the verdict of
SGLang 0.5.21, 0.5.22 and 0.5.23 over HTTP and in-process, made from their own
code by `scripts/make_release_fixtures.py`. SGLang is not needed here.

Where the library and a release disagree, the difference is deliberate and is
listed below (and in docs/contract.md) with its reason; every listed
difference is shown by at least one case. Where both refuse with one of
SGLang's own checks, the library says what SGLang says, word for word.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from sglang_envelope import (
    RequestRejected,
    Role,
    Target,
    build_engine_request,
    decode_client_request,
    to_worker_envelope,
)
from sglang_envelope.request.routing import Bootstrap
from sglang_envelope.request.rules import RULES, SGLANG_CHECKS_LEFT
from tests.strategies import DEPLOYMENT

FIXTURE = Path(__file__).parent / "fixtures" / "release_conformance.jsonl"
_LINES = FIXTURE.read_text(encoding="utf-8").splitlines()
CASES: list[dict[str, Any]] = [json.loads(line) for line in _LINES[1:]]
TARGET_KEYS = [f"{r}/{t}" for r in ("0.5.21", "0.5.22", "0.5.23") for t in ("http", "engine")]

#: Rules the library refuses a body with that the release accepts, and why.
REFUSED_BUT_ACCEPTED = {
    "needs_newer_sglang": "over HTTP the release drops a field it lacks and answers "
    "without it; the library refuses rather than lose what the client asked for",
    "unknown_field": "over HTTP FastAPI drops an unknown top-level key; the library "
    "refuses it (in-process SGLang refuses it too)",
    "not_token_input": "the endpoint takes one token-input request",
    "orchestrator_field": "only the serving system sets it",
    "batched_input": "the endpoint takes one token-input request, not a batch",
    "token_id_out_of_range": "a token id is in [0, 2^32); SGLang finds out when the model runs",
    "wrong_type": "in-process SGLang (and 0.5.21's HTTP parse of some fields) checks no "
    "types; the library types every field as SGLang's HTTP contract gate does",
    "invalid_value": "as wrong_type: sampling_logprobs_mode is 'selected' or 'support'",
    "token_indices_to_pool_unsafe": "any value can stop a running SGLang: the positions it "
    "indexes are the ones computed, which a cached prefix shortens",
}
#: SGLang's refusals (by the start of its message) of bodies the library accepts, and why.
ACCEPTED_BUT_REFUSED = {
    "request watermarking requires the server to enable --enable-watermark":
        "needs the server's flags: stays with SGLang",
    "logit_bias must has keys in [0, ":
        "needs the vocabulary size: stays with SGLang",
    "request reasoning end token IDs must be":
        "needs the vocabulary size: stays with SGLang",
}  # fmt: skip

#: The rules that make one of SGLang's own checks: their message is SGLang's.
SGLANG_WORDED = {rule.code for rule in RULES if rule.template is not None} | {
    "flat_with_multi_item",
    "output_flat_with_stream",
    "b64_without_flat",
    "empty_input_ids",
    "session_id_with_session_params",
    "watermark_key_when_disabled",
    "watermark_sets_nothing",
    "sampling_watermark_key_when_disabled",
    "sampling_watermark_sets_nothing",
    "logit_bias_key_not_integer",
    "unknown_sampling_param",
    "unexpected_sampling_param",
}


def _target(key: str) -> Target:
    release, transport = key.split("/")
    return Target(sglang=release, transport=transport)


@functools.cache
def _ours(case_id: str, key: str) -> RequestRejected | None:
    case = next(c for c in CASES if c["id"] == case_id)
    try:
        decode_client_request(json.dumps(case["body"]).encode(), target=_target(key))
    except RequestRejected as error:
        return error
    return None


def _pairs() -> list[tuple[str, str]]:
    return [(case["id"], key) for case in CASES for key in TARGET_KEYS]


def _theirs(case_id: str, key: str) -> dict[str, Any]:
    case = next(c for c in CASES if c["id"] == case_id)
    verdict: dict[str, Any] = case["targets"][key]
    return verdict


@pytest.mark.parametrize(("case_id", "key"), _pairs())
def test_each_verdict_agrees_or_differs_for_a_listed_reason(case_id: str, key: str) -> None:
    ours, theirs = _ours(case_id, key), _theirs(case_id, key)
    if ours is None and not theirs["ok"]:
        assert any(theirs["message"].startswith(start) for start in ACCEPTED_BUT_REFUSED), (
            f"{key} refuses what the library accepts: {theirs}"
        )
    elif ours is not None and theirs["ok"]:
        assert ours.code in REFUSED_BUT_ACCEPTED, f"{key} accepts; the library: {ours}"
    elif ours is not None and ours.code in SGLANG_WORDED and theirs["error"] != "TypeError":
        assert ours.message == theirs["message"], key


def test_every_listed_difference_is_shown_by_a_case() -> None:
    refused: set[str] = set()
    accepted: set[str] = set()
    for case_id, key in _pairs():
        ours, theirs = _ours(case_id, key), _theirs(case_id, key)
        if ours is not None and theirs["ok"]:
            refused.add(ours.code)
        if ours is None and not theirs["ok"]:
            accepted.update(s for s in ACCEPTED_BUT_REFUSED if theirs["message"].startswith(s))
    assert refused == set(REFUSED_BUT_ACCEPTED)
    assert accepted == set(ACCEPTED_BUT_REFUSED)


def test_agreement_is_total_outside_the_listed_differences() -> None:
    agree = sum(
        (_ours(case_id, key) is None) == _theirs(case_id, key)["ok"] for case_id, key in _pairs()
    )
    assert agree + _listed_count() == len(_pairs())


def _listed_count() -> int:
    count = 0
    for case_id, key in _pairs():
        ours, theirs = _ours(case_id, key), _theirs(case_id, key)
        count += (ours is None) != theirs["ok"]
    return count


_BOOTSTRAP = Bootstrap("10.0.0.1", 8998, 7)


@pytest.mark.parametrize("key", TARGET_KEYS)
@pytest.mark.parametrize("role", list(Role))
def test_no_engine_request_built_for_a_target_is_refused_by_its_own_checks(
    key: str, role: Role
) -> None:
    target = _target(key)
    tables = target.tables
    built = 0
    for case in CASES:
        if _ours(case["id"], key) is not None:
            continue
        request = decode_client_request(json.dumps(case["body"]).encode(), target=target)
        envelope = to_worker_envelope(request, rid="r-1")
        bootstrap = None if role is Role.AGGREGATED else _BOOTSTRAP
        n = getattr(request.sampling_params, "n", None)
        if role is not Role.AGGREGATED and isinstance(n, int) and n > 1:
            continue  # a prefill/decode leg carries one sequence (test_sequences.py)
        engine = build_engine_request(
            envelope,
            deployment=DEPLOYMENT,
            input_ids=request.input_ids,
            role=role,
            bootstrap=bootstrap,
        )
        body = engine.to_dict()
        assert set(body) <= set(tables.generate_req_input_fields), case["id"]
        sampling = body.get("sampling_params") or {}
        assert set(sampling) <= set(tables.sampling_params_fields), case["id"]
        if target.gate is not None:
            assert set(sampling) <= set(target.gate.sampling_keys), case["id"]
        client_part = {k: v for k, v in body.items() if k in type(request).__struct_fields__}
        decode_client_request(json.dumps(client_part).encode(), target=target)  # no refusal
        built += 1
    assert built > 40


def test_every_sglang_check_in_the_tables_has_a_rule_or_a_reason() -> None:
    made = {rule.template for rule in RULES if rule.template is not None}
    for release in ("0.5.21", "0.5.22", "0.5.23"):
        tables = Target(sglang=release).tables
        steps = (
            tables.tokenizer_manager_checks,
            tables.init_checks,
            tables.normalize_checks,
            tables.verify_checks,
        )
        for check in (check for step in steps for check in step):
            if check.needs:  # needs the deployment: stays with SGLang (docs/contract.md)
                continue
            assert check.message in made or check.message in SGLANG_CHECKS_LEFT, check.message
    assert set(SGLANG_CHECKS_LEFT).isdisjoint(made)


@pytest.mark.parametrize("release", ["0.5.21", "0.5.22", "0.5.23"])
def test_a_rule_holds_exactly_where_its_release_has_the_check(release: str) -> None:
    target = Target(sglang=release, transport="engine")
    body = b'{"input_ids": [1], "priority": 9223372036854775808}'
    if target.tables.priority_range is None:
        decode_client_request(body, target=target)
    else:
        with pytest.raises(RequestRejected) as caught:
            decode_client_request(body, target=target)
        assert caught.value.code == "priority_out_of_range"
