"""The checks the rules call: one pure function each, of the request or its
`sampling_params`, returning None when the request keeps the rule, else the
facts its message is filled with. `rules.RULES` says which check each rule
runs, its code, field and words.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import UNSET

from sglang_envelope.request.fields import RequestFields, SamplingParams

NULL = msgspec.Raw(b"null")


def is_given(value: object) -> bool:
    """True for a JSON value held as `msgspec.Raw` that is neither absent nor null."""
    return value is not UNSET and value != NULL


def param_value(value: Any, default: Any) -> Any:
    """A sampling parameter as SGLang's `SamplingParams.__post_init__` leaves it."""
    return default if value is UNSET or value is None else value


def n_null(p: SamplingParams) -> dict[str, object] | None:
    # SGLang's gate reads a null n as 1, but normalize_batch_and_arguments() then
    # compares it with 1 and fails with a TypeError (no answer in SGLang's words).
    return {} if p.n is None else None


def n_over_beam_width(p: SamplingParams) -> dict[str, object] | None:
    # A beam request (beam_width > 1) returns n of its beams: SGLang's scheduler
    # refuses more (beam_search/coordinator.py, validate_and_init).
    width = param_value(p.beam_width, None)
    n = param_value(p.n, 1)
    return {"n": n, "beam_width": width} if width is not None and 1 < width < n else None


# --- SGLang's own checks after dispatch (their messages are the release tables') ---

SAMPLING_EPS = 1e-6  # SGLang's: a smaller temperature means greedy (top_k 1)
INT64 = (-(2**63), 2**63 - 1)


def mode_without_mask(r: RequestFields) -> dict[str, object] | None:
    mode = r.sampling_logprobs_mode
    return {} if mode is not None and not r.return_sampling_mask else None


def watermark_in_both(r: RequestFields) -> dict[str, object] | None:
    params = r.sampling_params
    inner = None if params is None or params is UNSET else params.watermark
    both = is_given(r.watermark) and inner is not None and inner is not UNSET
    return {} if both else None


WATERMARK_KEYS = frozenset(("enabled", "key", "context_window"))
HEX = frozenset("0123456789abcdefABCDEF")


def watermark_problem(value: Any) -> str | None:
    """The rule SGLang refuses a watermark by (its code in `rules.RULES`, unprefixed):
    `normalize_watermark_request`'s, then `resolve_watermark_request`'s (a request
    with both is refused before); None when it accepts it."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return "watermark_not_object"
    if set(value) - WATERMARK_KEYS:
        return "watermark_unknown_key"
    enabled = value.get("enabled")
    key = value.get("key")
    window = value.get("context_window")
    if enabled is not None and type(enabled) is not bool:
        return "watermark_enabled_not_bool"
    if key is not None:
        if not isinstance(key, str):
            return "watermark_key_not_text"
        digits = key[2:] if key.lower().startswith("0x") else key
        if not 1 <= len(digits) <= 16:
            return "watermark_key_length"
        if not HEX.issuperset(digits):
            return "watermark_key_not_hex"
    if window is not None and (type(window) is not int or window < 1):
        return "watermark_context_window"
    if enabled is False and key is not None:
        return "watermark_key_when_disabled"
    if enabled is None and key is None:
        return "watermark_sets_nothing"
    return None


def watermark_is(code: str, *, inner: bool) -> Callable[[Any], dict[str, object] | None]:
    """The check that SGLang refuses the watermark by rule `code` (`inner`: the one in
    `sampling_params`)."""

    def check(value: Any) -> dict[str, object] | None:
        mark = value.watermark
        if mark is UNSET or mark is None:
            return None
        plain = msgspec.to_builtins(mark) if inner else msgspec.json.decode(mark)
        return {} if watermark_problem(plain) == code else None

    return check


def stop_list(raw: Any) -> list[str] | None:
    if raw is UNSET or raw == NULL:
        return None
    value = msgspec.json.decode(raw)
    return [value] if isinstance(value, str) else list(value)


def over_32(name: str) -> Callable[[SamplingParams], dict[str, object] | None]:
    """The check that `name` (a stop string or a list of them) holds more than 32."""
    read = operator.attrgetter(name)

    def check(p: SamplingParams) -> dict[str, object] | None:
        stops = stop_list(read(p))
        return {"count": len(stops)} if stops is not None and len(stops) > 32 else None

    return check


def stop_regex_too_long(p: SamplingParams) -> dict[str, object] | None:
    for pattern in stop_list(p.stop_regex) or ():
        size = len(pattern.encode("utf-8"))
        if size > 256:
            return {"stop_regex_len": size}
    return None


def logit_bias_key_not_integer(p: SamplingParams) -> dict[str, object] | None:
    bias = p.logit_bias
    if bias is UNSET or bias == NULL:
        return None
    for key in msgspec.json.decode(bias):  # its size was bounded by the decode
        try:
            int(key)
        except ValueError as error:
            return {"detail": str(error)}
    return None


def effective_temperature(p: SamplingParams) -> float:
    return param_value(p.temperature, 1.0)  # type: ignore[no-any-return]


def outside(name: str, low: float, high: float, *, open_low: bool = False) -> Any:
    """The range check of `name` (of the request or its `sampling_params`), whose
    default (None, or left out) is in the range: its value as the facts when outside."""
    read = operator.attrgetter(name)

    def check(p: SamplingParams) -> dict[str, object] | None:
        v = read(p)
        if v is UNSET or v is None:
            return None  # the default, which is inside
        inside = (low < v if open_low else low <= v) and v <= high
        return None if inside else {name: v}

    return check


def bad_top_k(p: SamplingParams) -> dict[str, object] | None:
    k = param_value(p.top_k, -1)
    if 0 <= effective_temperature(p) < SAMPLING_EPS:
        k = 1  # greedy
    return {"top_k": k} if k != -1 and k < 1 else None


#: The largest top_k SGLang's sampler holds: it puts every request's top_k in an int32
#: tensor, and a larger one stops every SGLang process (a greedy request's is 1).
LARGEST_TOP_K = 2**31 - 1


def top_k_overflows(p: SamplingParams) -> dict[str, object] | None:
    k = param_value(p.top_k, -1)
    if 0 <= effective_temperature(p) < SAMPLING_EPS:
        return None  # greedy: SGLang samples with top_k 1
    return {"top_k": k} if k > LARGEST_TOP_K else None


#: The smallest repetition penalty whose division of float32 logits stays finite for any
#: logit a model gives, at the smallest temperature that samples (1e-6): SGLang scales
#: logits by both in float32 (3.4e38 at most).
SMALLEST_REPETITION_PENALTY = 1e-20


def penalty_overflows(p: SamplingParams) -> dict[str, object] | None:
    value = p.repetition_penalty
    if value is UNSET or value is None or not 0 < value < SMALLEST_REPETITION_PENALTY:
        return None
    return {"repetition_penalty": value}


#: The largest logit bias whose sum with a logit, divided by the smallest temperature that
#: samples (1e-6), stays a finite float32.
LARGEST_LOGIT_BIAS = 1e30


def bias_overflows(p: SamplingParams) -> dict[str, object] | None:
    bias = p.logit_bias
    if bias is UNSET or bias == NULL:
        return None
    for key, value in msgspec.json.decode(bias).items():  # bounded by the decode
        if isinstance(value, (int, float)) and not abs(value) <= LARGEST_LOGIT_BIAS:
            return {"key": key, "value": value}
    return None


def stop_regex_invalid(p: SamplingParams) -> dict[str, object] | None:
    # At most 32 of 256 bytes, checked before.
    for pattern in stop_list(p.stop_regex) or ():
        try:
            re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as error:
            return {"pattern": pattern, "detail": str(error)}
    return None


def pooling_given(r: RequestFields) -> dict[str, object] | None:
    return {} if is_given(r.token_indices_to_pool) else None


def min_over_max(p: SamplingParams) -> dict[str, object] | None:
    low = param_value(p.min_new_tokens, 0)
    high = 128 if p.max_new_tokens is UNSET else p.max_new_tokens  # null: no limit
    if high is None or low <= high:
        return None
    return {"min_new_tokens": low, "max_new_tokens": high}


def start_below_minus_one(r: RequestFields) -> dict[str, object] | None:
    start = r.logprob_start_len
    below = r.return_logprob and start is not None and start < -1
    return {"start": start} if below else None


def logprobs_past_prompt(r: Any) -> dict[str, object] | None:
    """SGLang's scheduler's check of a request (or an engine body, which has the same
    fields) that asks for logprobs from past its prompt. A text prompt (no `input_ids`)
    is left to SGLang, which counts its tokens once it has tokenized it."""
    start = r.logprob_start_len
    ids = r.input_ids
    if not r.return_logprob or start is None or ids is None or start <= len(ids):
        return None
    return {"start": start, "tokens": len(ids)}


def routed_start_negative(r: RequestFields) -> dict[str, object] | None:
    """SGLang's scheduler's check of a request for routed experts from before
    position 0."""
    start = r.routed_experts_start_len
    return {"start": start} if r.return_routed_experts and start < 0 else None


def routed_start_past_prompt(r: Any) -> dict[str, object] | None:
    """SGLang's scheduler's check of a request (or an engine body) for routed experts from
    past its prompt. A text prompt (no `input_ids`) is left to SGLang, which counts its
    tokens once it has tokenized it."""
    start, ids = r.routed_experts_start_len, r.input_ids
    if not r.return_routed_experts or ids is None or start <= len(ids):
        return None
    return {"start": start, "tokens": len(ids)}


#: The fields that constrain decoding to a grammar, in SGLang's order.
GRAMMAR_FIELDS = ("json_schema", "regex", "ebnf", "structural_tag")


def grammars(p: SamplingParams) -> dict[str, object] | None:
    given = sum(1 for name in GRAMMAR_FIELDS if getattr(p, name))
    return {} if given > 1 else None


def min_tokens_with_grammar(p: SamplingParams) -> dict[str, object] | None:
    low = param_value(p.min_new_tokens, 0)
    if not isinstance(low, int) or low <= 0:
        return None
    grammar = next((name for name in GRAMMAR_FIELDS if getattr(p, name)), None)
    return None if grammar is None else {"min_new_tokens": low, "grammar": grammar}
