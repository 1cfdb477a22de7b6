"""The request contract as data: who may set each field, and every rule with its code.

Two tables hold the whole contract, and `docs/contract.md` shows the same
tables (a test checks that the two agree):

- `FIELD_OWNERS` names every field of SGLang 0.5.23's `GenerateReqInput` that a
  client may not send, and why: it is input other than one list of token ids,
  or only the serving system sets it.
- `RULES` lists every rule: its stable code, the field it is about, the message
  a client sees, and the check. Rules whose check is None are enforced by the
  typed decode of `ClientRequest`; their messages are filled in from msgspec's
  verdict by `translate_validation_error`.

Messages that quote SGLang use its own words, so a client sees the same text
whether the frontend or the engine refused it.
"""

from __future__ import annotations

import difflib
import operator
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec
from msgspec import UNSET

from sglang_envelope._errors import RequestRejected

if TYPE_CHECKING:
    from sglang_envelope._request import ClientRequest, SamplingParams

__all__ = [
    "DECODE_ERRORS",
    "FIELD_OWNERS",
    "GENERATE_REQ_INPUT_FIELDS",
    "KNOWN_FIELDS",
    "RULES",
    "SAMPLING_PARAMS_FIELDS",
    "Rule",
    "check_request",
    "first_unknown_key",
    "is_given",
    "prepare_checks",
    "reject",
    "translate_validation_error",
]

#: Every keyword argument of SGLang 0.5.23's `GenerateReqInput`, in its order.
GENERATE_REQ_INPUT_FIELDS: tuple[str, ...] = (
    "rid", "session_id", "text", "input_ids", "input_embeds", "image_data", "video_data",
    "audio_data", "mm_hashes", "mm_content_hashes", "use_audio_in_video", "video_config",
    "sampling_params", "watermark", "return_logprob", "logprob_start_len", "top_logprobs_num",
    "token_ids_logprob", "return_sampling_mask", "sampling_logprobs_mode",
    "return_text_in_logprobs", "return_flat_raw_top_logprobs",
    "return_flat_raw_output_top_logprobs", "return_flat_raw_top_logprobs_b64", "stream",
    "log_metrics", "return_hidden_states", "return_routed_experts", "routed_experts_start_len",
    "return_indexer_topk", "modalities", "session_params", "lora_path", "lora_id",
    "custom_logit_processor", "positional_embed_overrides", "bootstrap_host", "bootstrap_port",
    "bootstrap_room", "bootstrap_pair_key", "decode_tp_size", "routed_dp_rank",
    "data_parallel_rank", "disagg_prefill_dp_rank", "routing_key", "conversation_id",
    "http_worker_ipc", "background", "require_reasoning", "max_thinking_tokens", "priority",
    "extra_key", "no_logs", "custom_labels", "return_bytes", "return_entropy",
    "return_prompt_token_ids", "external_trace_header", "received_time",
    "need_wait_for_mm_inputs", "num_items_assigned", "encoder_urls", "max_dynamic_patch",
    "min_dynamic_patch", "image_max_dynamic_patch", "video_max_dynamic_patch", "images_config",
    "mm_processor_kwargs", "multi_item_delimiter_indices", "token_indices_to_pool", "cache_salt",
    "kv_hints",
)  # fmt: skip

#: The keys SGLang 0.5.23's contract gate accepts in `sampling_params`, in its order.
SAMPLING_PARAMS_FIELDS: tuple[str, ...] = (
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
    "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n",
    "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
    "spaces_between_special_tokens", "no_stop_trim", "stream_interval", "logit_bias",
    "sampling_seed", "custom_params", "beam_width", "watermark", "choice",
)  # fmt: skip

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


_NULL = msgspec.Raw(b"null")


def is_given(value: object) -> bool:
    """True for a JSON value held as `msgspec.Raw` that is neither absent nor null."""
    return value is not UNSET and value != _NULL


def _given(value: Any, default: Any) -> Any:
    return default if value is UNSET else value


def _n_not_one(p: SamplingParams) -> dict[str, object] | None:
    # An explicit null is refused too: SGLang's gate reads it as 1, but
    # normalize_batch_and_arguments() then fails on it with a TypeError.
    n = p.n
    return None if n is UNSET or n == 1 else {"n": n}


#: Keys SGLang's contract gate accepts in `sampling_params` that its engine's
#: SamplingParams cannot take (it fails with a TypeError after dispatch).
UNSUPPORTED_SAMPLING_KEYS = ("choice",)


def _unsupported_sampling_key(p: SamplingParams) -> dict[str, object] | None:
    found = [key for key in UNSUPPORTED_SAMPLING_KEYS if getattr(p, key) is not UNSET]
    return {"key": found[0]} if found else None


def _max_negative(p: SamplingParams) -> dict[str, object] | None:
    high = _given(p.max_new_tokens, None)
    return {"max_new_tokens": high} if high is not None and high < 0 else None


def _min_negative(p: SamplingParams) -> dict[str, object] | None:
    low = _given(p.min_new_tokens, None)
    return {"min_new_tokens": low} if low is not None and low < 0 else None


def _min_over_max(p: SamplingParams) -> dict[str, object] | None:
    low = _given(p.min_new_tokens, None)
    high = _given(p.max_new_tokens, 128)
    if low is None or high is None or low <= high:
        return None
    return {"min_new_tokens": low, "max_new_tokens": high}


class Rule(NamedTuple):
    """One rule of the contract.

    `check` returns None when the request keeps the rule, else the facts the
    message template is filled with. None as `check` means the typed decode
    enforces the rule.
    """

    code: str
    field: str | None
    message: str
    #: Takes the request, or its `SamplingParams` for a rule on `sampling_params`.
    check: Callable[[Any], dict[str, object] | None] | None = None
    #: A field the check reads that must differ from its default for the rule to be
    #: broken: while it holds its default, the check is skipped.
    when: str | None = None


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
         "unknown field `{key}`: SGLang 0.5.23's GenerateReqInput has no such field{hint}"),
    Rule("unknown_nested_field", "{path}.{key}", "unknown field `{key}` in {path}"),
    Rule("unknown_sampling_param", "sampling_params.{key}", "unknown field `{key}`, {expected}"),
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
         when="return_flat_raw_output_top_logprobs"),
    Rule("b64_without_flat", "return_flat_raw_top_logprobs_b64",
         "return_flat_raw_top_logprobs_b64 requires return_flat_raw_top_logprobs "
         "or return_flat_raw_output_top_logprobs.",
         lambda r: {} if (r.return_flat_raw_top_logprobs_b64 and not (
             r.return_flat_raw_top_logprobs or r.return_flat_raw_output_top_logprobs)) else None,
         when="return_flat_raw_top_logprobs_b64"),
    Rule("empty_input_ids", "input_ids", "input_ids cannot be empty.",
         lambda r: {} if (not r.input_ids) else None),
    Rule("session_id_with_session_params", "session_id",
         "session_id and session_params cannot both be set.",
         lambda r: {} if (r.session_id is not None and is_given(r.session_params)) else None,
         when="session_id"),
    # Sampling: one sequence a request, and SGLang's SamplingParams.verify() words.
    Rule("parallel_sampling", "sampling_params.n",
         "sampling_params.n must be 1: this endpoint returns one sequence per request, got {n}",
         _n_not_one, when="n"),
    Rule("unsupported_sampling_param", "sampling_params.{key}",
         "sampling_params.{key} passes SGLang 0.5.23's contract gate "
         "but its engine has no such sampling parameter",
         _unsupported_sampling_key, when="choice"),
    Rule("max_new_tokens_negative", "sampling_params.max_new_tokens",
         "max_new_tokens must be at least 0, got {max_new_tokens}.",
         _max_negative, when="max_new_tokens"),
    Rule("min_new_tokens_negative", "sampling_params.min_new_tokens",
         "min_new_tokens must be in [0, max_new_tokens], got {min_new_tokens}.",
         _min_negative, when="min_new_tokens"),
    Rule("min_new_tokens_over_max", "sampling_params.min_new_tokens",
         "min_new_tokens must be in [0, max_new_tokens({max_new_tokens})], got {min_new_tokens}.",
         _min_over_max, when="min_new_tokens"),
)  # fmt: skip

_RULES_BY_CODE = {rule.code: rule for rule in RULES}


def _on_sampling(rule: Rule) -> bool:
    """Whether a checked rule is about `sampling_params` (its check takes them)."""
    return (rule.field or "").startswith("sampling_params.")


_Check = Callable[[Any], "dict[str, object] | None"]


class _Checks(NamedTuple):
    """The checked rules of one scope, in order, and the fields that guard them."""

    #: (code, check, index of its guarding field or None), every checked rule.
    rules: tuple[tuple[str, _Check, int | None], ...]
    #: (code, check) of the rules no field guards: all that can break while every
    #: guarding field holds its default.
    unguarded: tuple[tuple[str, _Check], ...]
    guards: Callable[[Any], tuple[Any, ...]]  # the guarding fields' values, at once
    defaults: tuple[Any, ...]  # their defaults


def _checks(rules: list[Rule], defaults: Mapping[str, Any]) -> _Checks:
    guards = sorted({rule.when for rule in rules if rule.when})
    entries = tuple(
        (rule.code, rule.check, guards.index(rule.when) if rule.when else None)
        for rule in rules
        if rule.check is not None
    )
    unguarded = tuple((code, check) for code, check, at in entries if at is None)
    names = guards if len(guards) > 1 else guards * 2  # so that the getter gives a tuple
    getter = operator.attrgetter(*names)
    return _Checks(entries, unguarded, getter, tuple(defaults[name] for name in names))


_CHECKS: dict[bool, _Checks] = {}  # by `_on_sampling`; made by `prepare_checks`


def prepare_checks(
    request_defaults: Mapping[str, Any], sampling_defaults: Mapping[str, Any]
) -> None:
    """Group the checked rules by scope, given the field defaults of the request types."""
    for on_sampling, defaults in ((False, request_defaults), (True, sampling_defaults)):
        scoped = [rule for rule in RULES if rule.check and _on_sampling(rule) is on_sampling]
        _CHECKS[on_sampling] = _checks(scoped, defaults)


def _run(checks: _Checks, value: Any) -> None:
    """Raise `RequestRejected` for the first rule of `checks` that `value` breaks."""
    guards = checks.guards(value)
    if guards == checks.defaults:  # no guarded rule can be broken
        for code, check in checks.unguarded:
            facts = check(value)
            if facts is not None:
                raise reject(code, **facts)
        return
    defaults = checks.defaults
    for code, check, at in checks.rules:
        if at is not None and guards[at] == defaults[at]:
            continue
        facts = check(value)
        if facts is not None:
            raise reject(code, **facts)


def reject(code: str, **facts: object) -> RequestRejected:
    """The `RequestRejected` for rule `code`, its field and message filled in from `facts`."""
    rule = _RULES_BY_CODE[code]
    field = None if rule.field is None else rule.field.format(**facts)
    return RequestRejected(code, field, rule.message.format(**facts))


def check_request(request: ClientRequest) -> None:
    """Raise `RequestRejected` for the first checked rule `request` breaks."""
    _run(_CHECKS[False], request)
    params = request.sampling_params
    if params is not None and params is not UNSET:
        _run(_CHECKS[True], params)


# msgspec's verdicts: "<what> - at `$.<path>`"; the path is absent at the top level. The
# path holds only field names, indices and `[...]`, never client text, so it is read
# from the end; an unknown key is found in the body itself (`first_unknown_key`),
# since a key may hold text that looks like a path.
_AT = re.compile(
    r"^(?P<what>.*?)(?: - at (?P<key>`key` in )?`(?P<path>\$[\w.\[\]]*)`)?$", re.DOTALL
)
_EXPECTED = re.compile(r"^Expected `(?P<expected>[^`]*)`, got `(?P<got>[^`]*)`$")
_UNKNOWN = re.compile(r"^Object contains unknown field `", re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<key>[^`]*)`$")
_TOKEN_LIST_ITEM = re.compile(r"^input_ids\[\d+\]$")


def _unknown_top_level_key(key: str) -> RequestRejected:
    owner = FIELD_OWNERS.get(key)
    if owner is not None:
        return reject(owner, key=key)
    if key in SAMPLING_PARAMS_FIELDS and key not in GENERATE_REQ_INPUT_FIELDS:
        hint = f"; did you mean `sampling_params.{key}`?"
    else:
        near = difflib.get_close_matches(key, GENERATE_REQ_INPUT_FIELDS, n=1)
        hint = f"; did you mean `{near[0]}`?" if near else ""
    return reject("unknown_field", key=key, hint=hint)


def _unknown_sampling_key(key: str) -> RequestRejected:
    # SGLang's contract gate words (serde's unknown_field text).
    listed = ", ".join(f"`{name}`" for name in SAMPLING_PARAMS_FIELDS)
    return reject("unknown_sampling_param", key=key, expected=f"expected one of {listed}")


#: What msgspec raises on a body it cannot decode (RecursionError: nested too deeply;
#: BufferError: a memoryview that is not contiguous).
DECODE_ERRORS = (msgspec.ValidationError, msgspec.DecodeError, RecursionError, BufferError)

_members = msgspec.json.Decoder(dict[str, msgspec.Raw])

#: Where a struct sits in the body, and the names it knows; filled in by `_request.py`.
KNOWN_FIELDS: dict[str, frozenset[str]] = {}


def first_unknown_key(data: Any, path: str = "") -> tuple[str, str] | None:
    """The first key in document order that no struct at `path` knows: (path, key)."""
    try:
        members = _members.decode(data)
    except DECODE_ERRORS:
        return None
    known = KNOWN_FIELDS.get(path, frozenset())
    for key, value in members.items():
        if key not in known:
            return path, key
        inner = f"{path}.{key}" if path else key
        if inner in KNOWN_FIELDS:
            found = first_unknown_key(value, inner)
            if found is not None:
                return found
    return None


def translate_validation_error(
    error: Exception, *, prefix: str = "", data: Any = None
) -> RequestRejected:
    """Turn msgspec's verdict on a body (or on `prefix`, a part of it) into the rule it breaks.

    `data`, the JSON decoded, locates an unknown key without reading it from the message.
    """
    if isinstance(error, RecursionError):
        return reject("not_json", detail="JSON is nested too deeply")
    if not isinstance(error, msgspec.ValidationError):
        return reject("not_json", detail=str(error))
    match = _AT.match(str(error))
    assert match is not None  # the pattern matches any text
    what = match["what"]
    raw_path = (match["path"] or "$").removeprefix("$").removeprefix(".")
    path = (
        prefix + raw_path
        if raw_path.startswith("[")
        else ".".join(part for part in (prefix, raw_path) if part)
    )
    if match["key"]:
        return reject("invalid_value", path=path or "body", detail=f"keys must be strings; {what}")
    if _UNKNOWN.match(str(error)):
        found = first_unknown_key(data) if data is not None else None
        if found is None:  # not found in the body: read the message
            return reject("invalid_value", path=path or "body", detail=what)
        where, key = found
        if where == "sampling_params":
            return _unknown_sampling_key(key)
        if not where:
            return _unknown_top_level_key(key)
        return reject("unknown_nested_field", key=key, path=where)
    if missing := _MISSING.match(what):
        if not path and missing["key"] == "input_ids":
            return reject("missing_input_ids")
        return reject("invalid_value", path=path or "body", detail=what)
    expected = _EXPECTED.match(what)
    if not path:
        return reject("not_object", got=expected["got"] if expected else what)
    if _TOKEN_LIST_ITEM.match(path):
        if expected and expected["got"] == "array":
            return reject("batched_input")
        if not expected:
            return reject("token_id_out_of_range", path=path)
    if expected:
        return reject("wrong_type", path=path, expected=expected["expected"], got=expected["got"])
    return reject("invalid_value", path=path, detail=what)
