"""Many sequences: a batch of prompts, `sampling_params.n` samples each, as SGLang reads
them.

SGLang answers an array when a body is a batch or n > 1. `decode_sequences`
splits a batch into one client body a prompt (its members read once, each
prompt's ids or text and its rid spliced into the shared fields) and decodes each
with the rules of `decode_client_request`; `Sequences.samples()` fans the
sequences out into one-sample requests, for a prefill/decode pair that carries one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, NamedTuple

import msgspec
from msgspec import UNSET, Raw

from sglang_envelope.errors.exceptions import EnvelopeError, RequestRejected
from sglang_envelope.releases.target import Target
from sglang_envelope.request.body import as_json
from sglang_envelope.request.decode_errors import (
    DECODE_ERRORS,
    translate_validation_error,
)
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
#: Most bytes a batch is once split: each prompt's ids or text, and the shared fields once
#: a prompt.
DEFAULT_MAX_BATCH_BYTES = 64 * 1024 * 1024

#: The fields SGLang's batch normalization reads one item a prompt from when they are
#: lists (`GenerateReqInput.__getitem__`): refused as lists (`per_item_list`).
PER_ITEM_FIELDS = frozenset(
    {
        "sampling_params", "return_logprob", "logprob_start_len", "top_logprobs_num",
        "return_hidden_states", "return_sampling_mask", "sampling_logprobs_mode",
        "lora_path", "custom_logit_processor", "extra_key", "cache_salt", "watermark",
        "multi_item_delimiter_indices", "token_indices_to_pool",
        # A text batch's media: `image_data` a list (but `[]`, no image for any prompt),
        # `video_data`, `audio_data`, the hashes and `modalities` are one item a prompt.
        "image_data", "video_data", "audio_data", "mm_hashes", "mm_content_hashes",
        "modalities",
    }
)  # fmt: skip
#: A field whose one-prompt form is a list of ids:
#: per prompt when its first item is a list.
PER_ITEM_ID_LISTS = frozenset({"token_ids_logprob"})
#: The fields `GenerateReqInput.__getitem__` leaves out of each prompt of a batch (SGLang
#: 0.5.21-0.5.23 drop them there): refused when set (`not_in_batch`).
BATCH_DROPPED_FIELDS = frozenset(
    {
        "use_audio_in_video", "video_config", "max_dynamic_patch", "min_dynamic_patch",
        "image_max_dynamic_patch", "video_max_dynamic_patch", "images_config",
    }
)  # fmt: skip


def samples_per_prompt(request: RequestFields) -> int:
    """How many sequences SGLang makes of one prompt (a `ClientRequest` or an engine
    request's body): `sampling_params.n` when above 1, else 1 (SGLang reads an n below
    1 as one sequence of a single prompt). A beam request (`beam_width` > 1) is one
    sequence: its n is the number of beams it returns."""
    params = request.sampling_params
    if not isinstance(params, SamplingParams):
        return 1
    n = params.n
    width = params.beam_width
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
            raise EnvelopeError(
                "batch must be a bool, and a body that is not a batch has one"
            )
        if any(samples_per_prompt(request) != self.n for request in requests):
            raise EnvelopeError(
                f"n must be what each request's sampling_params make, {self.n}"
            )

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
            _sample(request, i * n + j)
            for i, request in enumerate(self.requests)
            for j in range(n)
        )


def _sample(request: ClientRequest, k: int) -> ClientRequest:
    params = request.sampling_params
    assert isinstance(params, SamplingParams)  # n > 1 is in it
    rid = None if request.rid is None else f"{request.rid}_{k}"
    one = msgspec.structs.replace(params, n=UNSET)
    # Checked when made.
    return msgspec.structs.replace(request, rid=rid, sampling_params=one)


_members = msgspec.json.Decoder(dict[str, Raw])
_items = msgspec.json.Decoder(list[Raw])
_rid = msgspec.json.Decoder(str | list[str] | None)
_text = msgspec.json.Decoder(str)
_json = msgspec.json.Encoder()
_BOUND_NAMES = ("max_prompts", "max_sequences", "max_batch_bytes")


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
    gives. A batch (`input_ids` a list of lists, or on a text target `text` a list)
    gives one request a prompt, each decoded by the same rules (a prompt's refusal
    names it: `input_ids[2][5]`, `text[1]`), with rid `f"{rid}_{i}"` for a
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
    bounds = (max_prompts, max_sequences, max_batch_bytes)
    for name, bound in zip(_BOUND_NAMES, bounds, strict=True):
        check_bound(name, bound)
    data = as_json(body, limits.max_body_bytes)
    # One prompt, the usual body, is decoded once; a batch never decodes as one prompt,
    # so it is read as a batch only once the one-prompt decode refuses the body.
    try:
        request = decode_with_limits(data, limits, contract)
    except RequestRejected as refusal:
        one_prompt_refusal = refusal
    else:
        return one_prompt(request, max_sequences)
    batch = _batch_of(data, contract.text_input)
    if batch is None:
        raise one_prompt_refusal
    return _decode_batch(batch, limits, contract, bounds)


def one_prompt(
    request: ClientRequest, max_sequences: int = DEFAULT_MAX_SEQUENCES
) -> Sequences:
    """The sequences of one prompt's `request`: its n samples, at most `max_sequences`
    (`too_many_sequences`, before any is made)."""
    check_bound("max_sequences", max_sequences)
    if type(request) is not ClientRequest:
        raise EnvelopeError(
            f"request must be a ClientRequest, got {type(request).__name__}"
        )
    n = samples_per_prompt(request)
    _check_count(1, n, max_sequences)
    return Sequences((request,), n, False)


class _Batch(NamedTuple):
    """A batch body: its other members, the field holding its prompts, and the prompts."""

    members: dict[str, Raw]
    key: str
    prompts: list[Raw]


def _batch_of(data: bytes | Raw, text_input: bool) -> _Batch | None:
    """The body as a batch, or None for a body that is not a batch (or not a JSON
    object): the one-prompt decode's refusal stands. SGLang reads the batch from `text`
    when it is set (a list: a batch), else from `input_ids` (a list whose first item is
    a list)."""
    try:
        members = _members.decode(data)
        text = members.get("text") if text_input else None
        key = "text" if text is not None and _head(text) == b"[" else "input_ids"
        raw = members.get(key)
        prompts = None if raw is None else _items.decode(raw)
    except DECODE_ERRORS:
        return None
    if key == "text":
        assert prompts is not None
        if not prompts:
            raise reject("empty_batch", key=key)
        if _given(members.get("input_ids")):
            raise reject("batch_text_and_input_ids")
        return _Batch(members, key, prompts)
    if not prompts or _head(prompts[0]) != b"[":
        return None  # [] and [number, ...] are one prompt, as the gate reads them
    if _given(text):  # one text: SGLang reads one prompt, whose ids are the whole batch
        raise reject("batch_text_and_input_ids")
    return _Batch(members, key, prompts)


def _head(raw: Raw, size: int = 1) -> bytes:
    """The first `size` bytes of a JSON value (msgspec strips the space around it)."""
    with memoryview(raw) as view:
        return view[:size].tobytes()


def _given(raw: Raw | None) -> bool:
    return raw is not None and _head(raw, 4) != b"null"


def _decode_batch(
    batch: _Batch, limits: Limits, contract: Any, bounds: tuple[int, int, int]
) -> Sequences:
    max_prompts, max_sequences, max_batch_bytes = bounds
    members, key, prompts = batch
    size = len(prompts)
    if size > max_prompts:
        raise reject("too_many_prompts", key=key, size=size, limit=max_prompts)
    rids = _rids(members.pop("rid", None), size)
    del members[key]
    _refuse_per_item_lists(members)
    shared = _json.encode(members)[1:-1]  # the shared members, without their braces
    work = size * (len(shared) + 64) + sum(len(item) for item in prompts)
    if work > max_batch_bytes:
        raise reject(
            "batch_too_large", key=key, size=size, work=work, limit=max_batch_bytes
        )
    prompt = _Prompt(key, shared, limits, contract)
    first = prompt.decode(prompts[0], rids[0], 0)
    n = _batch_n(first)
    _check_count(size, n, max_sequences)
    rest = (
        prompt.decode(item, rids[i], i) for i, item in enumerate(prompts[1:], start=1)
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
        head = _head(raw, 64)
        if key in BATCH_DROPPED_FIELDS and head[:1] not in (b"n", b"f"):  # null, false
            raise reject("not_in_batch", key=key)
        if not head.startswith(b"["):
            continue
        second = head[1:].lstrip()[:1]
        if key == "image_data" and second == b"]":
            continue  # SGLang reads an empty list as no image for every prompt
        if key in PER_ITEM_FIELDS or (key in PER_ITEM_ID_LISTS and second == b"["):
            raise reject("per_item_list", key=key)


class _Prompt(NamedTuple):
    """How each prompt of a batch is decoded: its `key` (`input_ids` or `text`) and rid
    spliced into the `shared` members, then every rule of `decode_client_request`."""

    key: str
    shared: bytes
    limits: Limits
    contract: Any

    def decode(self, item: Raw, rid: str | None, index: int) -> ClientRequest:
        """Prompt `index`'s request (a refusal of its prompt names `input_ids[index]`)."""
        if self.key == "text" and _head(item) != b'"':
            try:  # a text prompt is a string: msgspec's verdict on another value
                _text.decode(item)
            except DECODE_ERRORS as error:
                raise translate_validation_error(error, prefix=f"text[{index}]") from None
        parts = [b'{"', self.key.encode(), b'":', bytes(item)]
        if rid is not None:
            parts += [b',"rid":', _json.encode(rid)]
        if self.shared:
            parts += [b",", self.shared]
        parts.append(b"}")
        try:
            return decode_with_limits(b"".join(parts), self.limits, self.contract)
        except RequestRejected as error:
            raise _of_prompt(error, self.key, index) from None


def _of_prompt(error: RequestRejected, key: str, index: int) -> RequestRejected:
    """A prompt's refusal, naming the prompt. A prompt whose items are lists is not
    a batch of its own: SGLang's validator refuses the row (``elements must be int``)."""
    field = error.field
    if field is None or not (field == key or field.startswith(key + "[")):
        return error
    named = f"{key}[{index}]"
    if error.code == "batched_input":
        got = "array holding an array"
        return reject("wrong_type", path=named, expected="array of int", got=got)
    return RequestRejected(
        error.code, named + field[len(key) :], error.message.replace(key, named, 1)
    )


def _batch_n(request: ClientRequest) -> int:
    params = request.sampling_params
    if isinstance(params, SamplingParams) and isinstance(params.n, int) and params.n < 1:
        width = params.beam_width  # SGLang makes one sequence of a beam request
        if not (isinstance(width, int) and width > 1):
            raise reject("batch_n_below_one", n=params.n)
    return samples_per_prompt(request)


def _check_count(prompts: int, n: int, limit: int) -> None:
    if prompts * n > limit:
        raise reject(
            "too_many_sequences", count=prompts * n, prompts=prompts, n=n, limit=limit
        )
