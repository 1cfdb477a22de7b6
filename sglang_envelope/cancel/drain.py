"""A drain plan run with the caller's transport: abort all until the engine is idle.

`run_drain` follows a `DrainPlan`: post the abort-all body, read the caller's
``GET /v1/loads`` answer with `read_loads`, and repeat every `retry_every_s`
until the engine is idle or the next round would pass `deadline_s`. The
library opens no socket: `send` and `get_loads` are the caller's.

`asyncio` is imported by the functions that use it, so that importing the
library does not import it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import msgspec

from sglang_envelope.cancel.rollout import DrainPlan, read_loads
from sglang_envelope.errors.exceptions import EnvelopeError, show_value

__all__ = ["DrainOutcome", "DrainRound", "run_drain"]

DrainStop = Literal["idle", "deadline"]


class DrainRound(msgspec.Struct, frozen=True, kw_only=True):
    """One round of a drain: the abort posted, and the loads read after it."""

    #: Seconds after `run_drain` began, when the abort went out.
    at_s: float
    #: The HTTP status of ``POST /abort_request`` (SGLang answers 200).
    status: int
    #: Running and waiting requests the loads answer showed (None: not read in time).
    running: int | None
    waiting: int | None


class DrainOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What `run_drain` did: whether the engine was seen idle, and every round."""

    idle: bool
    rounds: tuple[DrainRound, ...]
    #: ``"idle"``: the last loads answer showed no request; ``"deadline"``: time ran out.
    stopped: DrainStop


async def _bounded(pending: object, name: str, timeout: float) -> Any:
    """`pending` awaited for at most `timeout` seconds (asyncio.TimeoutError past it)."""
    import asyncio

    if not inspect.isawaitable(pending):
        raise EnvelopeError(
            f"{name} must return an awaitable, got {type(pending).__name__}"
        )
    return await asyncio.wait_for(pending, max(timeout, 0.0))


async def _round(
    plan: DrainPlan,
    send: Callable[[bytes], Awaitable[int]],
    get_loads: Callable[[], Awaitable[bytes]],
    at: float,
    left: Callable[[], float],
) -> tuple[DrainRound, bool]:
    """One abort and one loads read, each given the time left: the round, and whether
    the engine is idle."""
    status = await _bounded(send(plan.abort.body), "send", left())
    if type(status) is not int:
        raise EnvelopeError(
            f"send must return an HTTP status (an int), got {show_value(status)}"
        )
    body = await _bounded(get_loads(), "get_loads", left())
    if type(body) is not bytes:
        raise EnvelopeError(
            f"get_loads must return the answer's bytes, got {type(body).__name__}"
        )
    load = read_loads(body)
    done = DrainRound(at_s=at, status=status, running=load.running, waiting=load.waiting)
    return done, load.idle


async def run_drain(
    plan: DrainPlan,
    send: Callable[[bytes], Awaitable[int]],
    get_loads: Callable[[], Awaitable[bytes]],
) -> DrainOutcome:
    """Carry out `plan`: abort all with `send` until `get_loads` shows the engine idle.

    Each round posts ``plan.abort.body`` with `send(body)` (which returns the
    HTTP status of ``POST /abort_request``), then reads ``GET /v1/loads``
    with `get_loads()` (which returns the answer's body bytes) and tests it
    with `read_loads`. Idle ends the drain; otherwise the next round starts
    `plan.retry_every_s` after this one began, unless that is past
    `plan.deadline_s`. Every call is given only the time left before the
    deadline; one that runs out is cancelled and ends the drain, not idle.

    An exception from `send` or `get_loads` propagates, and so does the
    `ResponseError` of a loads answer not in SGLang's shape. Raises
    `EnvelopeError` for arguments of the wrong type (a plan written by force
    after it was made included) and for callables that return anything but
    an awaitable of an int (`send`) or of bytes (`get_loads`).
    """
    import asyncio

    _check(plan, send, get_loads)
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + float(plan.deadline_s)
    rounds: list[DrainRound] = []
    while True:
        began = loop.time()
        try:
            done, idle = await _round(
                plan, send, get_loads, began - start, lambda: deadline - loop.time()
            )
        except asyncio.TimeoutError:
            return DrainOutcome(idle=False, rounds=tuple(rounds), stopped="deadline")
        rounds.append(done)
        if idle:
            return DrainOutcome(idle=True, rounds=tuple(rounds), stopped="idle")
        resume = began + float(plan.retry_every_s)
        if resume > deadline:
            return DrainOutcome(idle=False, rounds=tuple(rounds), stopped="deadline")
        await asyncio.sleep(max(0.0, resume - loop.time()))


def _check(plan: object, send: object, get_loads: object) -> None:
    if not isinstance(plan, DrainPlan):
        raise EnvelopeError(f"plan must be a DrainPlan, got {type(plan).__name__}")
    # Again: msgspec.structs.force_setattr writes frozen plans.
    DrainPlan.__post_init__(plan)
    for name, function in (("send", send), ("get_loads", get_loads)):
        if not callable(function):
            raise EnvelopeError(
                f"{name} must be an async callable, got {type(function).__name__}"
            )
