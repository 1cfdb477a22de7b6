"""A rule's `holds` shortcut is true only when its check finds nothing to refuse."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_envelope import RequestRejected, decode_client_request
from sglang_envelope.request.contract import shortcut_test
from sglang_envelope.request.rules import RULES, Holds, Rule
from sglang_envelope.request.types import RequestFields, SamplingParams
from tests.strategies import rule_flags, rule_numbers, token_ids

SHORTCUT_RULES = [rule for rule in RULES if rule.holds is not None]
SAMPLING_NUMBERS = (
    "temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty",
    "repetition_penalty", "max_new_tokens",
)  # fmt: skip


def _holds(rule: Rule, value: Any) -> bool:
    """The shortcut as the compiled check spells it, run on `value`."""
    assert rule.holds is not None
    return bool(eval(shortcut_test(rule.holds, "v"), {}, {"v": value}))  # the library's text


def test_a_shortcut_reads_only_fields_of_the_struct_it_tests() -> None:
    for rule in SHORTCUT_RULES:
        assert rule.holds is not None
        struct = (
            SamplingParams if (rule.field or "").startswith("sampling_params") else RequestFields
        )
        assert set(rule.holds.fields) <= set(struct.__struct_fields__), rule.code


def test_a_shortcut_is_spelled_from_its_data() -> None:
    assert shortcut_test(Holds("false", ("stream",)), "r") == "not r.stream"
    assert shortcut_test(Holds("any_true", ("a", "b")), "r") == "r.a or r.b"
    assert shortcut_test(Holds("nonempty", ("input_ids",)), "r") == "r.input_ids != ()"
    test = shortcut_test(Holds("in_range", ("top_p",), 0, 1, open_low=True), "p")
    assert test == "p.top_p is None or 0.0 < p.top_p <= 1.0"
    assert shortcut_test(Holds("at_least", ("n",), 0), "p") == "p.n is None or p.n >= 0.0"


def test_the_range_and_flat_rules_have_shortcuts() -> None:
    codes = {rule.code for rule in SHORTCUT_RULES}
    assert {"temperature_out_of_range", "top_p_out_of_range", "empty_input_ids"} <= codes
    assert {"output_flat_with_stream", "b64_without_flat"} <= codes


@settings(max_examples=400)
@given(st.sampled_from(SAMPLING_NUMBERS), rule_numbers)
def test_a_sampling_shortcut_never_lets_a_broken_value_through(name: str, value: Any) -> None:
    params = SamplingParams(**{name: value})
    for rule in SHORTCUT_RULES:
        if rule.when != name:
            continue
        assert rule.check is not None
        try:
            holds = _holds(rule, params)
        except TypeError:  # an awkward value the shortcut cannot compare: the check decides
            continue
        if holds:
            assert rule.check(params) is None, (rule.code, value)


@settings(max_examples=300)
@given(st.booleans(), st.booleans(), st.booleans(), rule_flags, token_ids | st.just([]))
def test_a_request_shortcut_never_lets_a_broken_request_through(
    flat: bool, output_flat: bool, b64: bool, stream: bool | None, ids: list[int]
) -> None:
    request = RequestFields(
        input_ids=tuple(ids),
        return_flat_raw_top_logprobs=flat,
        return_flat_raw_output_top_logprobs=output_flat,
        return_flat_raw_top_logprobs_b64=b64,
        stream=stream,
    )
    for rule in SHORTCUT_RULES:
        if rule.field is not None and rule.field.startswith("sampling_params"):
            continue
        assert rule.check is not None
        if _holds(rule, request):
            assert rule.check(request) is None, rule.code


def test_the_compiled_checks_still_refuse_what_the_shortcuts_skip() -> None:
    cases = [
        ({"input_ids": [1], "sampling_params": {"top_p": 0}}, "top_p_out_of_range"),
        ({"input_ids": [1], "sampling_params": {"temperature": -0.5}}, "temperature_out_of_range"),
        ({"input_ids": [1], "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens_negative"),
        ({"input_ids": []}, "empty_input_ids"),
        (
            {"input_ids": [1], "stream": True, "return_flat_raw_output_top_logprobs": True},
            "output_flat_with_stream",
        ),
    ]
    for body, code in cases:
        with pytest.raises(RequestRejected) as refused:
            decode_client_request(msgspec.json.encode(body))
        assert refused.value.code == code, body
