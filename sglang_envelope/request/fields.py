"""The fields of SGLang's `/generate` body: those a client may set, as types, and
those it may not, by the rule that refuses them (`FIELD_OWNERS`).

`RequestFields` is what a client request and an engine body share;
`SamplingParams` and `Watermark` are the typed `sampling_params`. They carry no
checks of their own: `rules.py` reads them, and `types.ClientRequest` (which
adds the checks) and `engine.EngineBody` derive from `RequestFields`. A field
in `FIELD_OWNERS` is not the client's: input other than token ids
(`not_token_input`) or a field only the serving system sets
(`orchestrator_field`); every other field of `GenerateReqInput` is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Raw, UnsetType

__all__ = [
    "FIELD_OWNERS",
    "NOT_TOKEN_INPUT",
    "NULL_AS_ABSENT",
    "ORCHESTRATOR_FIELD",
    "OWNED_BOOLEANS",
    "REQUEST_DEFAULTS",
    "SAMPLING_DEFAULTS",
    "TEXT_INPUT_FIELDS",
    "RequestFields",
    "SamplingParams",
    "TokenId",
    "Watermark",
    "token_input_struct",
]

TokenId = Annotated[int, msgspec.Meta(ge=0, lt=2**32)]


class Watermark(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    omit_defaults=True,
):
    """`sampling_params.watermark` as SGLang's contract gate accepts it."""

    enabled: bool | UnsetType | None = UNSET
    key: str | UnsetType | None = UNSET
    context_window: int | UnsetType | None = UNSET


class SamplingParams(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    omit_defaults=True,
):
    """The client's `sampling_params`, typed as SGLang's contract gate accepts them.

    It holds the keys of every known release (`ebnf_full_assistant`, which the
    gate refuses but `SamplingParams` takes, too); which of them a target takes
    is its contract's (`contract.contract_for`).

    A key the client left out is `UNSET` (and left out again when encoded); an
    explicit `null` is None, which SGLang may read differently (a null
    `max_new_tokens` means no limit). Lists and objects (`stop`,
    `stop_token_ids`, `stop_regex`, `logit_bias`, `custom_params`, `choice`)
    are the client's JSON as `msgspec.Raw` bytes, checked but never built as
    Python objects. The field order is SGLang's, which its unknown-field
    message lists.
    """

    max_new_tokens: int | UnsetType | None = UNSET
    stop: Raw | UnsetType = UNSET
    stop_token_ids: Raw | UnsetType = UNSET
    stop_regex: Raw | UnsetType = UNSET
    temperature: int | float | UnsetType | None = UNSET
    top_p: int | float | UnsetType | None = UNSET
    top_k: int | UnsetType | None = UNSET
    min_p: int | float | UnsetType | None = UNSET
    frequency_penalty: int | float | UnsetType | None = UNSET
    presence_penalty: int | float | UnsetType | None = UNSET
    repetition_penalty: int | float | UnsetType | None = UNSET
    min_new_tokens: int | UnsetType | None = UNSET
    n: int | UnsetType | None = UNSET
    json_schema: str | UnsetType | None = UNSET
    regex: str | UnsetType | None = UNSET
    ebnf: str | UnsetType | None = UNSET
    structural_tag: str | UnsetType | None = UNSET
    ignore_eos: bool | UnsetType | None = UNSET
    skip_special_tokens: bool | UnsetType | None = UNSET
    spaces_between_special_tokens: bool | UnsetType | None = UNSET
    no_stop_trim: bool | UnsetType | None = UNSET
    stream_interval: int | UnsetType | None = UNSET
    logit_bias: Raw | UnsetType = UNSET
    sampling_seed: int | UnsetType | None = UNSET
    custom_params: Raw | UnsetType = UNSET
    beam_width: int | UnsetType | None = UNSET
    watermark: Watermark | UnsetType | None = UNSET
    ebnf_full_assistant: bool | UnsetType | None = UNSET
    choice: Raw | UnsetType = UNSET


class RequestFields(msgspec.Struct, frozen=True, omit_defaults=True):
    """The `GenerateReqInput` fields a client may set: shared by the client request and
    the engine body (which are different types: an engine body is not a client request).

    `input_ids` is a tuple; every other list or object is the client's JSON as
    `msgspec.Raw` bytes (`msgspec.json.decode(raw)` gives the value), checked
    but never built as Python objects, so its cost stays that of its bytes.

    `input_ids` is None only in a request for a target that takes text
    (`Target(input="text")`): a token-input request always has it. `text` and
    the media fields (`TEXT_INPUT_FIELDS`) come last; on a token-input target
    they are never set (the decode refuses them).
    """

    input_ids: tuple[TokenId, ...] | None = None
    rid: str | None = None
    session_id: str | None = None
    sampling_params: SamplingParams | UnsetType | None = UNSET
    stream: bool | None = None
    return_logprob: bool | None = None
    logprob_start_len: int | None = None
    top_logprobs_num: int | None = None
    token_ids_logprob: Raw | UnsetType = UNSET
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
    session_params: Raw | UnsetType = UNSET
    lora_path: str | None = None
    custom_logit_processor: str | None = None
    conversation_id: str | None = None
    require_reasoning: bool | None = None
    max_thinking_tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None
    priority: int | None = None
    extra_key: str | None = None
    cache_salt: str | None = None
    no_logs: bool = False
    watermark: Raw | UnsetType = UNSET
    multi_item_delimiter_indices: Raw | UnsetType = UNSET
    token_indices_to_pool: Raw | UnsetType = UNSET
    # Text input and media (a target with input="text"): the client's JSON, nulls kept.
    text: str | None = None
    image_data: Raw | UnsetType = UNSET
    video_data: Raw | UnsetType = UNSET
    audio_data: Raw | UnsetType = UNSET
    mm_hashes: Raw | UnsetType = UNSET
    mm_content_hashes: Raw | UnsetType = UNSET
    use_audio_in_video: bool | UnsetType = UNSET
    video_config: Raw | UnsetType = UNSET
    modalities: Raw | UnsetType = UNSET
    max_dynamic_patch: int | UnsetType | None = UNSET
    min_dynamic_patch: int | UnsetType | None = UNSET
    image_max_dynamic_patch: int | UnsetType | None = UNSET
    video_max_dynamic_patch: int | UnsetType | None = UNSET
    images_config: Raw | UnsetType = UNSET
    mm_processor_kwargs: Raw | UnsetType = UNSET


#: Each client field's default, and each `sampling_params` key's: what a body that
#: leaves it out holds.
REQUEST_DEFAULTS: Mapping[str, Any] = {
    field.name: field.default for field in msgspec.structs.fields(RequestFields)
}
SAMPLING_DEFAULTS: Mapping[str, Any] = {
    field.name: field.default for field in msgspec.structs.fields(SamplingParams)
}
#: The fields only a target with input="text" takes: `text`, then the media fields.
TEXT_INPUT_FIELDS = RequestFields.__struct_fields__[
    RequestFields.__struct_fields__.index("text") :
]


def token_input_struct(name: str, ids: object) -> type[msgspec.Struct]:
    """A struct of a token-input client's fields, `input_ids` first and typed `ids`, and
    no text or media field (`TEXT_INPUT_FIELDS`): what such a client's body decodes to."""
    kept = (
        (f.name, f.type, f.default)
        for f in msgspec.structs.fields(RequestFields)
        if f.name != "input_ids" and f.name not in TEXT_INPUT_FIELDS
    )
    return msgspec.defstruct(
        name,
        [("input_ids", ids), *kept],
        kw_only=True,
        forbid_unknown_fields=True,
        frozen=True,
    )


NOT_TOKEN_INPUT = "not_token_input"
ORCHESTRATOR_FIELD = "orchestrator_field"

#: `GenerateReqInput` fields a client may not send, by the rule that refuses them.
FIELD_OWNERS: Mapping[str, str] = {
    # Input other than one flat list of token ids: text and media, or embeddings.
    **dict.fromkeys(TEXT_INPUT_FIELDS, NOT_TOKEN_INPUT),
    "input_embeds": NOT_TOKEN_INPUT,
    "positional_embed_overrides": NOT_TOKEN_INPUT,
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

#: The fields of `FIELD_OWNERS` that SGLang types as booleans: a null one is refused.
#: Every other one defaults to None in SGLang, which reads a null as absent, and so
#: does the library (AReaL sends ``"image_data": null`` with every request).
OWNED_BOOLEANS = ("use_audio_in_video", "log_metrics", "return_bytes", "background")
NULL_AS_ABSENT = frozenset(FIELD_OWNERS).difference(OWNED_BOOLEANS)
