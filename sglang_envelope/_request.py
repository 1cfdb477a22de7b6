"""The client's request: SGLang's native token-input `/generate` body, decoded and checked.

`ClientRequest` mirrors the single-request form of SGLang 0.5.23's
`GenerateReqInput`, limited to the fields a client may set (see `_rules.py` for
which fields are whose). Types follow SGLang's HTTP contract gate
(`sglang/api/v1/api_types.py`) where it has the field, and the dataclass where
it does not. Decoding is one typed msgspec pass; a failure is translated into
`RequestRejected` by `_rules.translate_validation_error`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec

from sglang_envelope._errors import EnvelopeError
from sglang_envelope._rules import DECODE_ERRORS, check_request, reject, translate_validation_error

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_INPUT_IDS",
    "ClientRequest",
    "SamplingParams",
    "decode_client_request",
]

#: Largest request body `decode_client_request` parses (16 MiB).
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
#: Longest `input_ids` `decode_client_request` accepts (one million tokens).
DEFAULT_MAX_INPUT_IDS = 1_000_000

TokenId = Annotated[int, msgspec.Meta(ge=0, lt=2**32)]
StrOrList = str | list[str]


class ClientRequest(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """One native `/generate` request with token input, as the client sent it.

    Fields left out by the client keep SGLang's defaults and are left out again
    when the request is encoded; a field the client set is kept as set, an
    explicit `"stream": false` included. `sampling_params` is the client's
    object, unchanged.
    """

    input_ids: list[TokenId]
    rid: str | None = None
    session_id: str | None = None
    sampling_params: dict[str, Any] | None = None
    stream: bool | None = None
    return_logprob: bool | None = None
    logprob_start_len: int | None = None
    top_logprobs_num: int | None = None
    token_ids_logprob: list[int] | None = None
    return_text_in_logprobs: bool | None = None
    return_flat_raw_top_logprobs: bool = False
    return_flat_raw_output_top_logprobs: bool = False
    return_flat_raw_top_logprobs_b64: bool = False
    return_sampling_mask: bool | None = None
    sampling_logprobs_mode: Literal["selected", "support"] | None = None
    return_hidden_states: bool | None = None
    return_routed_experts: bool = False
    routed_experts_start_len: int = 0
    return_indexer_topk: bool = False
    return_entropy: bool = False
    return_prompt_token_ids: bool = False
    session_params: dict[str, Any] | None = None
    lora_path: str | None = None
    custom_logit_processor: str | None = None
    conversation_id: str | None = None
    require_reasoning: bool | None = None
    max_thinking_tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None
    priority: int | None = None
    extra_key: str | None = None
    cache_salt: str | None = None
    custom_labels: dict[str, str] | None = None
    no_logs: bool = False
    watermark: dict[str, Any] | None = None
    multi_item_delimiter_indices: list[int] | None = None
    token_indices_to_pool: list[int] | None = None


class Watermark(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`sampling_params.watermark` as SGLang's contract gate accepts it."""

    enabled: bool | None = None
    key: str | None = None
    context_window: int | None = None


class SamplingParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The types SGLang 0.5.23 accepts in `sampling_params` (its contract gate).

    Used only to check the client's object: the request keeps the object itself,
    so a client's `null` or key order survives. The field order is SGLang's,
    which its unknown-field message lists.
    """

    max_new_tokens: int | None = None
    stop: StrOrList | None = None
    stop_token_ids: list[int] | None = None
    stop_regex: StrOrList | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    min_new_tokens: int | None = None
    n: int | None = None
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None
    ignore_eos: bool | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    no_stop_trim: bool | None = None
    stream_interval: int | None = None
    logit_bias: dict[str, float] | None = None
    sampling_seed: int | None = None
    custom_params: Any = None
    beam_width: int | None = None
    watermark: Watermark | None = None
    choice: list[str] | None = None


_decoder = msgspec.json.Decoder(ClientRequest)


def _check_sampling_params(request: ClientRequest) -> None:
    if request.sampling_params is None:
        return
    try:
        msgspec.convert(request.sampling_params, SamplingParams)
    except DECODE_ERRORS as error:
        raise translate_validation_error(error, prefix="sampling_params") from None


def _as_json(body: object) -> bytes | str | memoryview | bytearray | msgspec.Raw:
    """The body as JSON text; a mapping is encoded first, refusing what JSON cannot carry."""
    if isinstance(body, (bytes, bytearray, memoryview, msgspec.Raw)):
        return body
    try:
        if isinstance(body, str):
            return body.encode("utf-8")
        if isinstance(body, Mapping):
            return json.dumps(body, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as error:  # UnicodeError is a ValueError
        raise reject("not_json", detail=str(error)) from None
    raise reject("not_object", got=type(body).__name__)


def decode_client_request(
    body: bytes | str | Mapping[str, Any],
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_input_ids: int = DEFAULT_MAX_INPUT_IDS,
) -> ClientRequest:
    """Decode and check a client's `/generate` body (JSON bytes or text, or a parsed mapping).

    A mapping is held to what JSON can carry (string keys, finite numbers).
    Raises `RequestRejected` naming the broken rule (`docs/contract.md`), and
    `EnvelopeError` for a bound that is not an integer >= 0.
    """
    for name, bound in (("max_body_bytes", max_body_bytes), ("max_input_ids", max_input_ids)):
        if type(bound) is not int or bound < 0:
            got = "a negative integer" if type(bound) is int else type(bound).__name__
            raise EnvelopeError(f"{name} must be an integer >= 0, got {got}")
    data = _as_json(body)
    if len(data) > max_body_bytes:
        raise reject("body_too_large", size=len(data), limit=max_body_bytes)
    try:
        request = _decoder.decode(data)
    except DECODE_ERRORS as error:
        raise translate_validation_error(error) from None
    if len(request.input_ids) > max_input_ids:
        raise reject("too_many_input_ids", size=len(request.input_ids), limit=max_input_ids)
    _check_sampling_params(request)
    check_request(request)
    return request
