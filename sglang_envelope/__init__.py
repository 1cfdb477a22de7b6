"""sglang-envelope: the request and response contract of SGLang's native /generate.

The top level holds what a frontend or worker starts from: the errors, the
request side (a client's body to the engine request), the main response
readers, the serving loop (`Service` over the caller's `Transport`) and
cancellation. The rest is in namespaces, each with its own `__all__`:
`sglang_envelope.stream` (SSE frame by frame), `.pair` (a prefill/decode pair),
`.rollout` (RL rollout controls), `.flat` (the flat top-logprob codec), `.routed`
(the routed-experts codec), `.in_process` (SGLang run in-process),
`.overrides` (SGLang's request-header overrides), `.contract` (releases and
deployment rules as data), `.limits` (the default bounds) and `.types` (types
for annotations); `.testing` and `.adapters.*` are imported on their own.

The request and response functions are pure: they take bytes or values and
return values. The library opens no socket: `Service`, `run_abort` and
`run_drain` do their I/O through the callables and transport the caller gives.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import TYPE_CHECKING, Any

from sglang_envelope.errors.exceptions import (
    EngineError,
    EnvelopeError,
    LimitExceeded,
    RequestRejected,
    ResponseError,
    UpstreamError,
)
from sglang_envelope.errors.answers import error_response, stream_requested

# --- request side ---
from sglang_envelope.request.deployment import Deployment
from sglang_envelope.request.engine import EngineRequest, Role, build_engine_request
from sglang_envelope.request.routing import Bootstrap, Routing
from sglang_envelope.request.envelope import (
    WorkerEnvelope,
    decode_envelope,
    encode_envelope,
    to_worker_envelope,
)
from sglang_envelope.request.sequences import decode_sequences
from sglang_envelope.request.types import (
    ClientRequest,
    SamplingParams,
    decode_client_request,
)
from sglang_envelope.releases.target import Target

# --- response side ---
from sglang_envelope.response.aggregate import (
    aggregate_sse,
    aggregate_sse_async,
    parse_unary,
)
from sglang_envelope.response.types import GenerateResponse
from sglang_envelope.response.merge import finalize_response
from sglang_envelope.response.relay import relay_sse, relay_sse_async

# --- the serving loop ---
from sglang_envelope.serve.answer import Answer
from sglang_envelope.serve.server_info import read_deployment
from sglang_envelope.serve.service import CLIENT_GONE, Service
from sglang_envelope.serve.transport import EngineReply, Transport

# --- cancellation ---
from sglang_envelope.cancel.plan import AbortPolicy, plan_abort
from sglang_envelope.cancel.run import run_abort

# --- the namespaces ---
from sglang_envelope import (
    contract as contract,
    flat as flat,
    in_process as in_process,
    limits as limits,
    overrides as overrides,
    pair as pair,
    rollout as rollout,
    routed as routed,
    stream as stream,
    types as types,
)

__version__ = "0.2.0"

__all__ = [
    # errors
    "EngineError",
    "EnvelopeError",
    "LimitExceeded",
    "RequestRejected",
    "ResponseError",
    "UpstreamError",
    "error_response",
    "stream_requested",
    # request side
    "Bootstrap",
    "ClientRequest",
    "Deployment",
    "EngineRequest",
    "Role",
    "Routing",
    "SamplingParams",
    "Target",
    "WorkerEnvelope",
    "build_engine_request",
    "decode_client_request",
    "decode_envelope",
    "decode_sequences",
    "encode_envelope",
    "to_worker_envelope",
    # response side
    "GenerateResponse",
    "aggregate_sse",
    "aggregate_sse_async",
    "finalize_response",
    "parse_unary",
    "relay_sse",
    "relay_sse_async",
    # the serving loop
    "CLIENT_GONE",
    "Answer",
    "EngineReply",
    "Service",
    "Transport",
    "read_deployment",
    # cancellation
    "AbortPolicy",
    "plan_abort",
    "run_abort",
]

#: The names that left the top level for a namespace, and that namespace. Each is still
#: importable from here for one release, with a DeprecationWarning naming its new place.
_MOVED: dict[str, str] = {
    "ChoicesAggregator": "sglang_envelope.stream",
    "SSE_DONE": "sglang_envelope.stream",
    "SseDecoder": "sglang_envelope.stream",
    "StreamAggregator": "sglang_envelope.stream",
    "aggregate_frames": "sglang_envelope.stream",
    "aggregate_sse_bytes": "sglang_envelope.stream",
    "aggregate_sse_bytes_async": "sglang_envelope.stream",
    "aiter_frames": "sglang_envelope.stream",
    "encode_sse": "sglang_envelope.stream",
    "error_event": "sglang_envelope.stream",
    "PrefillServer": "sglang_envelope.pair",
    "merge_prefill_logprobs": "sglang_envelope.pair",
    "AbortAllPlan": "sglang_envelope.rollout",
    "ContinuePlan": "sglang_envelope.rollout",
    "DrainOutcome": "sglang_envelope.rollout",
    "DrainPlan": "sglang_envelope.rollout",
    "DrainPolicy": "sglang_envelope.rollout",
    "DrainRound": "sglang_envelope.rollout",
    "EngineLoad": "sglang_envelope.rollout",
    "PausePlan": "sglang_envelope.rollout",
    "WeightVersionSpan": "sglang_envelope.rollout",
    "continuation_request": "sglang_envelope.rollout",
    "engine_idle": "sglang_envelope.rollout",
    "plan_abort_all": "sglang_envelope.rollout",
    "plan_continue": "sglang_envelope.rollout",
    "plan_drain": "sglang_envelope.rollout",
    "plan_pause": "sglang_envelope.rollout",
    "read_loads": "sglang_envelope.rollout",
    "run_drain": "sglang_envelope.rollout",
    "DEFAULT_MAX_NESTED_POSITIONS": "sglang_envelope.flat",
    "FlatTopLogprobs": "sglang_envelope.flat",
    "decode_flat_top_logprobs": "sglang_envelope.flat",
    "encode_flat_top_logprobs": "sglang_envelope.flat",
    "OVERRIDE_HEADERS": "sglang_envelope.overrides",
    "header_overrides": "sglang_envelope.overrides",
    "DEPLOYMENT_RULES": "sglang_envelope.contract",
    "KNOWN_RELEASES": "sglang_envelope.contract",
    "DEFAULT_MAX_BATCH_BYTES": "sglang_envelope.limits",
    "DEFAULT_MAX_BODY_BYTES": "sglang_envelope.limits",
    "DEFAULT_MAX_BYTES": "sglang_envelope.limits",
    "DEFAULT_MAX_EVENT_BYTES": "sglang_envelope.limits",
    "DEFAULT_MAX_INPUT_IDS": "sglang_envelope.limits",
    "DEFAULT_MAX_JSON_DEPTH": "sglang_envelope.limits",
    "DEFAULT_MAX_JSON_ITEMS": "sglang_envelope.limits",
    "DEFAULT_MAX_PROMPTS": "sglang_envelope.limits",
    "DEFAULT_MAX_SEQUENCES": "sglang_envelope.limits",
    "AbortOutcome": "sglang_envelope.types",
    "AbortPlan": "sglang_envelope.types",
    "AbortSend": "sglang_envelope.types",
    "EngineBody": "sglang_envelope.types",
    "ErrorAnswer": "sglang_envelope.types",
    "MetaInfo": "sglang_envelope.types",
    "RejectionCode": "sglang_envelope.types",
    "RoleName": "sglang_envelope.types",
    "Sequences": "sglang_envelope.types",
    "Watermark": "sglang_envelope.types",
}


def _moved(name: str) -> Any:
    """A name that moved to a namespace, taken from there; the importing code is
    warned."""
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # `from sglang_envelope import name` looks the name up twice: first in the import
    # system (importlib's _handle_fromlist), then in the importing code. Warn only there;
    # the import system's frames are told apart as the warnings module does.
    caller = sys._getframe(1).f_code.co_filename
    if not ("importlib" in caller and "_bootstrap" in caller):
        warnings.warn(
            f"importing {name} from sglang_envelope is deprecated: "
            f"import it from {module}"
            " (the top-level name goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
    return getattr(importlib.import_module(module), name)


if TYPE_CHECKING:
    # The moved names, for type checkers, while they are still importable from here
    # (one import a name, as in _MOVED; tests/test_api.py holds the two together).
    from sglang_envelope.stream import ChoicesAggregator as ChoicesAggregator
    from sglang_envelope.stream import SSE_DONE as SSE_DONE
    from sglang_envelope.stream import SseDecoder as SseDecoder
    from sglang_envelope.stream import StreamAggregator as StreamAggregator
    from sglang_envelope.stream import aggregate_frames as aggregate_frames
    from sglang_envelope.stream import aggregate_sse_bytes as aggregate_sse_bytes
    from sglang_envelope.stream import (
        aggregate_sse_bytes_async as aggregate_sse_bytes_async,
    )
    from sglang_envelope.stream import aiter_frames as aiter_frames
    from sglang_envelope.stream import encode_sse as encode_sse
    from sglang_envelope.stream import error_event as error_event
    from sglang_envelope.pair import PrefillServer as PrefillServer
    from sglang_envelope.pair import merge_prefill_logprobs as merge_prefill_logprobs
    from sglang_envelope.rollout import AbortAllPlan as AbortAllPlan
    from sglang_envelope.rollout import ContinuePlan as ContinuePlan
    from sglang_envelope.rollout import DrainOutcome as DrainOutcome
    from sglang_envelope.rollout import DrainPlan as DrainPlan
    from sglang_envelope.rollout import DrainPolicy as DrainPolicy
    from sglang_envelope.rollout import DrainRound as DrainRound
    from sglang_envelope.rollout import EngineLoad as EngineLoad
    from sglang_envelope.rollout import PausePlan as PausePlan
    from sglang_envelope.rollout import WeightVersionSpan as WeightVersionSpan
    from sglang_envelope.rollout import continuation_request as continuation_request
    from sglang_envelope.rollout import engine_idle as engine_idle
    from sglang_envelope.rollout import plan_abort_all as plan_abort_all
    from sglang_envelope.rollout import plan_continue as plan_continue
    from sglang_envelope.rollout import plan_drain as plan_drain
    from sglang_envelope.rollout import plan_pause as plan_pause
    from sglang_envelope.rollout import read_loads as read_loads
    from sglang_envelope.rollout import run_drain as run_drain
    from sglang_envelope.flat import (
        DEFAULT_MAX_NESTED_POSITIONS as DEFAULT_MAX_NESTED_POSITIONS,
    )
    from sglang_envelope.flat import FlatTopLogprobs as FlatTopLogprobs
    from sglang_envelope.flat import decode_flat_top_logprobs as decode_flat_top_logprobs
    from sglang_envelope.flat import encode_flat_top_logprobs as encode_flat_top_logprobs
    from sglang_envelope.overrides import OVERRIDE_HEADERS as OVERRIDE_HEADERS
    from sglang_envelope.overrides import header_overrides as header_overrides
    from sglang_envelope.contract import DEPLOYMENT_RULES as DEPLOYMENT_RULES
    from sglang_envelope.contract import KNOWN_RELEASES as KNOWN_RELEASES
    from sglang_envelope.limits import DEFAULT_MAX_BATCH_BYTES as DEFAULT_MAX_BATCH_BYTES
    from sglang_envelope.limits import DEFAULT_MAX_BODY_BYTES as DEFAULT_MAX_BODY_BYTES
    from sglang_envelope.limits import DEFAULT_MAX_BYTES as DEFAULT_MAX_BYTES
    from sglang_envelope.limits import DEFAULT_MAX_EVENT_BYTES as DEFAULT_MAX_EVENT_BYTES
    from sglang_envelope.limits import DEFAULT_MAX_INPUT_IDS as DEFAULT_MAX_INPUT_IDS
    from sglang_envelope.limits import DEFAULT_MAX_JSON_DEPTH as DEFAULT_MAX_JSON_DEPTH
    from sglang_envelope.limits import DEFAULT_MAX_JSON_ITEMS as DEFAULT_MAX_JSON_ITEMS
    from sglang_envelope.limits import DEFAULT_MAX_PROMPTS as DEFAULT_MAX_PROMPTS
    from sglang_envelope.limits import DEFAULT_MAX_SEQUENCES as DEFAULT_MAX_SEQUENCES
    from sglang_envelope.types import AbortOutcome as AbortOutcome
    from sglang_envelope.types import AbortPlan as AbortPlan
    from sglang_envelope.types import AbortSend as AbortSend
    from sglang_envelope.types import EngineBody as EngineBody
    from sglang_envelope.types import ErrorAnswer as ErrorAnswer
    from sglang_envelope.types import MetaInfo as MetaInfo
    from sglang_envelope.types import RejectionCode as RejectionCode
    from sglang_envelope.types import RoleName as RoleName
    from sglang_envelope.types import Sequences as Sequences
    from sglang_envelope.types import Watermark as Watermark
else:
    __getattr__ = _moved
