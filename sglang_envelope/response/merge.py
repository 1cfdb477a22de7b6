"""A pair's answer made the client's: the prefill leg's prompt side merged into the
decode leg's answer (`merge_prefill`), and the answer under the client's rid
(`finalize_response`).

A decode worker's answer lacks what the prompt computation gave: its
prompt-side logprob keys arrive empty (``tokenizer_manager.add_logprob_to_meta_info``
writes them, the logprobs stay with prefill: ``srt/disaggregation/decode.py``)
and its prompt rows of ``routed_experts`` are zeros (seen on SGLang 0.5.23's
pair). See docs/responses.md (Prefill and decode). Merge and finalize commute:
the id is not a prompt-side key, and merge drops the unavailable note exactly
when it copies data, which is when finalize would not add it.
"""

from __future__ import annotations

import binascii
import warnings
from collections.abc import Callable
from typing import Any, Final

from sglang_envelope.errors.exceptions import EnvelopeError, ResponseError, show_value
from sglang_envelope.request.engine import EngineRequest, Role
from sglang_envelope.request.envelope import is_utf8
from sglang_envelope.response.frames import expected
from sglang_envelope.response.routed import (
    DEFAULT_MAX_ROUTED_EXPERTS,
    ROUTED_EXPERTS,
    routed_experts_bytes,
    row_width,
)

__all__ = [
    "POSITION_COUNTS",
    "PROMPT_LOGPROB_GROUPS",
    "UNAVAILABLE_MARKER",
    "UNAVAILABLE_REASON",
    "finalize_response",
    "has_prompt_logprobs",
    "merge_prefill",
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

#: The output side's logprobs of the ids asked for (``token_ids_logprob``).
ASKED_OUTPUT: Final = "output_token_ids_logprobs"

UNAVAILABLE_MARKER: Final = "input_logprobs_unavailable_reason"
"""A decode response's note that it has no prompt-side logprobs (`finalize_response`)."""
UNAVAILABLE_REASON: Final = "disaggregated_decode"
"""Why a decode response has no prompt-side logprobs: the prefill worker computed them."""


def merge_prefill(
    prefill_response: dict[str, Any],
    decode_response: dict[str, Any],
    *,
    routed_experts_start_len: int = 0,
    routed_experts_shape: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The decode response with the prefill response's prompt side: the answer an
    aggregated server gives, key order included (docs/responses.md, Prefill and decode).

    Each group of `PROMPT_LOGPROB_GROUPS` that holds no data in the decode
    response (its logprob keys missing, null or empty, and no count of
    `POSITION_COUNTS` above 0) but does in the prefill response takes the
    prefill's keys, and the `UNAVAILABLE_MARKER` goes. A null first entry of
    ``output_token_ids_logprobs`` takes the prefill's. The prompt rows of the
    decode's ``routed_experts`` (positions `routed_experts_start_len` to
    ``prompt_tokens``) become the prefill's, byte for byte; a row is ``layers x
    top_k`` int32, checked against `routed_experts_shape` when given, else the
    prefill's bytes over its prompt rows. A merge that cannot be made raises
    `ResponseError`. Every other key is the decode response's. Returns a new
    response; the inputs are not changed (values are shared, not copied).
    """
    prefill_meta = response_meta(prefill_response, "prefill_response")
    decode_meta = response_meta(decode_response, "decode_response")
    start = routed_experts_start_len
    if type(start) is not int or start < 0:
        raise EnvelopeError(
            f"routed_experts_start_len must be an integer >= 0, got {show_value(start)}"
        )
    shape = routed_experts_shape
    if shape is not None and (type(shape) is not tuple or len(shape) != 2):
        raise EnvelopeError(
            "routed_experts_shape must be a tuple (layers, top_k), "
            f"got {show_value(shape)}"
        )
    width = None if shape is None else row_width(*shape)
    meta = _with_prompt_logprobs(prefill_meta, decode_meta)
    first = _first_asked_output(prefill_meta, meta)
    if first is not None:
        meta[ASKED_OUTPUT] = [first, *meta[ASKED_OUTPUT][1:]]
    if ROUTED_EXPERTS in meta:
        meta[ROUTED_EXPERTS] = _routed_experts(prefill_meta, meta, start, width)
    merged = dict(decode_response)
    merged["meta_info"] = meta
    return merged


def merge_prefill_logprobs(
    prefill_response: dict[str, Any], decode_response: dict[str, Any]
) -> dict[str, Any]:
    """Deprecated: `merge_prefill`, which merges routed experts too."""
    warnings.warn(
        "merge_prefill_logprobs is deprecated: use merge_prefill, which also merges the "
        "prompt rows of routed_experts",
        DeprecationWarning,
        stacklevel=2,
    )
    return merge_prefill(prefill_response, decode_response)


def _with_prompt_logprobs(
    prefill_meta: dict[str, Any], decode_meta: dict[str, Any]
) -> dict[str, Any]:
    """A copy of `decode_meta` with the prefill's groups of prompt logprobs where the
    decode's hold no data (in place, SGLang's key order), and without the
    `UNAVAILABLE_MARKER` once a group was copied."""
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
    return meta


def _first_asked_output(prefill_meta: dict[str, Any], decode_meta: dict[str, Any]) -> Any:
    """The prefill's entry for the first output token, where the decode's is null.

    The first output token is the prefill's: the decode server has its logprobs,
    but writes null for its `ASKED_OUTPUT` entry (seen on SGLang 0.5.23's pair),
    where an aggregated server writes the asked ids' logprobs. A later incremental
    frame's deltas never begin with null, so only the first output's entry is
    filled in. None when there is nothing to fill.
    """
    decoded, prefilled = decode_meta.get(ASKED_OUTPUT), prefill_meta.get(ASKED_OUTPUT)
    if not (type(decoded) is list and decoded and decoded[0] is None):
        return None
    if type(prefilled) is not list or not prefilled or prefilled[0] is None:
        return None
    return prefilled[0]


def _routed_experts(
    prefill_meta: dict[str, Any],
    decode_meta: dict[str, Any],
    start: int,
    width: int | None,
) -> str:
    """The decode response's ``routed_experts`` with the prefill's prompt rows."""
    prompt = decode_meta.get("prompt_tokens")
    if type(prompt) is not int or prompt < 0:
        raise expected("decode_response.meta_info.prompt_tokens", "a count", prompt)
    given = prefill_meta.get("prompt_tokens", prompt)
    if given != prompt:
        raise ResponseError(
            f"the prefill response's prompt_tokens {show_value(given)} is not the decode "
            f"response's {prompt}: not the same request"
        )
    rows = max(prompt - start, 0)
    decode_raw = _raw(decode_meta, "decode_response")
    if ROUTED_EXPERTS not in prefill_meta:
        if rows == 0 or not decode_raw:
            return str(decode_meta[ROUTED_EXPERTS])
        raise ResponseError(
            f"the decode response's routed_experts has {rows} prompt rows, which a "
            "decode server fills with zeros, and the prefill response has no "
            "routed_experts to replace them: ask both legs for return_routed_experts"
        )
    prefill_raw = _raw(prefill_meta, "prefill_response")
    if width is None and rows:
        width = len(prefill_raw) // rows
    if (
        len(prefill_raw) != rows * (width or 0)
        or (rows and not width)
        or (width or 0) % 4
    ):
        raise ResponseError(
            f"the prefill response's routed_experts has {len(prefill_raw)} bytes, not "
            f"{rows} prompt rows ({prompt} prompt tokens from position {start})"
            + ("" if width is None else f" of {width} bytes")
        )
    if width and (len(decode_raw) % width or len(decode_raw) < len(prefill_raw)):
        raise ResponseError(
            f"the decode response's routed_experts has {len(decode_raw)} bytes, not "
            f"rows of {width} bytes from its {rows} prompt rows on"
        )
    joined = prefill_raw + decode_raw[len(prefill_raw) :]
    return binascii.b2a_base64(joined, newline=False).decode("ascii")


def _raw(meta: dict[str, Any], name: str) -> bytes:
    return routed_experts_bytes(
        meta[ROUTED_EXPERTS],
        name=f"{name}.meta_info.routed_experts",
        max_ids=DEFAULT_MAX_ROUTED_EXPERTS,
    )


def has_prompt_logprobs(meta: dict[str, Any]) -> bool:
    """Whether a response's `meta_info` holds prompt-side logprobs in any group."""
    return any(
        _group_holds_data(meta, logprob_keys, described_by)
        for logprob_keys, described_by in PROMPT_LOGPROB_GROUPS
    )


def response_meta(response: object, name: str) -> dict[str, Any]:
    """A response's `meta_info`; `ResponseError` naming `name` when it is not
    SGLang's shape."""
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


def finalize_response(
    response: dict[str, Any], *, engine: EngineRequest, client_rid: str
) -> dict[str, Any]:
    """`response` as the client expects it: its own rid, and a note for missing
    prompt logprobs.

    `response` is SGLang's final answer to `engine` (from `parse_unary`,
    `aggregate_sse` or `merge_prefill`). ``meta_info.id`` becomes
    `client_rid`. On the decode leg, when `engine` asked for prompt logprobs
    (``return_logprob`` with a ``logprob_start_len`` inside the prompt) and the
    response holds none, ``meta_info.input_logprobs_unavailable_reason`` is set
    to ``"disaggregated_decode"``. Every other key is kept, in its order.
    Returns a new response; `response` is not changed (values are shared).

    Raises `EnvelopeError` for a wrong `engine` or `client_rid` (the caller's
    mistake), `ResponseError` when `response` is not an object with a
    ``meta_info`` object.
    """
    if not isinstance(engine, EngineRequest):
        raise EnvelopeError(
            f"engine must be an EngineRequest, got {type(engine).__name__}"
        )
    if not isinstance(client_rid, str) or not client_rid or not is_utf8(client_rid):
        raise EnvelopeError(
            f"client_rid must be a non-empty UTF-8 string, got {show_value(client_rid)}"
        )
    meta = dict(response_meta(response, "response"))
    meta["id"] = client_rid
    if (
        engine.role == Role.DECODE
        and _asks_prompt_logprobs(engine)
        and not has_prompt_logprobs(meta)
    ):
        meta[UNAVAILABLE_MARKER] = UNAVAILABLE_REASON
    finished = dict(response)
    finished["meta_info"] = meta
    return finished


def _asks_prompt_logprobs(engine: EngineRequest) -> bool:
    """SGLang returns prompt logprobs for positions from ``logprob_start_len`` on.

    Its scheduler reads an absent or -1 start as "output logprobs only", and
    a start at the prompt's length covers no prompt position. A text prompt's length
    is SGLang's to know (it tokenizes it): no prompt logprobs are counted on.
    """
    body = engine.body
    start = body.logprob_start_len
    ids = body.input_ids
    if ids is None or not body.return_logprob:
        return False
    return type(start) is int and 0 <= start < len(ids)
