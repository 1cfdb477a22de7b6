"""Routed experts: the codec, the merge of a prefill/decode pair, and continuations joined."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    ClientRequest,
    EnvelopeError,
    LimitExceeded,
    ResponseError,
    decode_client_request,
)
from sglang_envelope.pair import merge_prefill
from sglang_envelope.rollout import continuation_request
from sglang_envelope.routed import decode_routed_experts, encode_routed_experts, join_routed_experts

FIXTURE = Path(__file__).parent / "fixtures" / "moe_pair_answers.jsonl"
PAIRS = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
SHAPE = (2, 2)  # the live suite's MoE model: 2 layers, top-2
VOLATILE = ("id", "e2e_latency", "response_sent_to_client_ts", "cached_tokens",
            "cached_tokens_details")  # fmt: skip


def ints(text: str) -> list[int]:
    raw = base64.b64decode(text)
    return list(struct.unpack(f"<{len(raw) // 4}i", raw))


def steady(answer: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in answer["meta_info"].items() if k not in VOLATILE}
    return {**answer, "meta_info": meta}


@pytest.mark.parametrize("pair", PAIRS, ids=[p["name"] for p in PAIRS])
def test_the_codec_round_trips_every_live_answer_byte_for_byte(pair: dict[str, Any]) -> None:
    for leg in ("aggregated", "prefill", "decode"):
        text = pair[leg]["meta_info"]["routed_experts"]
        rows = decode_routed_experts(text, layers=2, top_k=2)
        assert [e for row in rows for layer in row for e in layer] == ints(text)
        assert encode_routed_experts(rows) == text


@pytest.mark.parametrize("pair", PAIRS, ids=[p["name"] for p in PAIRS])
@pytest.mark.parametrize("shape", [SHAPE, None])
def test_a_merged_pair_is_the_aggregated_answer(
    pair: dict[str, Any], shape: tuple[int, int] | None
) -> None:
    start = pair["body"].get("routed_experts_start_len", 0)
    decode = pair["decode"]
    assert decode != pair["aggregated"]  # the decode leg alone is not the answer
    merged = merge_prefill(
        pair["prefill"], decode, routed_experts_start_len=start, routed_experts_shape=shape
    )
    assert json.dumps(steady(merged)) == json.dumps(steady(pair["aggregated"]))


def test_the_decode_leg_zero_fills_the_prompt_rows_only() -> None:
    pair = PAIRS[0]
    prompt = len(pair["body"]["input_ids"])
    decode = decode_routed_experts(pair["decode"]["meta_info"]["routed_experts"], layers=2, top_k=2)
    whole = decode_routed_experts(
        pair["aggregated"]["meta_info"]["routed_experts"], layers=2, top_k=2
    )
    assert decode[:prompt] == [[[0, 0], [0, 0]]] * prompt
    assert decode[prompt:] == whole[prompt:] and whole[:prompt] != decode[:prompt]


def meta(**fields: Any) -> dict[str, Any]:
    return {"output_ids": [9], "meta_info": {"prompt_tokens": 3, **fields}}


def encoded(*rows: int) -> str:
    return encode_routed_experts([[[e, e], [e, e]] for e in rows])


@pytest.mark.parametrize(
    ("prefill", "decode", "start", "words"),
    [
        (meta(), meta(routed_experts=encoded(0, 0, 0, 4)), 0, "no routed_experts"),
        (meta(routed_experts=encoded(1, 2)), meta(routed_experts=encoded(0, 0, 0, 4)), 0,
         "not 3 prompt rows"),
        (meta(routed_experts=encoded(1, 2, 3)), meta(routed_experts=encoded(0, 0)), 0,
         "the decode response's routed_experts has 32 bytes"),
        (meta(routed_experts="AAA"), meta(routed_experts=encoded(0, 0, 0, 4)), 0, "not Base64"),
        (meta(routed_experts="AAAA!AAA"), meta(routed_experts=encoded(0, 0, 0, 4)), 0,
         "not valid Base64"),
        (meta(routed_experts=encoded(1, 2, 3)), meta(routed_experts=encoded(0, 0, 0, 4)), 1,
         "not 2 prompt rows"),
        ({"meta_info": {"prompt_tokens": 4}}, meta(routed_experts=encoded(0, 0, 0, 4)), 0,
         "prompt_tokens 4 is not the decode response's 3"),
    ],
)  # fmt: skip
def test_a_merge_that_cannot_be_made_is_refused(
    prefill: dict[str, Any], decode: dict[str, Any], start: int, words: str
) -> None:
    with pytest.raises(ResponseError, match=words):
        merge_prefill(prefill, decode, routed_experts_start_len=start, routed_experts_shape=SHAPE)


def test_rows_that_do_not_fit_the_model_s_shape_are_refused() -> None:
    prefill, decode = (
        meta(routed_experts=encoded(1, 2, 3)),
        meta(routed_experts=encoded(0, 0, 0, 4)),
    )
    with pytest.raises(ResponseError, match="of 12 bytes"):
        merge_prefill(prefill, decode, routed_experts_shape=(3, 1))
    merged = merge_prefill(prefill, decode)  # the shape unknown: rows by the prefill's size
    assert merged["meta_info"]["routed_experts"] == encoded(1, 2, 3, 4)


def test_a_merge_keeps_the_decode_string_when_no_prompt_row_was_asked() -> None:
    decode = meta(routed_experts=encoded(4))
    assert merge_prefill(meta(), decode, routed_experts_start_len=3) == decode
    assert merge_prefill(meta(routed_experts=""), decode, routed_experts_start_len=3) == decode


@pytest.mark.parametrize(
    ("arguments", "words"),
    [({"routed_experts_start_len": -1}, "routed_experts_start_len must be"),
     ({"routed_experts_shape": (2,)}, "routed_experts_shape must be"),
     ({"routed_experts_shape": (2, 0)}, "top_k must be")],
)  # fmt: skip
def test_bad_merge_arguments_name_themselves(arguments: dict[str, Any], words: str) -> None:
    with pytest.raises(EnvelopeError, match=words):
        merge_prefill(meta(), meta(), **arguments)


rows_strategy = st.integers(1, 4).flatmap(
    lambda layers: st.integers(1, 4).flatmap(
        lambda k: st.lists(
            st.lists(
                st.lists(st.integers(-(2**31), 2**31 - 1), min_size=k, max_size=k),
                min_size=layers,
                max_size=layers,
            ),
            max_size=8,
        ).map(lambda rows: (rows, layers, k))
    )
)


@given(rows_strategy)
def test_any_rows_round_trip(case: tuple[list[list[list[int]]], int, int]) -> None:
    rows, layers, k = case
    text = encode_routed_experts(rows)
    assert decode_routed_experts(text, layers=layers, top_k=k) == rows
    flat = [e for row in rows for layer in row for e in layer]
    assert base64.b64decode(text) == struct.pack(f"<{len(flat)}i", *flat)


@given(rows_strategy, st.integers(0, 8))
def test_joined_parts_are_the_whole(case: tuple[list[list[list[int]]], int, int], cut: int) -> None:
    rows = case[0]
    parts = [encode_routed_experts(rows[:cut]), encode_routed_experts(rows[cut:])]
    assert join_routed_experts(parts) == encode_routed_experts(rows)


@pytest.mark.parametrize(
    ("text", "max_ids", "error", "words"),
    [("AAAA", 99, ResponseError, "not a whole number of int32"),
     (encode_routed_experts([[[1, 2, 3, 4, 5]]]), 99, ResponseError, "not a whole number of rows"),
     ("A" * 24, 2, LimitExceeded, "more than 2 expert ids"),
     (7, 99, ResponseError, "must be a Base64 string")],
)  # fmt: skip
def test_bad_strings_are_refused_before_the_work(
    text: Any, max_ids: int, error: type, words: str
) -> None:
    with pytest.raises(error, match=words):
        decode_routed_experts(text, layers=1, top_k=3, max_ids=max_ids)


@pytest.mark.parametrize(
    ("rows", "words"),
    [([[[1, 2]], [[1]]], r"rows\[1\] must have 1 layers of 2 experts"),
     ([[[1, 2**31]]], r"rows\[0\]\[0\]\[1\] must be an int32"),
     ([[[1, "2"]]], r"rows\[0\]\[0\]\[1\] must be an int32"),
     ("rows", "rows must be a sequence"),
     ([[1, 2]], r"rows\[0\] must be a sequence of layers")],
)  # fmt: skip
def test_bad_rows_name_the_entry(rows: Any, words: str) -> None:
    with pytest.raises(EnvelopeError, match=words):
        encode_routed_experts(rows)


def test_a_join_is_bounded_in_all() -> None:
    with pytest.raises(LimitExceeded):
        join_routed_experts([encoded(1), encoded(2)], max_ids=6)
    with pytest.raises(EnvelopeError, match="parts must be a sequence of strings"):
        join_routed_experts("AAAA")


def test_a_continuation_asks_for_the_rows_the_first_part_has_not_got() -> None:
    request = decode_client_request(
        b'{"input_ids": [5, 6, 7], "return_routed_experts": true, '
        b'"sampling_params": {"max_new_tokens": 6}}'
    )
    stopped = {"output_ids": [8, 9], "meta_info": {"finish_reason": {"type": "abort"},
                                                   "completion_tokens": 2}}  # fmt: skip
    follow = continuation_request(stopped, request)
    assert isinstance(follow, ClientRequest)
    assert follow.input_ids == (5, 6, 7, 8, 9) and follow.routed_experts_start_len == 4
    plain = decode_client_request(b'{"input_ids": [5, 6, 7]}')
    assert continuation_request(stopped, plain).routed_experts_start_len == 0
    late = decode_client_request(
        b'{"input_ids": [5, 6, 7], "return_routed_experts": true, "routed_experts_start_len": 3}'
    )
    empty = {"output_ids": [], "meta_info": {"finish_reason": {"type": "abort"}}}
    assert continuation_request(empty, late).routed_experts_start_len == 3
