"""The default bounds: each is applied before the work it bounds, and each is a keyword.

The request side's bounds are keywords of `decode_client_request`,
`decode_envelope` and `decode_sequences`; the response side's, of the readers
(`max_bytes`, `max_event_bytes`). See docs/api.md.
"""

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
)
from sglang_envelope.response.aggregate import DEFAULT_MAX_BYTES
from sglang_envelope.response.sse import DEFAULT_MAX_EVENT_BYTES

__all__ = [
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_INPUT_IDS",
    "DEFAULT_MAX_JSON_DEPTH",
    "DEFAULT_MAX_JSON_ITEMS",
    "DEFAULT_MAX_PROMPTS",
    "DEFAULT_MAX_SEQUENCES",
]
