"""Merge the prompt-side logprobs of a prefill response into its decode response.

In prefill/decode disaggregation the prefill worker computes the prompt's
logprobs and the decode worker generates the output. The decode worker gets
only the first output token's logprobs from the prefill worker
(``srt/disaggregation/decode.py``), yet its tokenizer manager writes the
prompt-side keys whenever logprobs were requested
(``tokenizer_manager.add_logprob_to_meta_info``): they arrive empty, not missing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from sglang_envelope.response.frames import expected

__all__ = [
    "POSITION_COUNTS",
    "PROMPT_LOGPROB_GROUPS",
    "UNAVAILABLE_MARKER",
    "has_prompt_logprobs",
    "merge_prefill_logprobs",
]

PROMPT_LOGPROB_GROUPS: Final[tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]] = (
    # (keys that hold the logprobs, keys that describe them)
    (("input_token_logprobs",), ()),
    (("input_top_logprobs",), ()),
    (("input_token_ids_logprobs",), ()),
    (
        (
            "input_top_logprobs_val_flat",
            "input_top_logprobs_idx_flat",
            "input_top_logprobs_val_flat_b64",
            "input_top_logprobs_idx_flat_b64",
        ),
        (
            "input_top_logprobs_val_flat_b64_dtype",
            "input_top_logprobs_idx_flat_b64_dtype",
            "input_top_logprobs_shape",
            "input_top_logprobs_null_prefix",
        ),
    ),
)
"""The prompt-side logprob keys of ``meta_info``, in groups that move together.

The flat top-logprob fields are one group: their arrays only make sense with
the shape, null prefix and dtypes they came with.
"""


def _count(value: object) -> int:
    return value if type(value) is int else 0


def _rows(shape: object) -> int:
    return _count(shape[0]) if type(shape) is list and len(shape) == 2 else 0


POSITION_COUNTS: Final[dict[str, Callable[[object], int]]] = {
    # key that counts covered positions -> how many it counts (0 when malformed)
    "input_top_logprobs_shape": _rows,
    "input_top_logprobs_null_prefix": _count,
}
"""Keys that count positions a group covers without storing them.

A group whose count is above 0 holds data even when its arrays are empty: the
flat fields of a one-token prompt are ``shape: [0, k]``, ``null_prefix: 1`` and
empty values (its only position has no logprob). Counts that are not integers
count as 0 here; `decode_flat_top_logprobs` is where they are checked.
"""

UNAVAILABLE_MARKER: Final = "input_logprobs_unavailable_reason"
"""A decode response's note that it has no prompt-side logprobs (`finalize_response`)."""


def merge_prefill_logprobs(
    prefill_response: dict[str, Any], decode_response: dict[str, Any]
) -> dict[str, Any]:
    """The decode response with the prefill response's prompt-side logprobs.

    For each group of `PROMPT_LOGPROB_GROUPS` that holds no data in the decode
    response but holds data in the prefill response, the group's keys are
    replaced by the prefill response's. A group holds data when one of its
    logprob keys is not missing, null or empty, or when it counts positions it
    covers (`POSITION_COUNTS`). When a group was copied, the `UNAVAILABLE_MARKER`
    key is dropped. Output-side keys and every other key are the decode
    response's, and so is the order of the keys (a decode response carries the
    prompt-side keys empty, where SGLang puts them), so the merged answer is an
    aggregated server's, key order included. Returns a new response; the inputs
    are not changed (values are shared, not copied).
    """
    prefill_meta = _meta(prefill_response, "prefill_response")
    decode_meta = _meta(decode_response, "decode_response")
    meta = dict(decode_meta)
    copied = False
    for logprob_keys, described_by in PROMPT_LOGPROB_GROUPS:
        if _group_holds_data(meta, logprob_keys, described_by) or not _group_holds_data(
            prefill_meta, logprob_keys, described_by
        ):
            continue
        for key in logprob_keys + described_by:
            if key in prefill_meta:  # in place where decode has the key: SGLang's order
                meta[key] = prefill_meta[key]
            else:
                meta.pop(key, None)
        copied = True
    if copied:
        meta.pop(UNAVAILABLE_MARKER, None)
    merged = dict(decode_response)
    merged["meta_info"] = meta
    return merged


def has_prompt_logprobs(meta: dict[str, Any]) -> bool:
    """Whether a response's `meta_info` holds prompt-side logprobs in any group."""
    return any(
        _group_holds_data(meta, logprob_keys, described_by)
        for logprob_keys, described_by in PROMPT_LOGPROB_GROUPS
    )


def _meta(response: object, name: str) -> dict[str, Any]:
    if type(response) is not dict:
        raise expected(name, "an object", response)
    meta = response.get("meta_info")
    if type(meta) is not dict:
        raise expected(f"{name}.meta_info", "an object", meta)
    return meta


def _group_holds_data(
    meta: dict[str, Any], logprob_keys: tuple[str, ...], described_by: tuple[str, ...]
) -> bool:
    if any(_holds_data(meta.get(key)) for key in logprob_keys):
        return True
    return any(
        POSITION_COUNTS[key](meta.get(key)) > 0
        for key in described_by
        if key in POSITION_COUNTS
    )


def _holds_data(value: object) -> bool:
    return value is not None and value != [] and value != ""
