"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec

from sglang_envelope import SSE_DONE, Bootstrap, encode_sse

README = Path(__file__).resolve().parent.parent / "README.md"
SEED = b'{"input_ids": [1, 2], "stream": false, "return_flat_raw_output_top_logprobs": true}'


def _examples() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    for block in re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL):
        exec(compile(block, str(README), "exec"), namespace)
    return namespace


def _response(finish: dict[str, Any] | None, tokens: int = 1) -> dict[str, Any]:
    """One frame as SGLang writes it; `tokens` is its completion_tokens, all tokens so far."""
    meta = {"id": "r1", "finish_reason": finish, "completion_tokens": tokens}
    return {"text": "hi", "output_ids": [7], "meta_info": meta}


def test_frontend_and_worker_examples_serve_a_unary_request() -> None:
    examples = _examples()
    sent: list[tuple[str, dict[str, Any], str]] = []

    def post(path: str, body: bytes, *, accept: str) -> list[bytes]:
        sent.append((path, msgspec.json.decode(body), accept))
        return [msgspec.json.encode(_response({"type": "length", "length": 1}))]

    wire = examples["admit"](SEED, "r1")
    reply = examples["serve"](wire, post, Bootstrap("10.0.0.7", 8998, 1))
    assert sent[0][0] == "/generate"
    assert sent[0][1]["stream"] is False and sent[0][2] == "application/json"
    assert examples["answer"](msgspec.json.encode(reply)) == reply
    assert reply["output_ids"] == [7]


def test_worker_example_aggregates_a_stream() -> None:
    examples = _examples()
    frames = [_response(None), _response({"type": "stop", "matched": 2}, tokens=2)]

    def post(path: str, body: bytes, *, accept: str) -> list[bytes]:
        assert accept == "text/event-stream"
        return [b"".join(encode_sse(f) for f in frames) + SSE_DONE]

    wire = examples["admit"](b'{"input_ids": [5]}', "r2")
    reply = examples["serve"](wire, post, Bootstrap("10.0.0.7", 8998, 2))
    assert reply["output_ids"] == [7, 7]
    assert reply["text"] == "hihi"
