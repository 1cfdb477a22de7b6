"""The shape of a /generate answer, for type checkers.

`GenerateResponse` and `MetaInfo` describe the keys SGLang 0.5.23 writes
(``tokenizer_manager._handle_batch_output``, ``add_logprob_to_meta_info``;
``api/v1/api_types.py``: ``GenerateResponse``, ``GenerateMetaInfo``). They are
``TypedDict``s: at run time a response is a plain ``dict``, so every key SGLang
adds, known or not, passes through unchanged; the types only tell ``mypy
--strict`` users which keys to expect and what they hold.
"""

from __future__ import annotations

from typing import Any

from typing_extensions import NotRequired, TypedDict

__all__ = ["FinishReason", "GenerateResponse", "LogprobEntry", "MetaInfo"]

LogprobEntry = list[float | int | str | None]
"""``[logprob, token_id, token_text_or_null]``: a token's logprob as SGLang writes it."""

FinishReason = dict[str, Any]
"""``{"type": "stop" | "length" | "abort", ...}``: ``matched``, ``length``, ``message``,
``status_code``, as the finish reason's type gives them."""


class MetaInfo(TypedDict):
    """A response's ``meta_info``: the keys SGLang writes, each when its option is on."""

    id: NotRequired[str]
    finish_reason: FinishReason | None
    prompt_tokens: NotRequired[int]
    completion_tokens: NotRequired[int]
    cached_tokens: NotRequired[int]
    reasoning_tokens: NotRequired[int]
    e2e_latency: NotRequired[float]
    weight_version: NotRequired[str | None]
    num_retractions: NotRequired[int]
    input_token_logprobs: NotRequired[list[LogprobEntry]]
    output_token_logprobs: NotRequired[list[LogprobEntry]]
    output_token_logprobs_length: NotRequired[int]
    input_top_logprobs: NotRequired[list[list[LogprobEntry] | None]]
    output_top_logprobs: NotRequired[list[list[LogprobEntry] | None]]
    input_token_ids_logprobs: NotRequired[list[list[LogprobEntry] | None]]
    output_token_ids_logprobs: NotRequired[list[list[LogprobEntry] | None]]
    output_token_sampling_mask: NotRequired[list[list[int]]]
    output_token_sampling_mask_length: NotRequired[int]
    output_token_sampling_logprobs: NotRequired[list[Any]]


class GenerateResponse(TypedDict):
    """One generation's answer: what the aggregators and `parse_unary` return."""

    text: NotRequired[str]
    output_ids: NotRequired[list[int]]
    meta_info: MetaInfo
    index: NotRequired[int]
    prompt_token_ids: NotRequired[list[int]]
