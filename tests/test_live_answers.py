"""The library's answer from SGLang's stream is SGLang's own unary answer, key order included.

`tests/fixtures/live_answers.jsonl` holds a live SGLang 0.5.23 server's answers
to the same bodies, unary and streamed, on a cumulative and an incremental
server (recorded by `live/record_answers.py`; the live suite checks the same
against the running server); `running_ahead.jsonl` one stream whose lists ran
ahead of their counts (`live/record_running_ahead.py`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from live.record_running_ahead import runs_ahead
from sglang_envelope import aggregate_sse, parse_unary, relay_sse
from sglang_envelope.stream import aggregate_sse_bytes

FIXTURE = Path(__file__).parent / "fixtures" / "live_answers.jsonl"
CASES = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
#: Values that differ from one request to the next: their keys are compared, not them.
VOLATILE = frozenset(
    ("id", "e2e_latency", "response_sent_to_client_ts", "cached_tokens", "cached_tokens_details")
)


def same_answer(ours: dict[str, Any], sglang: dict[str, Any]) -> None:
    """The same keys in the same order, at the top and in meta_info, and the same values
    but for `VOLATILE` ones."""
    assert list(ours) == list(sglang)
    assert list(ours["meta_info"]) == list(sglang["meta_info"])
    assert {k: v for k, v in ours.items() if k != "meta_info"} == {
        k: v for k, v in sglang.items() if k != "meta_info"
    }
    for key, value in sglang["meta_info"].items():
        if key not in VOLATILE:
            assert ours["meta_info"][key] == value, key


def _id(case: dict[str, Any]) -> str:
    return f"{case['name']}-{'incremental' if case['incremental'] else 'cumulative'}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_the_aggregated_stream_is_the_unary_answer(case: dict[str, Any]) -> None:
    sglang = dict(parse_unary(case["unary"].encode()))
    stream = case["stream"].encode()
    same_answer(dict(aggregate_sse([stream], incremental=case["incremental"])), sglang)
    as_bytes = aggregate_sse_bytes([stream], incremental=case["incremental"])
    same_answer(msgspec.json.decode(as_bytes), sglang)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_the_stream_sends_the_sent_time_only_first(case: dict[str, Any]) -> None:
    """Why the aggregator keeps it: SGLang's stream has it on its first frame alone."""
    frames = [json.loads(event[6:]) for event in case["stream"].split("\n\n") if event[6:7] == "{"]
    having = [i for i, f in enumerate(frames) if "response_sent_to_client_ts" in f["meta_info"]]
    assert having == [0] and len(frames) > 1


RUNNING_AHEAD = json.loads((FIXTURE.parent / "running_ahead.jsonl").read_text(encoding="utf-8"))
#: The four samples run as one batch, whose size on the CPU backend changes a logprob's last
#: float32 digits between the streamed and the unary request.
TOLERANCE = 1e-5


def close(ours: Any, sglang: Any) -> bool:
    """Equal JSON values, floats within `TOLERANCE` of each other."""
    if type(sglang) is float and type(ours) is float:
        return abs(ours - sglang) <= TOLERANCE * max(1.0, abs(sglang))
    if type(sglang) is list and type(ours) is list:
        pairs = zip(ours, sglang, strict=False)
        return len(ours) == len(sglang) and all(close(a, b) for a, b in pairs)
    return bool(ours == sglang)


def test_lists_running_ahead_of_their_counts_give_sglangs_answer() -> None:
    """A live cumulative stream (n = 4, logprobs) with a middle frame whose lists hold more
    than it counts (`live/record_running_ahead.py`): each sample's answer is SGLang's unary
    one, and a relay to a client of either mode reads back to it."""
    stream = RUNNING_AHEAD["stream"].encode()
    assert runs_ahead(stream)
    sglang = parse_unary(RUNNING_AHEAD["unary"].encode(), choices=4)
    answers = aggregate_sse([stream], choices=4)
    for ours, theirs in zip(answers, sglang, strict=True):
        assert list(ours) == list(theirs) and list(ours["meta_info"]) == list(theirs["meta_info"])
        for key, value in {**theirs, **theirs["meta_info"]}.items():
            if key not in VOLATILE and key != "meta_info":
                assert close({**ours, **ours["meta_info"]}[key], value), key
    for client_incremental in (True, False):
        relayed = b"".join(relay_sse([stream], choices=4, client_incremental=client_incremental))
        assert b'"error"' not in relayed
        assert aggregate_sse([relayed], choices=4) == answers  # the mode read from the frames
