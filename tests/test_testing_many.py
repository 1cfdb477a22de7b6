"""`FakeEngine` serving many sequences as SGLang 0.5.23 does: ``n`` > 1, batches, text.

Sequence index ``i * n + j``; with ``n`` > 1 every sample a new uuid hex rid,
a batch with ``n == 1`` the rids ``{rid}_{i}`` or the rid list's items; a
stream interleaves the sequences' frames, each with ``"index"`` last, and ends
with one ``[DONE]``; a unary answer is an array in index order.
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

import httpx

from sglang_envelope import aggregate_sse
from sglang_envelope.testing import FakeEngine
from sglang_envelope.testing.answers import ABORTED, text_ids
from sglang_envelope.testing.requests import MAX_SEQUENCES
from tests.test_testing_engine import first_frame, frames_of, in_process, post, run, served


def many(rid: str | None = "r", n: int = 1, tokens: int = 3, **body: Any) -> dict[str, Any]:
    sent: dict[str, Any] = {"input_ids": [5, 6, 7], **body}
    sent["sampling_params"] = {"max_new_tokens": tokens, "n": n, **body.get("sampling_params", {})}
    if rid is not None:
        sent["rid"] = rid
    return sent


def test_n_samples_answer_an_array_with_a_new_rid_each() -> None:
    async def answers() -> tuple[httpx.Response, httpx.Response, Any]:
        async with in_process(FakeEngine()) as client:
            sampled = await post(client, many(n=4))
            greedy = await post(client, many(n=3, sampling_params={"temperature": 0}))
            one = (await post(client, many(n=1))).json()
            return sampled, greedy, one

    sampled, greedy, one = run(answers)
    assert sampled.status_code == 200 and isinstance(sampled.json(), list)
    samples = sampled.json()
    assert len(samples) == 4 and all("index" not in sample for sample in samples)
    rids = [sample["meta_info"]["id"] for sample in samples]
    assert len(set(rids)) == 4 and all(len(rid) == 32 and rid != "r" for rid in rids)
    int(rids[0], 16)  # uuid4().hex
    outputs = [tuple(sample["output_ids"]) for sample in samples]
    assert len(set(outputs)) == 4  # sampled at SGLang's default temperature: they differ
    assert outputs[0] == tuple(one["output_ids"])  # and the same every time
    # At temperature 0 the samples of one prompt are equal, as in SGLang.
    assert len({tuple(sample["output_ids"]) for sample in greedy.json()}) == 1
    assert isinstance(one, dict) and one["meta_info"]["id"] == "r"


def test_a_batch_gets_sglang_s_rids_in_index_order() -> None:
    prompts = [[5, 6], [7, 8, 9], [10]]

    async def answers() -> list[Any]:
        async with in_process(FakeEngine()) as client:
            bodies = [
                {"input_ids": prompts, "rid": "b"},
                {"input_ids": prompts, "rid": ["x", "y", "z"]},
                {"input_ids": prompts},
                {"input_ids": prompts[:2], "rid": "c", "sampling_params": {"n": 2}},
            ]
            return [(await post(client, body)).json() for body in bodies]

    named, listed, absent, both = run(answers)
    assert [a["meta_info"]["id"] for a in named] == ["b_0", "b_1", "b_2"]
    assert [a["meta_info"]["id"] for a in listed] == ["x", "y", "z"]
    assert [a["meta_info"]["prompt_tokens"] for a in named] == [2, 3, 1]
    assert len({a["meta_info"]["id"] for a in absent}) == 3
    assert [a["meta_info"]["prompt_tokens"] for a in both] == [2, 2, 3, 3]  # index i*n + j
    assert named[0]["output_ids"] == both[0]["output_ids"] != both[1]["output_ids"]


def test_stream_frames_carry_index_last_and_interleave() -> None:
    body = many(n=2, tokens=3, input_ids=[[5, 6], [7]], stream=True)

    async def answer(incremental: bool) -> bytes:
        async with in_process(FakeEngine(incremental=incremental)) as client:
            return (await post(client, body)).content

    for incremental in (False, True):
        content = run(functools.partial(answer, incremental))
        assert content.count(b"data: [DONE]") == 1
        frames = frames_of(content)
        assert all(list(frame)[-1] == "index" for frame in frames)
        order = [frame["index"] for frame in frames]
        assert order == [0, 1, 2, 3] * 3  # round by round: interleaved
        for index in range(4):
            own = [
                "data: " + json.dumps({k: v for k, v in f.items() if k != "index"})
                for f in frames
                if f["index"] == index
            ]
            whole = aggregate_sse([("\n\n".join(own) + "\n\n").encode()], incremental=incremental)
            assert len(whole["output_ids"]) == 3
            assert whole["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
        assert len({f["meta_info"]["id"] for f in frames}) == 4


def test_text_is_tokenized_by_the_fake_s_tokenizer() -> None:
    async def answers() -> list[Any]:
        async with in_process(FakeEngine()) as client:
            bodies = [
                {"text": "héllo", "sampling_params": {"max_new_tokens": 2}},
                {"input_ids": text_ids("héllo", 320), "sampling_params": {"max_new_tokens": 2}},
                {"text": ["ab", "c"], "rid": "t"},
                {"text": ["ab", 3]},
            ]
            return [await post(client, body) for body in bodies]

    text, ids, batch, bad = run(answers)
    assert text.json()["output_ids"] == ids.json()["output_ids"]
    assert text.json()["meta_info"]["prompt_tokens"] == len("héllo".encode()) == 6
    assert [a["meta_info"]["id"] for a in batch.json()] == ["t_0", "t_1"]
    assert [a["meta_info"]["prompt_tokens"] for a in batch.json()] == [2, 1]
    assert bad.status_code == 400 and b"text[1] must be a string" in bad.content
    assert text_ids("\x00\xff", 10) == [3, 3 + 0xC3 % 7, 3 + 0xBF % 7]


def test_sglang_s_refusals_of_a_batch() -> None:
    async def answers() -> list[httpx.Response]:
        async with in_process(FakeEngine()) as client:
            return [
                await post(client, {"input_ids": [[1], [2]], "rid": ["a"]}),
                await post(client, {"input_ids": [[1], [2]], "rid": ["a", "a"]}),
                await post(client, {"input_ids": [[1], [2]], "return_logprob": [True, False]}),
                await post(client, {"input_ids": [[1], [2]], "rid": ["a", "b"], "stream": True}),
                await post(client, many(n=MAX_SEQUENCES + 1)),
                await post(client, {"input_ids": [[1], [320]]}),
            ]

    mismatch, twice, listed, streamed, large, vocab = run(answers)
    assert (mismatch.status_code, mismatch.json()) == (
        400,
        {
            "error": {
                "message": "The specified rids length mismatch with the batch_size "
                "for batch processing."
            }
        },
    )
    assert twice.json()["error"]["message"] == (
        "Duplicate request IDs detected within the request: ['a']"
    )
    assert listed.status_code == 400 and b"return_logprob is a list" in listed.content
    assert streamed.status_code == 200 and b"data: [DONE]" in streamed.content
    assert large.status_code == 400 and b"at most 1024 sequences" in large.content
    assert vocab.status_code == 400 and b"outside the model's vocabulary" in vocab.content


async def until(check: Any) -> None:
    while not check():
        await asyncio.sleep(0.005)


def test_aborting_one_sample_ends_only_that_sample() -> None:
    engine = FakeEngine(frame_delay=0.01)

    async def scenario() -> list[Any]:
        async with served(engine) as client:
            body = many(rid="mine", n=3, tokens=40, stream=True)
            async with client.stream("POST", "/generate", json=body) as response:
                lines, frame = await first_frame(response)
                frames = [frame]
                async for line in lines:
                    if line.startswith("data: {"):
                        frames.append(json.loads(line.removeprefix("data: ")))
                    if len(frames) == 3:
                        break
                loads = (await client.get("/v1/loads")).json()
                assert loads["loads"][0]["num_running_reqs"] == engine.running == 3
                await client.post("/abort_request", json={"rid": "mine"})  # aborts nothing
                second = frames[1]["meta_info"]["id"]
                await client.post("/abort_request", json={"rid": second})
                frames += [
                    json.loads(line.removeprefix("data: "))
                    async for line in lines
                    if line.startswith("data: {")
                ]
                return frames

    frames = run(scenario)
    last = {frame["index"]: frame for frame in frames}
    finishes = [last[index]["meta_info"]["finish_reason"] for index in range(3)]
    assert finishes[1] == ABORTED and len(last[1]["output_ids"]) < 40
    assert finishes[0] == finishes[2] == {"type": "length", "length": 40}
    assert sorted(o.ending for o in engine.outcomes) == ["abort", "length", "length"]
    assert [abort["rid"] for abort in engine.aborts] == ["mine", last[1]["meta_info"]["id"]]


def test_abort_all_ends_every_sequence_of_a_stream() -> None:
    engine = FakeEngine(frame_delay=0.01)

    async def scenario() -> bytes:
        async with in_process(engine) as client:
            body = many(n=2, tokens=200, input_ids=[[5], [6]], stream=True)
            task = asyncio.ensure_future(post(client, body))
            await until(lambda: engine.running == 4)
            await client.post("/abort_request", json={"abort_all": True})
            return (await task).content

    frames = frames_of(run(scenario))
    last = {f["index"]: f for f in frames}
    assert sorted(last) == [0, 1, 2, 3]
    assert all(f["meta_info"]["finish_reason"] == ABORTED for f in last.values())
    assert [o.ending for o in engine.outcomes] == ["abort"] * 4 and engine.running == 0


def test_a_client_that_goes_away_ends_all_its_sequences() -> None:
    engine = FakeEngine(frame_delay=0.01)

    async def scenario() -> None:
        async with served(engine) as client:
            body = many(n=4, tokens=200, stream=True)
            async with client.stream("POST", "/generate", json=body) as response:
                _, frame = await first_frame(response)
                assert list(frame)[-1] == "index"
            await until(lambda: engine.running == 0)
            unary = asyncio.ensure_future(post(client, many(n=3, tokens=200)))
            await until(lambda: engine.running == 3)
            unary.cancel()
            await until(lambda: engine.running == 0)

    run(scenario)
    assert engine.disconnects == 2 and not engine.aborts
    assert [o.ending for o in engine.outcomes] == ["disconnect"] * 7


def test_a_failure_ends_every_sequence() -> None:
    async def answers() -> tuple[httpx.Response, httpx.Response]:
        async with in_process(FakeEngine(fail_after=1, fail_status=503)) as client:
            return await post(client, many(n=2, stream=True)), await post(client, many(n=2))

    stream, unary = run(answers)
    events = stream.content.split(b"\n\n")
    assert len(events) == 5 and events[2].startswith(b'data: {"error"')
    assert events[3] == b"data: [DONE]"
    assert unary.status_code == 503 and "error" in unary.json()


def test_each_prompt_s_body_is_checked_as_one_request() -> None:
    async def answers() -> list[httpx.Response]:
        async with in_process(FakeEngine()) as client:
            return [
                await post(client, {"input_ids": [[1], [2]], "rid": ["a", 5]}),
                await post(client, {"text": "ab", "rid": ["q"], "sampling_params": {"n": 2}}),
                await post(client, many(n=2, return_logprob=True, top_logprobs_num=2)),
                await post(client, {"input_ids": [[1], []]}),
            ]

    typed, text, logprobs, empty = run(answers)
    assert typed.status_code == 400 and b"rid" in typed.content
    assert [a["meta_info"]["prompt_tokens"] for a in text.json()] == [2, 2]
    assert all(a["meta_info"]["id"] != "q" for a in text.json())
    for sample in logprobs.json():
        meta = sample["meta_info"]
        assert len(meta["output_token_logprobs"]) == len(meta["output_top_logprobs"]) == 3
    assert empty.status_code == 400


def test_an_empty_batch_is_answered_with_no_sequence_as_sglang_answers_it() -> None:
    # A live SGLang 0.5.23 answers ``"text": []`` with ``[]``, or a stream of ``[DONE]`` alone.
    engine = FakeEngine()

    async def answers() -> list[httpx.Response]:
        async with in_process(engine) as client:
            return [
                await post(client, {"text": [], "stream": stream, "sampling_params": params})
                for stream in (False, True)
                for params in ({}, {"n": 2})
            ]

    unary, unary_n, stream, stream_n = run(answers)
    for answer in (unary, unary_n):
        assert (answer.status_code, answer.content) == (200, b"[]")
        assert answer.headers["content-type"] == "application/json"
    for answer in (stream, stream_n):
        assert (answer.status_code, answer.content) == (200, b"data: [DONE]\n\n")
        assert answer.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert engine.running == 0 and list(engine.outcomes) == [] and len(engine.requests) == 4
