"""Many sequences served as one answer: n > 1 samples and batches, one request a sequence."""

from __future__ import annotations

import itertools
import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_envelope import EnvelopeError, Target, aggregate_sse, decode_client_request
from sglang_envelope.pair import PrefillServer
from sglang_envelope.serve.many import indexed_events
from sglang_envelope.stream import SseDecoder, encode_sse
from tests.serve_fakes import (
    DEPLOYMENT,
    DONE,
    LENGTH,
    POLICY,
    FakeTransport,
    Script,
    counted,
    events,
    frame,
    read,
    run,
)


def by_rid(request: dict[str, Any]) -> Script:
    """Each engine request makes ids of its own: 100 + its engine rid's number, then 1, 2."""
    k = 100 + int(request["rid"], 16)
    ids = [(k,), (k, 1), (k, 1, 2)]
    chunks = [
        frame("RID", i, LENGTH if len(i) == 3 else None, completion_tokens=len(i)) for i in ids
    ]
    chunks.append(DONE)
    return Script(chunks=chunks, delay_s=0.002 * (k % 3))


def serve(body: bytes | Any, script: Any = by_rid, **options: Any) -> tuple[Any, bytes, Any]:
    transport = FakeTransport(script)
    options.setdefault("abort_policy", POLICY)

    async def main() -> tuple[Any, bytes]:
        from sglang_envelope import Service

        async with Service(transport, deployment=DEPLOYMENT, rid=counted(), **options) as svc:
            answer = await svc.generate(body)
            return answer, await read(answer)

    answer, data = run(main())
    return answer, data, transport


def test_n_samples_unary_are_one_array_each_sample_its_own_request_and_rid() -> None:
    answer, data, transport = serve(
        b'{"rid": "job", "input_ids": [5], "sampling_params": {"n": 3}}'
    )
    assert (answer.status, answer.media_type) == (200, "application/json")
    array = json.loads(data)
    rids = [request["rid"] for request in transport.requests]
    assert len(set(rids)) == 3
    made = [[100 + int(rid, 16), 1, 2] for rid in sorted(rids)]
    assert [item["output_ids"] for item in array] == made
    assert [item["meta_info"]["id"] for item in array] == ["job_0", "job_1", "job_2"]
    assert all("n" not in request.get("sampling_params", {}) for request in transport.requests)
    assert transport.aborts == []


def test_n_samples_streamed_carry_their_index_last_and_one_done() -> None:
    body = b'{"rid": "job", "input_ids": [5], "stream": true, "sampling_params": {"n": 2}}'
    answer, data, _ = serve(body)
    assert answer.media_type.startswith("text/event-stream")
    sent = events(data.decode())
    assert sent[-1] == DONE and sent.count(DONE) == 1
    frames = [json.loads(event[6:]) for event in sent[:-1]]
    assert all(list(f)[-1] == "index" for f in frames)
    assert sorted({f["index"] for f in frames}) == [0, 1]
    assert [f["meta_info"]["id"] for f in frames if f["index"] == 1] == ["job_1"] * 3
    merged = aggregate_sse([data], choices=2)
    unary = json.loads(serve(body.replace(b'"stream": true, ', b""))[1])
    assert merged == unary


def test_a_batch_answers_in_order_under_sglangs_rids() -> None:
    body = b'{"rid": "b", "input_ids": [[5], [6, 7], [8]]}'
    _, data, transport = serve(body)
    assert [item["meta_info"]["id"] for item in json.loads(data)] == ["b_0", "b_1", "b_2"]
    assert [request["input_ids"] for request in transport.requests] == [[5], [6, 7], [8]]


@pytest.mark.parametrize(
    "members",
    list(
        itertools.permutations(
            [b'"rid": ["x", "y"]', b'"input_ids": [[5], [6]]', b'"return_logprob": true']
        )
    ),
)
def test_a_batch_is_served_whatever_the_order_of_its_members(members: tuple[bytes]) -> None:
    # A batch never decodes as one prompt: whichever member the one-prompt decode trips
    # on first (here the rid list, when it comes first), the body is read as a batch.
    body = b"{" + b", ".join(members) + b"}"
    answer, data, transport = serve(body)
    assert answer.status == 200
    assert [item["meta_info"]["id"] for item in json.loads(data)] == ["x", "y"]
    assert [request["input_ids"] for request in transport.requests] == [[5], [6]]


def test_a_batch_without_rids_gets_the_engines_and_n_per_prompt() -> None:
    body = b'{"input_ids": [[5], [6]], "sampling_params": {"n": 2}}'
    _, data, transport = serve(body)
    ids = [item["meta_info"]["id"] for item in json.loads(data)]
    assert ids == [request["rid"] for request in transport.requests] and len(set(ids)) == 4
    assert [r["input_ids"] for r in transport.requests] == [[5], [5], [6], [6]]


def test_a_text_batch_over_a_text_target_answers_an_array_in_order() -> None:
    body = b'{"rid": "t", "text": ["Hello", "world", "again"], "sampling_params": {"n": 2}}'
    answer, data, transport = serve(body, target=Target(input="text"))
    assert (answer.status, answer.media_type) == (200, "application/json")
    array = json.loads(data)
    # sample k of prompt i: the rid f"t_{i}_{k}" (Sequences.samples())
    assert [item["meta_info"]["id"] for item in array] == [f"t_{k // 2}_{k}" for k in range(6)]
    texts = [request["text"] for request in transport.requests]
    assert texts == ["Hello", "Hello", "world", "world", "again", "again"]
    assert all("input_ids" not in request for request in transport.requests)
    # each answer is its own engine request's (engine rids 0..5, made in index order)
    assert [int(request["rid"], 16) for request in transport.requests] == list(range(6))
    assert [item["output_ids"] for item in array] == [[100 + k, 1, 2] for k in range(6)]


def test_a_client_request_is_served_and_one_for_another_target_refused() -> None:
    request = decode_client_request(b'{"input_ids": [5], "sampling_params": {"n": 2}}')
    assert len(json.loads(serve(request)[1])) == 2
    other = decode_client_request(b'{"input_ids": [5]}', target=Target(sglang="0.5.21"))
    with pytest.raises(EnvelopeError, match=r"^request\.target: the request was made for"):
        serve(other)


def test_too_many_sequences_are_refused_before_any_is_sent() -> None:
    answer, data, transport = serve(b'{"input_ids": [5], "sampling_params": {"n": 5000}}')
    assert answer.status == 400 and transport.requests == []
    assert b"5000" in data


def test_one_sequence_refused_by_sglang_is_the_answer_and_the_others_are_aborted() -> None:
    def second_fails(request: dict[str, Any]) -> Script:
        if int(request["rid"], 16) == 2:  # rid 0 is the request's own, the samples 1, 2, 3
            return Script(400, [b'{"error":{"message":"nope"}}'])
        return Script(until_abort=True)

    body = b'{"input_ids": [5], "sampling_params": {"n": 3}}'
    answer, data, transport = serve(body, second_fails)
    assert answer.status == 400 and json.loads(data)["error"]["message"] == "nope"
    aborted = {abort["rid"] for abort in transport.aborts}
    assert aborted == {f"{k:032x}" for k in (1, 3)}
    # A streaming client gets SGLang's error frame (status 200), which ends the whole stream.
    answer, data, transport = serve(body.replace(b"{", b'{"stream": true, ', 1), second_fails)
    assert answer.status == 200 and data.endswith(b"\n\n" + DONE) and data.count(b"data:") == 2
    assert json.loads(events(data.decode())[0][6:])["error"]["message"] == "nope"
    assert {abort["rid"] for abort in transport.aborts} == {f"{k:032x}" for k in (1, 3)}


def test_a_streaming_client_gone_aborts_every_sample() -> None:
    transport = FakeTransport(lambda request: Script(chunks=[frame()], until_abort=True))

    async def main() -> None:
        from sglang_envelope import Service

        async with Service(transport, deployment=DEPLOYMENT, abort_policy=POLICY) as svc:
            body = b'{"input_ids": [5], "stream": true, "sampling_params": {"n": 3}}'
            answer = await svc.generate(body)
            first = await anext(answer.body)
            assert b'"index":' in first
            await answer.body.aclose()

    run(main())
    assert {a["rid"] for a in transport.aborts} == {r["rid"] for r in transport.requests}
    assert len(transport.requests) == 3


def test_a_pair_gives_each_sample_its_own_room_on_both_legs() -> None:
    prefill, decode = FakeTransport(by_rid), FakeTransport(by_rid)

    async def main() -> bytes:
        from sglang_envelope import Service

        server = PrefillServer(prefill, "10.0.0.1", 8998)
        async with Service(
            decode, deployment=DEPLOYMENT, prefill=server, abort_policy=POLICY, rid=counted()
        ) as svc:
            body = b'{"rid": "p", "input_ids": [5], "sampling_params": {"n": 2}}'
            return await read(await svc.generate(body))

    array = json.loads(run(main()))
    assert [item["meta_info"]["id"] for item in array] == ["p_0", "p_1"]
    rooms = [request["bootstrap_room"] for request in decode.requests]
    assert sorted(rooms) == sorted(r["bootstrap_room"] for r in prefill.requests)
    assert len(set(rooms)) == 2


def _frames(k: int) -> list[dict[str, Any]]:
    return [
        {"text": "", "output_ids": [k, i], "meta_info": {"id": f"s{k}", "n": i}} for i in range(3)
    ]


@given(st.lists(st.integers(1, 40), max_size=8), st.integers(0, 9))
def test_indexed_events_reads_any_chunking_of_one_sequence(cuts: list[int], k: int) -> None:
    stream = b"".join(encode_sse(f) for f in _frames(k)) + DONE
    decoder, out, at = SseDecoder(), [], 0
    for size in [*cuts, len(stream)]:
        chunk, at = stream[at : at + size], at + size
        out.append(indexed_events(decoder, chunk, k)[0])
    frames = [msgspec.json.decode(e[6:]) for e in events(b"".join(out).decode())]
    assert frames == [{**f, "index": k} for f in _frames(k)]


def test_an_error_frame_ends_the_merged_stream_as_it_came() -> None:
    error = b'data: {"error":{"message":"boom"}}\n\n'
    events_out, ended = indexed_events(SseDecoder(), frame() + error + DONE, 4)
    assert ended and events_out.endswith(error) and b'"index":4}' in events_out


def test_a_streamed_batch_of_n_samples_reads_back_in_index_order() -> None:
    body = b'{"input_ids": [[5], [6]], "stream": true, "sampling_params": {"n": 2}}'
    data = serve(body)[1]
    answers = aggregate_sse([data], choices=4)
    assert [a["output_ids"][0] for a in answers] == [100, 101, 102, 103]


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(1, 4),
    st.one_of(st.none(), st.sampled_from(["g", "a_1"])),
    st.booleans(),
)
def test_a_fan_out_has_unique_rids_and_rooms_and_streams_what_it_answers(
    prompts: int, n: int, rid: str | None, pair: bool
) -> None:
    ids = [[5 + i] for i in range(prompts)] if prompts > 1 else [5]
    body: dict[str, Any] = {"input_ids": ids, "sampling_params": {"n": n}}
    if rid is not None:
        body["rid"] = rid
    prefill = FakeTransport(by_rid)
    options = {"prefill": PrefillServer(prefill, "10.0.0.1", 8998)} if pair else {}
    wire = json.dumps(body).encode()
    _, unary, transport = serve(wire, **options)
    _, streamed, _ = serve(json.dumps({**body, "stream": True}).encode(), **options)
    count = prompts * n
    engine_rids = [request["rid"] for request in transport.requests]
    assert len(set(engine_rids)) == len(engine_rids) == count
    if pair:
        assert len({request["bootstrap_room"] for request in transport.requests}) == count
    answer = json.loads(unary)
    if count == 1:  # one sequence: SGLang's one object, not an array
        assert aggregate_sse([streamed]) == answer
        return
    assert len({item["meta_info"]["id"] for item in answer}) == count
    assert aggregate_sse([streamed], choices=count) == answer
