"""sglang-envelope: the request and response contract of SGLang's native /generate.

Sans-I/O: every function here is pure; the caller owns sockets and tasks.
"""

from sglang_envelope.errors.exceptions import (
    EngineError,
    EnvelopeError,
    LimitExceeded,
    RejectionCode,
    RequestRejected,
    ResponseError,
    UpstreamError,
)
from sglang_envelope.errors.answers import (
    ErrorAnswer,
    error_event,
    error_response,
    stream_requested,
)

# --- request side ---
from sglang_envelope.request.deployment import DEPLOYMENT_RULES, Deployment
from sglang_envelope.request.engine import (
    EngineBody,
    EngineRequest,
    Role,
    RoleName,
    build_engine_request,
)
from sglang_envelope.request.overrides import OVERRIDE_HEADERS, header_overrides
from sglang_envelope.request.routing import Bootstrap, Routing
from sglang_envelope.request.envelope import (
    WorkerEnvelope,
    decode_envelope,
    encode_envelope,
    to_worker_envelope,
)
from sglang_envelope.request.limits import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_INPUT_IDS,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_JSON_ITEMS,
)
from sglang_envelope.request.sequences import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_PROMPTS,
    DEFAULT_MAX_SEQUENCES,
    Sequences,
    decode_sequences,
)
from sglang_envelope.request.types import (
    ClientRequest,
    SamplingParams,
    Watermark,
    decode_client_request,
)
from sglang_envelope.releases.target import KNOWN_RELEASES, Target

# --- response side ---
from sglang_envelope.response.aggregate import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_EVENT_BYTES,
    ChoicesAggregator,
    StreamAggregator,
    aggregate_frames,
    aggregate_sse,
    parse_unary,
)
from sglang_envelope.response.aggregate_bytes import aggregate_sse_bytes, aggregate_sse_bytes_async
from sglang_envelope.response.aiter import aggregate_sse_async, aiter_frames
from sglang_envelope.response.types import GenerateResponse, MetaInfo
from sglang_envelope.response.flat import (
    DEFAULT_MAX_NESTED_POSITIONS,
    FlatTopLogprobs,
    decode_flat_top_logprobs,
    encode_flat_top_logprobs,
)
from sglang_envelope.response.finalize import finalize_response
from sglang_envelope.response.merge import merge_prefill, merge_prefill_logprobs
from sglang_envelope.response.routed import (
    DEFAULT_MAX_ROUTED_EXPERTS,
    decode_routed_experts,
    encode_routed_experts,
    join_routed_experts,
)
from sglang_envelope.response.relay import relay_sse, relay_sse_async
from sglang_envelope.response.sse import SSE_DONE, SseDecoder, encode_sse

# --- the serving loop ---
from sglang_envelope.serve.answer import Answer
from sglang_envelope.serve.pair import PrefillServer
from sglang_envelope.serve.service import CLIENT_GONE, Service
from sglang_envelope.serve.transport import EngineReply, Transport

# --- cancellation ---
from sglang_envelope.cancel.plan import AbortPlan, AbortPolicy, plan_abort
from sglang_envelope.cancel.run import AbortOutcome, AbortSend, run_abort
from sglang_envelope.cancel.rollout import (
    AbortAllPlan,
    ContinuePlan,
    DrainPlan,
    DrainPolicy,
    PausePlan,
    WeightVersionSpan,
    plan_abort_all,
    plan_continue,
    plan_drain,
    plan_pause,
)
from sglang_envelope.cancel.loads import EngineLoad, engine_idle, read_loads
from sglang_envelope.cancel.drain import DrainOutcome, DrainRound, run_drain
from sglang_envelope.cancel.continuation import continuation_request

__version__ = "0.2.0"

__all__ = [
    "CLIENT_GONE",
    "Answer",
    "EngineError",
    "EngineReply",
    "EnvelopeError",
    "LimitExceeded",
    "RejectionCode",
    "RequestRejected",
    "PrefillServer",
    "ResponseError",
    "Service",
    "Transport",
    "UpstreamError",
    "__version__",
    "ErrorAnswer",
    "error_event",
    "error_response",
    "stream_requested",
    # request side
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_INPUT_IDS",
    "DEFAULT_MAX_JSON_DEPTH",
    "DEFAULT_MAX_JSON_ITEMS",
    "DEFAULT_MAX_PROMPTS",
    "DEFAULT_MAX_SEQUENCES",
    "KNOWN_RELEASES",
    "OVERRIDE_HEADERS",
    "DEPLOYMENT_RULES",
    "Bootstrap",
    "ClientRequest",
    "Deployment",
    "EngineBody",
    "EngineRequest",
    "Role",
    "RoleName",
    "Routing",
    "SamplingParams",
    "Sequences",
    "Target",
    "Watermark",
    "WorkerEnvelope",
    "build_engine_request",
    "decode_client_request",
    "decode_envelope",
    "decode_sequences",
    "encode_envelope",
    "to_worker_envelope",
    # response side
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_NESTED_POSITIONS",
    "SSE_DONE",
    "GenerateResponse",
    "MetaInfo",
    "SseDecoder",
    "ChoicesAggregator",
    "StreamAggregator",
    "aggregate_frames",
    "aggregate_sse",
    "aggregate_sse_async",
    "aggregate_sse_bytes",
    "aggregate_sse_bytes_async",
    "aiter_frames",
    "encode_sse",
    "finalize_response",
    "header_overrides",
    "merge_prefill",
    "merge_prefill_logprobs",
    "DEFAULT_MAX_ROUTED_EXPERTS",
    "decode_routed_experts",
    "encode_routed_experts",
    "join_routed_experts",
    "parse_unary",
    "relay_sse",
    "relay_sse_async",
    "FlatTopLogprobs",
    "decode_flat_top_logprobs",
    "encode_flat_top_logprobs",
    # cancellation
    "AbortOutcome",
    "AbortPlan",
    "AbortPolicy",
    "AbortSend",
    "plan_abort",
    "run_abort",
    # rollout controls
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
