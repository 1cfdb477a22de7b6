"""Properties of the cancellation plan (`plan_abort`), over every role and stream state."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    AbortPlan,
    AbortPolicy,
    Bootstrap,
    EngineRequest,
    EnvelopeError,
    Role,
    RoleName,
    build_engine_request,
    decode_client_request,
    plan_abort,
    to_worker_envelope,
)
from sglang_envelope.cancel.plan import ABORT_RULES
from sglang_envelope.request.engine import EngineBody
from tests.strategies import DEPLOYMENT, abort_policies, engine_requests_to_abort


def _total(plan: AbortPlan) -> float:
    return plan.first_token_wait_s + sum(plan.retry_delays_s)


@given(engine_requests_to_abort(), st.booleans(), abort_policies())
def test_body_is_the_abort_request_for_the_engine_rid(
    request: EngineRequest, first_token_seen: bool, policy: AbortPolicy
) -> None:
    plan = plan_abort(request, first_token_seen=first_token_seen, policy=policy)
    assert json.loads(plan.body) == {"rid": request.rid}
    assert plan.deadline_s == policy.deadline_s


@given(engine_requests_to_abort(), st.booleans(), abort_policies())
def test_nothing_in_the_plan_goes_past_the_deadline(
    request: EngineRequest, first_token_seen: bool, policy: AbortPolicy
) -> None:
    plan = plan_abort(request, first_token_seen=first_token_seen, policy=policy)
    assert plan.first_token_wait_s <= plan.deadline_s
    assert _total(plan) <= plan.deadline_s


@given(engine_requests_to_abort(), st.booleans(), abort_policies())
def test_retries_are_the_longest_prefix_of_the_schedule_that_fits(
    request: EngineRequest, first_token_seen: bool, policy: AbortPolicy
) -> None:
    plan = plan_abort(request, first_token_seen=first_token_seen, policy=policy)
    kept = len(plan.retry_delays_s)
    assert plan.retry_delays_s == policy.retry_delays_s[:kept]
    repeats = not (request.stream and first_token_seen)
    if repeats and kept < len(policy.retry_delays_s):
        # Trimmed only because the next pause would have passed the deadline.
        next_delay = policy.retry_delays_s[kept]
        assert plan.first_token_wait_s + (sum(plan.retry_delays_s) + next_delay) > policy.deadline_s
    if not repeats:
        assert plan.retry_delays_s == ()


@given(engine_requests_to_abort(stream=False), st.booleans(), abort_policies())
def test_unary_aborts_at_once_and_repeats(
    request: EngineRequest, first_token_seen: bool, policy: AbortPolicy
) -> None:
    plan = plan_abort(request, first_token_seen=first_token_seen, policy=policy)
    assert not plan.wait_for_first_token
    assert plan.first_token_wait_s == 0.0
    if policy.retry_delays_s and policy.retry_delays_s[0] <= policy.deadline_s:
        assert plan.retry_delays_s  # a single early abort can be lost


@given(engine_requests_to_abort(role=Role.DECODE, stream=True), st.booleans(), abort_policies())
def test_streaming_decode_waits_only_before_its_first_token(
    request: EngineRequest, first_token_seen: bool, policy: AbortPolicy
) -> None:
    plan = plan_abort(request, first_token_seen=first_token_seen, policy=policy)
    assert plan.wait_for_first_token is (not first_token_seen)
    expected_wait = 0.0 if first_token_seen else min(policy.first_token_wait_s, policy.deadline_s)
    assert plan.first_token_wait_s == expected_wait


@given(engine_requests_to_abort(role=Role.PREFILL), st.booleans(), abort_policies())
def test_prefill_never_waits(
    request: EngineRequest, first_token_seen: bool, policy: AbortPolicy
) -> None:
    assert request.stream  # prefill always streams
    plan = plan_abort(request, first_token_seen=first_token_seen, policy=policy)
    assert not plan.wait_for_first_token
    assert plan.first_token_wait_s == 0.0


@given(engine_requests_to_abort(role=Role.AGGREGATED, stream=True), st.booleans())
def test_streaming_aggregated_never_waits(request: EngineRequest, first_token_seen: bool) -> None:
    plan = plan_abort(request, first_token_seen=first_token_seen)
    assert not plan.wait_for_first_token


@given(
    st.sampled_from(list(Role)),
    st.booleans(),
    st.booleans(),
    st.sampled_from([None, ""]),
    abort_policies(),
)
def test_a_missing_or_empty_rid_is_refused(
    role: Role, stream: bool, first_token_seen: bool, rid: str | None, policy: AbortPolicy
) -> None:
    # An engine request with no rid cannot be made: only build_engine_request makes one.
    with pytest.raises(EnvelopeError, match="build_engine_request"):
        EngineRequest(role, EngineBody(input_ids=(1,), rid=rid, stream=stream))


def test_the_rule_table_covers_every_state() -> None:
    states = set(itertools.product([False, True], list(Role), [False, True]))
    assert set(ABORT_RULES) == states
    waiting = {state for state, step in ABORT_RULES.items() if step.wait_for_first_token}
    assert waiting == {(True, Role.DECODE, False)}


def test_default_policy() -> None:
    policy = AbortPolicy()
    assert policy.retry_delays_s == (0.05, 0.1, 0.2, 0.4, 0.8)
    assert policy.first_token_wait_s == 5.0
    assert policy.deadline_s == 10.0
    envelope = to_worker_envelope(decode_client_request({"input_ids": [1]}), rid="r-1")
    request = build_engine_request(
        envelope,
        deployment=DEPLOYMENT,
        input_ids=[1],
        role=Role.DECODE,
        bootstrap=Bootstrap("h", 1, 1),
    )
    plan = plan_abort(request, first_token_seen=False)
    assert plan == AbortPlan(
        body=b'{"rid":"r-1"}',
        wait_for_first_token=True,
        first_token_wait_s=5.0,
        retry_delays_s=(0.05, 0.1, 0.2, 0.4, 0.8),
        deadline_s=10.0,
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"deadline_s": -1.0}, "deadline_s"),
        ({"deadline_s": math.inf}, "deadline_s"),
        ({"first_token_wait_s": math.nan}, "first_token_wait_s"),
        ({"first_token_wait_s": True}, "first_token_wait_s"),
        ({"retry_delays_s": (0.1, -0.1)}, r"retry_delays_s\[1\]"),
        ({"retry_delays_s": [0.1]}, "retry_delays_s"),
        ({"deadline_s": "10"}, "deadline_s"),
    ],
)
def test_policy_refuses_values_that_are_not_finite_non_negative_seconds(
    kwargs: dict[str, object], field: str
) -> None:
    with pytest.raises(EnvelopeError, match=field):
        AbortPolicy(**kwargs)  # type: ignore[arg-type]


def test_policy_is_frozen() -> None:
    policy = AbortPolicy()
    with pytest.raises(AttributeError):
        policy.deadline_s = 1.0  # type: ignore[misc]


def _decode_request(role: Role | RoleName = Role.DECODE) -> EngineRequest:
    envelope = to_worker_envelope(decode_client_request(b'{"input_ids": [1]}'), rid="r-1")
    bootstrap = Bootstrap("10.0.0.7", 8998, 1)
    return build_engine_request(
        envelope, deployment=DEPLOYMENT, input_ids=[1], role=role, bootstrap=bootstrap
    )


BY_HAND: Any = EngineRequest


@pytest.mark.parametrize(
    ("request_", "first_token_seen", "policy", "message"),
    [
        (object(), False, AbortPolicy(), "engine_request must be an EngineRequest, got object"),
        (None, False, AbortPolicy(), "engine_request must be an EngineRequest, got NoneType"),
        (_decode_request(), False, object(), "policy must be an AbortPolicy, got object"),
        (_decode_request(), False, {"deadline_s": 1}, "policy must be an AbortPolicy, got dict"),
        (_decode_request(), None, AbortPolicy(), "first_token_seen must be a bool, got NoneType"),
        (
            lambda: BY_HAND("sideways", EngineBody(input_ids=(1,), rid="r")),
            True,
            AbortPolicy(),
            "an EngineRequest is made only by build_engine_request",
        ),
        (
            lambda: BY_HAND(Role.DECODE, {"rid": "r"}),
            True,
            AbortPolicy(),
            "an EngineRequest is made only by build_engine_request",
        ),
    ],
)
def test_caller_mistakes_name_the_argument(
    request_: Any, first_token_seen: Any, policy: Any, message: str
) -> None:
    """Structs built by hand may be refused when made, or when planned; never with TypeError."""
    with pytest.raises(EnvelopeError, match=message) as raised:
        if callable(request_):
            request_ = request_()
        plan_abort(request_, first_token_seen=first_token_seen, policy=policy)
    assert type(raised.value) is EnvelopeError


def test_a_role_given_by_its_value_is_planned_as_the_role() -> None:
    by_value = _decode_request("decode")
    assert by_value.role is Role.DECODE
    assert plan_abort(by_value, first_token_seen=False) == plan_abort(
        _decode_request(), first_token_seen=False
    )
