"""The cancellation plan: how a worker stops one engine request, as data.

Pure data, no I/O. `plan_abort` says what to send to SGLang's
`POST /abort_request`, whether to wait for the first token first, when to repeat
the abort and when to give up draining; the worker's transport carries it out.
`ABORT_RULES` is the whole rule set; the SGLang facts behind it are in
`docs/cancellation.md`.

The checks every plan of the `cancel` folder makes (`check_seconds`,
`check_argument`, `check_body`) are here too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import reduce
from itertools import accumulate
from operator import add
from typing import Any, NamedTuple

import msgspec

from sglang_envelope.errors.exceptions import EnvelopeError, show_value
from sglang_envelope.request.engine import EngineRequest, Role
from sglang_envelope.request.envelope import check_text
from sglang_envelope.request.sequences import samples_per_prompt

__all__ = [
    "ABORT_RULES",
    "DEFAULT_DEADLINE_S",
    "DEFAULT_FIRST_TOKEN_WAIT_S",
    "DEFAULT_RETRY_DELAYS_S",
    "AbortPlan",
    "AbortPolicy",
    "AbortStep",
    "check_argument",
    "check_body",
    "check_seconds",
    "plan_abort",
]

#: Pauses between repeats of the abort: a short doubling schedule (1.55 s in all).
DEFAULT_RETRY_DELAYS_S: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4, 0.8)
#: How long a streaming decode request may wait for its first token before the abort.
DEFAULT_FIRST_TOKEN_WAIT_S = 5.0
#: How long after cancellation the worker keeps draining the generation response.
DEFAULT_DEADLINE_S = 10.0


def check_seconds(name: str, value: object) -> None:
    """Raise `EnvelopeError` naming `name` unless `value` is a finite number of seconds
    >= 0 (a plan's, or a rollout control's)."""
    # show_value, not repr: a hostile value may be nested too deep to show, or an int
    # too long.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EnvelopeError(
            f"{name}: expected a number of seconds, got {show_value(value)}"
        )
    try:
        seconds = float(value)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds) or seconds < 0:
        raise EnvelopeError(
            f"{name}: expected a finite number of seconds >= 0, got {show_value(value)}"
        )


def check_argument(name: str, value: object, kind: type, what: str) -> None:
    """Raise `EnvelopeError` ("`name` must be `what`, got its type") unless `value` is a
    `kind`."""
    if not isinstance(value, kind):
        raise EnvelopeError(f"{name} must be {what}, got {type(value).__name__}")


_encoder = msgspec.json.Encoder()


def check_body(body: object, kind: type[msgspec.Struct], made_by: str, shape: str) -> Any:
    """`body` decoded as a `kind`; `EnvelopeError` naming ``body`` unless it is exactly
    the bytes `made_by` builds (its `shape`). One decode and one encode, each linear in
    the body's length."""
    expected = f"expected the bytes {made_by} builds, {shape}"
    if type(body) is not bytes:
        raise EnvelopeError(f"body: {expected}, got {type(body).__name__}")
    try:
        value = msgspec.json.decode(body, type=kind)
    except (msgspec.DecodeError, EnvelopeError) as error:
        raise EnvelopeError(
            f"body: {expected}, got {show_value(body)} ({error})"
        ) from None
    if _encoder.encode(value) != body:
        raise EnvelopeError(
            f"body: {expected}, got {show_value(body)} (not in that form)"
        )
    return value


def _check_times(delays: object, wait: object, deadline: object) -> None:
    """The times of a policy or a plan, each a finite number of seconds >= 0."""
    if not isinstance(delays, tuple):
        raise EnvelopeError(
            f"retry_delays_s: expected a tuple of seconds, got {show_value(delays)}"
        )
    for index, delay in enumerate(delays):
        check_seconds(f"retry_delays_s[{index}]", delay)
    check_seconds("first_token_wait_s", wait)
    check_seconds("deadline_s", deadline)


class AbortPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """The timing a worker allows for cancelling one engine request.

    - `retry_delays_s`: the pauses between repeats of the abort, in order
      (the first abort goes without a pause);
    - `first_token_wait_s`: how long a streaming decode request that has not
      yet streamed a token may wait for one before it is aborted;
    - `deadline_s`: how long after cancellation the worker keeps the generation
      connection open to drain the engine's answer. Nothing in a plan goes past it.

    Every value is a finite number of seconds >= 0; anything else raises
    `EnvelopeError` naming the field.
    """

    retry_delays_s: tuple[float, ...] = DEFAULT_RETRY_DELAYS_S
    first_token_wait_s: float = DEFAULT_FIRST_TOKEN_WAIT_S
    deadline_s: float = DEFAULT_DEADLINE_S

    def __post_init__(self) -> None:
        _check_times(self.retry_delays_s, self.first_token_wait_s, self.deadline_s)


class _AbortBody(msgspec.Struct, forbid_unknown_fields=True):
    """The one abort body the library sends: `io_struct.AbortReq` with only its rid.

    Refused: an empty or null rid (SGLang's scheduler matches rids by prefix, and
    `AbortReq` reads null as ""), and `abort_all` in any form (no plan aborts every
    request)."""

    rid: str

    def __post_init__(self) -> None:
        check_text(self.rid, "rid")


class AbortPlan(msgspec.Struct, frozen=True, kw_only=True):
    """How to cancel one engine request; the transport carries it out.

    1. If `wait_for_first_token`, wait until the stream yields its first token
       or `first_token_wait_s` passes, whichever comes first.
    2. `POST /abort_request` with `body`.
    3. For each pause in `retry_delays_s`: sleep, then post `body` again, unless
       the generation response has already ended.
    4. Meanwhile keep the generation connection open and drain it; close it
       when the engine's answer ends or `deadline_s` after step 1 began.

    `first_token_wait_s + sum(retry_delays_s) <= deadline_s` always holds (the
    sum taken left to right), and `first_token_wait_s` is 0.0 unless the plan
    waits. A plan is checked when made, replaced or decoded: `body` must be the
    bytes `plan_abort` builds, `{"rid":"..."}` with a non-empty rid and nothing
    else (the library never aborts every request), every time a finite number of
    seconds >= 0. Anything else raises `EnvelopeError` naming the field
    (`msgspec.ValidationError` with the same message when decoding).
    """

    body: bytes
    wait_for_first_token: bool
    first_token_wait_s: float
    retry_delays_s: tuple[float, ...]
    deadline_s: float

    def __post_init__(self) -> None:
        shape = '{"rid":"..."} with a non-empty rid'
        check_body(self.body, _AbortBody, "plan_abort", shape)
        if type(self.wait_for_first_token) is not bool:
            raise EnvelopeError(
                "wait_for_first_token: expected a bool, "
                f"got {type(self.wait_for_first_token).__name__}"
            )
        _check_times(self.retry_delays_s, self.first_token_wait_s, self.deadline_s)
        if not self.wait_for_first_token and self.first_token_wait_s != 0:
            raise EnvelopeError(
                "first_token_wait_s: expected 0.0 in a plan that does not wait for the "
                f"first token, got {show_value(self.first_token_wait_s)}"
            )
        # Added left to right, as `_trim` adds them (`sum` may round otherwise).
        retries = reduce(add, map(float, self.retry_delays_s), 0.0)
        end = float(self.first_token_wait_s) + retries
        if not end <= float(self.deadline_s):
            raise EnvelopeError(
                "deadline_s: expected at least "
                f"first_token_wait_s + sum(retry_delays_s) = {end!r}, "
                f"got {show_value(self.deadline_s)}"
            )


class AbortStep(NamedTuple):
    """One row of `ABORT_RULES`."""

    #: Wait for the first token before aborting (a decode worker's KV transfer must end).
    wait_for_first_token: bool
    #: Repeat the abort on the retry schedule: SGLang may not have registered the rid yet.
    repeat: bool


_AT_ONCE_REPEATED = AbortStep(wait_for_first_token=False, repeat=True)
_AT_ONCE_SINGLE = AbortStep(wait_for_first_token=False, repeat=False)
_AFTER_FIRST_TOKEN = AbortStep(wait_for_first_token=True, repeat=True)

#: (stream, role, first_token_seen) -> step. A unary answer shows no first token,
#: so unary rows repeat whatever the caller says; a streamed token proves the
#: rid is registered, so one abort is enough after it.
ABORT_RULES: Mapping[tuple[bool, Role, bool], AbortStep] = {
    (False, Role.AGGREGATED, False): _AT_ONCE_REPEATED,
    (False, Role.AGGREGATED, True): _AT_ONCE_REPEATED,
    (False, Role.DECODE, False): _AT_ONCE_REPEATED,
    (False, Role.DECODE, True): _AT_ONCE_REPEATED,
    (False, Role.PREFILL, False): _AT_ONCE_REPEATED,
    (False, Role.PREFILL, True): _AT_ONCE_REPEATED,
    (True, Role.AGGREGATED, False): _AT_ONCE_REPEATED,
    (True, Role.AGGREGATED, True): _AT_ONCE_SINGLE,
    (True, Role.DECODE, False): _AFTER_FIRST_TOKEN,
    (True, Role.DECODE, True): _AT_ONCE_SINGLE,
    (True, Role.PREFILL, False): _AT_ONCE_REPEATED,
    (True, Role.PREFILL, True): _AT_ONCE_SINGLE,
}


def _trim(
    delays: tuple[float, ...], *, wait: float, deadline: float
) -> tuple[float, ...]:
    """The longest prefix of `delays` with `wait + sum(prefix) <= deadline`, the sums
    taken left to right (they only grow, so the delays that fit are a prefix)."""
    floats = tuple(map(float, delays))
    sums = accumulate(floats)
    return tuple(
        d for d, total in zip(floats, sums, strict=True) if wait + total <= deadline
    )


def plan_abort(
    engine_request: EngineRequest,
    *,
    first_token_seen: bool,
    policy: AbortPolicy = AbortPolicy(),  # noqa: B008 -- frozen, so sharing is safe
    rid: str | None = None,
) -> AbortPlan:
    """The plan for cancelling `engine_request` now.

    `first_token_seen` says whether its stream has already yielded a token.
    `rid` is the id to abort when not the request's own: SGLang runs each
    sample of an n > 1 request under a fresh random rid (the ids of its answer's
    frames, `ChoicesAggregator.rids`), which the request's rid does not reach, so
    such a request needs `rid` (one plan a sample). Raises `EnvelopeError` when
    the rid is missing or empty (SGLang matches abort rids by prefix, so an empty
    rid would name every request), for n > 1 without `rid`, and for arguments of
    the wrong type, naming the argument.
    """
    check_argument("engine_request", engine_request, EngineRequest, "an EngineRequest")
    check_argument("first_token_seen", first_token_seen, bool, "a bool")
    check_argument("policy", policy, AbortPolicy, "an AbortPolicy")
    # Only build_engine_request makes an EngineRequest, so its role and body are sound.
    if rid is None:
        if samples_per_prompt(engine_request.body) > 1:
            raise EnvelopeError(
                "rid: an n > 1 request's samples run under fresh rids its own does not "
                "reach: pass each sample's rid (its frames' meta_info.id) as rid="
            )
        rid = engine_request.rid
    check_text(rid, "rid")
    step = ABORT_RULES[(engine_request.stream, engine_request.role, first_token_seen)]
    deadline = float(policy.deadline_s)
    wait = 0.0
    if step.wait_for_first_token:
        wait = min(float(policy.first_token_wait_s), deadline)
    delays = (
        _trim(policy.retry_delays_s, wait=wait, deadline=deadline) if step.repeat else ()
    )
    return AbortPlan(
        body=_encoder.encode(_AbortBody(rid)),
        wait_for_first_token=step.wait_for_first_token,
        first_token_wait_s=wait,
        retry_delays_s=delays,
        deadline_s=deadline,
    )
