"""The final answer as the client expects it, from the response a worker got.

A worker runs the engine request under its own rid, so SGLang's answer names
that rid in ``meta_info.id``; the client expects its own. On the decode leg of
a disaggregated pair, SGLang's decode worker never has the prompt's logprobs:
it receives only the first output token's from prefill
(``srt/disaggregation/decode.py``), yet its tokenizer manager writes the
prompt-side keys whenever logprobs were requested, empty
(``tokenizer_manager.add_logprob_to_meta_info``). `finalize_response` says so
in ``meta_info.input_logprobs_unavailable_reason``; `merge_prefill`
removes that note when it fills the logprobs in from the prefill response.

Merge and finalize commute: ``finalize(merge(p, d))`` equals
``merge(p, finalize(d))`` (the id is not a prompt-side key, and merge drops the
note exactly when it copies data, which is when finalize would not add it).
"""

from __future__ import annotations

from typing import Any, Final

from sglang_envelope.errors.exceptions import EnvelopeError, show_value
from sglang_envelope.request.engine import EngineRequest, Role
from sglang_envelope.request.envelope import is_utf8
from sglang_envelope.response.merge import (
    UNAVAILABLE_MARKER,
    has_prompt_logprobs,
    response_meta,
)

__all__ = ["UNAVAILABLE_REASON", "finalize_response"]

UNAVAILABLE_REASON: Final = "disaggregated_decode"
"""Why a decode response has no prompt-side logprobs: the prefill worker computed them."""


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
