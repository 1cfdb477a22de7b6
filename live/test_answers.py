"""The README's worker flow answers what SGLang answers directly, field by field and key by key.

Each body goes to SGLang twice at temperature 0: as the client sent it, and through
the library (frontend, envelope wire form, aggregated worker). The answers must be
equal but for the volatile values (`flow.VOLATILE_META`), with the same keys in the
same order, for a unary and a streaming client, on the default (cumulative) server,
an `--incremental-streaming-output` one and a `--skip-tokenizer-init` one.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from live.flow import (
    Answer,
    assert_same,
    body_of,
    client,
    direct,
    final_state,
    key_order,
    through_library,
)
from live.servers import LiveServer

PROMPT = [5, 6, 7, 9, 10, 11, 12, 13]
GREEDY = {"temperature": 0, "max_new_tokens": 12}

#: name -> the client's body without `stream`; each runs for both client modes.
BODIES: dict[str, dict[str, Any]] = {
    "plain": {"input_ids": PROMPT, "sampling_params": GREEDY},
    "logprobs_from_2": {
        "input_ids": PROMPT,
        "sampling_params": GREEDY,
        "return_logprob": True,
        "top_logprobs_num": 3,
        "logprob_start_len": 2,
    },
    "logprobs_output_only": {
        "input_ids": PROMPT,
        "sampling_params": GREEDY,
        "return_logprob": True,
        "logprob_start_len": -1,
        "token_ids_logprob": [7, 86],
    },
    "prompt_flat": {
        "input_ids": PROMPT,
        "sampling_params": GREEDY,
        "return_logprob": True,
        "top_logprobs_num": 2,
        "logprob_start_len": 0,
        "return_flat_raw_top_logprobs": True,
    },
    "prompt_flat_b64": {
        "input_ids": PROMPT,
        "sampling_params": GREEDY,
        "return_logprob": True,
        "top_logprobs_num": 2,
        "logprob_start_len": 0,
        "return_flat_raw_top_logprobs": True,
        "return_flat_raw_top_logprobs_b64": True,
    },
    "stop_token_ids": {
        "input_ids": PROMPT,
        "sampling_params": {**GREEDY, "max_new_tokens": 32, "stop_token_ids": [295]},
    },
    "ignore_eos": {
        "input_ids": [1, 1, 1],
        "sampling_params": {**GREEDY, "max_new_tokens": 24, "ignore_eos": True},
    },
}
#: Output-flat: SGLang builds it only on a unary answer (a streaming client is refused).
UNARY_ONLY: dict[str, dict[str, Any]] = {
    "output_flat": {
        "input_ids": PROMPT,
        "sampling_params": GREEDY,
        "return_logprob": True,
        "top_logprobs_num": 3,
        "return_flat_raw_output_top_logprobs": True,
    },
    "output_flat_b64": {
        "input_ids": PROMPT,
        "sampling_params": GREEDY,
        "return_logprob": True,
        "top_logprobs_num": 3,
        "return_flat_raw_output_top_logprobs": True,
        "return_flat_raw_top_logprobs_b64": True,
    },
}


#: What SGLang's own answer must show for a body to test what its name says.
FINISH: dict[str, dict[str, Any]] = {
    "stop_token_ids": {"type": "stop", "matched": 295},
    "ignore_eos": {"type": "length", "length": 24},
}


def check_case(name: str, response: dict[str, Any]) -> None:
    want = FINISH.get(name, {"type": "length", "length": GREEDY["max_new_tokens"]})
    assert response["meta_info"]["finish_reason"] == want


def incremental(server: LiveServer) -> bool:
    return bool(json.loads(server.server_info)["incremental_streaming_output"])


async def both(server: LiveServer, body: bytes) -> tuple[Answer, Answer]:
    async with client() as http:
        want = await direct(http, server.url, body)
        got = await through_library(http, server.url, body, incremental=incremental(server))
    return got, want


@pytest.mark.parametrize("name", [*BODIES, *UNARY_ONLY])
def test_unary_client(any_server: LiveServer, name: str) -> None:
    request = {**BODIES, **UNARY_ONLY}[name]
    got, want = asyncio.run(both(any_server, body_of({**request, "stream": False})))
    assert (want.status, want.content_type) == (200, "application/json")
    assert got.status == want.status
    check_case(name, want.json())
    assert_same(got.json(), want.json())


def shapes(frames: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The key orders of a stream's frames by their place: SGLang writes its first frame, its
    middle frames and its last frame with their own keys (one frame is both first and last)."""
    keys = [key_order(frame) for frame in frames]
    if len(keys) == 1:
        return {"only": keys}
    return {"first": keys[:1], "middle": keys[1:-1], "last": keys[-1:]}


@pytest.mark.parametrize("name", list(BODIES))
def test_streaming_client(any_server: LiveServer, name: str) -> None:
    got, want = asyncio.run(both(any_server, body_of({**BODIES[name], "stream": True})))
    assert (want.status, want.content_type) == (200, "text/event-stream; charset=utf-8")
    assert got.status == want.status
    got_frames, want_frames = got.frames(), want.frames()
    mode = incremental(any_server)
    check_case(name, final_state(want_frames, incremental=mode))
    assert_same(
        final_state(got_frames, incremental=mode), final_state(want_frames, incremental=mode)
    )
    # SGLang coalesces tokens into frames as it pleases (more so on a busy machine): the counts
    # may differ, not the keys of a frame in its place.
    got_shapes, want_shapes = shapes(got_frames), shapes(want_frames)
    for place in got_shapes.keys() & want_shapes.keys():
        for keys in got_shapes[place]:
            assert keys in want_shapes[place] or not want_shapes[place], place
