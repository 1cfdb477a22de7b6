"""Rollout controls as plans: abort every request, drain, pause and continue
generation; and SGLang's ``GET /v1/loads`` answer read (is the engine idle?).

Pure data, no I/O, in the style of `plan_abort`: each plan is the path and the
exact body to send, checked when it is made; `run_drain` carries a drain out. The
SGLang facts behind them, read from each known release's code, are in
``docs/rollout.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal, NamedTuple

import msgspec

from sglang_envelope.cancel.plan import check_argument, check_body, check_seconds
from sglang_envelope.errors.exceptions import (
    EnvelopeError,
    LimitExceeded,
    ResponseError,
    show_value,
)
from sglang_envelope.releases.target import Target
from sglang_envelope.request.limits import check_bound

__all__ = [
    "CONTROLS",
    "DEFAULT_DRAIN_DEADLINE_S",
    "DEFAULT_DRAIN_RETRY_S",
    "DEFAULT_MAX_LOADS_BYTES",
    "PAUSE_MODES",
    "AbortAllPlan",
    "ContinuePlan",
    "DrainPlan",
    "DrainPolicy",
    "EngineLoad",
    "PausePlan",
    "ReleaseControls",
    "WeightVersionSpan",
    "engine_idle",
    "plan_abort_all",
    "plan_continue",
    "plan_drain",
    "plan_pause",
    "read_loads",
]

PauseMode = Literal["abort", "retract", "in_place"]
#: `PauseGenerationReqInput.mode`'s values, SGLang's default first.
PAUSE_MODES: tuple[str, ...] = ("abort", "retract", "in_place")
#: slime's drain: abort all, then look again every 3 s ...
DEFAULT_DRAIN_RETRY_S = 3.0
#: ... for up to 180 s.
DEFAULT_DRAIN_DEADLINE_S = 180.0
#: The largest ``/v1/loads`` answer read (a load is about 1 KiB; 1024 DP ranks fit).
DEFAULT_MAX_LOADS_BYTES = 1 << 20


class ReleaseControls(NamedTuple):
    """What one SGLang release's HTTP server has for rollout control."""

    #: `AbortReq`'s fields, as ``/abort_request`` parses them.
    abort_fields: tuple[str, ...]
    #: `PauseGenerationReqInput.mode`'s values; empty without ``/pause_generation``.
    pause_modes: tuple[str, ...]
    #: `ContinueGenerationReqInput`'s fields; None without ``/continue_generation``.
    continue_fields: tuple[str, ...] | None
    #: Whether ``GET /v1/loads`` is served.
    loads: bool


_ABORT_FIELDS = (
    "rid",
    "http_worker_ipc",
    "abort_all",
    "finished_reason",
    "abort_message",
    "weight_versions",
)
_SAME = ReleaseControls(
    _ABORT_FIELDS, PAUSE_MODES, ("rid", "http_worker_ipc", "torch_empty_cache"), True
)
#: Each known release's controls, read from its `http_server.py` and `io_struct.py`.
CONTROLS: Mapping[str, ReleaseControls] = {
    "0.5.21": _SAME,
    "0.5.22": _SAME,
    "0.5.23": _SAME,
}


def _controls(target: Target) -> ReleaseControls:
    check_argument("target", target, Target, "a Target")
    controls = CONTROLS.get(target.sglang)
    if controls is None:  # a release with tables but no controls read yet
        raise EnvelopeError(
            f"Target.sglang: no rollout controls are known for {target.sglang}"
        )
    return controls


class WeightVersionSpan(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """SGLang's `WeightVersionSpan`:
    the output tokens ``[start, end)`` made under weights `version`."""

    version: str
    start: int
    end: int

    def __post_init__(self) -> None:
        if type(self.version) is not str:
            raise EnvelopeError(
                f"version: expected a string, got {show_value(self.version)}"
            )
        for name in ("start", "end"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise EnvelopeError(
                    f"{name}: expected an int >= 0, got {show_value(value)}"
                )
        if self.end < self.start:
            raise EnvelopeError(
                f"end: expected at least start = {self.start}, got {self.end}"
            )


class _AbortAllBody(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    abort_all: Literal[True]
    weight_versions: tuple[WeightVersionSpan, ...] | None = None


class _PauseBody(msgspec.Struct, forbid_unknown_fields=True):
    mode: PauseMode


class _ContinueBody(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    torch_empty_cache: bool = True


def _check_path(path: object, expected: str) -> None:
    if path != expected or type(path) is not str:
        raise EnvelopeError(f"path: expected {expected!r}, got {show_value(path)}")


class AbortAllPlan(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /abort_request`` with ``abort_all`` true: every request held ends.

    `body` is exactly what `plan_abort_all` builds: ``{"abort_all":true}``,
    with ``"weight_versions"`` (a list of ``{"version","start","end"}``) when
    given. Checked when made, replaced or decoded, like `AbortPlan` (which
    refuses ``abort_all`` on purpose: it cancels one request).
    """

    body: bytes
    path: str = "/abort_request"

    def __post_init__(self) -> None:
        _check_path(self.path, "/abort_request")
        check_body(self.body, _AbortAllBody, "plan_abort_all", '{"abort_all":true,...}')


class PausePlan(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /pause_generation`` with ``{"mode": ...}`` (see `plan_pause`)."""

    body: bytes
    mode: str
    path: str = "/pause_generation"

    def __post_init__(self) -> None:
        _check_path(self.path, "/pause_generation")
        read = check_body(self.body, _PauseBody, "plan_pause", '{"mode":"..."}')
        if self.mode != read.mode:
            raise EnvelopeError(
                f"mode: expected the body's {read.mode!r}, got {show_value(self.mode)}"
            )


class ContinuePlan(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /continue_generation`` with ``{}`` or ``{"torch_empty_cache":false}``."""

    body: bytes
    path: str = "/continue_generation"

    def __post_init__(self) -> None:
        _check_path(self.path, "/continue_generation")
        check_body(
            self.body, _ContinueBody, "plan_continue", '{} or {"torch_empty_cache":false}'
        )


def _spans(weight_versions: object) -> tuple[WeightVersionSpan, ...]:
    if not isinstance(weight_versions, (tuple, list)):
        raise EnvelopeError(
            "weight_versions: expected a sequence of WeightVersionSpan, "
            f"got {type(weight_versions).__name__}"
        )
    for index, span in enumerate(weight_versions):
        if not isinstance(span, WeightVersionSpan):
            raise EnvelopeError(
                f"weight_versions[{index}]: expected a WeightVersionSpan, "
                f"got {type(span).__name__}"
            )
    return tuple(weight_versions)


def plan_abort_all(
    *,
    target: Target = Target(),  # noqa: B008 -- frozen, so sharing is safe
    weight_versions: tuple[WeightVersionSpan, ...] | None = None,
) -> AbortAllPlan:
    """The plan for aborting every request on the server of `target`.

    `weight_versions` goes into the body where the release's `AbortReq` has
    the field (every known release does); SGLang's ``/abort_request`` parses
    it and passes only ``rid`` and ``abort_all`` on (``docs/rollout.md``).
    Raises `EnvelopeError` naming the argument for a wrong type, and naming
    ``weight_versions`` for a release whose `AbortReq` lacks it.
    """
    controls = _controls(target)
    spans = None
    if weight_versions is not None:
        spans = _spans(weight_versions)
        if "weight_versions" not in controls.abort_fields:
            raise EnvelopeError(
                f"weight_versions: SGLang {target.sglang}'s AbortReq has no such field"
            )
    return AbortAllPlan(body=msgspec.json.encode(_AbortAllBody(True, spans)))


def plan_pause(
    mode: str = "abort",
    *,
    target: Target = Target(),  # noqa: B008 -- frozen, so sharing is safe
) -> PausePlan:
    """The plan for pausing generation on the server of `target`.

    `mode` is SGLang's: ``"abort"`` (the default: abort every request, then
    hold new ones until continued), ``"retract"`` (running requests go back to
    the waiting queue, their KV cache may be flushed) or ``"in_place"`` (they
    stay, with their KV cache). Raises `EnvelopeError` for another mode, and
    for a release without ``/pause_generation``.
    """
    controls = _controls(target)
    if not controls.pause_modes:
        raise EnvelopeError(f"mode: SGLang {target.sglang} has no /pause_generation")
    if type(mode) is not str or mode not in controls.pause_modes:
        listed = ", ".join(repr(m) for m in controls.pause_modes)
        raise EnvelopeError(f"mode: expected one of {listed}, got {show_value(mode)}")
    return PausePlan(body=msgspec.json.encode({"mode": mode}), mode=mode)


def plan_continue(
    *,
    torch_empty_cache: bool = True,
    target: Target = Target(),  # noqa: B008 -- frozen, so sharing is safe
) -> ContinuePlan:
    """The plan for continuing generation after `plan_pause` on the server of `target`.

    `torch_empty_cache` (SGLang's default: true) empties PyTorch's cache
    before un-pausing; the body states it only when false. Raises
    `EnvelopeError` for a wrong type and for a release without
    ``/continue_generation``.
    """
    controls = _controls(target)
    if controls.continue_fields is None:
        raise EnvelopeError(f"target: SGLang {target.sglang} has no /continue_generation")
    if type(torch_empty_cache) is not bool:
        raise EnvelopeError(
            f"torch_empty_cache: expected a bool, got {type(torch_empty_cache).__name__}"
        )
    return ContinuePlan(body=msgspec.json.encode(_ContinueBody(torch_empty_cache)))


class DrainPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How long a drain keeps aborting: every `retry_every_s`, for up to `deadline_s`.

    The defaults are slime's (3 s and 180 s). `retry_every_s` is a finite
    number of seconds > 0 and `deadline_s` one >= 0; else `EnvelopeError`.
    """

    retry_every_s: float = DEFAULT_DRAIN_RETRY_S
    deadline_s: float = DEFAULT_DRAIN_DEADLINE_S

    def __post_init__(self) -> None:
        _check_drain_times(self.retry_every_s, self.deadline_s)


def _check_drain_times(retry_every_s: object, deadline_s: object) -> None:
    check_seconds("retry_every_s", retry_every_s)
    if not float(retry_every_s) > 0:  # type: ignore[arg-type]  # checked: a number
        raise EnvelopeError(
            f"retry_every_s: expected more than 0 seconds, got {retry_every_s!r}"
        )
    check_seconds("deadline_s", deadline_s)


class DrainPlan(msgspec.Struct, frozen=True, kw_only=True):
    """Abort every request until the engine reports idle, bounded in time: post
    `abort`, read ``GET loads_path``, and again every `retry_every_s` until the answer
    shows the engine idle or the next round would pass `deadline_s` (`run_drain`)."""

    abort: AbortAllPlan
    retry_every_s: float
    deadline_s: float
    loads_path: str = "/v1/loads?include=core"

    def __post_init__(self) -> None:
        if not isinstance(self.abort, AbortAllPlan):
            raise EnvelopeError(
                f"abort: expected an AbortAllPlan, got {type(self.abort).__name__}"
            )
        AbortAllPlan.__post_init__(self.abort)
        _check_drain_times(self.retry_every_s, self.deadline_s)
        _check_path(self.loads_path, "/v1/loads?include=core")


def plan_drain(
    *,
    target: Target = Target(),  # noqa: B008 -- frozen, so sharing is safe
    weight_versions: tuple[WeightVersionSpan, ...] | None = None,
    policy: DrainPolicy = DrainPolicy(),  # noqa: B008 -- frozen, so sharing is safe
) -> DrainPlan:
    """The plan that drains the server of `target`: `plan_abort_all` until it is idle.

    Raises what `plan_abort_all` raises, `EnvelopeError` for a `policy` that is
    not a `DrainPolicy`, and for a release without ``GET /v1/loads``.
    """
    abort = plan_abort_all(target=target, weight_versions=weight_versions)
    check_argument("policy", policy, DrainPolicy, "a DrainPolicy")
    if not _controls(target).loads:
        raise EnvelopeError(f"target: SGLang {target.sglang} has no GET /v1/loads")
    return DrainPlan(
        abort=abort,
        retry_every_s=float(policy.retry_every_s),
        deadline_s=float(policy.deadline_s),
    )


class _Load(msgspec.Struct):
    num_running_reqs: Annotated[int, msgspec.Meta(ge=0)]
    num_waiting_reqs: Annotated[int, msgspec.Meta(ge=0)]


class _Loads(msgspec.Struct):
    loads: list[_Load]


_loads_decoder = msgspec.json.Decoder(_Loads)


class EngineLoad(msgspec.Struct, frozen=True, kw_only=True):
    """The requests a ``/v1/loads`` answer shows, summed over its DP ranks."""

    #: Requests in running batches (`num_running_reqs`).
    running: int
    #: Requests queued (`num_waiting_reqs`), the disaggregation queues included.
    waiting: int
    #: How many DP ranks the answer lists.
    ranks: int

    @property
    def idle(self) -> bool:
        """No running and no waiting request, on at least one rank."""
        return self.ranks > 0 and self.running == 0 and self.waiting == 0


def read_loads(body: bytes, *, max_bytes: int = DEFAULT_MAX_LOADS_BYTES) -> EngineLoad:
    """The running and waiting requests of a ``GET /v1/loads`` answer body (JSON bytes).

    Reads only ``loads[i].num_running_reqs`` and ``loads[i].num_waiting_reqs``
    (other keys are ignored). Raises `LimitExceeded` for a body over
    `max_bytes` (before parsing it), `ResponseError` naming the key for a body
    of another shape, and `EnvelopeError` for arguments of the wrong type.
    """
    if type(body) is not bytes:
        raise EnvelopeError(f"body must be bytes, got {type(body).__name__}")
    check_bound("max_bytes", max_bytes)
    if len(body) > max_bytes:
        raise LimitExceeded(
            "max_bytes",
            max_bytes,
            f"the /v1/loads answer is {len(body)} bytes, more than max_bytes={max_bytes}",
        )
    try:
        loads = _loads_decoder.decode(body).loads
    # A ValidationError names the key.
    except (msgspec.DecodeError, RecursionError) as error:
        raise ResponseError(
            f"the /v1/loads answer is not SGLang's shape: {error}"
        ) from None
    return EngineLoad(
        running=sum(load.num_running_reqs for load in loads),
        waiting=sum(load.num_waiting_reqs for load in loads),
        ranks=len(loads),
    )


def engine_idle(body: bytes, *, max_bytes: int = DEFAULT_MAX_LOADS_BYTES) -> bool:
    """Whether a ``GET /v1/loads`` answer shows the engine idle: every DP rank with no
    running and no waiting request (`read_loads(body).idle`). An answer listing no rank
    is not idle: it shows nothing. Raises what `read_loads` raises."""
    return read_loads(body, max_bytes=max_bytes).idle
