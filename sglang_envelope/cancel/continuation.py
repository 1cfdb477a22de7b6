"""A continuation request: what is left of an aborted (or length-stopped) generation,
as AReaL's rollout asks for it after a pause or an abort. At temperature 0 the two
parts' outputs (and their routed experts, joined) are the uninterrupted generation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec import UNSET

from sglang_envelope.cancel.plan import check_argument
from sglang_envelope.errors.exceptions import EnvelopeError, show_value
from sglang_envelope.request.checks import GRAMMAR_FIELDS
from sglang_envelope.request.fields import SamplingParams
from sglang_envelope.request.sequences import samples_per_prompt
from sglang_envelope.request.types import ClientRequest

__all__ = ["CONTINUABLE", "DEFAULT_MAX_NEW_TOKENS", "continuation_request"]

#: SGLang's `SamplingParams.max_new_tokens` when a request sets none.
DEFAULT_MAX_NEW_TOKENS = 128
#: The finish reasons a generation can be continued after.
CONTINUABLE = ("abort", "length")
#: Constrained decoding: its grammar would start again at the continuation's first token.
_CONSTRAINTS = (*GRAMMAR_FIELDS, "choice")


def _continuable(response: object) -> tuple[Mapping[str, Any], list[int]]:
    """The `meta_info` and the output ids of a response whose generation can be
    continued: `EnvelopeError` naming the field for anything else."""
    if not isinstance(response, Mapping):
        raise EnvelopeError(
            "response: expected one response object (as aggregate_sse and parse_unary "
            f"return), got {type(response).__name__}"
        )
    meta = response.get("meta_info")
    if not isinstance(meta, Mapping):
        raise EnvelopeError(f"meta_info: expected an object, got {show_value(meta)}")
    finish = meta.get("finish_reason")
    if not isinstance(finish, Mapping) or type(finish.get("type")) is not str:
        raise EnvelopeError(
            "meta_info.finish_reason: expected SGLang's finish reason object with a "
            f"'type', got {show_value(finish)} "
            "(a generation still running cannot be continued)"
        )
    kind = finish["type"]
    if kind not in CONTINUABLE:
        raise EnvelopeError(
            f"meta_info.finish_reason.type: {kind!r} cannot be continued: the generation "
            "ended on its own (only 'abort' and 'length' can be)"
        )
    status = finish.get("status_code")
    if kind == "abort" and type(status) is int and 400 <= status < 600:
        raise EnvelopeError(
            f"meta_info.finish_reason.status_code: {status}: "
            "SGLang refused or failed the "
            "request; a continuation would meet the same error"
        )
    ids = response.get("output_ids")
    if not isinstance(ids, list):
        raise EnvelopeError(
            f"output_ids: expected the list of output token ids, got {show_value(ids)}"
        )
    for index, token in enumerate(ids):
        if type(token) is not int:
            raise EnvelopeError(
                f"output_ids[{index}]: expected an int, got {show_value(token)}"
            )
    made = meta.get("completion_tokens")
    if type(made) is int and made != len(ids):
        raise EnvelopeError(
            f"output_ids: {len(ids)} ids, but meta_info.completion_tokens is {made}; an "
            "incremental stream's abort frame repeats its last id, so read such a stream "
            "in cumulative mode or unary"
        )
    return meta, ids


def _token_prompt(request: ClientRequest) -> tuple[int, ...]:
    """The request's prompt ids; `EnvelopeError` for what is not a `ClientRequest`, and
    for a text prompt."""
    check_argument("request", request, ClientRequest, "a ClientRequest")
    if request.input_ids is None or request.text is not None:
        raise EnvelopeError(
            "text: a request with a text prompt cannot be continued: the continuation "
            "appends the tokens made to input_ids, "
            "and the prompt's ids are SGLang's tokenizer's"
        )
    return request.input_ids


def continuation_request(
    response: Mapping[str, Any],
    request: ClientRequest,
    *,
    default_max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
) -> ClientRequest:
    """The request that continues `request`'s generation after `response` stopped it.

    `response` is the answer to `request` (one sequence, as `aggregate_sse` or
    `parse_unary` return it: a stream read in cumulative mode, or unary) with
    ``finish_reason.type`` ``"abort"`` or ``"length"``. The continuation is
    `request` with its ``output_ids`` appended to ``input_ids``,
    ``max_new_tokens`` lowered by the tokens made (unset counts as
    `default_max_new_tokens`, SGLang's 128; null stays null), ``min_new_tokens``
    lowered likewise (not below 0), ``routed_experts_start_len`` moved to the first
    part's last position (so `join_routed_experts` of the parts' strings is the
    whole generation's), for one sample of n > 1 no ``n`` and the sample's rid
    (``meta_info.id``), and every other field kept. It is made as a `ClientRequest`
    is: `RequestRejected` for a broken rule of `request.target`.

    Raises `EnvelopeError` naming the field where it cannot be continued: another
    finish reason (or none), an abort with an error status, ``output_ids`` missing,
    not ints or not ``completion_tokens`` many, no ``max_new_tokens`` left,
    constrained decoding, or a ``text`` prompt (only SGLang's tokenizer knows its ids).
    """
    prompt = _token_prompt(request)
    if type(default_max_new_tokens) is not int or default_max_new_tokens < 0:
        raise EnvelopeError(
            "default_max_new_tokens must be an int >= 0, "
            f"got {show_value(default_max_new_tokens)}"
        )
    meta, ids = _continuable(response)
    given = request.sampling_params
    params = SamplingParams() if given is UNSET or given is None else given
    changes: dict[str, Any] = {}
    one_sample = samples_per_prompt(request) > 1
    if one_sample:
        # The sample's rid (its id), or None for one to be assigned.
        rid = meta.get("id")
        changes["rid"] = rid if type(rid) is str and rid else None
    if request.return_routed_experts:
        # The first part's rows end before its last position, which had no forward pass.
        last = len(prompt) + len(ids) - 1
        changes["routed_experts_start_len"] = max(request.routed_experts_start_len, last)
    return msgspec.structs.replace(
        request,
        input_ids=(*prompt, *ids),
        sampling_params=_rest_of(params, len(ids), default_max_new_tokens, one_sample),
        **changes,
    )


def _rest_of(
    params: SamplingParams, made: int, default: int, one_sample: bool
) -> SamplingParams:
    """`params` for what is left after `made` tokens: the budgets lowered, and no ``n``
    for one sample of many; `EnvelopeError` for constrained decoding, and when no token
    is left to make."""
    for name in _CONSTRAINTS:
        if getattr(params, name) not in (UNSET, None):
            raise EnvelopeError(
                f"sampling_params.{name}: a constrained generation cannot be continued: "
                "SGLang would match it from its start against the continuation alone"
            )
    changes: dict[str, Any] = {}
    total = default if params.max_new_tokens is UNSET else params.max_new_tokens
    if total is not None:  # None: no limit was set
        if total <= made:
            raise EnvelopeError(
                f"sampling_params.max_new_tokens: {total} tokens were asked for "
                f"and {made} made: none is left to continue"
            )
        changes["max_new_tokens"] = total - made
    least = params.min_new_tokens
    if type(least) is int and least > 0:
        changes["min_new_tokens"] = max(0, least - made)
    if one_sample:
        changes["n"] = UNSET
    return msgspec.structs.replace(params, **changes)
