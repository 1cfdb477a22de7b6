"""Who may set each `GenerateReqInput` field: `FIELD_OWNERS`, read by plain lookups.

A field in `FIELD_OWNERS` is not the client's, and its value names the rule
that refuses it (`rules.RULES`): input other than token ids (`not_token_input`)
or a field only the serving system sets (`orchestrator_field`). Every other
field of SGLang's `GenerateReqInput` is the client's.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "FIELD_OWNERS",
    "NOT_TOKEN_INPUT",
    "NULL_AS_ABSENT",
    "ORCHESTRATOR_FIELD",
    "OWNED_BOOLEANS",
]

NOT_TOKEN_INPUT = "not_token_input"
ORCHESTRATOR_FIELD = "orchestrator_field"

#: `GenerateReqInput` fields a client may not send, by the rule that refuses them.
#: Every other field of `GENERATE_REQ_INPUT_FIELDS` is the client's.
FIELD_OWNERS: Mapping[str, str] = {
    # Input other than one flat list of token ids.
    "text": NOT_TOKEN_INPUT,
    "input_embeds": NOT_TOKEN_INPUT,
    "positional_embed_overrides": NOT_TOKEN_INPUT,
    "image_data": NOT_TOKEN_INPUT,
    "video_data": NOT_TOKEN_INPUT,
    "audio_data": NOT_TOKEN_INPUT,
    "mm_hashes": NOT_TOKEN_INPUT,
    "mm_content_hashes": NOT_TOKEN_INPUT,
    "use_audio_in_video": NOT_TOKEN_INPUT,
    "video_config": NOT_TOKEN_INPUT,
    "modalities": NOT_TOKEN_INPUT,
    "max_dynamic_patch": NOT_TOKEN_INPUT,
    "min_dynamic_patch": NOT_TOKEN_INPUT,
    "image_max_dynamic_patch": NOT_TOKEN_INPUT,
    "video_max_dynamic_patch": NOT_TOKEN_INPUT,
    "images_config": NOT_TOKEN_INPUT,
    "mm_processor_kwargs": NOT_TOKEN_INPUT,
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
