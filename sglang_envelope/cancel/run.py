"""Carrying out an abort plan, with the caller's transport.

`run_abort` follows an `AbortPlan` step by step (``docs/cancellation.md``):
wait for the first token when the plan says so, post the abort, repeat it on
the retry schedule. The library still opens no socket: `send` is the caller's
``POST /abort_request``, and the events are set by the caller's stream reader.

`asyncio` is imported by the functions that use it, so that importing the
library does not import it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from sglang_envelope.cancel.plan import AbortPlan, check_argument
from sglang_envelope.errors.exceptions import EnvelopeError, show_value

if TYPE_CHECKING:
    import asyncio

__all__ = ["AbortOutcome", "AbortSend", "StopReason", "run_abort"]

StopReason = Literal["schedule", "first_token", "finished", "deadline"]
"""Why `run_abort` stopped posting the abort.

- ``"schedule"``: every repeat in the plan was sent;
- ``"first_token"``: an abort was accepted (2xx) after the first token, which
  proves SGLang had registered the rid, so it was not lost;
- ``"finished"``: the generation response had ended, so there is nothing to abort;
- ``"deadline"``: the next repeat would not have been sent before the plan's deadline.
"""


class AbortSend(msgspec.Struct, frozen=True):
    """One abort posted: when it went out, and the status `send` returned."""

    #: Seconds after `run_abort` began.
    at_s: float
    #: The HTTP status of ``POST /abort_request`` (SGLang answers 200).
    status: int


class AbortOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What `run_abort` did."""

    #: Seconds spent waiting for the first token (0.0 when the plan does not wait).
    waited_s: float
    #: Whether the first token had been seen when the first abort went out.
    first_token_seen: bool
    #: Every abort posted, in order.
    sends: tuple[AbortSend, ...]
    #: Why it stopped.
    stopped: StopReason


async def run_abort(
    plan: AbortPlan,
    send: Callable[[bytes], Awaitable[int]],
    *,
    first_token: asyncio.Event | None = None,
    finished: asyncio.Event | None = None,
) -> AbortOutcome:
    """Carry out `plan`: post its body with `send`, on its schedule; return what was done.

    - When `plan.wait_for_first_token`, wait until `first_token` (or
      `finished`) is set or `plan.first_token_wait_s` passes (without either
      event, the whole bound: a decode worker's KV transfer must not be cut short).
    - Post `plan.body` with `send(body)`, which returns the HTTP status.
    - For each pause of `plan.retry_delays_s`: sleep, then post again. Stop
      early once `finished` is set (the generation response has ended: a pause
      under way ends then, so the call returns at once), once an abort posted
      after the first token was accepted (2xx), or when the next post would go
      out after `plan.deadline_s`.

    The first abort is always posted and awaited (bound it in `send`); a repeat
    is given only the time left before the deadline. Times are measured from
    the call. An exception from `send` propagates. Raises `EnvelopeError` for
    arguments of the wrong type, for a plan that no longer passes its own check
    (one written by force after it was made), and when `send` returns anything
    but an int.
    """
    import asyncio

    _check(plan, send, first_token, finished)
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + float(plan.deadline_s)
    if plan.wait_for_first_token:
        await _wait((first_token, finished), float(plan.first_token_wait_s))
    waited = loop.time() - start if plan.wait_for_first_token else 0.0
    first_token_seen = _is_set(first_token)
    sends, stopped = await _post_on_schedule(
        plan, send, first_token, finished, start, deadline
    )
    return AbortOutcome(
        waited_s=waited, first_token_seen=first_token_seen, sends=sends, stopped=stopped
    )


async def _post_on_schedule(
    plan: AbortPlan,
    send: Callable[[bytes], Awaitable[int]],
    first_token: asyncio.Event | None,
    finished: asyncio.Event | None,
    start: float,
    deadline: float,
) -> tuple[tuple[AbortSend, ...], StopReason]:
    """Post `plan.body` and its repeats (`run_abort`'s steps 2 and 3): the posts made, and
    why they stopped."""
    import asyncio

    loop = asyncio.get_running_loop()
    sends: list[AbortSend] = []
    delays = iter(plan.retry_delays_s)
    while not _is_set(finished):
        token_seen = _is_set(first_token)
        sent_at = loop.time()
        if sends and sent_at > deadline:  # the sleep overran
            return tuple(sends), "deadline"
        pending = send(plan.body)
        try:
            status = await sent_status(pending, deadline - sent_at if sends else None)
        except OutOfTime:
            return tuple(sends), "deadline"
        sends.append(AbortSend(sent_at - start, status))
        if token_seen and 200 <= status < 300:
            return tuple(sends), "first_token"
        delay = next(delays, None)
        if delay is None:
            return tuple(sends), "schedule"
        if loop.time() + delay > deadline:
            return tuple(sends), "deadline"
        await _wait((finished,), delay)  # a pause the answer's end cuts short
    return tuple(sends), "finished"


class OutOfTime(Exception):
    """The time `awaited` gave a call ran out: never the call's own ``TimeoutError``,
    which is its failure and propagates."""


async def awaited(pending: object, name: str, timeout: float | None) -> Any:
    """What `name` returned, awaited: for at most `timeout` seconds when not None
    (`OutOfTime` past it, the call cancelled); `EnvelopeError` when it is not
    awaitable. The call's own exceptions propagate, ``TimeoutError`` included."""
    import asyncio

    if not inspect.isawaitable(pending):
        raise EnvelopeError(
            f"{name} must return an awaitable, got {type(pending).__name__}"
        )
    if timeout is None:
        return await pending
    call = asyncio.ensure_future(pending)
    try:
        await asyncio.wait([call], timeout=max(timeout, 0.0))
    finally:  # out of time, or cancelled: the call is given up
        if not call.done():
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
    if call.cancelled():
        raise OutOfTime(name)
    return call.result()


async def sent_status(pending: object, timeout: float | None) -> int:
    """The HTTP status `send` returned, `awaited`; `EnvelopeError` unless an int."""
    status = await awaited(pending, "send", timeout)
    if type(status) is not int:
        raise EnvelopeError(
            f"send must return an HTTP status (an int), got {show_value(status)}"
        )
    return status


def _check(plan: AbortPlan, send: object, first_token: object, finished: object) -> None:
    import asyncio

    check_argument("plan", plan, AbortPlan, "an AbortPlan")
    # Again: msgspec.structs.force_setattr writes frozen plans.
    AbortPlan.__post_init__(plan)
    if not callable(send):
        raise EnvelopeError(f"send must be an async callable, got {type(send).__name__}")
    for name, event in (("first_token", first_token), ("finished", finished)):
        if event is not None:
            check_argument(name, event, asyncio.Event, "an asyncio.Event or None")


def _is_set(event: asyncio.Event | None) -> bool:
    return event is not None and event.is_set()


async def _wait(events: tuple[asyncio.Event | None, ...], timeout: float) -> None:
    """Wait until one of `events` is set or `timeout` seconds pass (all of them when
    `events` holds none)."""
    import asyncio

    waiting = [event for event in events if event is not None]
    if any(event.is_set() for event in waiting):
        return
    if not waiting:
        await asyncio.sleep(timeout)
        return
    waiters = [asyncio.ensure_future(event.wait()) for event in waiting]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
