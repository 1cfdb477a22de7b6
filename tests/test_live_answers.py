"""The library's answer from SGLang's stream is SGLang's own unary answer, key order included.

`tests/fixtures/live_answers.jsonl` holds a live SGLang 0.5.23 server's answers
to the same bodies, unary and streamed, on a cumulative and an incremental
server (recorded by `live/record_answers.py`; the live suite checks the same
against the running server).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sglang_envelope import aggregate_sse, parse_unary
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
