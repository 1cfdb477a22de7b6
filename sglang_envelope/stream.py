"""SGLang's stream, frame by frame: decode it, write it, aggregate and relay frames.

The main readers (`aggregate_sse`, `relay_sse`, `parse_unary` and their
asyncio twins) are imported from `sglang_envelope`; these are the pieces under
them, for a serving system that reads or writes SSE itself, and the readers of
the frames an in-process SGLang engine yields as Python dicts
(``tokenizer_manager.generate_request``): `aggregate_frames`,
`aggregate_frames_async`, `relay_frames`, `relay_frames_async` (and
`parse_unary`, which takes a unary answer's object too). See docs/responses.md
and docs/in-process.md.
"""

from sglang_envelope.errors.answers import error_event, error_frame
from sglang_envelope.response.aggregate import (
    StreamAggregator,
    aggregate_frames,
    aggregate_frames_async,
    aggregate_sse_bytes,
    aggregate_sse_bytes_async,
)
from sglang_envelope.response.choices import ChoicesAggregator
from sglang_envelope.response.relay_frames import (
    FrameRelay,
    relay_frames,
    relay_frames_async,
)
from sglang_envelope.response.sse import SSE_DONE, SseDecoder, aiter_frames, encode_sse

__all__ = [
    "SSE_DONE",
    "ChoicesAggregator",
    "FrameRelay",
    "SseDecoder",
    "StreamAggregator",
    "aggregate_frames",
    "aggregate_frames_async",
    "aggregate_sse_bytes",
    "aggregate_sse_bytes_async",
    "aiter_frames",
    "encode_sse",
    "error_event",
    "error_frame",
    "relay_frames",
    "relay_frames_async",
]
