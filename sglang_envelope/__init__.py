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

# --- response side (issue 3) ---

# --- cancellation (issue 4) ---

__version__ = "0.1.0"

__all__ = [
    "EngineError",
    "EnvelopeError",
    "LimitExceeded",
    "RequestRejected",
    "ResponseError",
    "__version__",
    # request side
    # response side
    # cancellation
]
