"""The request contract as data: every rule with its code.

`fields.FIELD_OWNERS` names every `GenerateReqInput` field a client may not
send, and why. `RULES` lists every rule: its code, field, message and check (`checks.py`;
None: the typed decode enforces it, and `decode_errors.py` words msgspec's
verdict). `docs/contract.md` shows both tables; a test checks they agree.
`contract.contract_for(target)` compiles the rules once per `Target` from its
release tables, in that release's words. Messages that quote SGLang use its
own words, so a client reads the same text whichever side refused it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

from sglang_envelope.errors.exceptions import RequestRejected
from sglang_envelope.releases.target import Target
from sglang_envelope.request.checks import (
    INT64,
    bad_top_k,
    bias_overflows,
    grammars,
    is_given,
    logit_bias_key_not_integer,
    logprobs_past_prompt,
    min_over_max,
    min_tokens_with_grammar,
    mode_without_mask,
    n_null,
    n_over_beam_width,
    outside,
    over_32,
    penalty_overflows,
    pooling_given,
    routed_start_negative,
    routed_start_past_prompt,
    start_below_minus_one,
    stop_regex_invalid,
    stop_regex_too_long,
    top_k_overflows,
    watermark_in_both,
    watermark_is,
)

__all__ = [
    "DEFAULT_TARGET",
    "ENGINE_RULES",
    "GENERATE_REQ_INPUT_FIELDS",
    "RULES",
    "RULES_BY_CODE",
    "SAMPLING_PARAMS_FIELDS",
    "SEQUENCE_RULES",
    "SGLANG_CHECKS_LEFT",
    "TARGET_RULES",
    "TEXT_INPUT_RULES",
    "Holds",
    "Rule",
    "refusal",
    "reject",
]


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


#: The target of every call that names none: SGLang 0.5.23 over HTTP.
DEFAULT_TARGET = Target()
#: Every keyword argument of SGLang 0.5.23's `GenerateReqInput`, in its order.
GENERATE_REQ_INPUT_FIELDS = DEFAULT_TARGET.tables.generate_req_input_fields
#: The keys SGLang 0.5.23's contract gate accepts in `sampling_params`, in its order.
SAMPLING_PARAMS_FIELDS = DEFAULT_TARGET.gate.sampling_keys if DEFAULT_TARGET.gate else ()

#: The rules that read `text` (only a target with input="text" has them).
TEXT_INPUT_RULES = frozenset(("no_input",))


def _sglang(
    code: str,
    field: str,
    template: str,
    check: Any,
    when: Any,
    holds: Holds | None = None,
) -> Rule:
    return Rule(code, field, template, check, when, template, holds)


def _range(
    code: str,
    name: str,
    template: str,
    low: float,
    high: float,
    *,
    open_low: bool = False,
) -> Rule:
    """SGLang's range check of `sampling_params.name`, whose default (None) is inside."""
    holds = Holds("in_range", (name,), low, high, open_low)
    check = outside(name, low, high, open_low=open_low)
    return _sglang(code, f"sampling_params.{name}", template, check, name, holds)


#: SGLang's refusals of a watermark, in its order (`normalize_watermark_request`'s):
#: `checks.watermark_problem` names the first one a watermark breaks.
_WATERMARK = (
    ("watermark_not_object", "watermark must be an object"),
    ("watermark_unknown_key", "watermark contains unknown fields"),
    ("watermark_enabled_not_bool", "watermark enabled must be a boolean"),
    ("watermark_key_not_text", "watermark key must be a hex string"),
    ("watermark_key_length", "watermark key must contain 1 to 16 hex digits"),
    ("watermark_key_not_hex", "watermark key must contain only hex digits"),
    ("watermark_context_window", "watermark context_window must be a positive integer"),
)
_RESOLVE = (
    (
        "watermark_key_when_disabled",
        "request watermark key cannot be combined with enabled=false",
    ),
    ("watermark_sets_nothing", "request watermark must set enabled or key"),
)
_PRIORITY_MESSAGE = (
    "priority must be a signed 64-bit integer between -9223372036854775808 "
    "and 9223372036854775807"
)

#: Every rule, in the order they are applied. `{…}` in a message is filled in.
RULES: tuple[Rule, ...] = (
    Rule("body_too_large", None, "request body is {size} bytes; the limit is {limit}"),
    Rule("not_json", None, "request body is not valid JSON: {detail}"),
    Rule("not_object", None, "request body must be a JSON object, got {got}"),
    Rule("not_token_input", "{key}",
         "{key} is not accepted: this endpoint takes one token-input request "
         "(input_ids)"),
    Rule("orchestrator_field", "{key}",
         "{key} is set only by the serving system; a client may not send it"),
    Rule("unknown_field", "{key}",
         "unknown field `{key}`: SGLang {release}'s GenerateReqInput has no such "
         "field{hint}"),
    Rule("unknown_nested_field", "{path}.{key}", "unknown field `{key}` in {path}"),
    Rule("unknown_sampling_param", "sampling_params.{key}",
         "unknown field `{key}`, {expected}"),
    Rule("unexpected_sampling_param", "sampling_params.{key}",
         "Unexpected keyword argument '{key}'"),
    Rule("needs_newer_sglang", "{path}",
         "{key} needs SGLang {first} or later; this target is {release}"),
    Rule("missing_input_ids", "input_ids",
         "input_ids is required: this endpoint takes one token-input request"),
    Rule("batched_input", "{key}",
         "{key} must be one {one}: decode_client_request takes one prompt, not a batch: "
         "{batch}"),
    Rule("token_id_out_of_range", "{path}", "{path} must be a token id in [0, 2^32)"),
    Rule("too_many_input_ids", "input_ids",
         "input_ids has {size} tokens; the limit is {limit}"),
    Rule("token_out_of_vocab", "input_ids[{index}]",
         "input_ids[{index}] is {id}, past the model's largest token id {limit}"),
    Rule("json_too_deep", "{path}", "{path} is nested deeper than {limit} levels"),
    Rule("json_too_many_items", "{path}", "{path} holds more than {limit} JSON items"),
    Rule("wrong_type", "{path}", "{path}: expected {expected}, got {got}"),
    Rule("invalid_value", "{path}", "{path}: {detail}"),
    Rule("invalid_envelope", None, "worker envelope is malformed: {detail}"),
    # decode_sequences' (SEQUENCE_RULES): a batch, its bounds and its rids, before any
    # prompt is decoded; then each prompt meets every rule above and below.
    Rule("empty_batch", "{key}", "{key} is an empty batch: it asks for no sequence"),
    Rule("batch_text_and_input_ids", "text",
         "text and input_ids cannot both be given in a batch: SGLang reads the batch "
         "from text and indexes input_ids by prompt; send one request a prompt"),
    Rule("too_many_prompts", "{key}", "{key} holds {size} prompts; the limit is {limit}"),
    Rule("batch_too_large", "{key}",
         "a batch of {size} prompts is {work} bytes once split (the shared fields once a "
         "prompt); the limit is {limit}"),
    Rule("per_item_list", "{key}",
         "{key} as a list (one value a prompt) is not accepted: give one value for the "
         "whole batch, or send one request a prompt"),
    Rule("not_in_batch", "{key}",
         "{key} is not accepted in a batch: SGLang's split of a batch leaves it out of "
         "every prompt; send one request a prompt"),
    Rule("rid_list_length", "rid",
         "The specified rids length mismatch with the batch_size for batch processing."),
    Rule("duplicate_rids", "rid",
         "Duplicate request IDs detected within the request: {rids}"),
    Rule("batch_n_below_one", "sampling_params.n",
         "sampling_params.n is {n}: SGLang makes no sequence of a batch for an n below 1 "
         "(its tokenizer manager then fails without an answer)"),
    Rule("too_many_sequences", "sampling_params.n",
         "the request asks for {count} sequences ({prompts} prompts x n {n}); "
         "the limit is {limit}"),
    # SGLang's own checks, in the order normalize_batch_and_arguments() makes them
    # (the first only on a target with input="text": `TEXT_INPUT_RULES`).
    Rule("no_input", "text", "Either text, input_ids or input_embeds should be provided.",
         lambda r: {} if r.text is None and r.input_ids is None else None),
    Rule("flat_with_multi_item", "return_flat_raw_top_logprobs",
         "return_flat_raw_top_logprobs does not support multi-item scoring: "
         "delimiter-sparse top logprob rows have no contiguous position mapping.",
         lambda r: {} if (r.return_flat_raw_top_logprobs
                          and is_given(r.multi_item_delimiter_indices)) else None,
         when="return_flat_raw_top_logprobs"),
    Rule("output_flat_with_stream", "return_flat_raw_output_top_logprobs",
         "return_flat_raw_output_top_logprobs is only set on the finished response "
         "and does not support stream=True.",
         lambda r: {} if (r.return_flat_raw_output_top_logprobs
                          and bool(r.stream)) else None,
         when="return_flat_raw_output_top_logprobs", holds=Holds("false", ("stream",))),
    Rule("b64_without_flat", "return_flat_raw_top_logprobs_b64",
         "return_flat_raw_top_logprobs_b64 requires return_flat_raw_top_logprobs "
         "or return_flat_raw_output_top_logprobs.",
         lambda r: {} if (r.return_flat_raw_top_logprobs_b64 and not (
             r.return_flat_raw_top_logprobs
             or r.return_flat_raw_output_top_logprobs)) else None,
         when="return_flat_raw_top_logprobs_b64",
         holds=Holds("any_true", ("return_flat_raw_top_logprobs",
                                  "return_flat_raw_output_top_logprobs"))),
    # (unless text is set)
    Rule("empty_input_ids", "input_ids", "input_ids cannot be empty.",
         lambda r: {} if r.input_ids == () and getattr(r, "text", None) is None else None,
         holds=Holds("nonempty", ("input_ids",))),
    Rule("session_id_with_session_params", "session_id",
         "session_id and session_params cannot both be set.",
         lambda r: {} if (r.session_id is not None
                          and is_given(r.session_params)) else None,
         when="session_id"),
    # The tokenizer manager's checks, then SamplingParams(**sampling_params) on the
    # watermark, in its order (the rule holds where the release tables carry it).
    _sglang("priority_out_of_range", "priority", _PRIORITY_MESSAGE,
            outside("priority", *INT64), "priority"),
    _sglang("sampling_logprobs_mode_without_mask", "sampling_logprobs_mode",
            "sampling_logprobs_mode can only be set when return_sampling_mask=true.",
            mode_without_mask, "sampling_logprobs_mode"),
    _sglang("watermark_in_both_places", "watermark",
            "watermark must be provided either at the request top level or inside "
            "sampling_params, not both", watermark_in_both, "watermark"),
    *(_sglang(code, "watermark", message, watermark_is(code, inner=False), "watermark")
      for code, message in _WATERMARK),
    # resolve_watermark_request()'s checks that need only the request (the release
    # tables do not list them; they hold where SGLang has a watermark at all).
    *(Rule(code, "watermark", message, watermark_is(code, inner=False), "watermark")
      for code, message in _RESOLVE),
    *(Rule(f"sampling_{code}", "sampling_params.watermark", message,
           watermark_is(code, inner=True), "watermark")
      for code, message in _RESOLVE),
    # Sampling: a null n, which SGLang's normalization fails on; then SGLang's
    # SamplingParams.normalize() and .verify() checks, in its words and order.
    Rule("n_null", "sampling_params.n",
         "sampling_params.n must be an integer, got null: SGLang's "
         "normalize_batch_and_arguments() fails on a null n", n_null, when="n"),
    # build_engine_request's (ENGINE_RULES): a prefill/decode pair carries one sequence.
    Rule("parallel_sampling", "sampling_params.n",
         "sampling_params.n is {n}: a {role} leg carries one sequence; send one request "
         "a sample, each with n = 1"),
    # A key SGLang's gate lets through that its SamplingParams has no argument for.
    Rule("unsupported_sampling_param", "sampling_params.{key}",
         "Unexpected keyword argument '{key}'"),
    *(_sglang(f"sampling_{code}", "sampling_params.watermark", message,
              watermark_is(code, inner=True), "watermark")
      for code, message in _WATERMARK),
    _sglang("too_many_stop_strings", "sampling_params.stop",
            "at most 32 stop strings are allowed, got {count}", over_32("stop"), "stop"),
    _sglang("too_many_stop_regexes", "sampling_params.stop_regex",
            "at most 32 stop_regex patterns are allowed, got {count}",
            over_32("stop_regex"), "stop_regex"),
    _sglang("stop_regex_too_long", "sampling_params.stop_regex",
            "stop_regex is {stop_regex_len} bytes, over the 256-byte limit",
            stop_regex_too_long, "stop_regex"),
    # SGLang compiles it with `re` after dispatch and fails without an answer (a
    # plain-text 500, or a stream cut before its first event).
    Rule("stop_regex_invalid", "sampling_params.stop_regex",
         "stop_regex {pattern!r} is not a valid regular expression: {detail}",
         stop_regex_invalid, "stop_regex"),
    _sglang("beam_width_below_one", "sampling_params.beam_width",
            "beam_width must be at least 1, got {beam_width}.",
            outside("beam_width", 1, math.inf), "beam_width"),
    # The scheduler's, for a beam request (its other checks need the deployment).
    Rule("n_over_beam_width", "sampling_params.n",
         "n ({n}) cannot exceed beam_width ({beam_width}).",
         n_over_beam_width, "beam_width"),
    _range("temperature_out_of_range", "temperature",
           "temperature must be a non-negative finite number, got {temperature}.",
           0.0, sys.float_info.max),
    _range("top_p_out_of_range", "top_p",
           "top_p must be in (0, 1], got {top_p}.",
           0.0, 1.0, open_low=True),
    _range("min_p_out_of_range", "min_p",
           "min_p must be in [0, 1], got {min_p}.",
           0.0, 1.0),
    _sglang("top_k_out_of_range", "sampling_params.top_k",
            "top_k must be -1 (disable) or at least 1, got {top_k}.", bad_top_k, "top_k"),
    # SGLang's sampler puts it in an int32 tensor: a larger one stops every SGLang
    # process (found by sending one to a live server).
    Rule("top_k_overflows_int32", "sampling_params.top_k",
         "top_k must be at most 2147483647: SGLang holds it as a 32-bit integer, and a "
         "larger one stops every SGLang process, got {top_k}", top_k_overflows, "top_k"),
    _range("frequency_penalty_out_of_range", "frequency_penalty",
           "frequency_penalty must be in [-2, 2], got {frequency_penalty}.",
           -2.0, 2.0),
    _range("presence_penalty_out_of_range", "presence_penalty",
           "presence_penalty must be in [-2, 2], got {presence_penalty}.",
           -2.0, 2.0),
    _range("repetition_penalty_out_of_range", "repetition_penalty",
           "repetition_penalty must be in (0, 2] (1.0 = no penalty), "
           "got {repetition_penalty}.",
           0.0, 2.0, open_low=True),
    # SGLang divides float32 logits by it: a smaller one makes them inf, and sampling with
    # top_k or top_p then stops every SGLang process (torch.multinomial on inf).
    Rule("repetition_penalty_overflows_logits", "sampling_params.repetition_penalty",
         "repetition_penalty must be at least 1e-20: a smaller one overflows SGLang's "
         "float32 logits, got {repetition_penalty}", penalty_overflows,
         "repetition_penalty"),
    _sglang("min_new_tokens_negative", "sampling_params.min_new_tokens",
            "min_new_tokens must be in [0, max_new_tokens], got {min_new_tokens}.",
            outside("min_new_tokens", 0, math.inf), "min_new_tokens"),
    _sglang("max_new_tokens_negative", "sampling_params.max_new_tokens",
            "max_new_tokens must be at least 0, got {max_new_tokens}.",
            outside("max_new_tokens", 0, math.inf), "max_new_tokens",
            Holds("at_least", ("max_new_tokens",), 0)),
    _sglang("min_new_tokens_over_max", "sampling_params.min_new_tokens",
            "min_new_tokens must be in [0, max_new_tokens({max_new_tokens})], "
            "got {min_new_tokens}.", min_over_max, "min_new_tokens"),
    Rule("logit_bias_key_not_integer", "sampling_params.logit_bias", "{detail}",
         logit_bias_key_not_integer, "logit_bias"),
    # A bias past it makes the float32 logits inf, and sampling with top_k, top_p or min_p
    # then stops every SGLang process (found by the live fuzz).
    Rule("logit_bias_overflows_logits", "sampling_params.logit_bias",
         "logit_bias[{key!r}] is {value}; a bias must be within [-1e30, 1e30]: "
         "a larger one overflows SGLang's float32 logits", bias_overflows, "logit_bias"),
    _sglang("sampling_seed_out_of_range", "sampling_params.sampling_seed",
            "sampling_seed must be in [-2**63, 2**63 - 1], got {sampling_seed}.",
            outside("sampling_seed", *INT64), "sampling_seed"),
    _sglang("several_grammars", "sampling_params",
            "Only one of json_schema, regex, ebnf, or structural_tag can be set.",
            grammars, ("json_schema", "regex", "ebnf", "structural_tag")),
    # A grammar that ends before min_new_tokens leaves no token to sample: SGLang fails
    # the request, and with top_k, top_p or min_p every SGLang process stops (found by
    # the live fuzz). Whether a grammar can end that early is not known before it runs.
    Rule("min_new_tokens_with_grammar", "sampling_params.min_new_tokens",
         "min_new_tokens ({min_new_tokens}) is not accepted with {grammar}: a grammar "
         "that ends before min_new_tokens leaves SGLang no token to sample, which fails "
         "the request or, with top_k, top_p or min_p, stops every SGLang process",
         min_tokens_with_grammar, "min_new_tokens"),
    # Its pooled logprobs index the computed positions, which a cached prefix shortens:
    # any value can stop every SGLang process (0.5.23, found by the live fuzz).
    Rule("token_indices_to_pool_unsafe", "token_indices_to_pool",
         "token_indices_to_pool is not accepted: SGLang 0.5.23 indexes the positions it "
         "computed with it, and a prompt in its prefix cache makes any index stop every "
         "SGLang process", pooling_given, "token_indices_to_pool"),
    # SGLang's scheduler asserts on it: the assertion stops every SGLang process.
    Rule("logprob_start_len_below_minus_one", "logprob_start_len",
         "logprob_start_len must be -1 (output logprobs only) or at least 0, got {start}",
         start_below_minus_one, ("return_logprob", "logprob_start_len")),
    # The scheduler's, after the deployment's checks (`DEPLOYMENT_RULES`), which repeat it
    # on the ids an engine request sends.
    Rule("logprob_start_len_past_prompt", "logprob_start_len",
         "req.logprob_start_len={start} is higher than the number of input tokens "
         "len(req.origin_input_ids)={tokens}. Please use a smaller logprob_start_len.",
         logprobs_past_prompt, ("return_logprob", "logprob_start_len")),
    # The scheduler's, when routed experts are asked for: it aborts the request with them
    # (the deployment's checks repeat the second on the ids an engine request sends).
    Rule("routed_experts_start_len_negative", "routed_experts_start_len",
         "recv_req.routed_experts_start_len={start} is lower than 0. Please use a "
         "non-negative routed_experts_start_len.",
         routed_start_negative, "return_routed_experts"),
    Rule("routed_experts_start_len_past_prompt", "routed_experts_start_len",
         "recv_req.routed_experts_start_len={start} is higher than the number of input "
         "tokens len(req.origin_input_ids)={tokens}. Please use a smaller "
         "routed_experts_start_len.",
         routed_start_past_prompt, "return_routed_experts"),
)  # fmt: skip

RULES_BY_CODE = {rule.code: rule for rule in RULES}
#: Rules the target's field lists enforce after the typed decode (no check of their own).
TARGET_RULES = frozenset(
    ("needs_newer_sglang", "unsupported_sampling_param", "unexpected_sampling_param")
)
#: Rules `decode_sequences` enforces on a body of many sequences, before its prompts.
SEQUENCE_RULES = frozenset(
    (
        "empty_batch",
        "batch_text_and_input_ids",
        "too_many_prompts",
        "batch_too_large",
        "per_item_list",
        "not_in_batch",
        "rid_list_length",
        "duplicate_rids",
        "batch_n_below_one",
        "too_many_sequences",
    )
)
#: Rules `build_engine_request` enforces for a role.
ENGINE_RULES = frozenset(("parallel_sampling",))

#: SGLang's checks in the release tables that need only the request but that no
#: rule above makes, and why. Checks that need the deployment (`Check.needs`) stay
#: with SGLang too; docs/contract.md lists them.
SGLANG_CHECKS_LEFT: Mapping[str, str] = {
    "sampling_seed must be an integer, got {sampling_seed_type}.": (
        "the typed decode refuses a sampling_seed that is not an integer"
    ),
    (
        "return_sampling_mask only supports DisallowedTokensLogitsProcessor among custom "
        "logit processors."
    ): "it needs the custom logit processor deserialised, which only SGLang does",
}


def refusal(rule: tuple[Any, ...], facts: dict[str, object]) -> RequestRejected:
    """The `RequestRejected` of `rule` (a `Rule`, or any row that starts with a rule's
    code, field and message), its field and message filled in from `facts`."""
    code, field, message = rule[:3]
    return RequestRejected(
        code, None if field is None else field.format(**facts), message.format(**facts)
    )


def reject(code: str, **facts: object) -> RequestRejected:
    """The `RequestRejected` for rule `code`, its field and message filled in
    from `facts`."""
    return refusal(RULES_BY_CODE[code], facts)
