"""Properties of the cancellation plan (`plan_abort`), over every role and stream state."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    AbortPolicy,
    Bootstrap,
    EngineRequest,
    EnvelopeError,
    Role,
    build_engine_request,
    decode_client_request,
    plan_abort,
    to_worker_envelope,
)
from sglang_envelope.cancel.plan import ABORT_RULES
from sglang_envelope.request.engine import EngineBody
from sglang_envelope.types import AbortPlan, RoleName
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
    body = {"input_ids": [1], "stream": True}
    envelope = to_worker_envelope(decode_client_request(body), rid="r-1")
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


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


_SOUND_PLAN: dict[str, Any] = {
    "body": b'{"rid":"r-1"}',
    "wait_for_first_token": True,
    "first_token_wait_s": 1.0,
    "retry_delays_s": (0.25, 0.5),
    "deadline_s": 2.0,
}

#: (field, value, what the message names): each makes a plan `run_abort` must not carry out.
_UNSOUND_PLANS = [
    ("body", b'{"rid":""}', "body"),  # SGLang's scheduler: "" is a prefix of every rid
    ("body", b'{"rid":null}', "body"),  # AbortReq turns a null rid into ""
    ("body", b'{"abort_all":true}', "body"),
    ("body", b'{"rid":"r-1","abort_all":true}', "body"),
    ("body", b'{"rid":"r-1","abort_all":false}', "body"),
    ("body", b'{"rid":["r-1"]}', "body"),
    ("body", b'{"rid": "r-1"}', "body"),  # not the bytes plan_abort builds
    ("body", b'{"rid":"\\u0072"}', "body"),
    ("body", b'{"rid":"\\ud800"}', "body"),
    ("body", b'{"rid":"r-1"', "body"),
    ("body", b"", "body"),
    ("body", '{"rid":"r-1"}', "body"),  # str, not bytes
    ("body", bytearray(b'{"rid":"r-1"}'), "body"),
    ("body", b'{"rid":' * 100_000, "body"),
    ("wait_for_first_token", 1, "wait_for_first_token"),
    ("wait_for_first_token", None, "wait_for_first_token"),
    ("first_token_wait_s", math.nan, "first_token_wait_s"),
    ("first_token_wait_s", -0.5, "first_token_wait_s"),
    ("first_token_wait_s", None, "first_token_wait_s"),
    ("first_token_wait_s", 10**400, "first_token_wait_s"),
    ("deadline_s", math.inf, "deadline_s"),
    ("deadline_s", -1.0, "deadline_s"),
    ("deadline_s", True, "deadline_s"),
    ("deadline_s", "2", "deadline_s"),
    ("retry_delays_s", (0.25, math.nan), r"retry_delays_s\[1\]"),
    ("retry_delays_s", (-0.25,), r"retry_delays_s\[0\]"),
    ("retry_delays_s", (None,), r"retry_delays_s\[0\]"),
    ("retry_delays_s", [0.25], "retry_delays_s"),
    ("retry_delays_s", None, "retry_delays_s"),
    # the invariant: first_token_wait_s + sum(retry_delays_s) <= deadline_s
    ("deadline_s", 1.5, "deadline_s"),
    ("first_token_wait_s", 1.5, "deadline_s"),
    ("retry_delays_s", (0.25, 0.5, 0.5), "deadline_s"),
]


@pytest.mark.parametrize(("name", "value", "field"), _UNSOUND_PLANS)
def test_a_plan_is_checked_when_made(name: str, value: Any, field: str) -> None:
    with pytest.raises(EnvelopeError, match=field) as raised:
        AbortPlan(**{**_SOUND_PLAN, name: value})
    assert type(raised.value) is EnvelopeError


@pytest.mark.parametrize(("name", "value", "field"), _UNSOUND_PLANS)
def test_a_plan_is_checked_when_replaced(name: str, value: Any, field: str) -> None:
    plan = AbortPlan(**_SOUND_PLAN)
    with pytest.raises(EnvelopeError, match=field):
        msgspec.structs.replace(plan, **{name: value})


def test_a_plan_is_checked_when_decoded() -> None:
    wire = msgspec.json.encode(AbortPlan(**_SOUND_PLAN))
    assert msgspec.json.decode(wire, type=AbortPlan) == AbortPlan(**_SOUND_PLAN)
    bad = wire.replace(b'"deadline_s":2.0', b'"deadline_s":1.0')
    # msgspec reports what __post_init__ raised as a ValidationError.
    with pytest.raises(msgspec.ValidationError, match="deadline_s"):
        msgspec.json.decode(bad, type=AbortPlan)


def test_a_plan_that_does_not_wait_waits_for_nothing() -> None:
    with pytest.raises(EnvelopeError, match="first_token_wait_s"):
        AbortPlan(**{**_SOUND_PLAN, "wait_for_first_token": False})
    plan = AbortPlan(**{**_SOUND_PLAN, "wait_for_first_token": False, "first_token_wait_s": 0.0})
    assert not plan.wait_for_first_token


@given(engine_requests_to_abort(), st.booleans(), abort_policies())
def test_every_plan_made_by_plan_abort_passes_its_own_check(
    request: EngineRequest, first_token_seen: bool, policy: AbortPolicy
) -> None:
    plan = plan_abort(request, first_token_seen=first_token_seen, policy=policy)
    assert msgspec.structs.replace(plan) == plan


def test_a_schedule_that_fits_only_summed_in_order_is_kept() -> None:
    # 0.1 + 0.2 is 0.30000000000000004 in floats: the plan's check adds the same way.
    policy = AbortPolicy(retry_delays_s=(0.1, 0.2), first_token_wait_s=0.0, deadline_s=0.1 + 0.2)
    plan = plan_abort(_decode_request(Role.PREFILL), first_token_seen=False, policy=policy)
    assert plan.retry_delays_s == (0.1, 0.2)


_DEEP = _nested(100_000)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"deadline_s": _DEEP}, "deadline_s"),
        ({"first_token_wait_s": _DEEP}, "first_token_wait_s"),
        ({"retry_delays_s": _DEEP}, "retry_delays_s"),
        ({"retry_delays_s": (0.1, _DEEP)}, r"retry_delays_s\[1\]"),
        ({"deadline_s": 10**5000}, "deadline_s"),
    ],
)
def test_a_deeply_nested_value_is_refused_by_name(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(EnvelopeError, match=field) as raised:
        AbortPolicy(**kwargs)
    assert type(raised.value) is EnvelopeError
    with pytest.raises(EnvelopeError, match=field) as raised:
        AbortPlan(**{**_SOUND_PLAN, **kwargs})
    assert type(raised.value) is EnvelopeError


@pytest.mark.parametrize("name", ["body", "wait_for_first_token"])
def test_a_deeply_nested_plan_field_is_refused_by_name(name: str) -> None:
    with pytest.raises(EnvelopeError, match=name) as raised:
        AbortPlan(**{**_SOUND_PLAN, name: _DEEP})
    assert type(raised.value) is EnvelopeError


def test_an_n_sample_request_is_aborted_one_sample_rid_at_a_time() -> None:
    client = decode_client_request(b'{"input_ids": [1], "sampling_params": {"n": 2}}')
    engine = build_engine_request(
        to_worker_envelope(client, rid="r"), input_ids=(1,), role=Role.AGGREGATED,
        deployment=DEPLOYMENT,
    )  # fmt: skip
    with pytest.raises(EnvelopeError, match=r"^rid: an n > 1 request's samples run under fresh"):
        plan_abort(engine, first_token_seen=True)
    plan = plan_abort(engine, first_token_seen=True, rid="0f3a")
    assert plan.body == b'{"rid":"0f3a"}'
    for bad in ("", 7):
        with pytest.raises(EnvelopeError, match=r"^rid must be a non-empty UTF-8 string"):
            plan_abort(engine, first_token_seen=True, rid=bad)  # type: ignore[arg-type]
    one = build_engine_request(
        to_worker_envelope(decode_client_request(b'{"input_ids": [1]}'), rid="own"),
        input_ids=(1,), role=Role.AGGREGATED, deployment=DEPLOYMENT,
    )  # fmt: skip
    assert plan_abort(one, first_token_seen=False, rid="other").body == b'{"rid":"other"}'
