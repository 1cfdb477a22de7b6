"""The README's frontend and worker examples serve requests as written."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec

from sglang_envelope import SSE_DONE, Bootstrap, encode_sse

README = Path(__file__).resolve().parent.parent / "README.md"
SEED = (
    b'{"rid": "client-1", "input_ids": [1, 2], "stream": false, '
    b'"return_flat_raw_output_top_logprobs": true}'
)
BOOTSTRAP = Bootstrap("10.0.0.7", 8998, 1)


def _examples() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    for block in re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL):
        exec(compile(block, str(README), "exec"), namespace)
    return namespace


def _response(text: str, ids: list[int], tokens: int, finish: Any = None) -> dict[str, Any]:
    """One answer as SGLang writes it."""
    meta = {"id": "client-1", "finish_reason": finish, "completion_tokens": tokens}
    return {"text": text, "output_ids": ids, "meta_info": meta}


class Engine:
    """A stand-in transport: records each post and answers with `answer`, in 5-byte chunks."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.sent: list[tuple[str, dict[str, Any], str]] = []

    def post(self, path: str, body: bytes, *, accept: str) -> AsyncIterator[bytes]:
        self.sent.append((path, msgspec.json.decode(body), accept))
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        for at in range(0, len(self.answer), 5):
            yield self.answer[at : at + 5]


def _serve(body: bytes, engine: Engine) -> tuple[int, Any]:
    examples = _examples()
    worker = functools.partial(examples["worker"], post=engine.post, bootstrap=BOOTSTRAP)

    async def run() -> tuple[int, Any]:
        status, answer = await examples["frontend"](body, worker)
        if not isinstance(answer, bytes):  # a stream: what the client would read
            answer = b"".join([chunk async for chunk in answer])
        return status, answer

    return asyncio.run(run())


def test_a_unary_request_with_output_flat_gets_the_unary_body() -> None:
    finished = _response(" The", [7], 1, {"type": "length", "length": 1})
    engine = Engine(msgspec.json.encode(finished))
    status, answer = _serve(SEED, engine)
    ((path, sent, accept),) = engine.sent
    assert (path, accept) == ("/generate", "application/json")
    assert sent["stream"] is False and sent["return_flat_raw_output_top_logprobs"] is True
    assert sent["bootstrap_room"] == 1 and sent["rid"] == "client-1"
    assert status == 200 and msgspec.json.decode(answer) == finished


def test_a_unary_client_without_output_flat_gets_one_body_from_the_engine_s_frames() -> None:
    frames = [_response("hi", [7], 1), _response("!", [8], 2, {"type": "stop", "matched": 2})]
    engine = Engine(b"".join(encode_sse(frame) for frame in frames) + SSE_DONE)
    status, answer = _serve(b'{"rid": "client-1", "input_ids": [5], "stream": false}', engine)
    ((_, sent, accept),) = engine.sent
    assert sent["stream"] is True and accept == "text/event-stream"  # streamed internally
    assert status == 200
    reply = msgspec.json.decode(answer)  # one JSON body, not SSE
    assert reply["text"] == "hi!" and reply["output_ids"] == [7, 8]
    assert reply["meta_info"]["id"] == "client-1"


def test_a_streaming_client_gets_cumulative_frames() -> None:
    frames = [_response("hi", [7], 1), _response("!", [8], 2, {"type": "stop", "matched": 2})]
    engine = Engine(b"".join(encode_sse(frame) for frame in frames) + SSE_DONE)
    status, answer = _serve(b'{"rid": "client-1", "input_ids": [5], "stream": true}', engine)
    assert status == 200 and engine.sent[0][2] == "text/event-stream"
    *events, done = answer[:-2].split(b"\n\n")
    assert done == b"data: [DONE]"
    last = msgspec.json.decode(events[-1].removeprefix(b"data: "))
    assert (last["text"], last["output_ids"]) == ("hi!", [7, 8])


def test_a_rejected_request_gets_sglang_s_400_and_reaches_no_engine() -> None:
    engine = Engine(b"")
    streaming = SEED.replace(b'"stream": false', b'"stream": true')
    status, answer = _serve(streaming, engine)
    error = msgspec.json.decode(answer)["error"]
    assert status == 400 and engine.sent == []
    assert error["param"] == "return_flat_raw_output_top_logprobs"


def test_an_engine_error_body_gets_the_engine_s_status() -> None:
    engine = Engine(b'{"error": {"message": "busy", "code": 503}}')
    status, answer = _serve(SEED, engine)
    assert status == 503
    assert msgspec.json.decode(answer)["error"]["message"] == "busy"
