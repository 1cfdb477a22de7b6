"""Bodies that kill a live SGLang 0.5.23 server, or that it cannot answer: the library must
refuse each before dispatch.

Each crasher was seen to end every SGLang process on the tiny model (vocabulary 320,
CPU), found by hand or by `live/fuzz.py` and minimised. None is sent here: a refused body
never reaches the engine, and an accepted one would kill the suite's server.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from live.flow import engine_request
from sglang_envelope import (
    RequestRejected,
    Role,
    decode_client_request,
    to_worker_envelope,
)

#: name -> (the body, what the server's log said as it died)
CRASHERS: dict[str, tuple[dict[str, Any], str]] = {
    "input_id_beyond_the_vocabulary": (
        {"input_ids": [1, 999], "sampling_params": {"max_new_tokens": 2}},
        "IndexError: index out of range in self (the embedding)",
    ),
    "logprob_start_len_below_minus_one": (
        {"input_ids": [5, 6, 7], "return_logprob": True, "logprob_start_len": -2},
        "AssertionError in the scheduler",
    ),
    "repetition_penalty_overflowing_float32": (
        # logits / 1e-50 overflow float32: with top_k or top_p the sampler's
        # torch.multinomial sees inf/nan; greedy (temperature 0) and plain sampling survive.
        {
            "input_ids": [250, 275],
            "sampling_params": {"max_new_tokens": 64, "repetition_penalty": 1e-50, "top_k": 89},
        },
        "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
    ),
    "logit_bias_overflowing_float32": (
        # 3e38 / temperature 0.5 overflows float32; top_k, top_p or min_p take the sampler
        # that multinomial-samples (without them the same body is answered).
        {
            "input_ids": [5, 6, 7],
            "sampling_params": {
                "max_new_tokens": 8,
                "logit_bias": {"86": 3e38},
                "temperature": 0.5,
                "top_k": 10,
            },
        },
        "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
    ),
    "repetition_penalty_overflowing_float32_with_min_p": (
        {
            "input_ids": [5, 6, 7],
            "sampling_params": {"max_new_tokens": 64, "repetition_penalty": 1e-50, "min_p": 0.5},
        },
        "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
    ),
    "a_grammar_ending_before_min_new_tokens": (
        # The grammar allows "a" and then only EOS, which min_new_tokens masks: no token is
        # left, and top_k's sampler multinomial-samples the NaN (without top_k: a 500).
        {
            "input_ids": [16, 269],
            "sampling_params": {
                "max_new_tokens": 8,
                "min_new_tokens": 5,
                "regex": "a",
                "top_k": 21,
            },
        },
        "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
    ),
    "a_json_schema_with_min_new_tokens_and_entropy": (
        # Found by the live fuzz.
        {
            "input_ids": [16, 269],
            "return_entropy": True,
            "sampling_params": {
                "min_new_tokens": 7,
                "json_schema": '{"type": "object"}',
                "top_k": 21,
                "stop": ["<"],
            },
        },
        "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
    ),
    "top_k_past_int32": (
        # The sampler's torch.tensor(top_ks, dtype=torch.int32); a greedy request's is 1.
        {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2, "top_k": 2**40}},
        "RuntimeError: value cannot be converted to type int32 without overflow",
    ),
    "stop_token_ids_past_the_vocabulary_with_min_new_tokens": (
        # MinNewTokensPenalizer scatters every stop id of the batch into a row of the
        # vocabulary; a request without min_new_tokens dies too beside one that has it.
        {"input_ids": [5, 6], "sampling_params": {"min_new_tokens": 2, "stop_token_ids": [400]}},
        "RuntimeError: index 400 is out of bounds for dimension 1 with size 321",
    ),
    "top_logprobs_num_past_the_vocabulary": (
        # The sampler's logprobs.topk(max_k): the vocabulary is 320 ids.
        {"input_ids": [5, 6], "return_logprob": True, "top_logprobs_num": 1000},
        "RuntimeError: selected index k out of range",
    ),
    # A prefill-only request (max_new_tokens 0) reads the logprobs at token_indices_to_pool
    # (logits_processor.compute_logprobs_at_positions), unchecked.
    "token_indices_to_pool_empty": (
        {
            "input_ids": [5, 6, 7],
            "token_indices_to_pool": [],
            "sampling_params": {"max_new_tokens": 0},
        },
        "ValueError: torch.cat(): expected a non-empty list of Tensors",
    ),
    "token_indices_to_pool_beyond_the_prompt": (
        {
            "input_ids": [5, 6, 7],
            "token_indices_to_pool": [3],
            "sampling_params": {"max_new_tokens": 0},
        },
        "IndexError: index 3 is out of bounds for dimension 0 with size 3",
    ),
    "token_indices_to_pool_with_a_cached_prefix": (
        # Answered the first time; once [5, ..., 10] is in the radix cache only the last id is
        # computed, and index 1 is out of range: whether it kills depends on the cache.
        {
            "input_ids": [5, 6, 7, 8, 9, 10],
            "token_indices_to_pool": [1],
            "sampling_params": {"max_new_tokens": 0},
        },
        "IndexError: index 1 is out of bounds for dimension 0 with size 1",
    ),
    "token_indices_to_pool_before_the_prompt": (
        {
            "input_ids": [5, 6, 7],
            "token_indices_to_pool": [-4],
            "sampling_params": {"max_new_tokens": 0},
        },
        "IndexError: index -4 is out of bounds for dimension 0 with size 3",
    ),
}


#: name -> (a body SGLang fails on without dying, how it answers)
BROKEN_ANSWERS: dict[str, tuple[dict[str, Any], str]] = {
    "stop_regex_not_a_regex": (
        # SamplingParams.normalize parses it (sre_parse) in the tokenizer manager: re.error.
        {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4, "stop_regex": "("}},
        "unary: 500 text/plain 'Internal Server Error'; stream: 200 text/event-stream headers, "
        "then the connection is cut (an incomplete chunked body, no event)",
    ),
}


def build(body: dict[str, Any]) -> None:
    request = decode_client_request(json.dumps(body).encode())
    envelope = to_worker_envelope(request, rid=uuid.uuid4().hex)
    engine_request(envelope, role=Role.AGGREGATED)


@pytest.mark.parametrize("name", list(CRASHERS))
def test_a_body_that_kills_sglang_is_refused_before_dispatch(name: str) -> None:
    body, death = CRASHERS[name]
    try:
        build(body)
    except RequestRejected:
        return
    pytest.fail(f"the library accepts a body that kills SGLang ({death}): {json.dumps(body)}")


@pytest.mark.parametrize("name", list(BROKEN_ANSWERS))
def test_a_body_sglang_cannot_answer_is_refused_before_dispatch(name: str) -> None:
    body, answer = BROKEN_ANSWERS[name]
    try:
        build(body)
    except RequestRejected:
        return
    pytest.fail(f"the library accepts a body SGLang cannot answer ({answer}): {json.dumps(body)}")
