"""The request contract as data: who may set each field, and every rule with its code.

Two tables hold the whole contract, and `docs/contract.md` shows the same
tables (a test checks that the two agree):

- `FIELD_OWNERS` names every field of SGLang's `GenerateReqInput` that a
  client may not send, and why: it is input other than one list of token ids,
  or only the serving system sets it.
- `RULES` lists every rule: its stable code, the field it is about, the message
  a client sees, and the check. Rules whose check is None are enforced by the
  typed decode of `ClientRequest`; their messages are filled in from msgspec's
  verdict by `_decode_errors.translate_validation_error`.

The rules are shared by every `Target`; `_contract.contract_for(target)`
compiles them once per target from its release tables: the fields and
`sampling_params` keys the release has (a field it lacks is refused, naming
the first release with it), its gate or none, SGLang's own checks that
release makes (a rule with a `template` holds where the tables carry that
message) and its words.

Messages that quote SGLang use its own words, so a client sees the same text
whether the frontend or the engine refused it.
"""

from __future__ import annotations

import math
import operator
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

import msgspec
from msgspec import UNSET

from sglang_envelope.errors.exceptions import RequestRejected
from sglang_envelope.releases.target import Target
from sglang_envelope.request.fields import RequestFields, SamplingParams

__all__ = [
    "DEFAULT_TARGET",
    "FIELD_OWNERS",
    "GENERATE_REQ_INPUT_FIELDS",
    "NULL_AS_ABSENT",
    "RULES",
    "RULES_BY_CODE",
    "SAMPLING_PARAMS_FIELDS",
    "SGLANG_CHECKS_LEFT",
    "TARGET_RULES",
    "Rule",
    "is_given",
    "reject",
    "watermark_problem",
]

#: The target of every call that names none: SGLang 0.5.23 over HTTP.
DEFAULT_TARGET = Target()
#: Every keyword argument of SGLang 0.5.23's `GenerateReqInput`, in its order.
GENERATE_REQ_INPUT_FIELDS = DEFAULT_TARGET.tables.generate_req_input_fields
#: The keys SGLang 0.5.23's contract gate accepts in `sampling_params`, in its order.
SAMPLING_PARAMS_FIELDS = DEFAULT_TARGET.gate.sampling_keys if DEFAULT_TARGET.gate else ()

NOT_TOKEN_INPUT = "not_token_input"
ORCHESTRATOR_FIELD = "orchestrator_field"

#: `GenerateReqInput` fields a client may not send, by the rule that refuses them.
#: Every other field of `GENERATE_REQ_INPUT_FIELDS` is the client's.
FIELD_OWNERS: Mapping[str, str] = {
    # Input other than one flat list of token ids.
    "text": NOT_TOKEN_INPUT,
    "input_embeds": NOT_TOKEN_INPUT,
    "positional_embed_overrides": NOT_TOKEN_INPUT,
    "image_data": NOT_TOKEN_INPUT,
    "video_data": NOT_TOKEN_INPUT,
    "audio_data": NOT_TOKEN_INPUT,
    "mm_hashes": NOT_TOKEN_INPUT,
    "mm_content_hashes": NOT_TOKEN_INPUT,
    "use_audio_in_video": NOT_TOKEN_INPUT,
    "video_config": NOT_TOKEN_INPUT,
    "modalities": NOT_TOKEN_INPUT,
    "max_dynamic_patch": NOT_TOKEN_INPUT,
    "min_dynamic_patch": NOT_TOKEN_INPUT,
    "image_max_dynamic_patch": NOT_TOKEN_INPUT,
    "video_max_dynamic_patch": NOT_TOKEN_INPUT,
    "images_config": NOT_TOKEN_INPUT,
    "mm_processor_kwargs": NOT_TOKEN_INPUT,
    # Disaggregation: where the KV cache goes and who pairs with whom.
    "bootstrap_host": ORCHESTRATOR_FIELD,
    "bootstrap_port": ORCHESTRATOR_FIELD,
    "bootstrap_room": ORCHESTRATOR_FIELD,
    "bootstrap_pair_key": ORCHESTRATOR_FIELD,
    "decode_tp_size": ORCHESTRATOR_FIELD,
    "disagg_prefill_dp_rank": ORCHESTRATOR_FIELD,
    "kv_hints": ORCHESTRATOR_FIELD,
    # Routing to a worker or a data-parallel rank.
    "routed_dp_rank": ORCHESTRATOR_FIELD,
    "data_parallel_rank": ORCHESTRATOR_FIELD,
    "routing_key": ORCHESTRATOR_FIELD,
    # Encoder disaggregation (EPD), filled in by the tokenizer side.
    "need_wait_for_mm_inputs": ORCHESTRATOR_FIELD,
    "num_items_assigned": ORCHESTRATOR_FIELD,
    "encoder_urls": ORCHESTRATOR_FIELD,
    # The server's own bookkeeping.
    "lora_id": ORCHESTRATOR_FIELD,
    "http_worker_ipc": ORCHESTRATOR_FIELD,
    "external_trace_header": ORCHESTRATOR_FIELD,
    "received_time": ORCHESTRATOR_FIELD,
    "log_metrics": ORCHESTRATOR_FIELD,
    "return_bytes": ORCHESTRATOR_FIELD,
    "background": ORCHESTRATOR_FIELD,
    # Metric labels: SGLang merges them over its own (model_name, engine_type, ...).
    "custom_labels": ORCHESTRATOR_FIELD,
}


#: The fields of `FIELD_OWNERS` that SGLang types as booleans: a null one is refused.
#: Every other one defaults to None in SGLang, which reads a null as absent, and so
#: does the library (AReaL sends ``"image_data": null`` with every request).
OWNED_BOOLEANS = ("use_audio_in_video", "log_metrics", "return_bytes", "background")
NULL_AS_ABSENT = frozenset(FIELD_OWNERS).difference(OWNED_BOOLEANS)

_NULL = msgspec.Raw(b"null")


def is_given(value: object) -> bool:
    """True for a JSON value held as `msgspec.Raw` that is neither absent nor null."""
    return value is not UNSET and value != _NULL


def _given(value: Any, default: Any) -> Any:
    return default if value is UNSET else value


def _value(value: Any, default: Any) -> Any:
    """A sampling parameter as SGLang's `SamplingParams.__post_init__` leaves it."""
    return default if value is UNSET or value is None else value


def _n_not_one(p: SamplingParams) -> dict[str, object] | None:
    # An explicit null is refused too: SGLang's gate reads it as 1, but
    # normalize_batch_and_arguments() then fails on it with a TypeError.
    n = p.n
    return None if n is UNSET or n == 1 else {"n": n}


# --- SGLang's own checks after dispatch (their messages are the release tables') ---

_SAMPLING_EPS = 1e-6  # SGLang's: a smaller temperature means greedy (top_k 1)
_INT64 = (-(2**63), 2**63 - 1)


def _priority_out_of_range(r: RequestFields) -> dict[str, object] | None:
    p = r.priority
    return {} if p is not None and not _INT64[0] <= p <= _INT64[1] else None


def _mode_without_mask(r: RequestFields) -> dict[str, object] | None:
    return {} if r.sampling_logprobs_mode is not None and not r.return_sampling_mask else None


def _watermark_in_both(r: RequestFields) -> dict[str, object] | None:
    params = r.sampling_params
    inner = None if params is None or params is UNSET else params.watermark
    return {} if is_given(r.watermark) and inner is not None and inner is not UNSET else None


_WATERMARK_KEYS = frozenset(("enabled", "key", "context_window"))
_HEX = frozenset("0123456789abcdefABCDEF")


def watermark_problem(value: Any) -> str | None:
    """SGLang's `normalize_watermark_request` verdict on a watermark: its message, or None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return "watermark must be an object"
    if set(value) - _WATERMARK_KEYS:
        return "watermark contains unknown fields"
    enabled, key, window = value.get("enabled"), value.get("key"), value.get("context_window")
    if enabled is not None and type(enabled) is not bool:
        return "watermark enabled must be a boolean"
    if key is not None:
        if not isinstance(key, str):
            return "watermark key must be a hex string"
        digits = key[2:] if key.lower().startswith("0x") else key
        if not 1 <= len(digits) <= 16:
            return "watermark key must contain 1 to 16 hex digits"
        if not _HEX.issuperset(digits):
            return "watermark key must contain only hex digits"
    if window is not None and (type(window) is not int or window < 1):
        return "watermark context_window must be a positive integer"
    return None


def _watermark_is(message: str, *, inner: bool) -> Callable[[Any], dict[str, object] | None]:
    """The check that the watermark (`inner`: in `sampling_params`) breaks with `message`."""

    def check(value: Any) -> dict[str, object] | None:
        mark = value.watermark
        if mark is UNSET or mark is None:
            return None
        plain = msgspec.to_builtins(mark) if inner else msgspec.json.decode(mark)
        return {} if watermark_problem(plain) == message else None

    return check


def _resolve_is(message: str, *, inner: bool) -> Callable[[Any], dict[str, object] | None]:
    """The check that `resolve_watermark_request` refuses the watermark (`inner`: the one in
    `sampling_params`; a request with both is refused before) with `message`, once
    `SamplingParams` has accepted it."""

    def check(value: Any) -> dict[str, object] | None:
        mark = value.watermark
        if mark is UNSET or mark is None or (not inner and mark == _NULL):
            return None
        plain = msgspec.to_builtins(mark) if inner else msgspec.json.decode(mark)
        if not isinstance(plain, dict) or watermark_problem(plain) is not None:
            return None
        enabled, key = plain.get("enabled"), plain.get("key")
        found = (
            "request watermark key cannot be combined with enabled=false"
            if enabled is False and key is not None
            else "request watermark must set enabled or key"
            if enabled is None and key is None
            else None
        )
        return {} if found == message else None

    return check


def _stop_list(raw: Any) -> list[str] | None:
    if raw is UNSET or raw == _NULL:
        return None
    value = msgspec.json.decode(raw)
    return [value] if isinstance(value, str) else list(value)


def _too_many_stops(p: SamplingParams) -> dict[str, object] | None:
    stops = _stop_list(p.stop)
    return {"count": len(stops)} if stops is not None and len(stops) > 32 else None


def _too_many_stop_regexes(p: SamplingParams) -> dict[str, object] | None:
    stops = _stop_list(p.stop_regex)
    return {"count": len(stops)} if stops is not None and len(stops) > 32 else None


def _stop_regex_too_long(p: SamplingParams) -> dict[str, object] | None:
    for pattern in _stop_list(p.stop_regex) or ():
        size = len(pattern.encode("utf-8"))
        if size > 256:
            return {"stop_regex_len": size}
    return None


def _logit_bias_key_not_integer(p: SamplingParams) -> dict[str, object] | None:
    bias = p.logit_bias
    if bias is UNSET or bias == _NULL:
        return None
    for key in msgspec.json.decode(bias):  # its size was bounded by the decode
        try:
            int(key)
        except ValueError as error:
            return {"detail": str(error)}
    return None


def _beam_width_below_one(p: SamplingParams) -> dict[str, object] | None:
    width = _value(p.beam_width, None)
    return {"beam_width": width} if width is not None and width < 1 else None


def _temperature(p: SamplingParams) -> float:
    return _value(p.temperature, 1.0)  # type: ignore[no-any-return]


def _bad_temperature(p: SamplingParams) -> dict[str, object] | None:
    t = p.temperature
    if t is UNSET or t is None or (t >= 0.0 and math.isfinite(t)):
        return None
    return {"temperature": t}


def _outside(name: str, low: float, high: float, *, open_low: bool = False) -> Any:
    """The range check of `name`, whose default (None, or left out) is inside the range."""
    read = operator.attrgetter(name)

    def check(p: SamplingParams) -> dict[str, object] | None:
        v = read(p)
        if v is UNSET or v is None:
            return None  # the default, which is inside
        inside = (low < v if open_low else low <= v) and v <= high
        return None if inside else {name: v}

    return check


def _bad_top_k(p: SamplingParams) -> dict[str, object] | None:
    k = _value(p.top_k, -1)
    if 0 <= _temperature(p) < _SAMPLING_EPS:
        k = 1  # greedy
    return {"top_k": k} if k != -1 and k < 1 else None


def _max_negative(p: SamplingParams) -> dict[str, object] | None:
    high = p.max_new_tokens
    return None if high is UNSET or high is None or high >= 0 else {"max_new_tokens": high}


#: The smallest repetition penalty whose division of float32 logits stays finite for any
#: logit a model gives, at the smallest temperature that samples (1e-6): SGLang scales
#: logits by both in float32 (3.4e38 at most).
SMALLEST_REPETITION_PENALTY = 1e-20


def _penalty_overflows(p: SamplingParams) -> dict[str, object] | None:
    value = p.repetition_penalty
    if value is UNSET or value is None or not 0 < value < SMALLEST_REPETITION_PENALTY:
        return None
    return {"repetition_penalty": value}


#: The largest logit bias whose sum with a logit, divided by the smallest temperature that
#: samples (1e-6), stays a finite float32.
LARGEST_LOGIT_BIAS = 1e30


def _bias_overflows(p: SamplingParams) -> dict[str, object] | None:
    bias = p.logit_bias
    if bias is UNSET or bias == _NULL:
        return None
    for key, value in msgspec.json.decode(bias).items():  # bounded by the decode
        if isinstance(value, (int, float)) and not abs(value) <= LARGEST_LOGIT_BIAS:
            return {"key": key, "value": value}
    return None


def _stop_regex_invalid(p: SamplingParams) -> dict[str, object] | None:
    for pattern in _stop_list(p.stop_regex) or ():  # at most 32 of 256 bytes, checked before
        try:
            re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as error:
            return {"pattern": pattern, "detail": str(error)}
    return None


def _pooling_given(r: RequestFields) -> dict[str, object] | None:
    return {} if is_given(r.token_indices_to_pool) else None


def _min_negative(p: SamplingParams) -> dict[str, object] | None:
    low = _value(p.min_new_tokens, 0)
    return {"min_new_tokens": low} if low < 0 else None


def _min_over_max(p: SamplingParams) -> dict[str, object] | None:
    low = _value(p.min_new_tokens, 0)
    high = _given(p.max_new_tokens, 128)
    if high is None or low <= high:
        return None
    return {"min_new_tokens": low, "max_new_tokens": high}


def _seed_out_of_range(p: SamplingParams) -> dict[str, object] | None:
    seed = _value(p.sampling_seed, None)
    return (
        {"sampling_seed": seed} if seed is not None and not _INT64[0] <= seed <= _INT64[1] else None
    )


def _start_below_minus_one(r: RequestFields) -> dict[str, object] | None:
    start = r.logprob_start_len
    return {"start": start} if r.return_logprob and start is not None and start < -1 else None


def logprobs_past_prompt(r: Any) -> dict[str, object] | None:
    """SGLang's scheduler's check of a request (or an engine body, which has the same
    fields) that asks for logprobs from past its prompt."""
    start, size = r.logprob_start_len, len(r.input_ids)
    if not r.return_logprob or start is None or start <= size:
        return None
    return {"start": start, "tokens": size}


def _grammars(p: SamplingParams) -> dict[str, object] | None:
    given = sum(1 for g in (p.json_schema, p.regex, p.ebnf, p.structural_tag) if g)
    return {} if given > 1 else None


class Holds(NamedTuple):
    """A rule's shortcut, as data: a test of the checked struct's `fields`.

    - `kind="false"`: the one field is false or None;
    - `kind="any_true"`: any of the fields is true;
    - `kind="nonempty"`: the one field is not the empty tuple;
    - `kind="in_range"`: the one field is None, or a number from `low` (excluded
      when `open_low`) to `high`;
    - `kind="at_least"`: the one field is None, or a number of at least `low`.

    `contract.shortcut_test` spells it in the compiled check.
    """

    kind: Literal["false", "any_true", "nonempty", "in_range", "at_least"]
    fields: tuple[str, ...]
    low: float = 0.0
    high: float = 0.0
    open_low: bool = False


class Rule(NamedTuple):
    """One rule of the contract.

    `check` returns None when the request keeps the rule, else the facts the
    message template is filled with. None as `check` means the typed decode
    enforces the rule. `template`, for one of SGLang's own checks, is its
    message in the release tables: the rule holds on a target whose tables
    carry it, in that release's words.
    """

    code: str
    field: str | None
    message: str
    #: Takes the request, or its `SamplingParams` for a rule on `sampling_params`.
    check: Callable[[Any], dict[str, object] | None] | None = None
    #: Fields the check reads that must differ from their defaults for the rule to
    #: be broken: while all hold their defaults, the check is skipped.
    when: str | tuple[str, ...] | None = None
    template: str | None = None
    #: A test of the checked struct that is true only when the rule holds: while it
    #: is, the check is not called (a shortcut; `check` decides). See `Holds`.
    holds: Holds | None = None


def _sglang(
    code: str, field: str, template: str, check: Any, when: Any, holds: Holds | None = None
) -> Rule:
    return Rule(code, field, template, check, when, template, holds)


def _range(
    code: str, name: str, template: str, low: float, high: float, *, open_low: bool = False
) -> Rule:
    """SGLang's range check of `sampling_params.name`, whose default (None) is inside."""
    holds = Holds("in_range", (name,), low, high, open_low)
    check = _outside(name, low, high, open_low=open_low)
    return _sglang(code, f"sampling_params.{name}", template, check, name, holds)


_WATERMARK_MESSAGES = (
    "watermark must be an object",
    "watermark contains unknown fields",
    "watermark enabled must be a boolean",
    "watermark key must be a hex string",
    "watermark key must contain 1 to 16 hex digits",
    "watermark key must contain only hex digits",
    "watermark context_window must be a positive integer",
)
_WATERMARK_CODES = (
    "watermark_not_object", "watermark_unknown_key", "watermark_enabled_not_bool",
    "watermark_key_not_text", "watermark_key_length", "watermark_key_not_hex",
    "watermark_context_window",
)  # fmt: skip
_RESOLVE = (
    ("watermark_key_when_disabled", "request watermark key cannot be combined with enabled=false"),
    ("watermark_sets_nothing", "request watermark must set enabled or key"),
)
_PRIORITY_MESSAGE = (
    "priority must be a signed 64-bit integer between -9223372036854775808 and 9223372036854775807"
)

#: Every rule, in the order they are applied. `{…}` in a message is filled in.
RULES: tuple[Rule, ...] = (
    Rule("body_too_large", None, "request body is {size} bytes; the limit is {limit}"),
    Rule("not_json", None, "request body is not valid JSON: {detail}"),
    Rule("not_object", None, "request body must be a JSON object, got {got}"),
    Rule("not_token_input", "{key}",
         "{key} is not accepted: this endpoint takes one token-input request (input_ids)"),
    Rule("orchestrator_field", "{key}",
         "{key} is set only by the serving system; a client may not send it"),
    Rule("unknown_field", "{key}",
         "unknown field `{key}`: SGLang {release}'s GenerateReqInput has no such field{hint}"),
    Rule("unknown_nested_field", "{path}.{key}", "unknown field `{key}` in {path}"),
    Rule("unknown_sampling_param", "sampling_params.{key}", "unknown field `{key}`, {expected}"),
    Rule("unexpected_sampling_param", "sampling_params.{key}",
         "Unexpected keyword argument '{key}'"),
    Rule("needs_newer_sglang", "{path}",
         "{key} needs SGLang {first} or later; this target is {release}"),
    Rule("missing_input_ids", "input_ids",
         "input_ids is required: this endpoint takes one token-input request"),
    Rule("batched_input", "input_ids",
         "input_ids must be one flat list of token ids: "
         "this endpoint takes one token-input request, not a batch"),
    Rule("token_id_out_of_range", "{path}", "{path} must be a token id in [0, 2^32)"),
    Rule("too_many_input_ids", "input_ids", "input_ids has {size} tokens; the limit is {limit}"),
    Rule("token_out_of_vocab", "input_ids[{index}]",
         "input_ids[{index}] is {id}, past the model's largest token id {limit}"),
    Rule("json_too_deep", "{path}", "{path} is nested deeper than {limit} levels"),
    Rule("json_too_many_items", "{path}", "{path} holds more than {limit} JSON items"),
    Rule("wrong_type", "{path}", "{path}: expected {expected}, got {got}"),
    Rule("invalid_value", "{path}", "{path}: {detail}"),
    Rule("invalid_envelope", None, "worker envelope is malformed: {detail}"),
    # SGLang's own checks, in the order normalize_batch_and_arguments() makes them.
    Rule("flat_with_multi_item", "return_flat_raw_top_logprobs",
         "return_flat_raw_top_logprobs does not support multi-item scoring: "
         "delimiter-sparse top logprob rows have no contiguous position mapping.",
         lambda r: {} if (r.return_flat_raw_top_logprobs
                          and is_given(r.multi_item_delimiter_indices)) else None,
         when="return_flat_raw_top_logprobs"),
    Rule("output_flat_with_stream", "return_flat_raw_output_top_logprobs",
         "return_flat_raw_output_top_logprobs is only set on the finished response "
         "and does not support stream=True.",
         lambda r: {} if (r.return_flat_raw_output_top_logprobs and bool(r.stream)) else None,
         when="return_flat_raw_output_top_logprobs", holds=Holds("false", ("stream",))),
    Rule("b64_without_flat", "return_flat_raw_top_logprobs_b64",
         "return_flat_raw_top_logprobs_b64 requires return_flat_raw_top_logprobs "
         "or return_flat_raw_output_top_logprobs.",
         lambda r: {} if (r.return_flat_raw_top_logprobs_b64 and not (
             r.return_flat_raw_top_logprobs or r.return_flat_raw_output_top_logprobs)) else None,
         when="return_flat_raw_top_logprobs_b64",
         holds=Holds("any_true", ("return_flat_raw_top_logprobs",
                                  "return_flat_raw_output_top_logprobs"))),
    Rule("empty_input_ids", "input_ids", "input_ids cannot be empty.",
         lambda r: {} if (not r.input_ids) else None, holds=Holds("nonempty", ("input_ids",))),
    Rule("session_id_with_session_params", "session_id",
         "session_id and session_params cannot both be set.",
         lambda r: {} if (r.session_id is not None and is_given(r.session_params)) else None,
         when="session_id"),
    # The tokenizer manager's checks, then SamplingParams(**sampling_params) on the
    # watermark, in its order (the rule holds where the release tables carry it).
    _sglang("priority_out_of_range", "priority", _PRIORITY_MESSAGE,
            _priority_out_of_range, "priority"),
    _sglang("sampling_logprobs_mode_without_mask", "sampling_logprobs_mode",
            "sampling_logprobs_mode can only be set when return_sampling_mask=true.",
            _mode_without_mask, "sampling_logprobs_mode"),
    _sglang("watermark_in_both_places", "watermark",
            "watermark must be provided either at the request top level or inside "
            "sampling_params, not both", _watermark_in_both, "watermark"),
    *(_sglang(code, "watermark", message, _watermark_is(message, inner=False), "watermark")
      for code, message in zip(_WATERMARK_CODES, _WATERMARK_MESSAGES, strict=True)),
    # resolve_watermark_request()'s checks that need only the request (the release
    # tables do not list them; they hold where SGLang has a watermark at all).
    *(Rule(code, "watermark", message, _resolve_is(message, inner=False), "watermark")
      for code, message in _RESOLVE),
    *(Rule(f"sampling_{code}", "sampling_params.watermark", message,
           _resolve_is(message, inner=True), "watermark")
      for code, message in _RESOLVE),
    # Sampling: one sequence a request, and SGLang's SamplingParams.normalize() and
    # .verify() checks, in its words and order.
    Rule("parallel_sampling", "sampling_params.n",
         "sampling_params.n must be 1: this endpoint returns one sequence per request, got {n}",
         _n_not_one, when="n"),
    # A key SGLang's gate lets through that its SamplingParams has no argument for.
    Rule("unsupported_sampling_param", "sampling_params.{key}",
         "Unexpected keyword argument '{key}'"),
    *(_sglang(f"sampling_{code}", "sampling_params.watermark", message,
              _watermark_is(message, inner=True), "watermark")
      for code, message in zip(_WATERMARK_CODES, _WATERMARK_MESSAGES, strict=True)),
    _sglang("too_many_stop_strings", "sampling_params.stop",
            "at most 32 stop strings are allowed, got {count}", _too_many_stops, "stop"),
    _sglang("too_many_stop_regexes", "sampling_params.stop_regex",
            "at most 32 stop_regex patterns are allowed, got {count}",
            _too_many_stop_regexes, "stop_regex"),
    _sglang("stop_regex_too_long", "sampling_params.stop_regex",
            "stop_regex is {stop_regex_len} bytes, over the 256-byte limit",
            _stop_regex_too_long, "stop_regex"),
    # SGLang compiles it with `re` after dispatch and fails without an answer (a
    # plain-text 500, or a stream cut before its first event).
    Rule("stop_regex_invalid", "sampling_params.stop_regex",
         "stop_regex {pattern!r} is not a valid regular expression: {detail}",
         _stop_regex_invalid, "stop_regex"),
    _sglang("beam_width_below_one", "sampling_params.beam_width",
            "beam_width must be at least 1, got {beam_width}.", _beam_width_below_one,
            "beam_width"),
    _sglang("temperature_out_of_range", "sampling_params.temperature",
            "temperature must be a non-negative finite number, got {temperature}.",
            _bad_temperature, "temperature",
            Holds("in_range", ("temperature",), 0.0, sys.float_info.max)),
    _range("top_p_out_of_range", "top_p",
           "top_p must be in (0, 1], got {top_p}.",
           0.0, 1.0, open_low=True),
    _range("min_p_out_of_range", "min_p",
           "min_p must be in [0, 1], got {min_p}.",
           0.0, 1.0),
    _sglang("top_k_out_of_range", "sampling_params.top_k",
            "top_k must be -1 (disable) or at least 1, got {top_k}.", _bad_top_k, "top_k"),
    _range("frequency_penalty_out_of_range", "frequency_penalty",
           "frequency_penalty must be in [-2, 2], got {frequency_penalty}.",
           -2.0, 2.0),
    _range("presence_penalty_out_of_range", "presence_penalty",
           "presence_penalty must be in [-2, 2], got {presence_penalty}.",
           -2.0, 2.0),
    _range("repetition_penalty_out_of_range", "repetition_penalty",
           "repetition_penalty must be in (0, 2] (1.0 = no penalty), got {repetition_penalty}.",
           0.0, 2.0, open_low=True),
    # SGLang divides float32 logits by it: a smaller one makes them inf, and sampling with
    # top_k or top_p then stops every SGLang process (torch.multinomial on inf).
    Rule("repetition_penalty_overflows_logits", "sampling_params.repetition_penalty",
         "repetition_penalty must be at least 1e-20: a smaller one overflows SGLang's float32 "
         "logits, got {repetition_penalty}", _penalty_overflows, "repetition_penalty"),
    _sglang("min_new_tokens_negative", "sampling_params.min_new_tokens",
            "min_new_tokens must be in [0, max_new_tokens], got {min_new_tokens}.",
            _min_negative, "min_new_tokens"),
    _sglang("max_new_tokens_negative", "sampling_params.max_new_tokens",
            "max_new_tokens must be at least 0, got {max_new_tokens}.",
            _max_negative, "max_new_tokens",
            Holds("at_least", ("max_new_tokens",), 0)),
    _sglang("min_new_tokens_over_max", "sampling_params.min_new_tokens",
            "min_new_tokens must be in [0, max_new_tokens({max_new_tokens})], "
            "got {min_new_tokens}.", _min_over_max, "min_new_tokens"),
    Rule("logit_bias_key_not_integer", "sampling_params.logit_bias", "{detail}",
         _logit_bias_key_not_integer, "logit_bias"),
    # A bias past it makes the float32 logits inf, and sampling with top_k, top_p or min_p
    # then stops every SGLang process (found by the live fuzz).
    Rule("logit_bias_overflows_logits", "sampling_params.logit_bias",
         "logit_bias[{key!r}] is {value}; a bias must be within [-1e30, 1e30]: a larger one "
         "overflows SGLang's float32 logits", _bias_overflows, "logit_bias"),
    _sglang("sampling_seed_out_of_range", "sampling_params.sampling_seed",
            "sampling_seed must be in [-2**63, 2**63 - 1], got {sampling_seed}.",
            _seed_out_of_range, "sampling_seed"),
    _sglang("several_grammars", "sampling_params",
            "Only one of json_schema, regex, ebnf, or structural_tag can be set.",
            _grammars, ("json_schema", "regex", "ebnf", "structural_tag")),
    # Its pooled logprobs index the computed positions, which a cached prefix shortens:
    # any value can stop every SGLang process (0.5.23, found by the live fuzz).
    Rule("token_indices_to_pool_unsafe", "token_indices_to_pool",
         "token_indices_to_pool is not accepted: SGLang 0.5.23 indexes the positions it "
         "computed with it, and a prompt in its prefix cache makes any index stop every "
         "SGLang process", _pooling_given, "token_indices_to_pool"),
    # SGLang's scheduler asserts on it: the assertion stops every SGLang process.
    Rule("logprob_start_len_below_minus_one", "logprob_start_len",
         "logprob_start_len must be -1 (output logprobs only) or at least 0, got {start}",
         _start_below_minus_one, ("return_logprob", "logprob_start_len")),
    # The scheduler's, after the deployment's checks (`DEPLOYMENT_RULES`), which repeat it
    # on the ids an engine request sends.
    Rule("logprob_start_len_past_prompt", "logprob_start_len",
         "req.logprob_start_len={start} is higher than the number of input tokens "
         "len(req.origin_input_ids)={tokens}. Please use a smaller logprob_start_len.",
         logprobs_past_prompt, ("return_logprob", "logprob_start_len")),
)  # fmt: skip

RULES_BY_CODE = {rule.code: rule for rule in RULES}
#: Rules the target's field lists enforce after the typed decode (no check of their own).
TARGET_RULES = frozenset(
    ("needs_newer_sglang", "unsupported_sampling_param", "unexpected_sampling_param")
)

#: SGLang's checks in the release tables that need only the request but that no
#: rule above makes, and why. Checks that need the deployment (`Check.needs`) stay
#: with SGLang too; docs/contract.md lists them.
SGLANG_CHECKS_LEFT: Mapping[str, str] = {
    "sampling_seed must be an integer, got {sampling_seed_type}.":
        "the typed decode refuses a sampling_seed that is not an integer",
    "return_sampling_mask only supports DisallowedTokensLogitsProcessor among custom "
    "logit processors.":
        "it needs the custom logit processor deserialised, which only SGLang does",
}  # fmt: skip


def reject(code: str, **facts: object) -> RequestRejected:
    """The `RequestRejected` for rule `code`, its field and message filled in from `facts`."""
    rule = RULES_BY_CODE[code]
    field = None if rule.field is None else rule.field.format(**facts)
    return RequestRejected(code, field, rule.message.format(**facts))
