"""SGLang's SSE stream, frame by frame: decode it, write it, aggregate decoded frames.

The main readers (`aggregate_sse`, `relay_sse`, `parse_unary` and their
asyncio twins) are imported from `sglang_envelope`; these are the pieces under
them, for a serving system that reads or writes SSE itself. See docs/responses.md.
"""

from sglang_envelope.errors.answers import error_event
from sglang_envelope.response.aggregate import StreamAggregator, aggregate_frames
from sglang_envelope.response.aggregate_bytes import (
    aggregate_sse_bytes,
    aggregate_sse_bytes_async,
)
from sglang_envelope.response.aiter import aiter_frames
from sglang_envelope.response.choices import ChoicesAggregator
from sglang_envelope.response.sse import SSE_DONE, SseDecoder, encode_sse

__all__ = [
    "SSE_DONE",
    "ChoicesAggregator",
    "SseDecoder",
    "StreamAggregator",
    "aggregate_frames",
    "aggregate_sse_bytes",
    "aggregate_sse_bytes_async",
    "aiter_frames",
    "encode_sse",
    "error_event",
]
