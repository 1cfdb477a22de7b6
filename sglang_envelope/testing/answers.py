"""The fake engine's answers: made-up tokens, in the shapes SGLang 0.5.23 writes.

Pure functions of a checked `ClientRequest`: `plan_answer` decides the whole
output (token ids, and why it ends) from the prompt, and `answer_object` gives
one stream frame or the unary body for a span of it, its `meta_info` keys
(`_meta_info`) in the order a live server writes them, each when it writes it
(``tests/fixtures/live_answers.jsonl``).

A request aborted in the scheduler's waiting queue (`WAITING_ABORT`) is answered as
``TokenizerManager._handle_abort_req`` answers it: its own few ``meta_info`` keys, the
whole text and logprobs, and in an incremental frame only the last id.

A fake of a prefill/decode pair's server answers as its role does on SGLang
0.5.23: a prefill server with one token, ``finish_reason {"type": "length",
"length": 0}``, the prompt's logprobs and the prompt's rows of routed experts;
a decode server with the whole output, the prompt logprobs empty, the first
output's ``output_token_ids_logprobs`` entry null and the prompt's rows of
routed experts zeros.

Token ids, texts and logprobs are made up but deterministic: the same prompt
always gives the same answer, and each id depends only on the ids before it
(the prompt's and the output's so far), so the prompt with part of the output
appended goes on with the rest of it. Logprobs are multiples of 1/16, so float32 (the
Base64 flat form) carries them exactly.
"""

from __future__ import annotations

import time
from typing import Any, Final, Literal, NamedTuple

import msgspec
from msgspec import UNSET

from sglang_envelope.request.types import ClientRequest
from sglang_envelope.response.flat import Side, encode_flat_top_logprobs
from sglang_envelope.response.routed import encode_routed_experts

__all__ = [
    "ABORTED",
    "WAITING_ABORT",
    "AnswerPlan",
    "Span",
    "answer_object",
    "plan_answer",
    "prompt_ids",
    "text_ids",
    "token_text",
]

#: A fake Mixture-of-Experts model's experts: routed expert ids are in [0, EXPERTS).
EXPERTS: Final = 8
#: SGLang's ``--disaggregation-mode``: an aggregated server, or one role of a pair.
Role = Literal["null", "prefill", "decode"]

#: Ids below this are the model's special tokens (``<s>``, ``</s>``, ``<pad>``),
#: never made.
FIRST_ID: Final = 3
#: The finish reason of a running request aborted by ``/abort_request``
#: (``FINISH_ABORT()``).
ABORTED: Final[dict[str, Any]] = {
    "type": "abort",
    "message": "Aborted",
    "status_code": None,
    "err_type": None,
}

#: The finish reason of a request aborted in the scheduler's waiting queue (one a pause
#: in ``"retract"`` mode put there), answered by ``TokenizerManager._handle_abort_req``.
WAITING_ABORT: Final[dict[str, Any]] = {
    "type": "abort",
    "message": "Abort in waiting queue",
}

_decode = msgspec.json.decode


def _logprob(token_id: int, position: int) -> float:
    return -float((token_id * 7 + position * 3) % 61 + 1) / 16.0


class _Rows(NamedTuple):
    """How one request's logprob entries are written."""

    texts: bool
    vocab_size: int
    k: int
    asked: list[int] | None

    def entry(self, logprob: float | None, token_id: int) -> list[Any]:
        return [logprob, token_id, token_text(token_id) if self.texts else None]

    def top(self, token_id: int, position: int) -> list[list[Any]]:
        best = _logprob(token_id, position)
        return [
            self.entry(best - 0.5 * rank, (token_id + 13 * rank) % self.vocab_size)
            for rank in range(self.k)
        ]

    def asked_row(self, position: int) -> list[list[Any]]:
        return [
            self.entry(_logprob(token_id, position), token_id)
            for token_id in self.asked or ()
        ]


class AnswerPlan(NamedTuple):
    """Everything one request will be answered with, decided when it arrives."""

    request: ClientRequest
    rid: str
    #: The whole output, up to its natural end.
    output_ids: tuple[int, ...]
    #: Why the output ends there (``length`` or ``stop``), as SGLang writes it.
    finish: dict[str, Any]
    #: How its logprob entries are written, and its prompt's logprob fields (made once).
    rows: _Rows
    prompt_fields: dict[str, Any]
    #: `time.monotonic()` when the request arrived, for ``e2e_latency``.
    started: float
    #: The server's role, and its model's (layers, top-k) when it returns routed experts.
    role: Role = "null"
    routed_experts_shape: tuple[int, int] | None = None


class Span(NamedTuple):
    """What one answer object covers: output ids ``[start, end)`` of the plan (``start``
    is 0 for a cumulative frame and a unary body), and the finish reason once finished."""

    start: int
    end: int
    finish: dict[str, Any] | None
    first: bool


def token_text(token_id: int) -> str:
    """The made-up text of one token."""
    return f" w{token_id}"


def text_ids(text: str, vocab_size: int) -> list[int]:
    """The fake's tokenizer: one id a UTF-8 byte, the byte's value past the special ids
    (wrapped into the vocabulary when it has fewer than 259 ids)."""
    span = vocab_size - FIRST_ID
    return [FIRST_ID + byte % span for byte in text.encode("utf-8", "surrogatepass")]


def _sampling(request: ClientRequest, name: str) -> Any:
    params = request.sampling_params
    if params is UNSET or params is None:
        return UNSET
    return getattr(params, name)


def _ids(raw: msgspec.Raw) -> list[int]:
    """The ids of a field of token ids (``null``: none), checked and bounded when the
    request was decoded."""
    return [item for item in _decode(raw) or () if type(item) is int]


def plan_answer(
    request: ClientRequest,
    rid: str,
    *,
    vocab_size: int,
    context_length: int,
    default_max_new_tokens: int,
    seed: int = 0,
    role: Role = "null",
    routed_experts_shape: tuple[int, int] | None = None,
) -> AnswerPlan:
    """The output for `request`: ids made from the prompt, ending at ``max_new_tokens``
    (``{"type": "length", "length": n}``) or at the first id of ``stop_token_ids``
    (``{"type": "stop", "matched": id}``, the id included). A null
    ``max_new_tokens`` runs to the context length. A `seed` other than 0 (a sample of
    ``n`` > 1 sampled at a temperature above 0) makes other ids from the same prompt.
    A prefill server (`role`) makes the first id alone."""
    limit = _sampling(request, "max_new_tokens")
    if limit is UNSET:
        limit = default_max_new_tokens
    given = prompt_ids(request)
    room = max(0, context_length - len(given))
    count = room if limit is None else min(limit, room)
    # Each id is a function of the sequence before it: its sum and its length.
    total = sum(given)
    length = len(given)
    span = vocab_size - FIRST_ID
    raw_stops = _sampling(request, "stop_token_ids")
    stops = frozenset() if raw_stops is UNSET else frozenset(_ids(raw_stops))
    ids: list[int] = []
    finish: dict[str, Any] = {"type": "length", "length": count}
    for _ in range(count):
        token = FIRST_ID + (total * 31 + 7 * length * (length + 1) + 101 * seed) % span
        total += token
        length += 1
        ids.append(token)
        if token in stops:
            finish = {"type": "stop", "matched": token}
            break
    if role == "prefill":  # it hands the first token over to the decode server
        ids, finish = ids[:1], {"type": "length", "length": 0}
    rows = _rows(request, vocab_size)
    prompt = _prompt_fields(request, rows) if request.return_logprob else {}
    if role == "decode":
        prompt = {
            key: _empty(key, value, request, rows.k) for key, value in prompt.items()
        }
    return AnswerPlan(
        request,
        rid,
        tuple(ids),
        finish,
        rows,
        prompt,
        time.monotonic(),
        role,
        routed_experts_shape,
    )


def _empty(key: str, value: Any, request: ClientRequest, k: int) -> Any:
    """A decode server's prompt logprob field: empty (the flat ones as for no row)."""
    if type(value) is list:
        return []
    return _top_fields(request, "input", [], k, flat=True)[key]


def _top_fields(
    request: ClientRequest, side: Side, top: list[Any], k: int, *, flat: bool
) -> dict[str, Any]:
    """One side's top logprobs: SGLang's nested rows, or with `flat` its flat fields."""
    if not flat:
        return {f"{side}_top_logprobs": top}
    b64 = request.return_flat_raw_top_logprobs_b64
    return encode_flat_top_logprobs(top, side=side, top_logprobs_num=k, b64=b64)


def _routed_experts(plan: AnswerPlan, made: int) -> str:
    """The rows of positions ``[routed_experts_start_len, prompt + made - 1)``: each
    expert a function of the token at its position, the position, its layer and rank
    (a decode server's prompt rows are zeros)."""
    assert plan.routed_experts_shape is not None
    layers, top_k = plan.routed_experts_shape
    sequence = (*prompt_ids(plan.request), *plan.output_ids[:made])
    prompt = len(sequence) - made

    def expert(at: int, layer: int, rank: int) -> int:
        if plan.role == "decode" and at < prompt:
            return 0
        return (sequence[at] * 5 + at * 3 + layer * 7 + rank * 11) % EXPERTS

    positions = range(plan.request.routed_experts_start_len, len(sequence) - 1)
    rows = [
        [[expert(at, layer, rank) for rank in range(top_k)] for layer in range(layers)]
        for at in positions
    ]
    return encode_routed_experts(rows)


def prompt_ids(request: ClientRequest) -> tuple[int, ...]:
    """The prompt's ids: a checked request has `input_ids` (a text prompt's are the
    fake's `text_ids`, made before the request is decoded)."""
    assert request.input_ids is not None
    return request.input_ids


def _rows(request: ClientRequest, vocab_size: int) -> _Rows:
    raw = request.token_ids_logprob
    asked = None if raw is UNSET else _ids(raw)
    k = min(request.top_logprobs_num or 0, vocab_size)
    return _Rows(bool(request.return_text_in_logprobs), vocab_size, k, asked)


def _prompt_fields(request: ClientRequest, rows: _Rows) -> dict[str, Any]:
    """The prompt's logprob fields, the same in every frame: made once a request."""
    start = request.logprob_start_len
    prompt = prompt_ids(request)
    inputs = range(0) if start is None or start < 0 else range(start, len(prompt))
    fields: dict[str, Any] = {
        "input_token_logprobs": [
            rows.entry(
                None if at == inputs.start else _logprob(prompt[at], at), prompt[at]
            )
            for at in inputs
        ]
    }
    if rows.k > 0:
        top: list[Any] = [
            None if at == inputs.start else rows.top(prompt[at], at) for at in inputs
        ]
        flat = bool(request.return_flat_raw_top_logprobs)
        fields.update(_top_fields(request, "input", top, rows.k, flat=flat))
    if rows.asked is not None:
        fields["input_token_ids_logprobs"] = [
            None if at == inputs.start else rows.asked_row(at) for at in inputs
        ]
    return fields


def _logprob_fields(plan: AnswerPlan, span: Span, unary: bool) -> dict[str, Any]:
    """SGLang's logprob block of ``meta_info`` (``add_logprob_to_meta_info``)."""
    request = plan.request
    rows = plan.rows
    prompt = plan.prompt_fields
    outputs = range(span.start, span.end)
    out_ids = plan.output_ids
    fields: dict[str, Any] = {
        "input_token_logprobs": prompt["input_token_logprobs"],
        "output_token_logprobs": [
            rows.entry(_logprob(out_ids[i], i), out_ids[i]) for i in outputs
        ],
        "output_token_logprobs_length": span.end,
    }
    if rows.k > 0:
        fields.update((key, value) for key, value in prompt.items() if "_top_" in key)
        top = [rows.top(out_ids[i], i) for i in outputs]
        finished = unary and span.finish is not None  # output-flat's only place
        flat = bool(request.return_flat_raw_output_top_logprobs) and finished
        fields.update(_top_fields(request, "output", top, rows.k, flat=flat))
    if rows.asked is not None:
        fields["input_token_ids_logprobs"] = prompt["input_token_ids_logprobs"]
        fields["output_token_ids_logprobs"] = [
            None if plan.role == "decode" and i == 0 else rows.asked_row(i)
            for i in outputs
        ]
    return fields


def _meta_info(
    plan: AnswerPlan, span: Span, unary: bool, retractions: int
) -> dict[str, Any]:
    finished = span.finish is not None
    meta: dict[str, Any] = {
        "id": plan.rid,
        "finish_reason": span.finish,
        "prompt_tokens": len(prompt_ids(plan.request)),
        "weight_version": "default",
        "num_retractions": retractions,
    }
    if plan.request.return_logprob:
        meta.update(_logprob_fields(plan, span, unary))
    meta.update(reasoning_tokens=0, completion_tokens=span.end, cached_tokens=0)
    if finished:
        meta["weight_versions"] = [{"version": "default", "start": 0, "end": span.end}]
    meta["cached_tokens_details"] = None
    asked = plan.request.return_routed_experts and plan.routed_experts_shape is not None
    if finished and asked:
        meta["routed_experts"] = _routed_experts(plan, span.end)
    meta["dp_rank"] = None
    if finished:
        meta["e2e_latency"] = time.monotonic() - plan.started
    if span.first or unary:
        meta["response_sent_to_client_ts"] = time.time()
    return meta


def _waiting_abort(plan: AnswerPlan, span: Span, unary: bool) -> dict[str, Any]:
    """``_handle_abort_req``'s answer: the whole text and logprobs, every id (only the
    last in an incremental frame), and its own few ``meta_info`` keys."""
    whole = span._replace(start=0)
    meta: dict[str, Any] = {
        "id": plan.rid,
        "finish_reason": span.finish,
        "weight_version": "default",
        "e2e_latency": time.monotonic() - plan.started,
        "weight_versions": [{"version": "default", "start": 0, "end": span.end}],
    }
    if plan.request.return_logprob:
        meta.update(_logprob_fields(plan, whole, unary))
    meta["completion_tokens"] = span.end
    if span.first or unary:
        meta["response_sent_to_client_ts"] = time.time()
    ids = plan.output_ids[: span.end]
    return {
        "text": "".join(map(token_text, ids)),
        "output_ids": list(ids[-1:] if span.start > 0 else ids),
        "meta_info": meta,
    }


def answer_object(
    plan: AnswerPlan, span: Span, *, unary: bool, retractions: int = 0
) -> dict[str, Any]:
    """One answer object: a stream frame (``span.start`` > 0 only for an incremental one)
    or, with `unary`, the non-streaming body, whose span starts at 0; `retractions`:
    how often a pause retracted the request."""
    if span.finish == WAITING_ABORT:
        return _waiting_abort(plan, span, unary)
    ids = plan.output_ids[span.start : span.end]
    return {
        "text": "".join(map(token_text, ids)),
        "output_ids": list(ids),
        "meta_info": _meta_info(plan, span, unary, retractions),
    }
