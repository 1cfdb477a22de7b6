"""SGLang's answers of many sequences, read with ``choices=``: streamed equals unary, per choice.

Each body goes to SGLang twice at temperature 0, streamed and not. The stream
read by `aggregate_sse(..., choices=N)` must equal the unary array read by
`parse_unary(..., choices=N)`, element by element, but for the volatile values
(`flow.VOLATILE_META`: every sample of n > 1 has a random rid of its own), with
the same keys in the same order; on the default (cumulative) server and an
``--incremental-streaming-output`` one. The relay with ``choices=`` re-aggregates
to the same answers.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from live.flow import assert_same, client, direct
from live.record_running_ahead import runs_ahead
from live.servers import LiveServer
from sglang_envelope import aggregate_sse, parse_unary, relay_sse

PROMPT = [5, 6, 7, 9, 10, 11, 12, 13]
GREEDY = {"temperature": 0, "max_new_tokens": 10}
#: The sequences of one request run as one batch, whose size on the CPU backend changes a
#: logprob's last float32 digits (the streamed and the unary run batch alike, but not always
#: step by step): floats are compared relatively within this.
TOLERANCE = 1e-5

#: name -> (the client's body without `stream`, its number of sequences)
BODIES: dict[str, tuple[dict[str, Any], int]] = {
    "n2": ({"input_ids": PROMPT, "sampling_params": {**GREEDY, "n": 2}}, 2),
    "n4_logprobs": (
        {
            "input_ids": PROMPT,
            "sampling_params": {**GREEDY, "n": 4},
            "return_logprob": True,
            "top_logprobs_num": 2,
        },
        4,
    ),
    "batch3": ({"input_ids": [PROMPT, [1, 2, 3], [40, 41]], "sampling_params": GREEDY}, 3),
    "batch2_n2": ({"input_ids": [PROMPT, [1, 2, 3]], "sampling_params": {**GREEDY, "n": 2}}, 4),
}


async def _both(live: LiveServer, body: dict[str, Any]) -> tuple[bytes, bytes]:
    async with client() as http:
        streamed = await direct(http, live.url, json.dumps({**body, "stream": True}).encode())
        unary = await direct(http, live.url, json.dumps({**body, "stream": False}).encode())
    assert streamed.status == unary.status == 200, (streamed.body[:300], unary.body[:300])
    return streamed.body, unary.body


#: The servers each test runs on (the suite's `any_server`, started and stopped by its pool).
SERVERS = pytest.mark.parametrize("any_server", ["server", "incremental_server"], indirect=True)


@SERVERS
@pytest.mark.parametrize("name", list(BODIES))
def test_stream_equals_unary(any_server: LiveServer, name: str) -> None:
    body, n = BODIES[name]
    stream, unary = asyncio.run(_both(any_server, body))
    want = parse_unary(unary, choices=n)
    got = aggregate_sse([stream], choices=n)
    assert len(got) == len(want) == n
    for mine, theirs in zip(got, want, strict=True):
        assert "index" not in mine
        assert_same(dict(mine), dict(theirs), tolerance=TOLERANCE)
    # Every index came in the stream, and each sample's rid is its own.
    indices = {
        json.loads(line[6:])["index"] for line in stream.split(b"\n\n") if b'"index"' in line
    }
    assert indices == set(range(n))


@SERVERS
@pytest.mark.parametrize("client_incremental", [False, True])
@pytest.mark.parametrize("name", list(BODIES))
def test_relay_reaggregates(any_server: LiveServer, name: str, client_incremental: bool) -> None:
    body, n = BODIES[name]
    stream, _ = asyncio.run(_both(any_server, body))
    relayed = b"".join(relay_sse([stream], choices=n, client_incremental=client_incremental))
    assert relayed.endswith(b"data: [DONE]\n\n") and relayed.count(b"[DONE]") == 1
    assert b'"error"' not in relayed, relayed[-400:]
    got = aggregate_sse([relayed], choices=n, incremental=client_incremental)
    want = aggregate_sse([stream], choices=n)
    assert got == want


def test_lists_running_ahead_of_their_counts_are_read_and_relayed(server: LiveServer) -> None:
    """SGLang writes a cumulative middle frame's growing lists when it gets to the frame, so
    about one stream in 30 to 150 of this body has a frame whose ids and logprobs run past
    its counts (`live/record_running_ahead.py`; `tests/fixtures/running_ahead.jsonl` holds
    one for the unit tests). Streamed until one does, at most 100 times, every stream gives
    the unary answer and relays to a client of either mode."""
    body, n = BODIES["n4_logprobs"]
    stream_body = json.dumps({**body, "stream": True}).encode()

    async def until_ahead() -> tuple[list[bytes], bytes]:
        streams: list[bytes] = []
        async with client() as http:
            unary = await direct(http, server.url, json.dumps({**body, "stream": False}).encode())
            while len(streams) < 100 and not any(map(runs_ahead, streams[-1:])):
                answer = await direct(http, server.url, stream_body)
                assert answer.status == 200, answer.body[:300]
                streams.append(answer.body)
        return streams, unary.body

    streams, unary = asyncio.run(until_ahead())
    want = parse_unary(unary, choices=n)
    for stream in streams:
        got = aggregate_sse([stream], choices=n)
        for mine, theirs in zip(got, want, strict=True):
            assert_same(dict(mine), dict(theirs), tolerance=TOLERANCE)
        for client_incremental in (False, True):
            relayed = relay_sse([stream], choices=n, client_incremental=client_incremental)
            assert aggregate_sse([b"".join(relayed)], choices=n) == got
