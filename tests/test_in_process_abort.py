"""An abort plan carried out through an in-process engine's tokenizer manager."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sglang_envelope import (
    AbortPolicy,
    Bootstrap,
    EngineRequest,
    EnvelopeError,
    Role,
    build_engine_request,
    decode_client_request,
    plan_abort,
    run_abort,
    to_worker_envelope,
)
from sglang_envelope.in_process import engine_abort
from tests.strategies import DEPLOYMENT

FLAT = (
    b'{"input_ids": [1, 2], "stream": false, "return_logprob": true, "top_logprobs_num": 2,'
    b' "return_flat_raw_output_top_logprobs": true}'
)


def engine_request(body: bytes, role: Role) -> EngineRequest:
    envelope = to_worker_envelope(decode_client_request(body), rid="engine-rid")
    bootstrap = None if role is Role.AGGREGATED else Bootstrap("10.0.0.1", 8998, 7)
    return build_engine_request(
        envelope, input_ids=[1, 2], role=role, deployment=DEPLOYMENT, bootstrap=bootstrap
    )


def unary_flat_engine() -> EngineRequest:
    """The case SGLang's output-flat needs unary: aborted without waiting for an answer."""
    return engine_request(FLAT, Role.AGGREGATED)


def decode_engine() -> EngineRequest:
    return engine_request(b'{"input_ids": [1, 2], "stream": true}', Role.DECODE)


class Manager:
    """SGLang 0.5.23's `TokenizerManager.abort_request`, as far as aborts go: a rid it
    holds is aborted once (`abort_sent`), any other abort is dropped."""

    def __init__(self, held: set[str]) -> None:
        self.held = held
        self.calls: list[str] = []
        self.dispatched: list[str] = []
        self.sent: set[str] = set()

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        self.calls.append(rid)
        if rid in self.held and rid not in self.sent:
            self.sent.add(rid)
            self.dispatched.append(rid)


class Engine:
    def __init__(self, manager: Manager) -> None:
        self.tokenizer_manager = manager


POLICY = AbortPolicy(retry_delays_s=(0.01, 0.01), first_token_wait_s=0.05, deadline_s=1.0)


def test_a_unary_request_is_aborted_at_once_through_the_engine() -> None:
    engine = unary_flat_engine()
    manager = Manager({engine.rid})
    plan = plan_abort(engine, first_token_seen=False, policy=POLICY)
    outcome = asyncio.run(run_abort(plan, engine_abort(Engine(manager))))
    assert not plan.wait_for_first_token and outcome.waited_s == 0.0
    assert manager.calls == [engine.rid] * 3  # the plan's repeats, dropped by SGLang
    assert manager.dispatched == [engine.rid]  # one abort reaches the scheduler


def test_a_streaming_decode_waits_for_its_first_token_and_stops_once_accepted() -> None:
    engine = decode_engine()
    manager = Manager({engine.rid})

    async def main() -> Any:
        first_token = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, first_token.set)
        plan = plan_abort(engine, first_token_seen=False, policy=POLICY)
        return plan, await run_abort(
            plan, engine_abort(manager), first_token=first_token
        )  # the tokenizer manager alone, as Dynamo's worker holds it

    plan, outcome = asyncio.run(main())
    assert plan.wait_for_first_token and outcome.first_token_seen
    assert outcome.stopped == "first_token" and manager.dispatched == [engine.rid]


def test_a_host_s_own_abort_and_the_plan_s_reach_the_scheduler_once() -> None:
    engine = unary_flat_engine()
    manager = Manager({engine.rid})
    manager.abort_request(rid=engine.rid)  # the host's cancellation monitor, first
    asyncio.run(
        run_abort(plan_abort(engine, first_token_seen=False, policy=POLICY), engine_abort(manager))
    )
    assert len(manager.calls) == 4 and manager.dispatched == [engine.rid]


@pytest.mark.parametrize("engine", [object(), Engine(object())])  # type: ignore[arg-type]
def test_what_cannot_abort_is_refused_at_once(engine: Any) -> None:
    with pytest.raises(EnvelopeError, match="has no abort_request"):
        engine_abort(engine)


@pytest.mark.parametrize("body", [b"{}", b'{"abort_all":true}', b'{"rid": 3}', b"x", None])
def test_a_body_that_is_not_an_abort_plan_s_is_named(body: Any) -> None:
    """`send` takes an abort plan's body: any other (an abort-all plan's, which the tokenizer
    manager's `abort_request(rid=...)` would not carry) is an `EnvelopeError` naming it,
    never Python's `KeyError`, and nothing is aborted."""
    manager = Manager(held={"a"})

    async def sent() -> int:
        return await engine_abort(manager)(body)

    with pytest.raises(EnvelopeError, match=r"^body: expected an abort plan's \{\"rid\": \.\.\.\}"):
        asyncio.run(sent())
    assert manager.calls == []
