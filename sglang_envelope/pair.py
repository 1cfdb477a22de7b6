"""A prefill/decode pair (disaggregated serving): its prefill server, and its prompt logprobs.

`Service(..., prefill=PrefillServer(...))` serves a pair; a worker that runs
the legs itself builds them with `build_engine_request` and a `Bootstrap`, and
merges prefill's prompt logprobs into decode's answer with
`merge_prefill_logprobs`. See docs/frontend.md and docs/responses.md.
"""

from sglang_envelope.response.merge import merge_prefill_logprobs
from sglang_envelope.serve.pair import PrefillServer

__all__ = ["PrefillServer", "merge_prefill_logprobs"]
