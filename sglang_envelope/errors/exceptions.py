"""The library's exceptions: one base, one branch for each side of the wire.

    EnvelopeError(ValueError)  every error this library raises
    ├── RequestRejected        a client request (or envelope) breaks a rule
    └── ResponseError          an engine response cannot be turned into an answer
        ├── LimitExceeded      a size bound was passed before the excess was parsed
        └── EngineError        SGLang itself answered with an error

`EnvelopeError` is raised directly only for a caller's own mistake, such as
building a prefill request without a `Bootstrap`. Every error carries its facts
as attributes, so callers never parse messages, and survives pickling with them
(a rejection raised in a process pool arrives as itself).
"""

from __future__ import annotations

import reprlib
from typing import Any, Final, Literal, cast

__all__ = [
    "EngineError",
    "EnvelopeError",
    "LimitExceeded",
    "RejectionCode",
    "RequestRejected",
    "ResponseError",
    "UpstreamError",
]

#: SGLang's ``type`` for every error its /generate writes in a stream.
SGLANG_ERROR_TYPE: Final = "invalid_request_error"

RejectionCode = Literal[
    "body_too_large",
    "not_json",
    "not_object",
    "not_token_input",
    "orchestrator_field",
    "unknown_field",
    "unknown_nested_field",
    "unknown_sampling_param",
    "unexpected_sampling_param",
    "needs_newer_sglang",
    "missing_input_ids",
    "batched_input",
    "token_id_out_of_range",
    "too_many_input_ids",
    "token_out_of_vocab",
    "json_too_deep",
    "json_too_many_items",
    "wrong_type",
    "invalid_value",
    "invalid_envelope",
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
    "no_input",
    "flat_with_multi_item",
    "output_flat_with_stream",
    "b64_without_flat",
    "empty_input_ids",
    "session_id_with_session_params",
    "priority_out_of_range",
    "sampling_logprobs_mode_without_mask",
    "watermark_in_both_places",
    "watermark_not_object",
    "watermark_unknown_key",
    "watermark_enabled_not_bool",
    "watermark_key_not_text",
    "watermark_key_length",
    "watermark_key_not_hex",
    "watermark_context_window",
    "watermark_key_when_disabled",
    "watermark_sets_nothing",
    "sampling_watermark_key_when_disabled",
    "sampling_watermark_sets_nothing",
    "n_null",
    "parallel_sampling",
    "unsupported_sampling_param",
    "sampling_watermark_not_object",
    "sampling_watermark_unknown_key",
    "sampling_watermark_enabled_not_bool",
    "sampling_watermark_key_not_text",
    "sampling_watermark_key_length",
    "sampling_watermark_key_not_hex",
    "sampling_watermark_context_window",
    "too_many_stop_strings",
    "too_many_stop_regexes",
    "stop_regex_too_long",
    "stop_regex_invalid",
    "beam_width_below_one",
    "n_over_beam_width",
    "temperature_out_of_range",
    "top_p_out_of_range",
    "min_p_out_of_range",
    "top_k_out_of_range",
    "top_k_overflows_int32",
    "frequency_penalty_out_of_range",
    "presence_penalty_out_of_range",
    "repetition_penalty_out_of_range",
    "repetition_penalty_overflows_logits",
    "min_new_tokens_negative",
    "max_new_tokens_negative",
    "min_new_tokens_over_max",
    "logit_bias_key_not_integer",
    "logit_bias_overflows_logits",
    "sampling_seed_out_of_range",
    "several_grammars",
    "min_new_tokens_with_grammar",
    "token_indices_to_pool_unsafe",
    "logprob_start_len_below_minus_one",
    "logprob_start_len_past_prompt",
    "routed_experts_start_len_negative",
    "routed_experts_start_len_past_prompt",
    # the deployment's rules (`DEPLOYMENT_RULES`) that `RULES` has not named above
    "thinking_needs_strict_thinking",
    "routed_dp_rank_out_of_range",
    "text_needs_tokenizer",
    "input_too_long",
    "total_tokens_too_many",
    "token_ids_logprob_out_of_vocab",
    "hidden_states_over_server_mode",
    "hidden_states_not_enabled",
    "custom_logit_processor_not_enabled",
    "stop_needs_tokenizer",
    "stop_regex_needs_tokenizer",
    "min_new_tokens_needs_tokenizer",
    "logit_bias_out_of_vocab",
    "input_over_max_req_input_len",
    "routed_experts_not_enabled",
    "stop_token_ids_out_of_vocab",
    "top_logprobs_num_over_vocab",
]
"""Every `RequestRejected.code`: the codes of the rules in `docs/contract.md`, in order
(`RULES`, then the deployment's rules that `RULES` does not have)."""


#: Rule codes a unary client is answered with a status other than 400 for.
REJECTION_STATUSES: dict[str, int] = {"body_too_large": 413}


class EnvelopeError(ValueError):
    """Base of every error raised by sglang-envelope.

    Each carries what an answer to its client is made of, so that a caller
    raises it, or turns it into its own framework's error, without parsing
    text: `message`; `status`, the HTTP status SGLang's /generate gives a
    unary client that failed so (`error_response`'s); `error_type`, the
    ``type`` of SGLang's error object; `retryable`, whether sending the same
    request again may succeed, as SGLang writes it (false).
    """

    status: int = 500
    error_type: str = "envelope_error"
    retryable: bool = False

    def __init__(self, message: object = "") -> None:
        super().__init__(message)
        self.message = str(message)


class RequestRejected(EnvelopeError):
    """A request breaks one of the rules in `docs/contract.md`.

    `code` is the rule's stable snake_case name (one of `RejectionCode`), `field`
    the dotted path of the offending field (None when the request as a whole is
    at fault) and `message` the human text, which is also `str(error)`.
    """

    status = 400
    error_type = SGLANG_ERROR_TYPE

    def __init__(
        self, code: RejectionCode | str, field: str | None, message: str
    ) -> None:
        super().__init__(message)
        self.code: RejectionCode = cast(RejectionCode, code)
        self.field = field
        self.message = message
        if type(code) is str and code in REJECTION_STATUSES:
            self.status = REJECTION_STATUSES[code]

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.code, self.field, self.message), self.__dict__

    def __repr__(self) -> str:
        facts = f"code={self.code!r}, field={self.field!r}, message={self.message!r}"
        return f"RequestRejected({facts})"


class ResponseError(EnvelopeError):
    """An engine response is malformed, truncated or inconsistent."""

    status = 502
    error_type = "response_error"


class LimitExceeded(ResponseError):
    """Input passed a size bound; raised before the excess is parsed.

    `bound` names the bound (such as ``"max_bytes"``) and `limit` is its value.
    """

    error_type = "limit_exceeded"

    def __init__(self, bound: str, limit: int, message: str | None = None) -> None:
        super().__init__(message or f"{bound} exceeded: the limit is {limit}")
        self.bound = bound
        self.limit = limit

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.bound, self.limit, str(self)), self.__dict__


class EngineError(ResponseError):
    """SGLang answered with an error (an error frame, an error body or an abort).

    `message` is SGLang's text and `code` the HTTP status code it gave (None
    when it gave none); `status` is that code when it is an error status, else 500.
    """

    error_type = SGLANG_ERROR_TYPE

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = code if type(code) is int and 400 <= code < 600 else 500

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.message, self.code), self.__dict__


class UpstreamError(ResponseError):
    """SGLang could not be reached, or did not answer in time: the transport failed.

    `status` is the HTTP status a gateway answers with: 502 (down, refused, reset,
    or the connection broke mid-answer), 503 (the service's own: no connection to
    SGLang came free in time, or the service is shutting down) or 504 (timed out).
    `message` says what failed; `retry_after_s`, when not None, is the whole
    seconds a client should wait before it tries again (``Retry-After``).
    """

    error_type = "upstream_error"

    def __init__(
        self, message: str, status: int = 502, *, retry_after_s: int | None = None
    ) -> None:
        if status not in (502, 503, 504):
            raise EnvelopeError(
                f"status: expected 502, 503 or 504, got {show_value(status)}"
            )
        if retry_after_s is not None and (
            type(retry_after_s) is not int or retry_after_s < 0
        ):
            raise EnvelopeError(
                "retry_after_s: expected None or whole seconds >= 0, "
                f"got {show_value(retry_after_s)}"
            )
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after_s = retry_after_s

    def __reduce__(self) -> tuple[Any, ...]:
        # `retry_after_s`, a keyword, comes back with the rest of the state.
        return type(self), (self.message, self.status), self.__dict__


_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = _REPR.maxother = 40


def show_value(value: object) -> str:
    """A short rendering of a possibly hostile value, for an error message.

    Never raises: an int too long for str() (over 4300 digits) is shown by its
    size, a value whose repr fails by its type.
    """
    if type(value) is int and value.bit_length() > 64:
        return f"an int of {value.bit_length()} bits"
    try:
        return _REPR.repr(value)
    except Exception:  # a failing __repr__, or nesting too deep
        return f"a {type(value).__name__} object"
