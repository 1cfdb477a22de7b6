"""SGLang run in-process: what a worker that holds an ``sgl.Engine`` needs beyond HTTP.

`engine_abort` carries out an abort plan through the engine's tokenizer
manager. The engine describes itself with `Deployment.from_engine`, and its
output objects are read by `sglang_envelope.stream.aggregate_frames_async`,
`relay_frames_async` and `parse_unary`. See docs/in-process.md.
"""

from sglang_envelope.cancel.in_process import engine_abort

__all__ = ["engine_abort"]
