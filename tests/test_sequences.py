"""decode_sequences and Sequences: a batch of prompts, n samples each, and their fan-out."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    Bootstrap,
    EnvelopeError,
    RequestRejected,
    Role,
    build_engine_request,
    decode_client_request,
    decode_sequences,
    error_response,
    to_worker_envelope,
)
from sglang_envelope.request.types import request_json
from sglang_envelope.types import Sequences
from tests.strategies import DEPLOYMENT, HOSTILE_BODIES, client_requests, json_values

Body = dict[str, Any]


def _rejected(body: Any, **bounds: Any) -> RequestRejected:
    with pytest.raises(RequestRejected) as raised:
        decode_sequences(body, **bounds)
    return raised.value


# --- one prompt ---------------------------------------------------------------------


def test_a_body_that_is_not_a_batch_gives_decode_client_request_s_request() -> None:
    body = b'{"input_ids":[1,2],"rid":"a","stream":true}'
    sequences = decode_sequences(body)
    assert sequences.requests == (decode_client_request(body),)
    assert (sequences.n, sequences.batch, sequences.count, sequences.array) == (1, False, 1, False)
    assert sequences.samples() == sequences.requests


@pytest.mark.parametrize(
    ("n", "beam_width", "samples", "array"),
    [(None, None, 1, False), (1, None, 1, False), (3, None, 3, True), (0, None, 1, False),
     (-2, None, 1, False), (2, 2, 1, False), (2, 1, 2, True)],
)  # fmt: skip
def test_n_samples_of_one_prompt_as_sglang_makes_them(
    n: int | None, beam_width: int | None, samples: int, array: bool
) -> None:
    params = {k: v for k, v in (("n", n), ("beam_width", beam_width)) if v is not None}
    sequences = decode_sequences({"input_ids": [5], "rid": "r", "sampling_params": params})
    assert (sequences.n, sequences.count, sequences.array) == (samples, samples, array)
    sent = sequences.requests[0].sampling_params.n  # type: ignore[union-attr]
    assert sent == (msgspec.UNSET if n is None else n)  # as sent


def test_samples_of_one_prompt_take_sglang_s_rids_and_one_sequence_each() -> None:
    sequences = decode_sequences({"input_ids": [5], "rid": "r", "sampling_params": {"n": 3}})
    samples = sequences.samples()
    assert [s.rid for s in samples] == ["r_0", "r_1", "r_2"]
    assert all(s.sampling_params.n is msgspec.UNSET for s in samples)  # type: ignore[union-attr]
    assert all(s.input_ids == (5,) for s in samples)


def test_a_null_n_is_refused() -> None:
    rejected = _rejected({"input_ids": [5], "sampling_params": {"n": None}})
    assert (rejected.code, rejected.field) == ("n_null", "sampling_params.n")


# --- a batch ------------------------------------------------------------------------


def test_a_batch_gives_one_request_a_prompt_with_sglang_s_rids() -> None:
    prompts = [[1, 2], [3]]
    body: Body = {"input_ids": prompts, "rid": "b", "stream": False, "return_logprob": True}
    sequences = decode_sequences(body)
    assert (sequences.n, sequences.batch, sequences.count, sequences.array) == (1, True, 2, True)
    assert [r.rid for r in sequences.requests] == ["b_0", "b_1"]
    assert [r.input_ids for r in sequences.requests] == [(1, 2), (3,)]
    for i, request in enumerate(sequences.requests):
        one = {**body, "input_ids": prompts[i], "rid": f"b_{i}"}
        assert request == decode_client_request(one)
    assert sequences.samples() == sequences.requests


def test_a_batch_of_n_samples_fans_out_in_index_order() -> None:
    body = {"input_ids": [[1], [2]], "rid": ["x", "y"], "sampling_params": {"n": 2}}
    sequences = decode_sequences(body)
    assert (sequences.n, sequences.count) == (2, 4)
    samples = sequences.samples()
    assert [(s.rid, s.input_ids) for s in samples] == [
        ("x_0", (1,)), ("x_1", (1,)), ("y_2", (2,)), ("y_3", (2,))
    ]  # fmt: skip


def test_a_batch_without_rid_leaves_every_rid_to_the_caller() -> None:
    sequences = decode_sequences({"input_ids": [[1], [2]], "sampling_params": {"n": 2}})
    assert [s.rid for s in sequences.samples()] == [None] * 4


@pytest.mark.parametrize(
    ("body", "code", "field", "words"),
    [
        ({"input_ids": [[1], [2]], "rid": ["a"]}, "rid_list_length", "rid",
         "The specified rids length mismatch with the batch_size for batch processing."),
        ({"input_ids": [[1], [2]], "rid": ["a", "a"]}, "duplicate_rids", "rid",
         "Duplicate request IDs detected within the request: ['a']"),
        ({"input_ids": [[1], [2]], "rid": ["a", 2]}, "wrong_type", "rid[1]", "expected str"),
        ({"input_ids": [[1], [2]], "rid": {"a": 1}}, "wrong_type", "rid", "got object"),
        ({"input_ids": [[1], 2]}, "wrong_type", "input_ids[1]", "expected array, got int"),
        ({"input_ids": [[1], None]}, "wrong_type", "input_ids[1]", "got null"),
        ({"input_ids": [[1], []]}, "empty_input_ids", "input_ids[1]", "input_ids[1] cannot be"),
        ({"input_ids": [[1], [2, -1]]}, "token_id_out_of_range", "input_ids[1][1]", "[0, 2^32)"),
        ({"input_ids": [[1], [[2]]]}, "wrong_type", "input_ids[1]", "expected array of int"),
        ({"input_ids": [[1], [2]], "sampling_params": [{}, {}]}, "per_item_list",
         "sampling_params", "one request a prompt"),
        ({"input_ids": [[1], [2]], "return_logprob": [True, False]}, "per_item_list",
         "return_logprob", "one value for the whole batch"),
        ({"input_ids": [[1], [2]], "token_ids_logprob": [[1], [2]]}, "per_item_list",
         "token_ids_logprob", "as a list"),
        ({"input_ids": [[1], [2]], "multi_item_delimiter_indices": [1, 2]}, "per_item_list",
         "multi_item_delimiter_indices", "as a list"),  # SGLang gives prompt i item i
        ({"input_ids": [[1], [2]], "sampling_params": {"n": 0}}, "batch_n_below_one",
         "sampling_params.n", "below 1"),
        ({"input_ids": [[1], [2]], "stream": "yes"}, "wrong_type", "stream", "expected bool"),
        ({"input_ids": [[1], [2]], "text": "x"}, "not_token_input", "text", "not accepted"),
        ({"input_ids": [[1], [2]], "sampling_params": {"n": 3, "beam_width": 2}},
         "n_over_beam_width", "sampling_params.n", "n (3) cannot exceed beam_width (2)."),
    ],
)  # fmt: skip
def test_a_bad_batch_is_refused_naming_the_field(
    body: Body, code: str, field: str, words: str
) -> None:
    rejected = _rejected(body)
    assert (rejected.code, rejected.field) == (code, field), rejected
    assert words in rejected.message


def test_a_flat_token_ids_logprob_is_one_value_for_the_whole_batch() -> None:
    sequences = decode_sequences({"input_ids": [[1], [2]], "token_ids_logprob": [7]})
    assert all(r.token_ids_logprob == msgspec.Raw(b"[7]") for r in sequences.requests)


# --- bounds -------------------------------------------------------------------------


def test_the_batch_size_is_bounded_before_any_prompt_is_decoded() -> None:
    body = b'{"input_ids":[' + b",".join([b"[1]"] * 9) + b'],"stream":"bad"}'
    rejected = _rejected(body, max_prompts=8)
    assert (rejected.code, rejected.field) == ("too_many_prompts", "input_ids")
    assert "9 prompts; the limit is 8" in rejected.message


def test_the_split_batch_is_bounded_before_splitting() -> None:
    shared = {"session_params": {"id": "s" * 5000}, "stream": "bad"}
    rejected = _rejected({"input_ids": [[1]] * 100, **shared}, max_batch_bytes=100_000)
    assert (rejected.code, rejected.field) == ("batch_too_large", "input_ids")


def test_the_number_of_sequences_is_bounded() -> None:
    rejected = _rejected({"input_ids": [[1], [2]], "sampling_params": {"n": 3}}, max_sequences=5)
    assert (rejected.code, rejected.field) == ("too_many_sequences", "sampling_params.n")
    assert "6 sequences (2 prompts x n 3)" in rejected.message
    one = _rejected({"input_ids": [1], "sampling_params": {"n": 10**6}})
    assert one.code == "too_many_sequences"


@pytest.mark.parametrize("name", ["max_prompts", "max_sequences", "max_batch_bytes"])
@pytest.mark.parametrize("bound", [-1, 1.5, "3", True])
def test_a_bound_that_is_not_an_integer_is_the_caller_s_error(name: str, bound: Any) -> None:
    with pytest.raises(EnvelopeError, match=name):
        decode_sequences(b'{"input_ids":[1]}', **{name: bound})


def test_decode_client_request_points_a_batch_to_decode_sequences() -> None:
    with pytest.raises(RequestRejected) as raised:
        decode_client_request(b'{"input_ids":[[1],[2]]}')
    assert raised.value.code == "batched_input" and "decode_sequences" in raised.value.message


# --- the engine request of a leg of a pair ------------------------------------------


@pytest.mark.parametrize("role", [Role.PREFILL, Role.DECODE])
def test_a_pair_s_leg_refuses_n_over_one_and_takes_each_sample(role: Role) -> None:
    sequences = decode_sequences({"input_ids": [1, 2], "rid": "r", "sampling_params": {"n": 2}})
    envelope = to_worker_envelope(sequences.requests[0], rid="e")
    with pytest.raises(RequestRejected) as raised:
        build_engine_request(
            envelope, input_ids=[1, 2], role=role, deployment=DEPLOYMENT,
            bootstrap=Bootstrap("h", 1, 1),
        )  # fmt: skip
    assert (raised.value.code, raised.value.field) == ("parallel_sampling", "sampling_params.n")
    assert f"a {role.value} leg" in raised.value.message
    for sample in sequences.samples():
        built = build_engine_request(
            to_worker_envelope(sample, rid=sample.rid or "x"), input_ids=[1, 2], role=role,
            deployment=DEPLOYMENT, bootstrap=Bootstrap("h", 1, 1),
        )  # fmt: skip
        assert built.to_dict()["sampling_params"].get("n", 1) == 1


def test_the_aggregated_role_passes_n_on() -> None:
    request = decode_client_request({"input_ids": [1], "sampling_params": {"n": 4}})
    built = build_engine_request(
        to_worker_envelope(request, rid="e"), input_ids=[1], role="aggregated",
        deployment=DEPLOYMENT,
    )  # fmt: skip
    assert built.to_dict()["sampling_params"]["n"] == 4


# --- Sequences made by hand ---------------------------------------------------------


def test_sequences_made_by_hand_are_checked() -> None:
    one = decode_client_request({"input_ids": [1]})
    three = decode_client_request({"input_ids": [1], "sampling_params": {"n": 3}})
    bad: list[tuple[Any, Any, Any]] = [
        ((), 1, False),
        ([one], 1, False),
        (({"input_ids": [1]},), 1, False),
        ((one,), 0, False),
        ((one, one), 1, False),
        ((one,), 3, False),
        ((three,), 1, False),
        ((one,), 1, 1),
    ]
    for requests, n, batch in bad:
        with pytest.raises(EnvelopeError):
            Sequences(requests, n, batch)
    assert Sequences((three,), 3, False).count == 3


# --- properties ---------------------------------------------------------------------


@st.composite
def many_sequences(draw: st.DrawFn) -> Body:
    """A body of one prompt or a batch, with an n of 1 to 4 (and the rid forms SGLang has)."""
    body = draw(client_requests())
    body.pop("logprob_start_len", None)  # past a shorter prompt: refused
    body.pop("routed_experts_start_len", None)  # likewise
    if draw(st.booleans()):
        size = draw(st.integers(1, 4))
        body["input_ids"] = [draw(st.lists(st.integers(0, 1000), min_size=1)) for _ in range(size)]
        rid = draw(st.sampled_from(["string", "list", "absent"]))
        if rid == "string":
            body["rid"] = draw(st.text(min_size=1, max_size=6))
        elif rid == "list":
            body["rid"] = draw(
                st.lists(st.text(max_size=6), min_size=size, max_size=size, unique=True)
            )
        else:
            body.pop("rid", None)
    n = draw(st.integers(1, 4))
    body["sampling_params"] = {**(body.get("sampling_params") or {}), "n": n}
    return body


@given(many_sequences())
def test_samples_are_unique_checked_and_in_index_order(body: Body) -> None:
    sequences = decode_sequences(json.dumps(body))
    samples = sequences.samples()
    assert len(samples) == sequences.count == len(sequences.requests) * sequences.n
    rids = [sample.rid for sample in samples]
    assert all(rid is None for rid in rids) or len(set(rids)) == len(rids)
    for k, sample in enumerate(samples):
        prompt = sequences.requests[k // sequences.n]
        assert sample.input_ids == prompt.input_ids  # index order: k = i * n + j
        assert getattr(sample.sampling_params, "n", 1) in (1, msgspec.UNSET) or sequences.n == 1
        # every sample is a request every rule accepts, as sent
        assert decode_client_request(request_json(sample)) == sample
    assert sequences.array is (sequences.batch or sequences.n > 1)


@given(client_requests())
def test_a_one_prompt_body_of_one_sequence_is_decode_client_request_s(body: Body) -> None:
    data = json.dumps(body).encode()
    sequences = decode_sequences(data)
    assert sequences.requests == (decode_client_request(data),)
    assert not sequences.array and sequences.samples() == sequences.requests


@pytest.mark.parametrize("body", HOSTILE_BODIES, ids=range(len(HOSTILE_BODIES)))
def test_hostile_bodies_are_refused_with_the_library_s_errors(body: bytes) -> None:
    try:
        decode_sequences(body)
    except RequestRejected as rejected:
        assert rejected.code and rejected.message


@given(json_values, st.sampled_from(["input_ids", "rid", "sampling_params", "stream", "x"]))
def test_any_value_in_a_batch_field_is_refused_cleanly(value: Any, key: str) -> None:
    body = {"input_ids": [[1], [2]], "rid": ["a", "b"], key: value}
    try:
        decode_sequences(body)
    except RequestRejected as rejected:
        assert rejected.code and rejected.field


@pytest.mark.parametrize(
    ("ids", "field", "words"),
    [
        ([[[5]]], "input_ids[0]", "expected array of int, got array holding an array"),
        ([[5], [6, [7]]], "input_ids[1][1]", "expected int, got array"),
        # Not a batch (its first item is an id): one prompt holding a list.
        ([5, [6]], "input_ids[1]", "expected int, got array"),
        ([5, 6, [[7]]], "input_ids[2]", "expected int, got array"),
    ],
)
def test_a_prompt_holding_a_list_is_a_wrong_type_as_sglang_s_validator_refuses_it(
    ids: list[Any], field: str, words: str
) -> None:
    """SGLang's validator refuses such a prompt with pydantic's 400 in either mode ("row 1:
    elements must be int", "contains non-int64 element"); it is not a batch of its own."""
    body = json.dumps({"input_ids": ids, "stream": True}).encode()
    for decode in (decode_sequences, decode_client_request):
        if isinstance(ids[0], list) and decode is decode_client_request:
            continue  # a batch: decode_client_request's batched_input
        with pytest.raises(RequestRejected) as caught:
            decode(body)
        assert (caught.value.code, caught.value.field) == ("wrong_type", field)
        assert str(caught.value) == f"{field}: {words}"
        status, media_type, _ = error_response(caught.value, stream=True)
        assert (status, media_type) == (400, "application/json")
