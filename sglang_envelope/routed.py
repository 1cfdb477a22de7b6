"""The routed experts of SGLang's answer (`return_routed_experts`), read, written and
joined.

`decode_routed_experts` reads ``meta_info.routed_experts`` into rows
(``[position][layer][k]``), `encode_routed_experts` writes rows as SGLang does,
and `join_routed_experts` joins the strings of a generation made in parts (a
continuation). A pair's answer gets the prefill leg's prompt rows with
`sglang_envelope.pair.merge_prefill`. See docs/responses.md and docs/rollout.md.
"""

from sglang_envelope.response.routed import (
    DEFAULT_MAX_ROUTED_EXPERTS,
    decode_routed_experts,
    encode_routed_experts,
    join_routed_experts,
)

__all__ = [
    "DEFAULT_MAX_ROUTED_EXPERTS",
    "decode_routed_experts",
    "encode_routed_experts",
    "join_routed_experts",
]
