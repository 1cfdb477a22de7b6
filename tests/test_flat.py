"""The flat top-logprob codec against SGLang 0.5.23's own encoder, and under fire.

The golden file `fixtures/flat_fields.jsonl` holds what SGLang's tokenizer
manager wrote for each case (see `scripts/make_flat_fixtures.py`); it is read
with the standard `json` module, which knows NaN and Infinity.
"""

from __future__ import annotations

import base64
import json
import math
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given

import sglang_envelope.response.flat as _flat
from sglang_envelope import EnvelopeError, LimitExceeded, ResponseError
from sglang_envelope.flat import (
    DEFAULT_MAX_NESTED_POSITIONS,
    FlatTopLogprobs,
    decode_flat_top_logprobs,
    encode_flat_top_logprobs,
)
from tests.strategies import (
    flat_fields,
    flat_nested_rows,
    hostile_flat_meta_infos,
    hostile_flat_nested,
)

FIXTURE = Path(__file__).parent / "fixtures" / "flat_fields.jsonl"
CASES: list[dict[str, Any]] = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
GOOD = [case for case in CASES if "error" not in case["expected"]]
BAD = [case for case in CASES if "error" in case["expected"]]


def _name(case: dict[str, Any]) -> str:
    return str(case["name"])


def _nested(case: dict[str, Any]) -> list[Any]:
    """The case's val and idx rows as nested `[logprob, token_id, None]` rows."""
    return [
        None if row is None else [[v, i, None] for v, i in zip(row, ids, strict=True)]
        for row, ids in zip(case["val"], case["idx"], strict=True)
    ]


def _encode(case: dict[str, Any], nested: Any) -> dict[str, object]:
    return encode_flat_top_logprobs(
        nested, side=case["side"], top_logprobs_num=case["top_logprobs_num"], b64=case["b64"]
    )


def _float32(value: float) -> float:
    """`value` rounded to float32 as numpy casts it, by way of `struct` (±inf past the range)."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def _same(a: object, b: object) -> bool:
    """Equal as JSON text: exact floats, -0.0 apart from 0.0, NaN equal to NaN."""
    return json.dumps(a) == json.dumps(b)


def test_fixture_covers_what_it_promises() -> None:
    sides_forms = {(case["side"], case["b64"]) for case in CASES}
    shapes = [case["expected"][f"{case['side']}_top_logprobs_shape"] for case in GOOD]
    assert len(CASES) >= 300
    assert sides_forms == {(s, b) for s in ("input", "output") for b in (False, True)}
    assert {k for _, k in shapes} >= {0, 1, 5, 20}
    assert any(rows == 0 for rows, _ in shapes)
    assert any(case["val"] == [] for case in GOOD)
    assert len(BAD) >= 40
    assert any(
        math.isnan(v) for case in GOOD if case["b64"] for row in case["val"] if row for v in row
    )


@pytest.mark.parametrize("case", GOOD, ids=_name)
def test_encode_equals_sglang(case: dict[str, Any]) -> None:
    # JSON text equality: same keys in SGLang's order, same Base64 bytes, exact numbers.
    assert json.dumps(_encode(case, _nested(case))) == json.dumps(case["expected"])


@pytest.mark.parametrize("case", BAD, ids=_name)
def test_encode_rejects_what_sglang_rejects(case: dict[str, Any]) -> None:
    with pytest.raises(ResponseError) as caught:
        _encode(case, _nested(case))
    assert str(caught.value) == case["expected"]["message"]


@pytest.mark.parametrize("case", GOOD, ids=_name)
def test_decode_inverts_sglang(case: dict[str, Any]) -> None:
    expected = case["expected"]
    decoded = decode_flat_top_logprobs(expected, side=case["side"])
    assert decoded is not None
    assert list(decoded.shape) == expected[f"{case['side']}_top_logprobs_shape"]
    assert decoded.null_prefix == expected[f"{case['side']}_top_logprobs_null_prefix"]
    round_value = _float32 if case["b64"] else (lambda value: value)
    want = [
        [(round_value(v), i, None) for v, i, _ in row] if row else None for row in _nested(case)
    ]
    assert _same(decoded.to_nested(), want)
    # and SGLang's bytes come back from the decoded rows, bit for bit
    assert json.dumps(_encode(case, decoded.to_nested())) == json.dumps(expected)


@given(flat_nested_rows(b64=False))
def test_json_round_trip_is_exact(drawn: tuple[list[Any], int]) -> None:
    nested, num = drawn
    fields = encode_flat_top_logprobs(nested, side="output", top_logprobs_num=num)
    decoded = decode_flat_top_logprobs(fields, side="output")
    assert decoded is not None
    want = [[(v, i, None) for v, i, _ in row] if row else None for row in nested]
    assert _same(decoded.to_nested(), want)


@given(flat_nested_rows(b64=True))
def test_b64_round_trip_keeps_float32_values(drawn: tuple[list[Any], int]) -> None:
    nested, num = drawn
    fields = encode_flat_top_logprobs(nested, side="input", top_logprobs_num=num, b64=True)
    decoded = decode_flat_top_logprobs(fields, side="input")
    assert decoded is not None
    want = [[(v, i, None) for v, i, _ in row] if row else None for row in nested]
    assert _same(decoded.to_nested(), want)


@given(flat_nested_rows(b64=False))
def test_b64_rounds_each_value_to_float32(drawn: tuple[list[Any], int]) -> None:
    nested, num = drawn
    fields = encode_flat_top_logprobs(nested, side="input", top_logprobs_num=num, b64=True)
    decoded = decode_flat_top_logprobs(fields, side="input")
    assert decoded is not None
    want = [[(_float32(v), i, None) for v, i, _ in row] if row else None for row in nested]
    assert _same(decoded.to_nested(), want)


@given(flat_fields())
def test_decode_reads_fields_built_without_the_library(
    drawn: tuple[dict[str, Any], str, dict[str, Any]],
) -> None:
    meta_info, side, parts = drawn
    decoded = decode_flat_top_logprobs(meta_info, side=side)  # type: ignore[arg-type]
    assert decoded is not None
    null_prefix, rows, k = parts["null_prefix"], parts["rows"], parts["k"]
    assert (decoded.null_prefix, decoded.shape) == (null_prefix, (rows, k))
    assert _same(list(decoded.values), parts["values"])
    assert list(decoded.token_ids) == parts["token_ids"]
    nested = decoded.to_nested()
    assert len(nested) == null_prefix + rows
    assert nested[:null_prefix] == [None] * null_prefix
    for i, row in enumerate(nested[null_prefix:]):
        if k == 0:
            assert row is None
            continue
        assert row is not None and len(row) == k
        for j, entry in enumerate(row):
            flat = i * k + j
            assert _same(entry, [parts["values"][flat], parts["token_ids"][flat], None])


@given(flat_fields())
def test_encode_gives_back_decoded_fields(
    drawn: tuple[dict[str, Any], str, dict[str, Any]],
) -> None:
    meta_info, side, parts = drawn
    assume(parts["k"] > 0 or parts["rows"] == 0)  # SGLang never writes [rows, 0] rows
    decoded = decode_flat_top_logprobs(meta_info, side=side)  # type: ignore[arg-type]
    assert decoded is not None
    fields = encode_flat_top_logprobs(
        decoded.to_nested(),
        side=side,  # type: ignore[arg-type]
        top_logprobs_num=parts["k"],
        b64=parts["b64"],
    )
    assert _same(fields, {key: meta_info[key] for key in fields})


@given(hostile_flat_meta_infos())
def test_hostile_meta_info_raises_only_envelope_errors(drawn: tuple[Any, str]) -> None:
    meta_info, side = drawn
    try:
        decoded = decode_flat_top_logprobs(meta_info, side=side)  # type: ignore[arg-type]
    except EnvelopeError as error:
        assert str(error)
        return
    assert decoded is None or isinstance(decoded, FlatTopLogprobs)
    if decoded is not None:
        rows, k = decoded.shape
        assert len(decoded.values) == len(decoded.token_ids) == rows * k
        if decoded.null_prefix + rows > DEFAULT_MAX_NESTED_POSITIONS:  # refused before building
            with pytest.raises(LimitExceeded):
                decoded.to_nested()
        else:
            assert len(decoded.to_nested()) == decoded.null_prefix + rows


@given(hostile_flat_nested, flat_nested_rows())
def test_hostile_nested_raises_only_envelope_errors(junk: list[Any], valid: Any) -> None:
    for b64 in (False, True):
        try:
            fields = encode_flat_top_logprobs(junk, side="output", top_logprobs_num=2, b64=b64)
        except ResponseError as error:
            assert str(error)
            continue
        assert decode_flat_top_logprobs(fields, side="output") is not None
    nested, _ = valid
    assert encode_flat_top_logprobs(nested, side="output", top_logprobs_num=1)


# --- decode: one rule each ---

ROWS = [None, [[-0.5, 7, None], [-1.5, 9, None]], [[-0.25, 3, None], [-2.0, 4, None]]]


def _fields(b64: bool, side: str = "output") -> dict[str, object]:
    return encode_flat_top_logprobs(ROWS, side=side, top_logprobs_num=2, b64=b64)  # type: ignore[arg-type]


def test_no_flat_fields_for_the_side_gives_none() -> None:
    assert decode_flat_top_logprobs({"id": "x"}, side="output") is None
    assert decode_flat_top_logprobs(_fields(True, side="input"), side="output") is None
    assert decode_flat_top_logprobs(_fields(True, side="input"), side="input") is not None


@pytest.mark.parametrize("b64", [False, True])
def test_a_missing_companion_key_is_named(b64: bool) -> None:
    for key in _fields(b64):
        damaged = {k: v for k, v in _fields(b64).items() if k != key}
        with pytest.raises(ResponseError, match=key):
            decode_flat_top_logprobs(damaged, side="output")


def test_both_forms_at_once_are_rejected() -> None:
    both = {**_fields(True), "output_top_logprobs_val_flat": [-0.5]}
    with pytest.raises(ResponseError, match="both present"):
        decode_flat_top_logprobs(both, side="output")


@pytest.mark.parametrize(
    ("key", "marker"),
    [
        ("output_top_logprobs_val_flat_b64_dtype", "float64"),
        ("output_top_logprobs_val_flat_b64_dtype", "bfloat16"),
        ("output_top_logprobs_idx_flat_b64_dtype", "int64"),
        ("output_top_logprobs_idx_flat_b64_dtype", None),
    ],
)
def test_an_unknown_dtype_marker_is_named(key: str, marker: object) -> None:
    with pytest.raises(ResponseError, match=key):
        decode_flat_top_logprobs({**_fields(True), key: marker}, side="output")


@pytest.mark.parametrize(
    "shape", [[2], [2, 2, 2], [True, 2], [2.0, 2], [-1, 2], [2, math.nan], "2,2", None, {}]
)
def test_a_bad_shape_is_named(shape: object) -> None:
    for b64 in (False, True):
        with pytest.raises(ResponseError, match="output_top_logprobs_shape"):
            decode_flat_top_logprobs(
                {**_fields(b64), "output_top_logprobs_shape": shape}, side="output"
            )


@pytest.mark.parametrize(
    "null_prefix", [-1, True, 1.0, None, "1", pytest.param(10**5000, id="10**5000")]
)
def test_a_bad_null_prefix_is_named(null_prefix: object) -> None:
    with pytest.raises(ResponseError, match="output_top_logprobs_null_prefix"):
        decode_flat_top_logprobs(
            {**_fields(True), "output_top_logprobs_null_prefix": null_prefix}, side="output"
        )


@pytest.mark.parametrize("shape", [[3, 2], [2, 3], [1, 2], [0, 2], [2, 2**62], [1, 3]])
def test_arrays_that_disagree_with_the_shape_are_rejected(shape: list[int]) -> None:
    for b64, key in ((False, "output_top_logprobs_val_flat"), (True, "val_flat_b64")):
        with pytest.raises(ResponseError, match=key):
            decode_flat_top_logprobs(
                {**_fields(b64), "output_top_logprobs_shape": shape}, side="output"
            )


def test_base64_length_is_checked_before_decoding() -> None:
    # 10**6 characters of garbage: refused for their length, never decoded
    fields = {**_fields(True), "output_top_logprobs_val_flat_b64": "!" * 10**6}
    with pytest.raises(ResponseError, match=r"must be 24 Base64 characters .* got 1000000"):
        decode_flat_top_logprobs(fields, side="output")


@pytest.mark.parametrize(
    "text",
    [
        "!" + "A" * 23,  # outside the alphabet
        "é" + "A" * 23,  # not even ASCII
        "A" * 10 + "=" + "A" * 13,  # padding in the middle
        "=" + "A" * 23,
    ],
)
def test_invalid_base64_is_named(text: str) -> None:
    fields = {**_fields(True), "output_top_logprobs_idx_flat_b64": text}
    with pytest.raises(ResponseError, match="output_top_logprobs_idx_flat_b64 is not valid Base64"):
        decode_flat_top_logprobs(fields, side="output")


def test_base64_of_the_wrong_byte_count_is_rejected() -> None:
    # 8 characters are right for 4 bytes, but unpadded they carry 6
    fields = {
        **encode_flat_top_logprobs(
            [[[-1.0, 1, None]]], side="output", top_logprobs_num=1, b64=True
        ),
        "output_top_logprobs_val_flat_b64": "AAAAAAAA",
    }
    with pytest.raises(ResponseError, match="decodes to 6 bytes, expected 4"):
        decode_flat_top_logprobs(fields, side="output")


@pytest.mark.parametrize(
    ("key", "items"),
    [
        ("output_top_logprobs_val_flat", [-0.5, "x", -0.25, -2.0]),
        ("output_top_logprobs_val_flat", [-0.5, True, -0.25, -2.0]),
        ("output_top_logprobs_idx_flat", [7, 9.0, 3, 4]),
        ("output_top_logprobs_idx_flat", [7, None, 3, 4]),
        ("output_top_logprobs_idx_flat", "7934"),
    ],
)
def test_json_items_of_the_wrong_type_are_named(key: str, items: object) -> None:
    with pytest.raises(ResponseError, match=key):
        decode_flat_top_logprobs({**_fields(False), key: items}, side="output")


def test_a_json_null_logprob_reads_as_nan() -> None:
    # orjson, which SGLang's server uses, writes NaN and ±Infinity as null
    fields = {**_fields(False), "output_top_logprobs_val_flat": [None, -1.5, -0.25, None]}
    decoded = decode_flat_top_logprobs(fields, side="output")
    assert decoded is not None
    assert math.isnan(decoded.values[0]) and math.isnan(decoded.values[3])
    assert decoded.values[1:3] == (-1.5, -0.25)


@pytest.mark.parametrize(
    ("shape", "null_prefix"), [([1, 2], 2**24), ([2**40, 0], 0), ([0, 2], 2**24 + 1)]
)
def test_too_many_positions_hit_the_limit(shape: list[int], null_prefix: int) -> None:
    fields = {
        "output_top_logprobs_val_flat": [-0.5] * (shape[0] * shape[1]),
        "output_top_logprobs_idx_flat": [1] * (shape[0] * shape[1]),
        "output_top_logprobs_shape": shape,
        "output_top_logprobs_null_prefix": null_prefix,
    }
    with pytest.raises(LimitExceeded) as caught:
        decode_flat_top_logprobs(fields, side="output")
    assert (caught.value.bound, caught.value.limit) == ("max_positions", 2**24)


@pytest.mark.parametrize("meta_info", [None, [], "meta", 3])
def test_meta_info_must_be_an_object(meta_info: object) -> None:
    with pytest.raises(ResponseError, match="meta_info must be a JSON object"):
        decode_flat_top_logprobs(meta_info, side="output")  # type: ignore[arg-type]


def test_a_bad_side_is_the_callers_mistake() -> None:
    with pytest.raises(EnvelopeError) as caught:
        decode_flat_top_logprobs(_fields(True), side="prompt")  # type: ignore[arg-type]
    assert type(caught.value) is EnvelopeError
    with pytest.raises(EnvelopeError) as caught:
        encode_flat_top_logprobs(ROWS, side="both", top_logprobs_num=2)  # type: ignore[arg-type]
    assert type(caught.value) is EnvelopeError


def test_base64_arrays_are_zero_copy_views() -> None:
    decoded = decode_flat_top_logprobs(_fields(True), side="output")
    assert decoded is not None
    for view, fmt in ((decoded.values, "f"), (decoded.token_ids, "i")):
        assert isinstance(view, memoryview)
        assert (view.format, view.itemsize, view.readonly, len(view)) == (fmt, 4, True, 4)
    assert (decoded.values[-1], decoded.token_ids[-1]) == (-2.0, 4)


def test_a_rows_by_zero_shape_gives_null_rows() -> None:
    fields = {
        "input_top_logprobs_val_flat": [],
        "input_top_logprobs_idx_flat": [],
        "input_top_logprobs_shape": [3, 0],
        "input_top_logprobs_null_prefix": 1,
    }
    decoded = decode_flat_top_logprobs(fields, side="input")
    assert decoded is not None
    assert decoded.to_nested() == [None, None, None, None]


def test_decoded_logprobs_are_immutable_and_unhashable() -> None:
    decoded = decode_flat_top_logprobs(_fields(True), side="output")
    assert decoded is not None
    with pytest.raises(AttributeError):
        decoded.null_prefix = 0  # type: ignore[misc]
    with pytest.raises(TypeError):
        hash(decoded)
    assert repr(decoded) == "FlatTopLogprobs(null_prefix=1, shape=(2, 2))"


def test_big_endian_hosts_byteswap(monkeypatch: pytest.MonkeyPatch) -> None:
    # On a "big-endian" host the native bytes are the wire bytes reversed per item.
    little = _fields(True)
    monkeypatch.setattr(_flat, "_SWAP", True)
    swapped = _fields(True)

    def items(fields: dict[str, object], key: str) -> list[bytes]:
        raw = base64.b64decode(str(fields[key]))
        return [raw[i : i + 4] for i in range(0, len(raw), 4)]

    for key in ("output_top_logprobs_val_flat_b64", "output_top_logprobs_idx_flat_b64"):
        assert items(swapped, key) == [item[::-1] for item in items(little, key)]
    decoded = decode_flat_top_logprobs(swapped, side="output")
    assert decoded is not None
    assert decoded.to_nested() == [None, *[[tuple(entry) for entry in row] for row in ROWS[1:]]]  # type: ignore[union-attr]


# --- encode: one rule each ---


def test_encode_takes_sglangs_tuples_and_ignores_text() -> None:
    as_tuples: list[Any] = [
        None,
        [(-0.5, 7, "a"), (-1.5, 9, None)],
        ((-0.25, 3, "b"), (-2.0, 4, "c")),
    ]
    for b64 in (False, True):
        assert _fields(b64) == encode_flat_top_logprobs(
            as_tuples, side="output", top_logprobs_num=2, b64=b64
        )


@pytest.mark.parametrize(
    ("nested", "where"),
    [
        ([[[-0.5, 7]]], r"nested\[0\]\[0\] must be \[logprob, token_id, text\]"),
        ([[[-0.5, 7, None]], ["abc"]], r"nested\[1\]\[0\] must be \[logprob"),
        ([None, [[True, 7, None]]], r"nested\[1\]\[0\] must be a float logprob"),
        ([[[-0.5, 7, None], [-0.5, "7", None]]], r"nested\[0\]\[1\] must be an int token id"),
        ([[[-0.5, 7.0, None]]], r"nested\[0\]\[0\] must be an int token id"),
        ([[[-0.5, False, None]]], r"nested\[0\]\[0\] must be an int token id"),
        ([None, "row"], r"nested\[1\] must be a list of entries or None"),
        ({"rows": 1}, "nested must be a list of rows"),
    ],
)
def test_malformed_rows_are_named(nested: Any, where: str) -> None:
    for b64 in (False, True):
        with pytest.raises(ResponseError, match=where):
            encode_flat_top_logprobs(nested, side="output", top_logprobs_num=1, b64=b64)


@pytest.mark.parametrize("token_id", [2**31, -(2**31) - 1, 2**64])
def test_b64_needs_int32_token_ids_json_copies_them(token_id: int) -> None:
    nested = [[[-0.5, 1, None], [-0.75, token_id, None]]]
    with pytest.raises(ResponseError, match=r"nested\[0\]\[1\] must be an int32 token id"):
        encode_flat_top_logprobs(nested, side="output", top_logprobs_num=2, b64=True)
    fields = encode_flat_top_logprobs(nested, side="output", top_logprobs_num=2)
    assert fields["output_top_logprobs_idx_flat"] == [1, token_id]


def test_b64_rejects_an_int_logprob_beyond_float64() -> None:
    nested: list[Any] = [[[-0.5, 1, None]], [[10**400, 2, None]]]
    with pytest.raises(ResponseError, match=r"nested\[1\]\[0\] must be a logprob within float64"):
        encode_flat_top_logprobs(nested, side="output", top_logprobs_num=1, b64=True)


@pytest.mark.parametrize("num", [-1, True, 2.0, None])
def test_a_bad_top_logprobs_num_is_the_callers_mistake(num: object) -> None:
    with pytest.raises(EnvelopeError, match="top_logprobs_num") as caught:
        encode_flat_top_logprobs(ROWS, side="output", top_logprobs_num=num)  # type: ignore[arg-type]
    assert type(caught.value) is EnvelopeError


def test_byteswapping_follows_the_hosts_byte_order() -> None:
    assert _flat._SWAP is (sys.byteorder == "big")


# --- what to_nested() may build -------------------------------------------------

#: 146 bytes that ask for 16,777,215 positions: counted, not stored.
TINY_HUGE = {
    "output_top_logprobs_val_flat": [],
    "output_top_logprobs_idx_flat": [],
    "output_top_logprobs_shape": [0, 5],
    "output_top_logprobs_null_prefix": 16_777_215,
}


def test_to_nested_refuses_more_positions_than_its_bound_before_building() -> None:
    flat = decode_flat_top_logprobs(TINY_HUGE, side="output")
    assert flat is not None
    with pytest.raises(LimitExceeded) as raised:
        flat.to_nested()
    assert (raised.value.bound, raised.value.limit) == (
        "max_nested_positions",
        _flat.DEFAULT_MAX_NESTED_POSITIONS,
    )
    assert "16777215 positions" in str(raised.value)


@pytest.mark.parametrize(("null_prefix", "rows", "k"), [(3, 2, 1), (0, 5, 0), (5, 0, 4)])
def test_to_nested_builds_up_to_its_bound(null_prefix: int, rows: int, k: int) -> None:
    flat = FlatTopLogprobs(null_prefix, (rows, k), (-0.5,) * (rows * k), (7,) * (rows * k))
    assert len(flat.to_nested(max_positions=null_prefix + rows)) == null_prefix + rows
    with pytest.raises(LimitExceeded, match="the limit is"):
        flat.to_nested(max_positions=null_prefix + rows - 1)


@pytest.mark.parametrize("bound", [-1, 1.5, None, True, "10"])
def test_a_bad_bound_is_the_callers_mistake(bound: Any) -> None:
    flat = FlatTopLogprobs(0, (0, 0), (), ())
    with pytest.raises(EnvelopeError, match="max_positions must be an integer >= 0") as raised:
        flat.to_nested(max_positions=bound)
    assert type(raised.value) is EnvelopeError


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ((-1, (0, 0), (), ()), "null_prefix must be an integer >= 0, got -1"),
        (("1", (0, 0), (), ()), "null_prefix must be an integer >= 0"),
        ((0, [1, 1], (0.0,), (1,)), r"shape must be a tuple \(rows, k\)"),
        ((0, (1,), (), ()), r"shape must be a tuple \(rows, k\)"),
        ((0, (1, -1), (), ()), r"shape must be a tuple \(rows, k\)"),
        ((0, (1, True), (0.0,), (1,)), r"shape must be a tuple \(rows, k\)"),
        ((0, (2, 1), (0.0,), (1, 2)), r"values must be a sequence of rows \* k = 2 items, got 1"),
        ((0, (1, 1), (0.0,), 3), r"token_ids must be a sequence of rows \* k = 1 items, got 3"),
        ((0, (1, 1), None, (1,)), "values must be a sequence"),
        ((0, (1, 1), (0.0,), "7"), "token_ids must be a sequence"),
        ((0, (1, 1), (0.0,), b"7"), "token_ids must be a sequence"),
    ],
)
def test_a_flat_built_by_hand_is_checked(fields: tuple[Any, ...], message: str) -> None:
    with pytest.raises(EnvelopeError, match=message):
        FlatTopLogprobs(*fields)


def test_the_cli_does_not_print_a_huge_list_for_a_tiny_input(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    from sglang_envelope.cli.main import EXIT_BAD_INPUT, main

    path = tmp_path / "tiny.json"
    path.write_bytes(json.dumps(TINY_HUGE, separators=(",", ":")).encode())  # bare meta_info
    assert path.stat().st_size == 146
    assert main(["flat", str(path)]) == EXIT_BAD_INPUT
    out = capsysbinary.readouterr().out
    assert len(out) < 1000
    error = json.loads(out)["error"]
    assert error["type"] == "limit_exceeded" and error["bound"] == "max_nested_positions"
    path.write_bytes(json.dumps({**TINY_HUGE, "output_top_logprobs_null_prefix": 5000}).encode())
    assert main(["flat", str(path), "--max-positions", "4999"]) == EXIT_BAD_INPUT
    assert json.loads(capsysbinary.readouterr().out)["error"]["limit"] == 4999
    assert main(["flat", str(path), "--max-positions", "5000"]) == 0
    assert json.loads(capsysbinary.readouterr().out) == {"output_top_logprobs": [None] * 5000}


def test_the_cli_bound_must_be_a_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sglang_envelope.cli.main import main

    with pytest.raises(SystemExit) as raised:
        main(["flat", str(tmp_path / "x.json"), "--max-positions", "-1"])
    assert raised.value.code == 2
    assert "expected an integer >= 0, got '-1'" in capsys.readouterr().err
