"""A drain plan run with the caller's transport: abort all until the engine is idle.

The library opens no socket: `send` and `get_loads` are the caller's. `asyncio` is
imported by the functions that use it, so that importing the library does not
import it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

import msgspec

from sglang_envelope.cancel.plan import check_argument
from sglang_envelope.cancel.rollout import DrainPlan, read_loads
from sglang_envelope.cancel.run import OutOfTime, awaited, sent_status
from sglang_envelope.errors.exceptions import EnvelopeError

__all__ = ["DrainOutcome", "DrainRound", "run_drain"]

DrainStop = Literal["idle", "deadline"]


class DrainRound(msgspec.Struct, frozen=True, kw_only=True):
    """One round of a drain: the abort posted, and the loads read after it."""

    #: Seconds after `run_drain` began, when the abort went out.
    at_s: float
    #: The HTTP status of ``POST /abort_request`` (SGLang answers 200).
    status: int
    #: Running and waiting requests the loads answer showed (a round whose answer did
    #: not come in time is not recorded: the drain ended there).
    running: int
    waiting: int


class DrainOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What `run_drain` did: whether the engine was seen idle, and every round."""

    idle: bool
    rounds: tuple[DrainRound, ...]
    #: ``"idle"``: the last loads answer showed no request; ``"deadline"``: time ran out.
    stopped: DrainStop


async def run_drain(
    plan: DrainPlan,
    send: Callable[[bytes], Awaitable[int]],
    get_loads: Callable[[], Awaitable[bytes]],
) -> DrainOutcome:
    """Carry out `plan`: abort all with `send` until `get_loads` shows the engine idle.

    Each round posts ``plan.abort.body`` with `send(body)`, which returns the HTTP
    status, then reads `get_loads()`, the ``GET /v1/loads`` answer's bytes, with
    `read_loads`. Idle ends the drain; otherwise the next round starts
    `plan.retry_every_s` after this one began, unless that is past `plan.deadline_s`.
    Each call is given only the time left; one that runs out ends the drain, not idle.

    Exceptions of `send` and `get_loads` propagate, and `read_loads`'s
    `ResponseError`. Raises `EnvelopeError` for arguments of the wrong type (a plan
    written by force after it was made included) and for callables that return
    anything but an awaitable of an int (`send`) or of bytes (`get_loads`).
    """
    import asyncio

    check_argument("plan", plan, DrainPlan, "a DrainPlan")
    DrainPlan.__post_init__(plan)  # again: msgspec.structs.force_setattr writes it
    for name, function in (("send", send), ("get_loads", get_loads)):
        if not callable(function):
            raise EnvelopeError(
                f"{name} must be an async callable, got {type(function).__name__}"
            )
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + float(plan.deadline_s)
    rounds: list[DrainRound] = []
    idle = False
    while True:
        began = loop.time()
        try:
            status = await sent_status(send(plan.abort.body), deadline - loop.time())
            body = await awaited(get_loads(), "get_loads", deadline - loop.time())
        except OutOfTime:
            break
        if type(body) is not bytes:
            raise EnvelopeError(
                f"get_loads must return the answer's bytes, got {type(body).__name__}"
            )
        load = read_loads(body)
        at = began - start
        rounds.append(
            DrainRound(at_s=at, status=status, running=load.running, waiting=load.waiting)
        )
        idle = load.idle
        resume = began + float(plan.retry_every_s)
        if idle or resume > deadline:
            break
        await asyncio.sleep(max(0.0, resume - loop.time()))
    stopped: DrainStop = "idle" if idle else "deadline"
    return DrainOutcome(idle=idle, rounds=tuple(rounds), stopped=stopped)
