"""`continuation_request`: what is left of an aborted or length-stopped generation."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from msgspec import UNSET

from sglang_envelope import (
    ClientRequest,
    EnvelopeError,
    RequestRejected,
    SamplingParams,
    Target,
    decode_client_request,
)
from sglang_envelope.rollout import continuation_request
from tests.strategies import continuable

ABORTED = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}


def answer(ids: list[Any], finish: Any = ABORTED, **meta: Any) -> dict[str, Any]:
    return {
        "text": "",
        "output_ids": ids,
        "meta_info": {"finish_reason": finish, "completion_tokens": len(ids), **meta},
    }


def request(body: dict[str, Any], **kwargs: Any) -> ClientRequest:
    return decode_client_request({"input_ids": [1, 2, 3], **body}, **kwargs)


def test_the_ids_are_appended_and_the_budget_lowered() -> None:
    first = request(
        {
            "sampling_params": {"max_new_tokens": 10, "temperature": 0, "min_new_tokens": 4},
            "return_logprob": True,
            "top_logprobs_num": 2,
            "stream": True,
            "rid": "r-1",
        }
    )
    then = continuation_request(answer([7, 8, 9]), first)
    assert then.input_ids == (1, 2, 3, 7, 8, 9)
    assert then.sampling_params is not None and then.sampling_params is not UNSET
    assert then.sampling_params.max_new_tokens == 7
    assert then.sampling_params.min_new_tokens == 1
    assert then.sampling_params.temperature == 0
    assert (then.return_logprob, then.top_logprobs_num, then.stream, then.rid) == (
        True,
        2,
        True,
        "r-1",
    )


@given(continuable())
def test_a_continuation_is_the_request_with_what_is_left(
    case: tuple[ClientRequest, dict[str, Any]],
) -> None:
    first, response = case
    made = response["output_ids"]
    then = continuation_request(response, first)
    assert first.input_ids is not None
    assert then.input_ids == (*first.input_ids, *made)
    params, before = then.sampling_params, first.sampling_params
    assert isinstance(params, SamplingParams) and isinstance(before, SamplingParams)
    assert params.max_new_tokens == before.max_new_tokens - len(made)  # type: ignore[operator]
    if isinstance(before.min_new_tokens, int):
        assert params.min_new_tokens == max(0, before.min_new_tokens - len(made))
    unchanged = ("max_new_tokens", "min_new_tokens")
    assert msgspec.structs.replace(params, **{k: getattr(before, k) for k in unchanged}) == before
    assert msgspec.structs.replace(then, input_ids=first.input_ids, sampling_params=before) == first
    # and it is a checked request: decoding its JSON gives it back
    assert decode_client_request(msgspec.json.encode(then)) == then


def test_an_unset_budget_counts_as_sglangs_default() -> None:
    then = continuation_request(answer([5] * 100), request({}))
    assert then.sampling_params.max_new_tokens == 28  # type: ignore[union-attr]
    then = continuation_request(answer([5] * 10), request({}), default_max_new_tokens=16)
    assert then.sampling_params.max_new_tokens == 6  # type: ignore[union-attr]


def test_a_null_budget_stays_null() -> None:
    then = continuation_request(
        answer([5] * 10), request({"sampling_params": {"max_new_tokens": None}})
    )
    assert then.sampling_params.max_new_tokens is None  # type: ignore[union-attr]


def test_an_abort_before_any_output_continues_as_it_was() -> None:
    first = request({"sampling_params": {"max_new_tokens": 5}})
    assert continuation_request(answer([], {"type": "abort", "message": "x"}), first) == first


def test_a_length_stopped_answer_continues() -> None:
    first = request({"sampling_params": {"max_new_tokens": 8}})
    then = continuation_request(answer([4, 4], {"type": "length", "length": 2}), first)
    assert then.sampling_params.max_new_tokens == 6  # type: ignore[union-attr]


def test_the_target_and_its_rules_are_kept() -> None:
    old = Target(sglang="0.5.21")
    first = request({"sampling_params": {"max_new_tokens": 3}}, target=old)
    then = continuation_request(answer([9]), first)
    assert then.target == old
    with pytest.raises(RequestRejected) as caught:
        continuation_request(answer([2**32]), first)
    assert caught.value.field == "input_ids[3]"


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (answer([1], {"type": "stop", "matched": 1}), r"^meta_info\.finish_reason\.type: 'stop'"),
        (answer([1], None), r"^meta_info\.finish_reason: expected SGLang's finish reason"),
        (answer([1], {"type": 1}), r"^meta_info\.finish_reason: expected"),
        (
            answer([1], {"type": "abort", "status_code": 400}),
            r"^meta_info\.finish_reason\.status_code: 400",
        ),
        ({"output_ids": [1]}, r"^meta_info: expected an object"),
        ({"meta_info": {"finish_reason": ABORTED}}, r"^output_ids: expected the list"),
        (answer(["1"]), r"^output_ids\[0\]: expected an int, got '1'"),
        (answer([True]), r"^output_ids\[0\]: expected an int, got True"),
        (
            {
                "output_ids": [1, 2, 2],
                "meta_info": {"finish_reason": ABORTED, "completion_tokens": 2},
            },
            r"^output_ids: 3 ids, but meta_info\.completion_tokens is 2",
        ),
        (
            answer([1] * 10),
            r"^sampling_params\.max_new_tokens: 10 tokens were asked for and 10 made",
        ),
        ([answer([1])], r"^response: expected one response object .* got list"),
    ],
)
def test_what_cannot_be_continued_is_refused_naming_the_field(response: Any, message: str) -> None:
    with pytest.raises(EnvelopeError, match=message):
        continuation_request(response, request({"sampling_params": {"max_new_tokens": 10}}))


@pytest.mark.parametrize(
    ("name", "value"),
    [("json_schema", "{}"), ("regex", "a+"), ("ebnf", "root ::= 'a'"), ("structural_tag", "{}")],
)
def test_a_constrained_generation_is_refused(name: str, value: str) -> None:
    first = request({"sampling_params": {"max_new_tokens": 10, name: value}})
    with pytest.raises(EnvelopeError, match=rf"^sampling_params\.{name}: a constrained generation"):
        continuation_request(answer([1]), first)


def test_arguments_of_the_wrong_type_are_refused() -> None:
    with pytest.raises(EnvelopeError, match=r"^request must be a ClientRequest, got dict"):
        continuation_request(answer([1]), {"input_ids": [1]})  # type: ignore[arg-type]
    with pytest.raises(EnvelopeError, match=r"^default_max_new_tokens must be an int >= 0"):
        continuation_request(answer([1]), request({}), default_max_new_tokens=-1)


def test_one_sample_of_n_continues_alone_under_its_own_rid() -> None:
    many = request({"input_ids": [1], "rid": "job", "sampling_params": {"n": 4, "temperature": 1}})
    part = answer([7, 8], id="job_2")
    rest = continuation_request(part, many)
    assert rest.rid == "job_2" and rest.input_ids == (1, 7, 8)
    assert rest.sampling_params is not UNSET and rest.sampling_params is not None
    assert (rest.sampling_params.n, rest.sampling_params.temperature) == (UNSET, 1)
    assert continuation_request(answer([7]), many).rid is None  # no id: one is assigned
    one = request({"input_ids": [1], "rid": "solo"})
    assert continuation_request(answer([7], id="other"), one).rid == "solo"
