"""RL rollout controls: abort all, drain, pause and continue an engine; continue a
generation.

Each control is a plan (the path and the exact body to send, checked when it is
made) for the SGLang release of its `Target`; `run_drain` carries a drain out
with the caller's own transport, and `continuation_request` asks for what is
left of an aborted or length-stopped generation. See docs/rollout.md.
"""

from sglang_envelope.cancel.continuation import continuation_request
from sglang_envelope.cancel.drain import DrainOutcome, DrainRound, run_drain
from sglang_envelope.cancel.rollout import (
    AbortAllPlan,
    ContinuePlan,
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
)

__all__ = [
    "AbortAllPlan",
    "ContinuePlan",
    "DrainOutcome",
    "DrainPlan",
    "DrainPolicy",
    "DrainRound",
    "EngineLoad",
    "PausePlan",
    "WeightVersionSpan",
    "continuation_request",
    "engine_idle",
    "plan_abort_all",
    "plan_continue",
    "plan_drain",
    "plan_pause",
    "read_loads",
    "run_drain",
]
