"""Many sequences: a batch of prompts, `sampling_params.n` samples each, as SGLang reads them.

A `/generate` body holds B prompts (a batch: `input_ids` a list whose first
element is a list, the rule of SGLang's contract gate) and n samples of each
(`sampling_params.n`); SGLang answers an array when the body is a batch or
n > 1, sequence `i * n + j` being sample `j` of prompt `i`. `decode_sequences`
splits a batch into one client body a prompt (its members read once, each
prompt's ids and rid spliced into the shared fields) and decodes each with the
rules of `decode_client_request`; `Sequences.samples()` fans the sequences out
into one-sample requests, for a prefill/decode pair that carries one sequence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec import UNSET, Raw

from sglang_envelope.errors.exceptions import EnvelopeError, RequestRejected
from sglang_envelope.releases.target import Target
from sglang_envelope.request.body import as_json
from sglang_envelope.request.decode_errors import DECODE_ERRORS, translate_validation_error
from sglang_envelope.request.fields import RequestFields, SamplingParams
from sglang_envelope.request.limits import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_INPUT_IDS,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_JSON_ITEMS,
    Limits,
    check_bound,
    make_limits,
)
from sglang_envelope.request.rules import DEFAULT_TARGET, reject
from sglang_envelope.request.types import ClientRequest, contract_of, decode_with_limits

__all__ = [
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_PROMPTS",
    "DEFAULT_MAX_SEQUENCES",
    "Sequences",
    "decode_sequences",
    "one_prompt",
    "samples_per_prompt",
]

#: Most prompts in one batch `decode_sequences` accepts.
DEFAULT_MAX_PROMPTS = 1024
#: Most sequences (prompts x n) one body may ask for.
DEFAULT_MAX_SEQUENCES = 4096
#: Most bytes a batch is once split: each prompt's ids, and the shared fields once a prompt.
DEFAULT_MAX_BATCH_BYTES = 64 * 1024 * 1024

#: The fields SGLang's batch normalization reads one item a prompt from when they are
#: lists (`GenerateReqInput.__getitem__`): refused as lists (`per_item_list`).
PER_ITEM_FIELDS = frozenset(
    {
        "sampling_params", "return_logprob", "logprob_start_len", "top_logprobs_num",
        "return_hidden_states", "return_sampling_mask", "sampling_logprobs_mode",
        "lora_path", "custom_logit_processor", "extra_key", "cache_salt", "watermark",
    }
)  # fmt: skip
#: A field whose one-prompt form is a list of ids: per prompt when its first item is a list.
PER_ITEM_ID_LISTS = frozenset({"token_ids_logprob"})


def samples_per_prompt(request: RequestFields) -> int:
    """How many sequences SGLang makes of one prompt (a `ClientRequest` or an engine
    request's body): `sampling_params.n` when above 1,
    else 1 (SGLang reads an n below 1 as one sequence of a single prompt). A beam
    request (`beam_width` > 1) is one sequence: its n is the number of beams it returns."""
    params = request.sampling_params
    if not isinstance(params, SamplingParams):
        return 1
    n, width = params.n, params.beam_width
    if not isinstance(n, int) or n <= 1 or (isinstance(width, int) and width > 1):
        return 1
    return n


class Sequences(msgspec.Struct, frozen=True):
    """The sequences one `/generate` body asks for: `requests`, one `ClientRequest` a
    prompt (each a one-prompt request that passed every rule, `sampling_params.n` as
    sent), `n` samples of each, and whether the body was a batch.

    Sequence `k = i * n + j` is sample `j` of prompt `i`. Checked when made:
    `EnvelopeError` names the field.
    """

    requests: tuple[ClientRequest, ...]
    n: int
    batch: bool

    def __post_init__(self) -> None:
        requests = self.requests
        if type(requests) is not tuple or not requests:
            raise EnvelopeError("requests must be a non-empty tuple of ClientRequest")
        if any(type(request) is not ClientRequest for request in requests):
            raise EnvelopeError("requests must hold only ClientRequest")
        if type(self.n) is not int or self.n < 1:
            raise EnvelopeError(f"n must be an integer >= 1, got {self.n!r}")
        if type(self.batch) is not bool or (not self.batch and len(requests) != 1):
            raise EnvelopeError("batch must be a bool, and a body that is not a batch has one")
        if any(samples_per_prompt(request) != self.n for request in requests):
            raise EnvelopeError(f"n must be what each request's sampling_params make, {self.n}")

    @property
    def count(self) -> int:
        """How many sequences SGLang makes: prompts x n."""
        return len(self.requests) * self.n

    @property
    def array(self) -> bool:
        """Whether SGLang answers with an array (one item a sequence, in index order)."""
        return self.batch or self.n > 1

    def samples(self) -> tuple[ClientRequest, ...]:
        """The `count` one-sample requests, in index order (`k = i * n + j`).

        With n == 1 they are `requests` themselves (a batch's prompts carry SGLang's
        own per-prompt rids). With n > 1 sample `k` of prompt `i` is prompt `i`'s
        request without `sampling_params.n` and with rid `f"{rid}_{k}"` (`rid` the
        prompt's), or None when the prompt has none (the caller assigns one): SGLang's
        own scheme for a string rid (`GenerateReqInput._normalize_rid`), and unique by
        construction, since the text after the last `_` is `k`, and every `k` differs.
        SGLang itself gives each sample a random rid, which no client can know.
        """
        if self.n == 1:
            return self.requests
        n = self.n
        return tuple(
            _sample(request, i * n + j) for i, request in enumerate(self.requests) for j in range(n)
        )


def _sample(request: ClientRequest, k: int) -> ClientRequest:
    params = request.sampling_params
    assert isinstance(params, SamplingParams)  # n > 1 is in it
    rid = None if request.rid is None else f"{request.rid}_{k}"
    one = msgspec.structs.replace(params, n=UNSET)
    return msgspec.structs.replace(request, rid=rid, sampling_params=one)  # checked when made


class _Bounds(msgspec.Struct, frozen=True):
    prompts: int
    sequences: int
    batch_bytes: int


_members = msgspec.json.Decoder(dict[str, Raw])
_items = msgspec.json.Decoder(list[Raw])
_rid = msgspec.json.Decoder(str | list[str] | None)
_json = msgspec.json.Encoder()
_NUMBER_START = frozenset(b"-0123456789")


def decode_sequences(
    body: bytes | str | Mapping[str, Any],
    *,
    target: Target = DEFAULT_TARGET,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_input_ids: int = DEFAULT_MAX_INPUT_IDS,
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
    max_json_items: int = DEFAULT_MAX_JSON_ITEMS,
    max_token_id: int | None = None,
    max_prompts: int = DEFAULT_MAX_PROMPTS,
    max_sequences: int = DEFAULT_MAX_SEQUENCES,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
) -> Sequences:
    """Decode a `/generate` body of one prompt or a batch, with n samples of each.

    A body that is not a batch gives one request, the one `decode_client_request`
    gives. A batch gives one request a prompt, each decoded by the same rules (a
    prompt's refusal names it: `input_ids[2][5]`), with rid `f"{rid}_{i}"` for a
    string rid, the list's items for a list (its length the batch's), or None.
    The bounds are `decode_client_request`'s (`max_input_ids` a prompt), and
    `max_prompts`, `max_sequences` (prompts x n) and `max_batch_bytes` (the batch
    once split), each applied before the work it bounds. Raises `RequestRejected`
    naming the rule (`docs/contract.md`), and `EnvelopeError` for a bound that is
    not an integer >= 0 or a `target` that is not a `Target`.
    """
    contract = contract_of(target)
    limits = make_limits(
        max_body_bytes, max_input_ids, max_json_depth, max_json_items, max_token_id
    )
    for name, bound in (("max_prompts", max_prompts), ("max_sequences", max_sequences)):
        check_bound(name, bound)
    check_bound("max_batch_bytes", max_batch_bytes)
    bounds = _Bounds(max_prompts, max_sequences, max_batch_bytes)
    data = as_json(body, limits.max_body_bytes)
    members, prompts = _batch_of(data)
    if prompts is None:
        return one_prompt(decode_with_limits(data, limits, contract), max_sequences)
    assert members is not None
    return _decode_batch(members, prompts, limits, contract, bounds)


def one_prompt(request: ClientRequest, max_sequences: int = DEFAULT_MAX_SEQUENCES) -> Sequences:
    """The sequences of one prompt's `request`: its n samples, at most `max_sequences`
    (`too_many_sequences`, before any is made)."""
    check_bound("max_sequences", max_sequences)
    if type(request) is not ClientRequest:
        raise EnvelopeError(f"request must be a ClientRequest, got {type(request).__name__}")
    n = samples_per_prompt(request)
    _check_count(1, n, max_sequences)
    return Sequences((request,), n, False)


def _batch_of(data: bytes | Raw) -> tuple[dict[str, Raw] | None, list[Raw] | None]:
    """The body's members and its prompts when it is a batch, else (None, None): a body
    that is not a batch (or not a JSON object) is left to the one-prompt decode."""
    try:
        members = _members.decode(data)
        ids = members.get("input_ids")
        prompts = None if ids is None else _items.decode(ids)
    except DECODE_ERRORS:
        return None, None
    if not prompts or bytes(memoryview(prompts[0])[:1]) != b"[":
        return None, None  # [] and [number, ...] are one prompt, as the gate reads them
    return members, prompts


def _decode_batch(
    members: dict[str, Raw], prompts: list[Raw], limits: Limits, contract: Any, bounds: _Bounds
) -> Sequences:
    size = len(prompts)
    if size > bounds.prompts:
        raise reject("too_many_prompts", size=size, limit=bounds.prompts)
    rids = _rids(members.pop("rid", None), size)
    del members["input_ids"]
    _refuse_per_item_lists(members)
    shared = _json.encode(members)[1:-1]  # the shared members, without their braces
    work = size * (len(shared) + 64) + sum(len(ids) for ids in prompts)
    if work > bounds.batch_bytes:
        raise reject("batch_too_large", size=size, work=work, limit=bounds.batch_bytes)
    first = _decode_prompt(prompts[0], rids[0], shared, 0, limits, contract)
    n = _batch_n(first)
    _check_count(size, n, bounds.sequences)
    rest = (
        _decode_prompt(ids, rids[i], shared, i, limits, contract)
        for i, ids in enumerate(prompts[1:], start=1)
    )
    return Sequences((first, *rest), n, True)


def _rids(raw: Raw | None, size: int) -> list[str | None]:
    """Each prompt's rid, as SGLang's `_normalize_rid` gives them (None: not given)."""
    try:
        rid = None if raw is None else _rid.decode(raw)
    except DECODE_ERRORS as error:
        raise translate_validation_error(error, prefix="rid") from None
    if rid is None:
        return [None] * size
    if isinstance(rid, str):
        return [f"{rid}_{i}" for i in range(size)]
    if len(rid) != size:
        raise reject("rid_list_length")
    if len(set(rid)) != size:  # SGLang's words: its list of the repeated rids
        counts: Counter[str] = Counter(rid)
        raise reject("duplicate_rids", rids=[r for r, c in counts.items() if c > 1])
    return list(rid)


def _refuse_per_item_lists(members: dict[str, Raw]) -> None:
    for key, raw in members.items():
        with memoryview(raw) as view:
            head = view[:64].tobytes().lstrip()
        if not head.startswith(b"["):
            continue
        if key in PER_ITEM_FIELDS or (key in PER_ITEM_ID_LISTS and head[1:].lstrip()[:1] == b"["):
            raise reject("per_item_list", key=key)


def _decode_prompt(
    ids: Raw, rid: str | None, shared: bytes, index: int, limits: Limits, contract: Any
) -> ClientRequest:
    """One prompt's client body, its ids and rid spliced into the shared fields, decoded;
    a refusal of its ids names the prompt (`input_ids[index]`)."""
    parts = [b'{"input_ids":', bytes(ids)]
    if rid is not None:
        parts += [b',"rid":', _json.encode(rid)]
    if shared:
        parts += [b",", shared]
    parts.append(b"}")
    try:
        return decode_with_limits(b"".join(parts), limits, contract)
    except RequestRejected as error:
        raise _of_prompt(error, index) from None


def _of_prompt(error: RequestRejected, index: int) -> RequestRejected:
    field = error.field
    if field is None or not field.startswith("input_ids"):
        return error
    named = f"input_ids[{index}]"
    return RequestRejected(
        error.code, named + field[len("input_ids") :], error.message.replace("input_ids", named, 1)
    )


def _batch_n(request: ClientRequest) -> int:
    params = request.sampling_params
    n = params.n if isinstance(params, SamplingParams) else UNSET
    width = params.beam_width if isinstance(params, SamplingParams) else UNSET
    beam = isinstance(width, int) and width > 1  # SGLang makes one sequence of a beam request
    if isinstance(n, int) and n < 1 and not beam:
        raise reject("batch_n_below_one", n=n)
    return samples_per_prompt(request)


def _check_count(prompts: int, n: int, limit: int) -> None:
    if prompts * n > limit:
        raise reject("too_many_sequences", count=prompts * n, prompts=prompts, n=n, limit=limit)
