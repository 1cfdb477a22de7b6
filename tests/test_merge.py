"""merge_prefill."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import EnvelopeError, ResponseError
from sglang_envelope.pair import merge_prefill
from sglang_envelope.response.merge import (
    PROMPT_LOGPROB_GROUPS,
    UNAVAILABLE_MARKER,
    has_prompt_logprobs,
)
from tests.strategies import final_responses, near_final_responses

LIVE = Path(__file__).parent / "fixtures" / "live_answers.jsonl"
LIVE_ANSWERS = [json.loads(line) for line in LIVE.read_text(encoding="utf-8").splitlines()]
PROMPT_KEYS = frozenset(
    key for data, described in PROMPT_LOGPROB_GROUPS for key in data + described
)
ENTRIES = [[None, 1, None], [-0.5, 2, None]]
FLAT_B64 = {
    "input_top_logprobs_val_flat_b64": "AAAAvw==",
    "input_top_logprobs_idx_flat_b64": "AgAAAA==",
    "input_top_logprobs_val_flat_b64_dtype": "float32",
    "input_top_logprobs_idx_flat_b64_dtype": "int32",
    "input_top_logprobs_shape": [1, 1],
    "input_top_logprobs_null_prefix": 1,
}


def response(**meta: Any) -> dict[str, Any]:
    return {
        "text": "hi",
        "output_ids": [5],
        "meta_info": {"finish_reason": {"type": "stop"}, **meta},
    }


def test_the_spec_keys_are_the_groups() -> None:
    assert (
        frozenset(
            {"input_token_logprobs", "input_top_logprobs", "input_token_ids_logprobs"}
            | {
                f"input_top_logprobs_{suffix}"
                for suffix in (
                    "val_flat",
                    "idx_flat",
                    "val_flat_b64",
                    "idx_flat_b64",
                    "val_flat_b64_dtype",
                    "idx_flat_b64_dtype",
                    "shape",
                    "null_prefix",
                )
            }
        )
        == PROMPT_KEYS
    )


@pytest.mark.parametrize("lacking", ["missing", None, []])
def test_copies_what_the_decode_response_lacks(lacking: Any) -> None:
    decode_meta: dict[str, Any] = {UNAVAILABLE_MARKER: "prefill-decode disaggregation"}
    if lacking != "missing":
        decode_meta.update(input_token_logprobs=lacking, input_top_logprobs=lacking)
    decode = response(output_token_logprobs=[[-1.0, 5, None]], **decode_meta)
    prefill = response(
        input_token_logprobs=ENTRIES,
        input_top_logprobs=[None, [[-0.5, 2, None]]],
        output_token_logprobs=[[-9.0, 4, None]],
    )
    merged = merge_prefill(prefill, decode)
    assert merged["meta_info"] == {
        "finish_reason": {"type": "stop"},
        "output_token_logprobs": [[-1.0, 5, None]],  # the decode response's, never the prefill's
        "input_token_logprobs": ENTRIES,
        "input_top_logprobs": [None, [[-0.5, 2, None]]],
    }
    assert {k: v for k, v in merged.items() if k != "meta_info"} == {
        "text": "hi",
        "output_ids": [5],
    }


def test_keeps_what_the_decode_response_has() -> None:
    decode = response(input_token_logprobs=[[-2.0, 1, None]], **{UNAVAILABLE_MARKER: "x"})
    merged = merge_prefill(response(input_token_logprobs=ENTRIES), decode)
    assert merged == decode  # nothing copied, so the marker stays too


def test_flat_fields_move_as_one_group() -> None:
    """SGLang's decode side writes empty flat arrays with their own shape; the
    prefill's arrays replace them together with their shape, prefix and dtypes."""
    decode = response(
        input_top_logprobs_val_flat=[],
        input_top_logprobs_idx_flat=[],
        input_top_logprobs_shape=[0, 1],
        input_top_logprobs_null_prefix=0,
    )
    merged = merge_prefill(response(**FLAT_B64), decode)
    assert merged["meta_info"] == {"finish_reason": {"type": "stop"}, **FLAT_B64}


def _sglang_input_flat_fields(kind: str) -> list[dict[str, Any]]:
    """SGLang's own prompt-flat fields for `kind` rows ("all-null": [None], "empty": [])."""
    fixture = Path(__file__).parent / "fixtures" / "flat_fields.jsonl"
    cases = [json.loads(line) for line in fixture.read_text(encoding="utf-8").splitlines()]
    return [
        case["expected"]
        for case in cases
        if case["side"] == "input"
        and f"/{kind}/" in case["name"]
        and "error" not in case["expected"]
    ]


@pytest.mark.parametrize("one_token_prompt", _sglang_input_flat_fields("all-null"))
@pytest.mark.parametrize("decode_side", [*_sglang_input_flat_fields("empty"), {}])
def test_a_one_token_prompt_s_flat_fields_hold_data(
    one_token_prompt: dict[str, Any], decode_side: dict[str, Any]
) -> None:
    """A one-token prompt's only position has no logprob: SGLang writes shape [0, k],
    null prefix 1 (more for more such positions) and no values. It covers a position,
    so it is data, while the decode side's fields for no rows at all (shape [0, k],
    null prefix 0) are not."""
    assert one_token_prompt["input_top_logprobs_null_prefix"] >= 1
    assert one_token_prompt["input_top_logprobs_shape"][0] == 0
    decode = response(**decode_side, **{UNAVAILABLE_MARKER: "disaggregated_decode"})
    merged = merge_prefill(response(**one_token_prompt), decode)
    assert merged["meta_info"] == {"finish_reason": {"type": "stop"}, **one_token_prompt}
    assert has_prompt_logprobs(merged["meta_info"])
    assert not has_prompt_logprobs(decode["meta_info"])


@pytest.mark.parametrize(
    ("counts", "holds"),
    [
        ({"input_top_logprobs_shape": [0, 5], "input_top_logprobs_null_prefix": 0}, False),
        ({"input_top_logprobs_shape": [0, 5], "input_top_logprobs_null_prefix": 2}, True),
        ({"input_top_logprobs_shape": [1, 0], "input_top_logprobs_null_prefix": 0}, True),
        ({"input_top_logprobs_shape": "3", "input_top_logprobs_null_prefix": "3"}, False),
        ({"input_top_logprobs_shape": [0], "input_top_logprobs_null_prefix": None}, False),
        ({"input_top_logprobs_null_prefix": 1}, True),
    ],
)
def test_a_group_holds_data_when_it_covers_a_position(counts: dict[str, Any], holds: bool) -> None:
    assert has_prompt_logprobs(counts) is holds
    merged = merge_prefill(response(**counts), response())
    assert (merged["meta_info"] == {"finish_reason": {"type": "stop"}, **counts}) is holds


def test_a_prefill_response_without_data_changes_nothing() -> None:
    decode = response(input_token_logprobs=[], **{UNAVAILABLE_MARKER: "x"})
    assert merge_prefill(response(input_token_logprobs=[]), decode) == decode
    assert merge_prefill(response(), decode) == decode


@given(final_responses(), final_responses(), st.data())
def test_only_prompt_side_keys_change_and_inputs_are_untouched(
    prefill: dict[str, Any], decode: dict[str, Any], data: st.DataObject
) -> None:
    for key in data.draw(st.lists(st.sampled_from(sorted(PROMPT_KEYS)), max_size=4)):
        target = data.draw(st.sampled_from([prefill, decode]))
        target["meta_info"][key] = data.draw(st.sampled_from([[], None, ENTRIES, "abc", 3]))
    before = copy.deepcopy((prefill, decode))
    merged = merge_prefill(prefill, decode)
    assert (prefill, decode) == before
    assert merged is not decode and merged["meta_info"] is not decode["meta_info"]
    assert {k: v for k, v in merged.items() if k != "meta_info"} == {
        k: v for k, v in decode.items() if k != "meta_info"
    }

    def untouched(meta: dict[str, Any]) -> dict[str, Any]:
        changed = (*PROMPT_KEYS, UNAVAILABLE_MARKER, "output_token_ids_logprobs")
        return {k: v for k, v in meta.items() if k not in changed}

    assert untouched(merged["meta_info"]) == untouched(decode["meta_info"])
    asked = [merged, decode, prefill]
    outputs = [r["meta_info"].get("output_token_ids_logprobs") for r in asked]
    if outputs[0] != outputs[1]:  # only a null first entry, filled in from the prefill's
        assert outputs[1][0] is None and outputs[0] == [outputs[2][0], *outputs[1][1:]]
    for key in PROMPT_KEYS & merged["meta_info"].keys():
        assert merged["meta_info"][key] in (
            decode["meta_info"].get(key),
            prefill["meta_info"].get(key),
        )


@pytest.mark.parametrize(
    ("prefill", "decode", "message"),
    [
        ([], response(), "prefill_response: expected an object, got an array"),
        (response(), None, "decode_response: expected an object, got null"),
        (
            {"meta_info": 3},
            response(),
            "prefill_response.meta_info: expected an object, got an integer",
        ),
        (response(), {"text": "x"}, "decode_response.meta_info: expected an object, got null"),
    ],
)
def test_malformed_responses_name_the_key(prefill: Any, decode: Any, message: str) -> None:
    with pytest.raises(ResponseError, match=message):
        merge_prefill(prefill, decode)


@given(near_final_responses, near_final_responses)
def test_any_json_raises_only_envelope_errors(prefill: Any, decode: Any) -> None:
    try:
        merged = merge_prefill(prefill, decode)
    except EnvelopeError:
        return
    assert isinstance(merged["meta_info"], dict)


def _as_decode_leg(meta: dict[str, Any]) -> dict[str, Any]:
    """`meta` with the prompt-side keys as a decode leg carries them: present, but empty."""
    emptied = dict(meta)
    for logprob_keys, described_by in PROMPT_LOGPROB_GROUPS:
        for key in (*logprob_keys, *described_by):
            value = meta.get(key)
            if isinstance(value, (list, str)):
                emptied[key] = value[:0]
            if key == "input_top_logprobs_shape" and value is not None:
                emptied[key] = [0, value[1]]
            if key == "input_top_logprobs_null_prefix" and value is not None:
                emptied[key] = 0
    return emptied


@pytest.mark.parametrize("name", ["logprobs", "prompt_flat", "prompt_flat_b64"])
def test_the_merged_answer_is_an_aggregated_server_s_key_order_included(name: str) -> None:
    """A live aggregated answer, its prompt side emptied as a decode leg's is, merged with
    itself as the prefill leg's: byte for byte the aggregated answer."""
    case = next(c for c in LIVE_ANSWERS if c["name"] == name and not c["incremental"])
    aggregated = json.loads(case["unary"])
    decode = {**aggregated, "meta_info": _as_decode_leg(aggregated["meta_info"])}
    assert decode != aggregated
    merged = merge_prefill(aggregated, decode)
    assert json.dumps(merged) == json.dumps(aggregated)
