"""finalize_response: the client's rid, and a note for prompt logprobs decode cannot have."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    Bootstrap,
    EngineRequest,
    EnvelopeError,
    ResponseError,
    Role,
    build_engine_request,
    decode_client_request,
    finalize_response,
    to_worker_envelope,
)
from sglang_envelope.pair import merge_prefill
from sglang_envelope.request.envelope import is_utf8
from sglang_envelope.response.merge import PROMPT_LOGPROB_GROUPS, UNAVAILABLE_MARKER
from tests.strategies import (
    DEPLOYMENT,
    HOSTILE_KINDS,
    final_responses,
    hostile_objects,
    near_final_responses,
)

BOOT = Bootstrap("10.0.0.7", 8998, 7)
PROMPT_KEYS = sorted(key for data, described in PROMPT_LOGPROB_GROUPS for key in data + described)
ENTRIES = [[None, 1, None], [-0.5, 2, None]]


def engine(role: Role, **body: Any) -> EngineRequest:
    request = decode_client_request({"input_ids": [1, 2], **body})
    envelope = to_worker_envelope(request, rid="worker-7")
    bootstrap = None if role is Role.AGGREGATED else BOOT
    return build_engine_request(
        envelope, deployment=DEPLOYMENT, input_ids=request.input_ids, role=role, bootstrap=bootstrap
    )


PROMPT_LOGPROBS = {"return_logprob": True, "logprob_start_len": 0}


def decode_answer(**meta: Any) -> dict[str, Any]:
    """What SGLang's decode worker answers when logprobs were asked: prompt side empty."""
    return {
        "text": "hi",
        "output_ids": [5],
        "meta_info": {
            "id": "worker-7",
            "finish_reason": {"type": "length", "length": 1},
            "input_token_logprobs": [],
            "output_token_logprobs": [[-1.0, 5, None]],
            **meta,
        },
    }


def test_the_id_becomes_the_client_s_rid_in_place() -> None:
    answer = decode_answer()
    before = copy.deepcopy(answer)
    final = finalize_response(answer, engine=engine(Role.AGGREGATED), client_rid="client-1")
    assert answer == before
    assert list(final["meta_info"]) == list(answer["meta_info"])  # same keys, same order
    assert final["meta_info"]["id"] == "client-1"
    assert {**final["meta_info"], "id": "worker-7"} == answer["meta_info"]


def test_a_response_without_an_id_gets_one() -> None:
    final = finalize_response(
        {"meta_info": {}}, engine=engine(Role.AGGREGATED), client_rid="client-1"
    )
    assert final == {"meta_info": {"id": "client-1"}}


def test_decode_marks_prompt_logprobs_it_cannot_have() -> None:
    final = finalize_response(
        decode_answer(), engine=engine(Role.DECODE, **PROMPT_LOGPROBS), client_rid="c"
    )
    assert final["meta_info"][UNAVAILABLE_MARKER] == "disaggregated_decode"
    assert list(final["meta_info"])[-1] == UNAVAILABLE_MARKER


@pytest.mark.parametrize(
    ("role", "body", "answer"),
    [
        # Other legs have their own prompt logprobs.
        (Role.AGGREGATED, PROMPT_LOGPROBS, decode_answer()),
        (Role.PREFILL, PROMPT_LOGPROBS, decode_answer()),
        # Prompt logprobs were not asked for: SGLang's scheduler reads an absent
        # or -1 start as output only, and a start at the prompt's end covers nothing.
        (Role.DECODE, {"return_logprob": True}, decode_answer()),
        (Role.DECODE, {"return_logprob": True, "logprob_start_len": -1}, decode_answer()),
        (Role.DECODE, {"return_logprob": True, "logprob_start_len": 2}, decode_answer()),
        (Role.DECODE, {"logprob_start_len": 0}, decode_answer()),
        # The decode answer has them (merged already).
        (Role.DECODE, PROMPT_LOGPROBS, decode_answer(input_token_logprobs=ENTRIES)),
    ],
)
def test_no_mark_unless_decode_lacks_what_was_asked(
    role: Role, body: dict[str, Any], answer: dict[str, Any]
) -> None:
    final = finalize_response(answer, engine=engine(role, **body), client_rid="c")
    assert UNAVAILABLE_MARKER not in final["meta_info"]


def test_the_start_may_be_the_last_prompt_position() -> None:
    asks = {"return_logprob": True, "logprob_start_len": 1}
    final = finalize_response(decode_answer(), engine=engine(Role.DECODE, **asks), client_rid="c")
    assert UNAVAILABLE_MARKER in final["meta_info"]


def prefill_answer(meta: dict[str, Any]) -> dict[str, Any]:
    return {"text": "", "output_ids": [9], "meta_info": {"id": "worker-7", **meta}}


def test_merge_then_finalize_fills_in_and_drops_the_mark() -> None:
    decode_leg = engine(Role.DECODE, **PROMPT_LOGPROBS)
    prefill = prefill_answer({"input_token_logprobs": ENTRIES})
    marked = finalize_response(decode_answer(), engine=decode_leg, client_rid="c")
    merged = merge_prefill(prefill, marked)
    assert UNAVAILABLE_MARKER not in merged["meta_info"]
    assert merged["meta_info"]["input_token_logprobs"] == ENTRIES
    assert merged == finalize_response(
        merge_prefill(prefill, decode_answer()), engine=decode_leg, client_rid="c"
    )


@given(
    final_responses(),
    final_responses(),
    st.sampled_from(list(Role)),
    st.sampled_from([{}, {"return_logprob": True}, PROMPT_LOGPROBS]),
    st.data(),
)
def test_merge_and_finalize_commute(
    prefill: dict[str, Any],
    decode: dict[str, Any],
    role: Role,
    body: dict[str, Any],
    data: st.DataObject,
) -> None:
    """`finalize(merge(p, d))` equals `merge(p, finalize(d))`, key order included."""
    for key in data.draw(st.lists(st.sampled_from([*PROMPT_KEYS, UNAVAILABLE_MARKER]), max_size=4)):
        target = data.draw(st.sampled_from([prefill, decode]))
        target["meta_info"][key] = data.draw(
            st.sampled_from([[], None, ENTRIES, 0, 1, [0, 5], [2, 1], "x"])
        )
    leg = engine(role, **body)
    one = finalize_response(merge_prefill(prefill, decode), engine=leg, client_rid="c")
    other = merge_prefill(prefill, finalize_response(decode, engine=leg, client_rid="c"))
    assert one == other
    assert list(one["meta_info"]) == list(other["meta_info"])
    assert one["meta_info"]["id"] == "c"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"engine": None}, "engine must be an EngineRequest, got NoneType"),
        ({"engine": {"role": "decode"}}, "engine must be an EngineRequest, got dict"),
        ({"client_rid": ""}, "client_rid must be a non-empty UTF-8 string"),
        ({"client_rid": 7}, "client_rid must be a non-empty UTF-8 string, got 7"),
        ({"client_rid": "a\ud800"}, "client_rid must be a non-empty UTF-8 string"),
    ],
)
def test_caller_mistakes_name_the_argument(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"engine": engine(Role.DECODE), "client_rid": "c", **kwargs}
    with pytest.raises(EnvelopeError, match=message) as raised:
        finalize_response(decode_answer(), **arguments)
    assert type(raised.value) is EnvelopeError


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (None, "response: expected an object, got null"),
        ({"text": "x"}, "response.meta_info: expected an object, got null"),
        ({"meta_info": [1]}, "response.meta_info: expected an object, got an array"),
    ],
)
def test_a_malformed_response_names_the_key(response: Any, message: str) -> None:
    with pytest.raises(ResponseError, match=message):
        finalize_response(response, engine=engine(Role.DECODE), client_rid="c")


@given(near_final_responses, st.sampled_from(list(Role)), st.text(min_size=1, max_size=8))
def test_any_json_raises_only_response_errors(response: Any, role: Role, rid: str) -> None:
    try:
        final = finalize_response(response, engine=engine(role, **PROMPT_LOGPROBS), client_rid=rid)
    except ResponseError:
        return
    except EnvelopeError:  # only a rid JSON cannot carry is the caller's mistake
        assert not is_utf8(rid)
        return
    assert final["meta_info"]["id"] == rid


@pytest.mark.parametrize("kind", HOSTILE_KINDS)
@pytest.mark.parametrize("role", list(Role))
def test_hostile_responses_raise_only_library_errors(kind: str, role: Role) -> None:
    """The hostile-input matrix's responses (deep nesting, huge ints, NaN, ...)."""
    leg = engine(role, **PROMPT_LOGPROBS)
    for response in hostile_objects("response", kind):
        try:
            final = finalize_response(response, engine=leg, client_rid="c")
        except EnvelopeError:
            continue
        assert final["meta_info"]["id"] == "c"
