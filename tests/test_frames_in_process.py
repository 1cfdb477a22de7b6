"""SGLang's answer as an in-process engine yields it (dicts): the same readers' verdicts.

Each live answer of `tests/fixtures/live_answers.jsonl` (a cumulative and an
incremental server) is read as the objects the engine yields in-process: its
frames decoded. The object readers must give what the byte readers give on the
same answer: the aggregation, the unary answer, and the relay in either client
mode, frame by frame.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    EngineError,
    EnvelopeError,
    ResponseError,
    aggregate_sse,
    parse_unary,
    relay_sse,
)
from sglang_envelope.stream import (
    SSE_DONE,
    aggregate_frames,
    aggregate_frames_async,
    encode_sse,
    error_event,
    relay_frames,
    relay_frames_async,
)

FIXTURE = Path(__file__).parent / "fixtures" / "live_answers.jsonl"
CASES = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]


def frames_of(stream: str) -> list[dict[str, Any]]:
    return [json.loads(event[6:]) for event in stream.split("\n\n") if event[6:7] == "{"]


def events_of(stream: str) -> list[bytes]:
    """The stream an event a chunk: the byte relay then sends a frame an event, as the
    object relay sends a frame an object (a chunk of several events goes out as one
    frame, the latest state, when the relay converts)."""
    return [event.encode() + b"\n\n" for event in stream.split("\n\n") if event]


def sse_frames(data: bytes) -> list[dict[str, Any]]:
    return [msgspec.json.decode(e[6:]) for e in data.split(b"\n\n") if e[6:7] == b"{"]


async def outputs(frames: Iterable[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    """The frames as an in-process engine yields them: one at a time, awaited."""
    for frame in frames:
        await asyncio.sleep(0)
        yield frame


async def collected(frames: AsyncIterator[dict[str, Any]]) -> list[dict[str, Any]]:
    return [frame async for frame in frames]


def _id(case: dict[str, Any]) -> str:
    return f"{case['name']}-{'incremental' if case['incremental'] else 'cumulative'}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_the_objects_aggregate_to_what_the_bytes_do(case: dict[str, Any]) -> None:
    frames = frames_of(case["stream"])
    want = aggregate_sse([case["stream"].encode()])
    assert aggregate_frames(frames) == want
    assert asyncio.run(aggregate_frames_async(outputs(frames))) == want
    unary = json.loads(case["unary"])
    assert parse_unary(unary) == parse_unary(case["unary"].encode()) == unary


@pytest.mark.parametrize("client_incremental", [False, True])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_the_objects_relay_as_the_bytes_do(case: dict[str, Any], client_incremental: bool) -> None:
    frames = frames_of(case["stream"])
    relayed_bytes = relay_sse(events_of(case["stream"]), client_incremental=client_incremental)
    by_bytes = sse_frames(b"".join(relayed_bytes))
    by_objects = list(relay_frames(frames, client_incremental=client_incremental))
    assert by_objects == by_bytes
    relayed = relay_frames_async(outputs(frames), client_incremental=client_incremental)
    assert asyncio.run(collected(relayed)) == by_bytes
    # The client's answer read back is SGLang's, whichever mode it was relayed in.
    read_back = aggregate_frames(by_objects, incremental=client_incremental)
    assert read_back == aggregate_sse([case["stream"].encode()])


@given(st.data())
def test_any_cut_of_a_stream_fails_as_the_bytes_relay_does(data: st.DataObject) -> None:
    case = data.draw(st.sampled_from(CASES))
    frames = frames_of(case["stream"])
    cut = data.draw(st.integers(0, len(frames) - 1))
    client = data.draw(st.booleans())
    events = [encode_sse(frame) for frame in frames[:cut]]
    by_bytes = sse_frames(b"".join(relay_sse(events, client_incremental=client)))
    by_objects = list(relay_frames(frames[:cut], client_incremental=client))
    assert by_objects == by_bytes
    assert "error" in by_objects[-1] and "ended" in by_objects[-1]["error"]["message"]


def test_an_error_object_from_the_engine_ends_the_relay_as_sglang_s_frame() -> None:
    frames = frames_of(CASES[0]["stream"])
    failed = EngineError("The running request was aborted by a backend error.", 500)
    engine_error = msgspec.json.decode(error_event(failed)[6:])
    relayed = list(relay_frames([frames[0], engine_error, frames[1]]))
    assert relayed == [frames[0], engine_error]
    data = b"".join(encode_sse(frame) for frame in relayed) + SSE_DONE
    assert data.endswith(error_event(failed) + SSE_DONE)


@pytest.mark.parametrize(
    ("call", "words"),
    [(lambda: relay_frames([], incremental=1), "incremental: expected True, False or None"),  # type: ignore[arg-type]
     (lambda: relay_frames([], client_incremental=None), "client_incremental: expected a bool"),  # type: ignore[arg-type]
     (lambda: relay_frames(7), "relay_frames frames: expected an iterable"),  # type: ignore[arg-type]
     (lambda: relay_frames_async([]), "expected an async iterable")],  # type: ignore[arg-type]
)  # fmt: skip
def test_bad_arguments_are_refused_at_the_call(call: Any, words: str) -> None:
    with pytest.raises(EnvelopeError, match=words):
        call()


def test_what_is_not_a_frame_is_the_relay_s_error_frame() -> None:
    (error,) = relay_frames(["not a frame"])  # type: ignore[list-item]
    assert error["error"]["type"] == "response_error" and "frame 1" in error["error"]["message"]
    with pytest.raises(ResponseError, match="expected an object"):
        aggregate_frames(["not a frame"])  # type: ignore[list-item]
    with pytest.raises(ResponseError, match="JSON array"):
        parse_unary([json.loads(CASES[0]["unary"])])


def test_an_abort_with_a_status_is_relayed_as_sglang_streams_it() -> None:
    """SGLang streams a request it ended with a status (a timeout) as its last frame."""
    frames = frames_of(CASES[0]["stream"])[:2]
    last = {**frames[-1], "meta_info": dict(frames[-1]["meta_info"])}
    last["meta_info"]["finish_reason"] = {
        "type": "abort",
        "status_code": 503,
        "message": "Request running timeout reached.",
    }
    stream = [frames[0], last]
    relayed = list(relay_frames(stream, incremental=CASES[0]["incremental"]))
    assert relayed[-1]["meta_info"]["finish_reason"] == last["meta_info"]["finish_reason"]
    data = b"".join(encode_sse(frame) for frame in stream) + SSE_DONE
    by_bytes = sse_frames(b"".join(relay_sse([data], incremental=CASES[0]["incremental"])))
    assert relayed == by_bytes


@given(st.data())
def test_the_async_relay_ends_as_the_sync_one_on_a_cut_or_an_error(
    data: st.DataObject,
) -> None:
    case = data.draw(st.sampled_from(CASES))
    frames = frames_of(case["stream"])
    cut = data.draw(st.integers(0, len(frames) - 1))
    failed = EngineError("The running request was aborted by a backend error.", 500)
    engine_error = msgspec.json.decode(error_event(failed)[6:])
    for stream in (frames[:cut], [*frames[:cut], engine_error, *frames[cut:]]):
        want = list(relay_frames(stream, incremental=case["incremental"]))
        relayed = relay_frames_async(outputs(stream), incremental=case["incremental"])
        assert asyncio.run(collected(relayed)) == want
        assert "error" in want[-1]


def test_many_sequences_aggregate_async_as_they_do_sync() -> None:
    """Two sequences' frames, interleaved with their ``index`` as SGLang streams n = 2."""
    one, two = (frames_of(case["stream"]) for case in CASES[:2] if not case["incremental"])
    both = [
        {**frame, "index": i}
        for pair in zip(one, two, strict=False)
        for i, frame in enumerate(pair)
    ]
    both += [{**frame, "index": 0} for frame in one[len(two) :]]
    both += [{**frame, "index": 1} for frame in two[len(one) :]]
    want = aggregate_frames(both, incremental=False, choices=2)
    got = asyncio.run(aggregate_frames_async(outputs(both), incremental=False, choices=2))
    assert got == want and len(got) == 2


def test_a_cumulative_frame_without_ids_of_its_own_passes_as_it_is() -> None:
    """Only a frame holding SGLang's growing lists is cut to its counts."""
    frames = frames_of(CASES[0]["stream"])
    bare = [{key: value for key, value in frame.items() if key != "output_ids"} for frame in frames]
    assert list(relay_frames(bare, incremental=False)) == bare


def growing_engine(steps: int) -> Iterator[dict[str, Any]]:
    """A cumulative engine as SGLang's ``_handle_batch_output`` is one: every middle frame
    holds the request's growing lists themselves, which later tokens extend."""
    ids: list[int] = []
    logprobs: list[list[Any]] = []
    tops: list[list[Any]] = []
    for step in range(1, steps + 1):
        ids.append(step)
        logprobs.append([-0.5, step, None])
        tops.append([[-0.5, step, None]])
        last = step == steps
        meta = {
            "id": "rid",
            "finish_reason": {"type": "length", "length": steps} if last else None,
            "completion_tokens": step,
            "output_token_logprobs": list(logprobs) if last else logprobs,
            "output_top_logprobs": list(tops) if last else tops,
            "output_token_logprobs_length": step,
        }
        yield {"output_ids": list(ids) if last else ids, "meta_info": meta}


@pytest.mark.parametrize("client_incremental", [False, True])
def test_a_frame_kept_later_says_what_it_said(client_incremental: bool) -> None:
    """The client's frames are read after the engine went on: each holds its own counts'
    entries, as SGLang writes them when it keeps up (the frames copied at each step)."""
    kept = list(relay_frames(growing_engine(6), client_incremental=client_incremental))
    want = [
        json.loads(json.dumps(frame))
        for frame in relay_frames(
            (json.loads(json.dumps(frame)) for frame in growing_engine(6)),
            client_incremental=client_incremental,
        )
    ]
    assert kept == want
    assert [len(frame["output_ids"]) for frame in kept] == (
        [1] * 6 if client_incremental else [1, 2, 3, 4, 5, 6]
    )
    assert all(len(f["meta_info"]["output_top_logprobs"]) == len(f["output_ids"]) for f in kept)
