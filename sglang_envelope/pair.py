"""A prefill/decode pair (disaggregated serving): its prefill server, and its merged
answer.

`Service(..., prefill=PrefillServer(...))` serves a pair; a worker that runs
the legs itself builds them with `build_engine_request` and a `Bootstrap`, and
gives its client the aggregated server's answer with `merge_prefill`: the
prefill leg's prompt logprobs and prompt rows of routed experts in the decode
leg's answer. `merge_prefill_logprobs` is its deprecated earlier name. See
docs/frontend.md and docs/responses.md.
"""

from sglang_envelope.response.merge import merge_prefill, merge_prefill_logprobs
from sglang_envelope.serve.pair import PrefillServer

__all__ = ["PrefillServer", "merge_prefill", "merge_prefill_logprobs"]
