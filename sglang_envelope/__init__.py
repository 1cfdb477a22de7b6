"""sglang-envelope: the request and response contract of SGLang's native /generate.

Sans-I/O: every function here is pure; the caller owns sockets and tasks.
"""

from sglang_envelope._errors import (
    EngineError,
    EnvelopeError,
    LimitExceeded,
    RequestRejected,
    ResponseError,
)

# --- request side (issue 2) ---
from sglang_envelope._engine import (
    Bootstrap,
    EngineBody,
    EngineRequest,
    Role,
    build_engine_request,
)
from sglang_envelope._envelope import (
    WorkerEnvelope,
    decode_envelope,
    encode_envelope,
    to_worker_envelope,
)
from sglang_envelope._request import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_INPUT_IDS,
    ClientRequest,
    decode_client_request,
)

# --- response side (issue 3) ---
from sglang_envelope._aggregate import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_EVENT_BYTES,
    StreamAggregator,
    aggregate_frames,
    aggregate_sse,
    parse_unary,
)
from sglang_envelope._flat import (
    FlatTopLogprobs,
    decode_flat_top_logprobs,
    encode_flat_top_logprobs,
)
from sglang_envelope._merge import merge_prefill_logprobs
from sglang_envelope._relay import relay_sse, relay_sse_async
from sglang_envelope._sse import SSE_DONE, SseDecoder, encode_sse

# --- cancellation (issue 4) ---
from sglang_envelope._abort import AbortPlan, AbortPolicy, plan_abort

__version__ = "0.1.0"

__all__ = [
    "EngineError",
    "EnvelopeError",
    "LimitExceeded",
    "RequestRejected",
    "ResponseError",
    "__version__",
    # request side
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_INPUT_IDS",
    "Bootstrap",
    "ClientRequest",
    "EngineBody",
    "EngineRequest",
    "Role",
    "WorkerEnvelope",
    "build_engine_request",
    "decode_client_request",
    "decode_envelope",
    "encode_envelope",
    "to_worker_envelope",
    # response side
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_EVENT_BYTES",
    "SSE_DONE",
    "SseDecoder",
    "StreamAggregator",
    "aggregate_frames",
    "aggregate_sse",
    "encode_sse",
    "merge_prefill_logprobs",
    "parse_unary",
    "relay_sse",
    "relay_sse_async",
    "FlatTopLogprobs",
    "decode_flat_top_logprobs",
    "encode_flat_top_logprobs",
    # cancellation
    "AbortPlan",
    "AbortPolicy",
    "plan_abort",
]
