"""The flat top-logprob fields of SGLang's answer (`return_flat_raw_*`), read and written.

`decode_flat_top_logprobs` reads them without a Python object per element;
`encode_flat_top_logprobs` writes them exactly as SGLang does. See
docs/flat-logprobs.md.
"""

from sglang_envelope.response.flat import (
    DEFAULT_MAX_NESTED_POSITIONS,
    FlatTopLogprobs,
    decode_flat_top_logprobs,
    encode_flat_top_logprobs,
)

__all__ = [
    "DEFAULT_MAX_NESTED_POSITIONS",
    "FlatTopLogprobs",
    "decode_flat_top_logprobs",
    "encode_flat_top_logprobs",
]
