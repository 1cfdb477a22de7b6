"""Every refusal kind, byte for byte against the running SGLang server's own answer, in both modes.

For each body of `record_refusals.CASES` and each client mode, the server is
asked, and the library's `error_response` for the same body in that mode must
be the server's answer: status, content type and body bytes (with the
library's message where `OWN_WORDS` says the library words the rule its own
way). The server's answer must also be the one recorded in
`tests/fixtures/live_refusals.jsonl`: if it is not, the live engine wins, and
`live/record_refusals.py` is run again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from live import record_refusals
from live.record_refusals import CASES, OTHER_LAYER, OWN_WORDS, Case, answer_with, message_of
from sglang_envelope import RequestRejected, decode_client_request, error_response, stream_requested
from sglang_envelope.errors.answers import refusal_layer

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "live_refusals.jsonl"
RECORDED = {
    (line["case"], line["stream"]): line
    for line in map(json.loads, FIXTURE.read_text(encoding="utf-8").splitlines())
}
RUNS = [(case, stream) for case in CASES for stream in case.modes]


def _without_message(line: dict[str, Any]) -> dict[str, Any]:
    """A recorded line, pydantic's message (which names a file and line of SGLang's) left out."""
    if line["layer"] != "pydantic":
        return line
    return {**line, "body": json.dumps({**json.loads(line["body"]), "message": None})}


@pytest.mark.parametrize(("case", "stream"), RUNS, ids=lambda v: getattr(v, "name", str(v)))
def test_the_library_answers_a_refusal_as_the_server_does(
    server: Any, case: Case, stream: bool | None
) -> None:
    live = record_refusals.record(server.url, case, stream)
    assert _without_message(live) == _without_message(RECORDED[case.name, stream])
    sent = live["request"].encode()
    with pytest.raises(RequestRejected) as raised:
        decode_client_request(sent, **live["decode"])
    rejected = raised.value
    assert rejected.code == case.code
    got = error_response(rejected, stream=stream_requested(sent))
    if case.name in OTHER_LAYER:
        assert refusal_layer(rejected) != live["layer"]
        return
    if live["layer"] in ("pydantic", "gate", "engine"):
        assert (message_of(live) != rejected.message) is (case.code in OWN_WORDS)
    assert tuple(got) == answer_with(live, rejected.message)


def test_the_server_outlived_every_refusal(server: Any) -> None:
    for case, stream in RUNS[:3]:
        record_refusals.record(server.url, case, stream)
    assert server.alive()
