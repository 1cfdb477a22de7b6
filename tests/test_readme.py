"""The README's frontend and worker examples serve requests as written."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sglang_envelope import Bootstrap, Deployment
from sglang_envelope.stream import SSE_DONE, encode_sse

README = Path(__file__).resolve().parent.parent / "README.md"
SEED = (
    b'{"rid": "client-1", "input_ids": [1, 2], "stream": false, '
    b'"return_flat_raw_output_top_logprobs": true}'
)
BOOTSTRAP = Bootstrap("10.0.0.7", 8998, 1)
#: The live suite's model: 320 ids, a context of 1,024 tokens.
DEPLOYMENT = Deployment(vocab_size=320, context_length=1024, num_reserved_tokens=0,
                        allow_auto_truncate=False)  # fmt: skip
SSE, JSON = "text/event-stream; charset=utf-8", "application/json"


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
    """A stand-in transport: records each post; answers `status` and `answer` in 5-byte chunks."""

    def __init__(self, answer: bytes, status: int = 200) -> None:
        self.answer = answer
        self.status = status
        self.sent: list[tuple[str, dict[str, Any], str]] = []

    async def post(
        self, path: str, body: bytes, *, headers: dict[str, str]
    ) -> tuple[int, AsyncIterator[bytes]]:
        assert headers["Content-Type"] == "application/json"  # SGLang refuses a body without
        self.sent.append((path, msgspec.json.decode(body), headers["Accept"]))
        return self.status, self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        for at in range(0, len(self.answer), 5):
            yield self.answer[at : at + 5]


def _serve(body: bytes, engine: Engine, deployment: Deployment = DEPLOYMENT) -> tuple[int, Any]:
    status, media, answer = _answer(body, engine, deployment)
    assert media == ("text/event-stream; charset=utf-8" if b"data: " in answer[:6] else JSON)
    return status, answer


def _answer(
    body: bytes, engine: Engine, deployment: Deployment = DEPLOYMENT
) -> tuple[int, str, bytes]:
    """What the client reads: the status, the content type and the body's bytes."""
    examples = _examples()
    worker = functools.partial(
        examples["worker"], post=engine.post, bootstrap=BOOTSTRAP, deployment=deployment
    )

    async def run() -> tuple[int, str, bytes]:
        status, media, answer = await examples["frontend"](body, worker)
        if not isinstance(answer, bytes):  # a stream: what the client would read
            answer = b"".join([chunk async for chunk in answer])
        return status, media, answer

    return asyncio.run(run())


def test_a_unary_request_with_output_flat_gets_the_unary_body() -> None:
    finished = _response(" The", [7], 1, {"type": "length", "length": 1})
    engine = Engine(msgspec.json.encode(finished))
    status, answer = _serve(SEED, engine)
    ((path, sent, accept),) = engine.sent
    assert (path, accept) == ("/generate", "application/json")
    assert sent["stream"] is False and sent["return_flat_raw_output_top_logprobs"] is True
    assert sent["bootstrap_room"] == 1 and re.fullmatch("[0-9a-f]{32}", sent["rid"])
    assert status == 200 and msgspec.json.decode(answer) == finished


@pytest.mark.parametrize("incremental", [True, False, None])
def test_a_unary_client_is_asked_unary_on_every_server(incremental: bool | None) -> None:
    finished = _response("hi!", [7, 8], 2, {"type": "stop", "matched": 2})
    engine = Engine(msgspec.json.encode(finished))
    body = b'{"rid": "client-1", "input_ids": [5], "stream": false}'
    deployment = msgspec.structs.replace(DEPLOYMENT, incremental_streaming_output=incremental)
    status, answer = _serve(body, engine, deployment)
    ((_, sent, accept),) = engine.sent
    assert sent["stream"] is False and accept == "application/json"
    assert status == 200
    reply = msgspec.json.decode(answer)  # SGLang's one answer, under the client's rid
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


def test_a_rejected_streaming_request_gets_sglang_s_answer_and_reaches_no_engine() -> None:
    """SGLang refuses output-flat with stream=true after dispatch: a 200 stream of one frame."""
    engine = Engine(b"")
    streaming = SEED.replace(b'"stream": false', b'"stream": true')
    message = (
        "return_flat_raw_output_top_logprobs is only set on the finished response "
        "and does not support stream=True."
    )
    error = {"message": message, "type": "invalid_request_error", "code": 400, "retryable": False}
    frame = b"data: " + msgspec.json.encode({"error": error}) + b"\n\n"
    assert _answer(streaming, engine) == (200, SSE, frame + SSE_DONE)
    assert engine.sent == []


@pytest.mark.parametrize(
    ("body", "answer"),
    [  # the engine's refusal, pydantic's and the gate's, as SGLang 0.5.23 writes them
        (
            b'{"input_ids": [], "stream": false}',
            b'{"error":{"message":"input_ids cannot be empty."}}',
        ),
        (
            b'{"input_ids": [1], "rid": 5, "stream": true}',
            b'{"object":"error","message":"rid: expected str | null, got int",'
            b'"type":"Bad Request","param":null,"code":400}',
        ),
        (
            b'{"input_ids": [1], "stream": true, "sampling_params": {"max_tokens": 5}}',
            b'{"error":"unknown field `max_tokens`, expected one of `max_new_tokens`, ',
        ),
    ],
)
def test_a_rejected_unary_answer_is_sglang_s_400_in_its_layer_s_shape(
    body: bytes, answer: bytes
) -> None:
    status, media, got = _answer(body, Engine(b""))
    assert (status, media) == (400, JSON) and got.startswith(answer)


def test_an_engine_error_body_gets_the_engine_s_status() -> None:
    engine = Engine(b'{"error": {"message": "routed_dp_rank=1 out of range [0, 1)"}}', status=400)
    assert _answer(SEED, engine) == (
        400, JSON, b'{"error":{"message":"routed_dp_rank=1 out of range [0, 1)"}}'
    )  # fmt: skip
    busy = Engine(b'{"error": {"message": "busy"}}', status=503)
    assert _answer(SEED, busy) == (503, JSON, b'{"error":{"message":"busy"}}')


@pytest.mark.parametrize("stream", [False, True])
def test_an_id_outside_the_vocabulary_never_reaches_the_engine(stream: bool) -> None:
    """One such id stops every SGLang process: the worker refuses it, in the client's mode."""
    engine = Engine(b"")
    body = b'{"input_ids": [1, 320], "stream": %s}' % (b"true" if stream else b"false")
    status, media, answer = _answer(body, engine)
    message = "input_ids[1] is 320, outside the model's vocabulary [0, 320)"
    assert engine.sent == []
    if stream:
        assert (status, media) == (200, SSE)
        assert msgspec.json.decode(answer.split(b"\n\n")[0][6:])["error"]["message"] == message
    else:
        assert (status, media) == (400, JSON)
        assert msgspec.json.decode(answer) == {"error": {"message": message}}


def test_a_request_longer_than_the_context_is_refused_in_sglang_words() -> None:
    engine = Engine(b"")
    body = msgspec.json.encode({"input_ids": [5] * 1000, "stream": False,
                                "sampling_params": {"max_new_tokens": 100}})  # fmt: skip
    status, _, answer = _answer(body, engine)
    assert engine.sent == [] and status == 400
    assert msgspec.json.decode(answer)["error"]["message"].startswith(
        "Requested token count exceeds the model's maximum context length of 1024 tokens. "
        "You requested a total of 1100 tokens"
    )
