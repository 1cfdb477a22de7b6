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
    # cancellation
    "AbortPlan",
    "AbortPolicy",
    "plan_abort",
]
