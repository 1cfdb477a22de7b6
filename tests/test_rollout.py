"""The rollout controls: abort-all, drain, pause and continue plans, the /v1/loads reading,
and `run_drain` with made-up transports."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import EnvelopeError, LimitExceeded, ResponseError, Target
from sglang_envelope.cancel import rollout
from sglang_envelope.rollout import (
    AbortAllPlan,
    ContinuePlan,
    DrainOutcome,
    DrainPlan,
    DrainPolicy,
    EngineLoad,
    PausePlan,
    WeightVersionSpan,
    engine_idle,
    plan_abort_all,
    plan_continue,
    plan_drain,
    plan_pause,
    read_loads,
    run_drain,
)
from sglang_envelope.types import AbortPlan
from tests.strategies import loads_answers, weight_version_spans

T = TypeVar("T")
RELEASES = ("0.5.21", "0.5.22", "0.5.23")


def run(make: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await asyncio.wait_for(make(), 10)

    return asyncio.run(main())


# --- abort all ---


@pytest.mark.parametrize("release", RELEASES)
def test_abort_all_is_the_body_sglang_tests_send(release: str) -> None:
    plan = plan_abort_all(target=Target(sglang=release))
    assert plan.path == "/abort_request" and plan.body == b'{"abort_all":true}'


def test_abort_all_carries_weight_versions_as_sglang_parses_them() -> None:
    spans = (WeightVersionSpan(version="v1", start=0, end=3),)
    plan = plan_abort_all(weight_versions=spans)
    assert json.loads(plan.body) == {
        "abort_all": True,
        "weight_versions": [{"version": "v1", "start": 0, "end": 3}],
    }


@given(weight_version_spans())
def test_an_abort_all_plan_decodes_back_to_itself(spans: tuple[WeightVersionSpan, ...]) -> None:
    plan = plan_abort_all(weight_versions=spans)
    assert msgspec.json.decode(msgspec.json.encode(plan), type=AbortAllPlan) == plan
    assert json.loads(plan.body).get("weight_versions", []) == [
        msgspec.structs.asdict(span) for span in spans
    ]


def test_weight_versions_are_refused_where_abort_req_lacks_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    without = rollout.CONTROLS["0.5.21"]._replace(abort_fields=("rid", "abort_all"))
    monkeypatch.setitem(rollout.CONTROLS, "0.5.21", without)
    spans = (WeightVersionSpan(version="v1", start=0, end=1),)
    with pytest.raises(EnvelopeError, match=r"^weight_versions: SGLang 0.5.21's AbortReq"):
        plan_abort_all(target=Target(sglang="0.5.21"), weight_versions=spans)
    assert plan_abort_all(target=Target(sglang="0.5.21")).body == b'{"abort_all":true}'


@pytest.mark.parametrize(
    ("weight_versions", "message"),
    [
        ("v1", r"^weight_versions: expected a sequence of WeightVersionSpan, got str"),
        ([{"version": "v1"}], r"^weight_versions\[0\]: expected a WeightVersionSpan, got dict"),
    ],
)
def test_weight_versions_of_the_wrong_type_are_refused(weight_versions: Any, message: str) -> None:
    with pytest.raises(EnvelopeError, match=message):
        plan_abort_all(weight_versions=weight_versions)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"version": 1, "start": 0, "end": 0}, r"^version: expected a string"),
        ({"version": "v", "start": -1, "end": 0}, r"^start: expected an int >= 0"),
        ({"version": "v", "start": 0, "end": True}, r"^end: expected an int >= 0"),
        ({"version": "v", "start": 5, "end": 4}, r"^end: expected at least start = 5, got 4"),
    ],
)
def test_a_bad_span_is_refused_naming_its_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(EnvelopeError, match=message):
        WeightVersionSpan(**fields)


@pytest.mark.parametrize(
    "body",
    [
        b'{"abort_all":false}',
        b'{"abort_all": true}',
        b'{"rid":"","abort_all":true}',
        b'{"abort_all":true,"weight_versions":[["v",0,1]]}',
        b"{}",
        b"null",
        "{}",
    ],
)
def test_an_abort_all_plan_holds_only_the_bytes_plan_abort_all_builds(body: Any) -> None:
    with pytest.raises(EnvelopeError, match=r"^body: expected the bytes plan_abort_all builds"):
        AbortAllPlan(body=body)


def test_the_single_abort_plan_still_refuses_abort_all() -> None:
    with pytest.raises(EnvelopeError, match=r"^body: expected the bytes plan_abort builds"):
        AbortPlan(
            body=plan_abort_all().body,
            wait_for_first_token=False,
            first_token_wait_s=0.0,
            retry_delays_s=(),
            deadline_s=1.0,
        )


def test_a_plan_refuses_another_path() -> None:
    with pytest.raises(EnvelopeError, match=r"^path: expected '/abort_request'"):
        AbortAllPlan(body=b'{"abort_all":true}', path="/abort")


def test_a_target_that_is_not_a_target_is_refused() -> None:
    for plan in (plan_abort_all, plan_continue, plan_drain):
        with pytest.raises(EnvelopeError, match=r"^target must be a Target, got str"):
            plan(target="0.5.23")  # type: ignore[arg-type]


# --- pause and continue ---


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("mode", ["abort", "retract", "in_place"])
def test_pause_is_sglangs_body_for_each_mode(release: str, mode: str) -> None:
    plan = plan_pause(mode, target=Target(sglang=release))
    assert (plan.path, plan.body, plan.mode) == (
        "/pause_generation",
        b'{"mode":"%s"}' % mode.encode(),
        mode,
    )


def test_pause_defaults_to_sglangs_abort_mode() -> None:
    assert plan_pause().mode == "abort"


@pytest.mark.parametrize("mode", ["inplace", "", None, 1])
def test_another_pause_mode_is_refused(mode: Any) -> None:
    with pytest.raises(
        EnvelopeError, match=r"^mode: expected one of 'abort', 'retract', 'in_place'"
    ):
        plan_pause(mode)


def test_a_pause_plan_is_checked() -> None:
    with pytest.raises(EnvelopeError, match=r"^mode: expected the body's 'abort'"):
        PausePlan(body=b'{"mode":"abort"}', mode="retract")
    with pytest.raises(EnvelopeError, match=r"^body: expected the bytes plan_pause builds"):
        PausePlan(body=b'{"mode":"paused"}', mode="paused")


def test_continue_states_torch_empty_cache_only_when_false() -> None:
    assert plan_continue().body == b"{}"
    assert plan_continue(torch_empty_cache=False).body == b'{"torch_empty_cache":false}'
    assert plan_continue().path == "/continue_generation"
    with pytest.raises(EnvelopeError, match=r"^torch_empty_cache: expected a bool, got int"):
        plan_continue(torch_empty_cache=0)  # type: ignore[arg-type]
    with pytest.raises(EnvelopeError, match=r"^body: expected the bytes plan_continue builds"):
        ContinuePlan(body=b'{"torch_empty_cache":true}')


def test_a_release_without_the_endpoints_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    bare = rollout.ReleaseControls(("rid", "abort_all"), (), None, False)
    monkeypatch.setitem(rollout.CONTROLS, "0.5.21", bare)
    old = Target(sglang="0.5.21")
    with pytest.raises(EnvelopeError, match=r"^mode: SGLang 0.5.21 has no /pause_generation"):
        plan_pause(target=old)
    with pytest.raises(EnvelopeError, match=r"^target: SGLang 0.5.21 has no /continue_gen"):
        plan_continue(target=old)
    with pytest.raises(EnvelopeError, match=r"^target: SGLang 0.5.21 has no GET /v1/loads"):
        plan_drain(target=old)


# --- /v1/loads ---

LIVE_SHAPE: dict[str, Any] = {
    "timestamp": "2026-12-02T16:00:00+00:00",
    "version": "0.5.23",
    "accelerator": None,
    "num_accelerators": 1,
    "loads": [
        {"timestamp": 1.0, "dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0},
        {"timestamp": 1.0, "dp_rank": 1, "num_running_reqs": 2, "num_waiting_reqs": 1},
    ],
}


def test_loads_are_summed_over_ranks() -> None:
    body = json.dumps(LIVE_SHAPE).encode()
    assert read_loads(body) == EngineLoad(running=2, waiting=1, ranks=2)
    assert not engine_idle(body)
    LIVE_SHAPE["loads"][1].update(num_running_reqs=0, num_waiting_reqs=0)
    assert engine_idle(json.dumps(LIVE_SHAPE).encode())


@given(loads_answers())
def test_idle_is_no_running_and_no_waiting_request(answer: tuple[bytes, int, int, int]) -> None:
    body, running, waiting, ranks = answer
    assert read_loads(body) == EngineLoad(running=running, waiting=waiting, ranks=ranks)
    assert engine_idle(body) == (ranks > 0 and running == 0 and waiting == 0)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{}", r"missing required field `loads`"),
        (b'{"loads":[{"num_running_reqs":0}]}', r"missing required field `num_waiting_reqs`"),
        (b'{"loads":[{"num_running_reqs":true,"num_waiting_reqs":0}]}', r"loads\[0\]"),
        (b'{"loads":[{"num_running_reqs":-1,"num_waiting_reqs":0}]}', r"loads\[0\]\.num_running"),
        (b"[", r"not SGLang's shape"),
        (b'{"loads":' * 100_000, r"not SGLang's shape"),
        (b'{"loads":[],"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}", r"recursion depth"),
    ],
)
def test_a_loads_answer_of_another_shape_is_a_response_error(body: bytes, message: str) -> None:
    with pytest.raises(ResponseError, match=message):
        read_loads(body)


def test_a_loads_answer_is_bounded_before_it_is_read() -> None:
    with pytest.raises(LimitExceeded, match="more than max_bytes=10") as caught:
        read_loads(b" " * 11, max_bytes=10)
    assert caught.value.bound == "max_bytes"
    with pytest.raises(EnvelopeError, match=r"^body must be bytes, got str"):
        read_loads("{}")  # type: ignore[arg-type]


# --- the drain plan and run_drain ---


def test_the_default_drain_is_slimes() -> None:
    plan = plan_drain()
    assert (plan.retry_every_s, plan.deadline_s) == (3.0, 180.0)
    assert plan.abort == plan_abort_all() and plan.loads_path == "/v1/loads?include=core"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"retry_every_s": 0}, r"^retry_every_s: expected more than 0 seconds"),
        ({"retry_every_s": float("nan")}, r"^retry_every_s: expected a finite number"),
        ({"deadline_s": -1}, r"^deadline_s: expected a finite number of seconds >= 0"),
        ({"deadline_s": "1"}, r"^deadline_s: expected a number of seconds"),
    ],
)
def test_a_bad_drain_policy_is_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(EnvelopeError, match=message):
        DrainPolicy(**fields)


def _loads(running: int) -> bytes:
    load = {"num_running_reqs": running, "num_waiting_reqs": 0}
    return json.dumps({"loads": [load]}).encode()


def _transport(busy_rounds: int) -> tuple[list[bytes], Any, Any]:
    posted: list[bytes] = []

    async def send(body: bytes) -> int:
        posted.append(body)
        return 200

    async def get_loads() -> bytes:
        return _loads(1 if len(posted) <= busy_rounds else 0)

    return posted, send, get_loads


def test_run_drain_repeats_until_idle() -> None:
    plan = plan_drain(policy=DrainPolicy(retry_every_s=0.01, deadline_s=5))
    posted, send, get_loads = _transport(busy_rounds=2)
    outcome = run(lambda: run_drain(plan, send, get_loads))
    assert outcome.idle and outcome.stopped == "idle"
    assert posted == [plan.abort.body] * 3
    assert [r.running for r in outcome.rounds] == [1, 1, 0]
    assert all(
        b.at_s - a.at_s >= 0.009 for a, b in zip(outcome.rounds, outcome.rounds[1:], strict=False)
    )


def test_run_drain_gives_up_at_its_deadline() -> None:
    plan = plan_drain(policy=DrainPolicy(retry_every_s=0.05, deadline_s=0.12))
    posted, send, get_loads = _transport(busy_rounds=1000)
    outcome = run(lambda: run_drain(plan, send, get_loads))
    assert outcome == DrainOutcome(idle=False, rounds=outcome.rounds, stopped="deadline")
    assert 2 <= len(posted) == len(outcome.rounds) <= 3
    assert all(r.at_s <= 0.12 for r in outcome.rounds)


def test_run_drain_cuts_a_call_that_outlives_the_deadline() -> None:
    plan = plan_drain(policy=DrainPolicy(retry_every_s=1, deadline_s=0.05))

    async def send(body: bytes) -> int:
        return 200

    async def get_loads() -> bytes:
        await asyncio.sleep(10)
        return b""

    outcome = run(lambda: run_drain(plan, send, get_loads))
    assert outcome == DrainOutcome(idle=False, rounds=(), stopped="deadline")


@pytest.mark.parametrize("failing", ["send", "get_loads"])
def test_run_drain_lets_a_callable_s_own_timeout_propagate(failing: str) -> None:
    """`TimeoutError` raised by `send` or `get_loads` themselves is their failure, which
    propagates; only the plan's deadline ends the drain as ``"deadline"``."""
    plan = plan_drain(policy=DrainPolicy(retry_every_s=1, deadline_s=5))

    async def send(body: bytes) -> int:
        if failing == "send":
            raise TimeoutError("send's own")
        return 200

    async def get_loads() -> bytes:
        raise TimeoutError("get_loads's own")

    with pytest.raises(TimeoutError, match=f"^{failing}'s own$"):
        run(lambda: run_drain(plan, send, get_loads))


@given(st.integers(0, 3), st.sampled_from([200, 400, 503]))
def test_run_drain_posts_once_a_round_whatever_the_status(busy: int, status: int) -> None:
    plan = plan_drain(policy=DrainPolicy(retry_every_s=0.001, deadline_s=5))
    posted: list[bytes] = []

    async def send(body: bytes) -> int:
        posted.append(body)
        return status

    async def get_loads() -> bytes:
        return _loads(1 if len(posted) <= busy else 0)

    outcome = run(lambda: run_drain(plan, send, get_loads))
    assert outcome.idle and len(outcome.rounds) == len(posted) == busy + 1
    assert {r.status for r in outcome.rounds} == {status}


@pytest.mark.parametrize(
    ("send_returns", "loads_returns", "message"),
    [
        ("200", b"", r"^send must return an HTTP status \(an int\), got '200'"),
        (200, "{}", r"^get_loads must return the answer's bytes, got str"),
    ],
)
def test_run_drain_refuses_callables_that_return_the_wrong_type(
    send_returns: Any, loads_returns: Any, message: str
) -> None:
    async def send(body: bytes) -> Any:
        return send_returns

    async def get_loads() -> Any:
        return loads_returns

    with pytest.raises(EnvelopeError, match=message):
        run(lambda: run_drain(plan_drain(), send, get_loads))


def test_run_drain_refuses_arguments_of_the_wrong_type() -> None:
    async def send(body: bytes) -> int:
        return 200

    with pytest.raises(EnvelopeError, match=r"^plan must be a DrainPlan, got AbortAllPlan"):
        run(lambda: run_drain(plan_abort_all(), send, send))  # type: ignore[arg-type]
    with pytest.raises(EnvelopeError, match=r"^get_loads must be an async callable, got int"):
        run(lambda: run_drain(plan_drain(), send, 1))  # type: ignore[arg-type]
    forced = plan_drain()
    msgspec.structs.force_setattr(forced, "retry_every_s", -1.0)
    with pytest.raises(EnvelopeError, match=r"^retry_every_s: expected a finite number"):
        run(lambda: run_drain(forced, send, send))  # type: ignore[arg-type]
    with pytest.raises(EnvelopeError, match=r"^send must return an awaitable, got int"):
        run(lambda: run_drain(plan_drain(), lambda body: 200, send))  # type: ignore[arg-type,return-value]


def test_a_drain_plan_is_checked() -> None:
    with pytest.raises(EnvelopeError, match=r"^abort: expected an AbortAllPlan, got bytes"):
        DrainPlan(abort=b"{}", retry_every_s=1.0, deadline_s=1.0)  # type: ignore[arg-type]
    plan = plan_drain()
    assert msgspec.json.decode(msgspec.json.encode(plan), type=DrainPlan) == plan
