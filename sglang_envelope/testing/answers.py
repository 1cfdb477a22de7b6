"""The fake engine's answers: made-up tokens, in the shapes SGLang 0.5.23's /generate writes.

Pure functions of a checked `ClientRequest`: `plan_answer` decides the whole
output (token ids, and why it ends) from the prompt, and `answer_object` gives
one stream frame or the unary body for a span of it, its `meta_info` keys in
the order a live server writes them (``tests/fixtures/live_answers.jsonl``):
``id, finish_reason, prompt_tokens, weight_version, num_retractions``, the
logprob fields when asked, ``reasoning_tokens, completion_tokens,
cached_tokens``, ``weight_versions`` once finished, ``cached_tokens_details,
dp_rank``, ``e2e_latency`` once finished, and ``response_sent_to_client_ts``
on the first frame of a stream and on a unary body.

Token ids, texts and logprobs are made up but deterministic: the same prompt
always gives the same answer. Logprobs are multiples of 1/16, so float32 (the
Base64 flat form) carries them exactly.
"""

from __future__ import annotations

import time
from typing import Any, Final, NamedTuple

import msgspec
from msgspec import UNSET

from sglang_envelope.request.types import ClientRequest
from sglang_envelope.response.flat import encode_flat_top_logprobs

__all__ = ["ABORTED", "AnswerPlan", "Span", "answer_object", "plan_answer", "token_text"]

#: Ids below this are the model's special tokens (``<s>``, ``</s>``, ``<pad>``): never made.
FIRST_ID: Final = 3
#: The finish reason of a running request aborted by ``/abort_request`` (``FINISH_ABORT()``).
ABORTED: Final[dict[str, Any]] = {
    "type": "abort",
    "message": "Aborted",
    "status_code": None,
    "err_type": None,
}

_decode = msgspec.json.decode


class AnswerPlan(NamedTuple):
    """Everything one request will be answered with, decided when it arrives."""

    request: ClientRequest
    rid: str
    #: The whole output, up to its natural end.
    output_ids: tuple[int, ...]
    #: Why the output ends there (``length`` or ``stop``), as SGLang writes it.
    finish: dict[str, Any]
    vocab_size: int
    #: `time.monotonic()` when the request arrived, for ``e2e_latency``.
    started: float


class Span(NamedTuple):
    """What one answer object covers: output ids ``[start, end)`` of the plan (``start`` is
    0 for a cumulative frame and a unary body), and the finish reason once finished."""

    start: int
    end: int
    finish: dict[str, Any] | None
    first: bool


def token_text(token_id: int) -> str:
    """The made-up text of one token."""
    return f" w{token_id}"


def _sampling(request: ClientRequest, name: str) -> Any:
    params = request.sampling_params
    if params is UNSET or params is None:
        return UNSET
    return getattr(params, name)


def _stop_ids(request: ClientRequest) -> frozenset[int]:
    raw = _sampling(request, "stop_token_ids")
    if raw is UNSET:
        return frozenset()
    value = _decode(raw)  # checked and bounded when the request was decoded
    items = value if isinstance(value, list) else [value]
    return frozenset(item for item in items if type(item) is int)


def plan_answer(
    request: ClientRequest,
    rid: str,
    *,
    vocab_size: int,
    context_length: int,
    default_max_new_tokens: int,
) -> AnswerPlan:
    """The output for `request`: ids made from the prompt, ending at ``max_new_tokens``
    (``{"type": "length", "length": n}``) or at the first id of ``stop_token_ids``
    (``{"type": "stop", "matched": id}``, the id included). A null
    ``max_new_tokens`` runs to the context length."""
    limit = _sampling(request, "max_new_tokens")
    if limit is UNSET:
        limit = default_max_new_tokens
    room = max(0, context_length - len(request.input_ids))
    count = room if limit is None else min(limit, room)
    seed = sum(request.input_ids) * 31 + len(request.input_ids)
    span = vocab_size - FIRST_ID
    stops = _stop_ids(request)
    ids: list[int] = []
    for index in range(count):
        token = FIRST_ID + (seed + 7 * index * (index + 1)) % span
        ids.append(token)
        if token in stops:
            finish: dict[str, Any] = {"type": "stop", "matched": token}
            return AnswerPlan(request, rid, tuple(ids), finish, vocab_size, time.monotonic())
    finish = {"type": "length", "length": count}
    return AnswerPlan(request, rid, tuple(ids), finish, vocab_size, time.monotonic())


def _logprob(token_id: int, position: int) -> float:
    return -float((token_id * 7 + position * 3) % 61 + 1) / 16.0


def _entry(plan: AnswerPlan, logprob: float | None, token_id: int) -> list[Any]:
    text = token_text(token_id) if plan.request.return_text_in_logprobs else None
    return [logprob, token_id, text]


def _top_row(plan: AnswerPlan, token_id: int, position: int, k: int) -> list[list[Any]]:
    best = _logprob(token_id, position)
    return [
        _entry(plan, best - 0.5 * rank, (token_id + 13 * rank) % plan.vocab_size)
        for rank in range(k)
    ]


def _ids_row(plan: AnswerPlan, asked: list[int], position: int) -> list[list[Any]]:
    return [_entry(plan, _logprob(token_id, position), token_id) for token_id in asked]


def _asked_ids(plan: AnswerPlan) -> list[int] | None:
    raw = plan.request.token_ids_logprob
    if raw is UNSET:
        return None
    value = _decode(raw)
    return [item for item in value if type(item) is int] if isinstance(value, list) else None


def _input_positions(plan: AnswerPlan) -> range:
    start = plan.request.logprob_start_len
    if start is None or start < 0:
        return range(0)
    return range(start, len(plan.request.input_ids))


def _logprob_fields(plan: AnswerPlan, span: Span, unary: bool) -> dict[str, Any]:
    """SGLang's logprob block of ``meta_info`` (``add_logprob_to_meta_info``)."""
    request, prompt = plan.request, plan.request.input_ids
    inputs, outputs = _input_positions(plan), range(span.start, span.end)
    out_ids = plan.output_ids
    fields: dict[str, Any] = {
        "input_token_logprobs": [
            _entry(plan, None if at == inputs.start else _logprob(prompt[at], at), prompt[at])
            for at in inputs
        ],
        "output_token_logprobs": [
            _entry(plan, _logprob(out_ids[i], i), out_ids[i]) for i in outputs
        ],
        "output_token_logprobs_length": span.end,
    }
    k = min(request.top_logprobs_num or 0, plan.vocab_size)
    if k > 0:
        in_top: list[Any] = [
            None if at == inputs.start else _top_row(plan, prompt[at], at, k) for at in inputs
        ]
        out_top = [_top_row(plan, out_ids[i], i, k) for i in outputs]
        b64 = request.return_flat_raw_top_logprobs_b64
        if request.return_flat_raw_top_logprobs:
            fields.update(
                encode_flat_top_logprobs(in_top, side="input", top_logprobs_num=k, b64=b64)
            )
        else:
            fields["input_top_logprobs"] = in_top
        if request.return_flat_raw_output_top_logprobs and unary and span.finish is not None:
            fields.update(
                encode_flat_top_logprobs(out_top, side="output", top_logprobs_num=k, b64=b64)
            )
        else:
            fields["output_top_logprobs"] = out_top
    asked = _asked_ids(plan)
    if asked is not None:
        fields["input_token_ids_logprobs"] = [
            None if at == inputs.start else _ids_row(plan, asked, at) for at in inputs
        ]
        fields["output_token_ids_logprobs"] = [_ids_row(plan, asked, i) for i in outputs]
    return fields


def _meta_info(plan: AnswerPlan, span: Span, unary: bool) -> dict[str, Any]:
    finished = span.finish is not None
    meta: dict[str, Any] = {
        "id": plan.rid,
        "finish_reason": span.finish,
        "prompt_tokens": len(plan.request.input_ids),
        "weight_version": "default",
        "num_retractions": 0,
    }
    if plan.request.return_logprob:
        meta.update(_logprob_fields(plan, span, unary))
    meta.update(reasoning_tokens=0, completion_tokens=span.end, cached_tokens=0)
    if finished:
        meta["weight_versions"] = [{"version": "default", "start": 0, "end": span.end}]
    meta.update(cached_tokens_details=None, dp_rank=None)
    if finished:
        meta["e2e_latency"] = time.monotonic() - plan.started
    if span.first or unary:
        meta["response_sent_to_client_ts"] = time.time()
    return meta


def answer_object(plan: AnswerPlan, span: Span, *, unary: bool) -> dict[str, Any]:
    """One answer object: a stream frame (``span.start`` > 0 only for an incremental one)
    or, with `unary`, the non-streaming body, whose span starts at 0."""
    ids = plan.output_ids[span.start : span.end]
    return {
        "text": "".join(map(token_text, ids)),
        "output_ids": list(ids),
        "meta_info": _meta_info(plan, span, unary),
    }
