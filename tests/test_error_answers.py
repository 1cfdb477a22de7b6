"""error_response against SGLang 0.5.23's own answers, recorded live (live/record_refusals.py).

Each line of `tests/fixtures/live_refusals.jsonl` is a body breaking one rule,
sent to a running server in one client mode, and SGLang's answer: status,
content type and body bytes. The library decodes the same body, and its
`error_response` in the client's mode must give that answer byte for byte:
in SGLang's words where the library has them, else with the library's own
message in SGLang's shape (`OWN_WORDS`, and docs/errors.md says why).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from live.record_refusals import (
    CASES,
    OTHER_LAYER,
    OWN_WORDS,
    answer_with,
    engine_answer,
    message_of,
    sglang_json,
)
from sglang_envelope import (
    EngineError,
    EnvelopeError,
    RequestRejected,
    decode_client_request,
    error_response,
    stream_requested,
)
from sglang_envelope.errors.answers import REFUSAL_LAYERS, refusal_layer
from sglang_envelope.errors.exceptions import RejectionCode
from sglang_envelope.stream import error_event
from sglang_envelope.types import ErrorAnswer

FIXTURE = Path(__file__).parent / "fixtures" / "live_refusals.jsonl"
LINES: list[dict[str, Any]] = [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def _rejection(line: dict[str, Any]) -> RequestRejected:
    with pytest.raises(RequestRejected) as raised:
        decode_client_request(line["request"].encode(), **line["decode"])
    assert raised.value.code == line["code"], raised.value
    return raised.value


def test_the_recording_covers_every_case_in_both_modes_and_each_layer() -> None:
    assert [(line["case"], line["stream"]) for line in LINES] == [
        (case.name, stream) for case in CASES for stream in case.modes
    ]
    layers = {line["layer"] for line in LINES}
    assert {"pydantic", "gate", "engine", "accepts"} <= layers


@pytest.mark.parametrize("line", LINES, ids=lambda line: f"{line['case']}-{line['stream']}")
def test_sglang_s_answer_is_rewritten_faithfully(line: dict[str, Any]) -> None:
    """The test's own oracle: SGLang's recorded answer, given back its message, is itself."""
    if line["body"] is None or line["layer"] not in ("pydantic", "gate", "engine"):
        return
    recorded = (line["status"], line["content_type"], line["body"].encode())
    assert answer_with(line, message_of(line)) == recorded


@pytest.mark.parametrize("line", LINES, ids=lambda line: f"{line['case']}-{line['stream']}")
def test_error_response_is_sglang_s_answer(line: dict[str, Any]) -> None:
    rejected = _rejection(line)
    stream = stream_requested(line["request"].encode())
    assert stream is (line["stream"] is True)
    got = error_response(rejected, stream=stream)
    assert isinstance(got, ErrorAnswer)
    if line["case"] in OTHER_LAYER:
        assert refusal_layer(rejected) != line["layer"]
        return
    own = line["code"] in OWN_WORDS
    if line["layer"] in ("pydantic", "gate", "engine"):
        assert (message_of(line) != rejected.message) is own, rejected.message
    assert tuple(got) == answer_with(line, rejected.message)


def test_every_rule_code_has_a_layer_that_was_recorded_or_is_the_engine_s() -> None:
    recorded = {line["code"]: line["layer"] for line in LINES if line["case"] not in OTHER_LAYER}
    for code in RejectionCode.__args__:  # type: ignore[attr-defined]
        layer = REFUSAL_LAYERS.get(code, "engine")
        if code in recorded and recorded[code] in ("pydantic", "gate"):
            assert layer == recorded[code] or code in ("wrong_type", "invalid_value"), code


def test_body_too_large_keeps_413_in_both_modes() -> None:
    rejected = RequestRejected("body_too_large", None, "request body is 9 bytes; the limit is 1")
    body = b'{"error":{"message":"request body is 9 bytes; the limit is 1"}}'
    for stream in (None, False, True):
        assert error_response(rejected, stream=stream) == (413, "application/json", body)


@pytest.mark.parametrize("stream", [None, False, True])
def test_an_engine_error_keeps_sglang_s_status_and_shape(stream: bool | None) -> None:
    got = error_response(EngineError("routed_dp_rank=1 out of range [0, 1)", 400), stream=stream)
    assert tuple(got) == engine_answer(stream, "routed_dp_rank=1 out of range [0, 1)")
    busy = error_response(EngineError("busy", 503), stream=stream)
    if stream:
        assert busy.status == 200 and busy.body.startswith(error_event(EngineError("busy", 503)))
        assert b'"code":503' in busy.body
    else:
        assert busy == (503, "application/json", b'{"error":{"message":"busy"}}')


def test_detail_gives_the_rule_and_its_field_in_either_mode() -> None:
    rejected = RequestRejected("orchestrator_field", "routed_dp_rank", "no")
    detailed = {
        "error": {
            "message": "no",
            "type": "orchestrator_field",
            "code": 400,
            "retryable": False,
            "param": "routed_dp_rank",
        }
    }
    for stream in (None, False, True):
        got = error_response(rejected, stream=stream, detail=True)
        assert got == (400, "application/json", sglang_json(detailed))
    assert error_event(rejected, detail=True) == b"data: " + sglang_json(detailed) + b"\n\n"
    plain = {"message": "no", "type": "invalid_request_error", "code": 400, "retryable": False}
    assert error_event(rejected) == b"data: " + sglang_json({"error": plain}) + b"\n\n"


@pytest.mark.parametrize(
    ("body", "stream"),
    [
        (b'{"stream": true}', True),
        (b'{"input_ids": [1], "stream" : true }', True),
        ({"stream": True}, True),
        ('{"stream": true}', True),
        (b'{"stream": false}', False),
        (b'{"stream": "true"}', False),
        (b'{"stream": 1}', False),
        (b'{"stream": null}', False),
        (b"{}", False),
        (b'{"stream": tru', False),
        (b"[true]", False),
        (b"\xff", False),
        (None, False),
        (b"[" * 100_000, False),
    ],
)
def test_stream_requested_reads_the_mode_leniently(body: Any, stream: bool) -> None:
    assert stream_requested(body) is stream


@pytest.mark.parametrize("flags", [{"stream": "yes"}, {"stream": 1}, {"detail": None}])
def test_the_mode_and_detail_must_be_bools(flags: dict[str, Any]) -> None:
    with pytest.raises(EnvelopeError, match=r"^(stream|detail): expected a bool, got "):
        error_response(EngineError("busy", 503), **flags)


@pytest.mark.parametrize(
    ("code", "field", "layer"),
    [
        ("wrong_type", "sampling_params", "pydantic"),
        ("wrong_type", "sampling_params.stop[0]", "gate"),
        ("wrong_type", "sampling_params.watermark.enabled", "gate"),
        ("invalid_value", "max_thinking_tokens", "gate"),
        ("wrong_type", "watermark", "engine"),
        ("wrong_type", "watermark.key", "engine"),
        ("wrong_type", "input_ids[0]", "pydantic"),
        ("wrong_type", None, "pydantic"),
        ("not_json", None, "pydantic"),
        ("unknown_sampling_param", "sampling_params.max_tokens", "gate"),
        ("empty_input_ids", "input_ids", "engine"),
        ("orchestrator_field", "sampling_params.x", "engine"),  # fields matter for two rules only
        ("a rule of a later release", None, "engine"),
    ],
)
def test_the_layer_is_read_from_the_rule_and_its_field(
    code: str, field: str | None, layer: str
) -> None:
    assert refusal_layer(RequestRejected(code, field, "m")) == layer
