"""The request side's costs and verdicts are bounded by the body, whatever form it takes."""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Iterator, Mapping
from enum import IntEnum
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import RequestRejected, decode_client_request
from sglang_envelope.request.body import mapping_json
from tests.strategies import client_requests, json_values


def _peak_over_body(body: bytes) -> float:
    """The most memory refusing `body` held at once, as a multiple of its size."""
    tracemalloc.start()
    try:
        with pytest.raises(RequestRejected) as caught:
            decode_client_request(body, max_body_bytes=len(body))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.code == "unknown_field"
    return peak / len(body)


def test_a_long_unknown_key_costs_a_few_times_its_size() -> None:
    # (Counted by tracemalloc, not timed: "did you mean" over the whole key held 38x.)
    key = b"a" * (1 << 20)
    assert _peak_over_body(b'{"input_ids": [1], "' + key + b'": 1}') < 6


@pytest.mark.parametrize(
    ("key", "near"),
    [
        ("temperature", "sampling_params.temperature"),
        ("input_idz", "input_ids"),
        ("return_flat_raw_output_top_logprobs" + "x" * 46, "return_flat_raw_output_top_logprobs"),
        ("return_flat_raw_output_top_logprobs" + "x" * 47, None),  # too long to match any
    ],
)
def test_did_you_mean_still_finds_a_near_field(key: str, near: str | None) -> None:
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({"input_ids": [1], key: 1})
    message = caught.value.message
    assert message.endswith(f"; did you mean `{near}`?" if near else "has no such field")


def _verdict(body: Any, limit: int) -> str:
    try:
        decode_client_request(body, max_body_bytes=limit)
    except RequestRejected as rejected:
        return rejected.code
    return "accepted"


def _same_verdicts(body: dict[str, Any]) -> None:
    size = len(msgspec.json.encode(body))
    for limit in (size - 1, size, size + 1):
        assert _verdict(body, limit) == _verdict(msgspec.json.encode(body), limit), limit


@pytest.mark.parametrize(
    "body",
    [
        {"input_ids": [1]},
        {"input_ids": [1, 2, 3], "sampling_params": {"temperature": 1e-05, "stop": ["a", "b"]}},
        {
            "input_ids": [1],
            "sampling_params": {"custom_params": {"a": [[], {}, [1, [2]]], "c": 1e22}},
        },
        {"input_ids": [1], "rid": "é\u2028\x01", "sampling_params": {"logit_bias": {"5": -1.5}}},
    ],
)
def test_a_mapping_and_its_compact_json_get_one_verdict_at_the_bound(body: dict[str, Any]) -> None:
    _same_verdicts(body)


@given(client_requests(), json_values)
def test_any_mapping_and_its_compact_json_get_one_verdict(body: dict[str, Any], extra: Any) -> None:
    _same_verdicts(body)
    sampling = {**body.get("sampling_params", {}), "custom_params": {"x": extra}}
    _same_verdicts({**body, "sampling_params": sampling})


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {"input_ids": [1], "sampling_params": {"custom_params": {1: "a", "1": "b", 2.0: 0}}},
            "sampling_params.custom_params",
        ),
        ({"input_ids": [1], 5: 3}, "body"),
        ({"input_ids": [1], "session_params": {"a": [0, {None: 1}]}}, "session_params.a[1]"),
        (
            {"input_ids": [1], "sampling_params": {"logit_bias": {5: 1.0}}},
            "sampling_params.logit_bias",
        ),
        ({"input_ids": [1], "session_params": {"a": {1.5: 1}}}, "session_params.a"),
        ({"input_ids": [1], "session_params": {"a": {b"x": 1}}}, "session_params.a"),
    ],
)
def test_a_mapping_key_that_is_not_a_string_is_refused(body: dict[Any, Any], field: str) -> None:
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(body)
    assert caught.value.code == "invalid_value"
    assert caught.value.field == field
    assert "keys must be strings" in caught.value.message


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (float("nan"), "session_params.a"),
        ([1.0, float("inf")], "session_params.a[1]"),
        ({"b": [0, -float("inf")]}, "session_params.a.b[1]"),
        (b"bytes", "session_params.a"),
        ({1, 2}, "session_params.a"),
        ([object()], "session_params.a[0]"),
    ],
)
def test_a_mapping_value_json_cannot_carry_is_refused(value: Any, field: str) -> None:
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({"input_ids": [1], "session_params": {"a": value}})
    assert caught.value.code == "invalid_value"
    assert caught.value.field == field


def test_a_mapping_holding_itself_is_refused_as_endless() -> None:
    body: dict[str, Any] = {"input_ids": [1], "session_params": {}}
    body["session_params"]["self"] = body
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(body)
    assert caught.value.code == "body_too_large"


@given(st.lists(st.integers(0, 2**31), min_size=1, max_size=50), st.integers(0, 3))
def test_a_list_of_ids_at_the_bound_is_accepted(ids: list[int], nested: int) -> None:
    body: dict[str, Any] = {"input_ids": ids, "session_params": {"a": [[]] * nested}}
    assert _verdict(body, len(msgspec.json.encode(body))) == "accepted"


def test_a_mapping_nested_too_deep_for_json_is_refused_before_it_is_walked() -> None:
    from sglang_envelope.request.body import DEEPEST

    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({"input_ids": [1], "custom_params": {"a": deep}})
    assert caught.value.code == "not_json"
    assert f"nested deeper than {DEEPEST} levels" in caught.value.message
    shallow: list[object] = []
    for _ in range(DEEPEST - 3):
        shallow = [shallow]
    with pytest.raises(RequestRejected) as caught:  # within reach of JSON: the depth bound
        decode_client_request({"input_ids": [1], "custom_params": {"a": shallow}})
    assert "deeper than" not in caught.value.message


class _Color(IntEnum):
    RED = 1


class _Tag(str):
    """A str of the caller's own type: JSON carries it as the text it is."""


class _Frozen(Mapping[str, Any]):
    """A mapping that is not a dict."""

    def __init__(self, items: dict[str, Any]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=4),
    st.floats(), st.sampled_from([math.nan, math.inf]), st.binary(max_size=2),
    st.just(_Color.RED), st.just({1, 2}), st.just(object()),
)  # fmt: skip
_KEYS = st.one_of(st.text(max_size=3), st.integers(0, 2), st.just(b"k"), st.just(1.5))
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_KEYS, inner, max_size=3),
        st.dictionaries(st.text(max_size=3), inner, max_size=3).map(_Frozen),
    ),
    max_leaves=12,
)


def _carried(value: Any) -> bool:
    """Whether JSON carries `value` as it is, each part told plainly."""
    if isinstance(value, Mapping):  # msgspec writes a dict, not another mapping
        return isinstance(value, dict) and all(
            isinstance(key, str) and _carried(item) for key, item in value.items()
        )
    if isinstance(value, (list, tuple)):
        return all(_carried(item) for item in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (str, int, type(None)))


@given(_VALUES)
def test_a_mapping_is_taken_exactly_when_json_carries_all_of_it(value: Any) -> None:
    body = {"session_params": {"a": value}}
    try:
        data = mapping_json(body, 2**20)
    except RequestRejected as refusal:
        assert not _carried(value), refusal
        assert refusal.code in ("invalid_value", "not_json")
    else:
        assert _carried(value)
        assert data == msgspec.json.encode(body)


def test_a_subclass_is_taken_only_where_json_writes_it() -> None:
    """An enum of ints is written as its number; msgspec writes no subclass of str."""
    body = {"session_params": {"color": _Color.RED}}
    assert mapping_json(body, 2**20) == b'{"session_params":{"color":1}}'
    with pytest.raises(RequestRejected, match="type _Tag is unsupported") as caught:
        mapping_json({"session_params": {"tag": _Tag("x")}}, 2**20)
    assert caught.value.code == "not_json"
