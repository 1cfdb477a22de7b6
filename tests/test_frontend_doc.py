"""docs/pieces.md's frontend and worker, run against a fake SGLang over loopback.

The page's own code (its Python blocks, in one namespace, as test_docs runs
them) serves a client on 127.0.0.1 and talks to a stand-in for SGLang's HTTP
server, also on 127.0.0.1, that streams, errs or waits for an abort as the
case needs. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sglang_envelope import AbortPolicy, Bootstrap, Role
from sglang_envelope.flat import encode_flat_top_logprobs
from tests.test_docs import run_blocks

PAGE = Path(__file__).resolve().parent.parent / "docs" / "pieces.md"
TIMEOUT_S = 10.0
#: Most frames the fake streams while it waits for an abort.
MAX_WAITING_FRAMES = 500

Script = Callable[["FakeSGLang", dict[str, Any], asyncio.StreamWriter], Any]


@pytest.fixture(scope="module")
def page() -> dict[str, Any]:
    blocks = run_blocks(PAGE)
    blocks["PAGE_DEPLOYMENT"] = blocks["DEPLOYMENT"]
    return blocks


class FakeSGLang:
    """POST /generate answered by `script`; POST /abort_request recorded (answered 200)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.generate: list[dict[str, Any]] = []
        self.aborts: list[dict[str, Any]] = []
        self.aborted = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        size = re.search(rb"(?i)content-length: *(\d+)", head)
        body = msgspec.json.decode(await reader.readexactly(int(size[1]) if size else 0))
        if head.startswith(b"POST /abort_request "):
            self.aborts.append(body)
            self.aborted.set()
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
        else:
            assert head.startswith(b"POST /generate ")
            self.generate.append(body)
            await self.script(self, body, writer)
        await writer.drain()
        writer.close()


def frame(text: str, ids: list[int], tokens: int, finish: Any = None) -> bytes:
    meta = {"id": "r-9", "finish_reason": finish, "prompt_tokens": 2, "completion_tokens": tokens}
    return b"data: " + msgspec.json.encode({"text": text, "output_ids": ids, "meta_info": meta})


SSE_HEAD = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
INCREMENTAL = [
    frame(" The", [791], 1),
    frame(" answer", [3363], 2),
    frame(".", [13], 3, {"type": "length", "length": 3}),
]


async def stream(frames: list[bytes], writer: asyncio.StreamWriter) -> None:
    writer.write(SSE_HEAD)
    for data in frames:
        writer.write(data + b"\n\n")
        await writer.drain()
        await asyncio.sleep(0.01)  # one chunk each, as an engine streams them
    writer.write(b"data: [DONE]\n\n")


@contextlib.asynccontextmanager
async def serve(
    page: dict[str, Any], script: Script, **config: Any
) -> AsyncIterator[tuple[int, FakeSGLang]]:
    """A fake SGLang and the page's frontend, each on a loopback port; `config` sets the page's."""
    fake = FakeSGLang(script)
    engine = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    front = await asyncio.start_server(page["serve_client"], "127.0.0.1", 0)
    page.update(
        SGLANG=engine.sockets[0].getsockname()[:2],
        ROLE=Role.AGGREGATED,
        BOOTSTRAP=None,
        DEPLOYMENT=page["PAGE_DEPLOYMENT"],
        ABORT_POLICY=AbortPolicy(retry_delays_s=(0.01,), first_token_wait_s=0.2, deadline_s=2.0),
    )
    page.update(config)
    async with engine, front:
        yield front.sockets[0].getsockname()[1], fake


def run(
    page: dict[str, Any], script: Script, body: bytes, **config: Any
) -> tuple[int, bytes, FakeSGLang]:
    async def case() -> tuple[int, bytes, FakeSGLang]:
        async with serve(page, script, **config) as (port, fake):
            status, answer = await post(port, body)
        return status, answer, fake

    return asyncio.run(asyncio.wait_for(case(), TIMEOUT_S))


async def post(port: int, body: bytes) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /generate HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    head, _, answer = (await reader.read()).partition(b"\r\n\r\n")
    writer.close()
    return int(head.split()[1]), answer


def events(answer: bytes) -> list[Any]:
    """The client's SSE events: each JSON frame decoded, and the final [DONE] as text."""
    assert answer.endswith(b"\n\n")
    out: list[Any] = []
    for event in answer[:-2].split(b"\n\n"):
        assert event.startswith(b"data: ")
        data = event[len(b"data: ") :]
        out.append("[DONE]" if data == b"[DONE]" else msgspec.json.decode(data))
    return out


FLAT_BODY = (
    b'{"rid": "client-1", "input_ids": [1, 2], "stream": false, "return_logprob": true, '
    b'"top_logprobs_num": 2, "logprob_start_len": 0, "return_flat_raw_output_top_logprobs": true}'
)


def unary_answer(rid: str) -> dict[str, Any]:
    flat = encode_flat_top_logprobs(
        [[(-0.25, 791, None), (-1.75, 578, None)]], side="output", top_logprobs_num=2, b64=True
    )
    meta = {"id": rid, "finish_reason": {"type": "length", "length": 1}, "completion_tokens": 1}
    meta |= {"output_token_logprobs": [[-0.25, 791, None]], **flat}
    return {"text": " The", "output_ids": [791], "meta_info": meta}


async def answer_unary(
    fake: FakeSGLang, body: dict[str, Any], writer: asyncio.StreamWriter
) -> None:
    writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
    writer.write(msgspec.json.encode(unary_answer(body["rid"])))


def test_a_unary_client_of_a_server_of_unknown_mode_is_asked_unary(page: dict[str, Any]) -> None:
    status, answer, fake = run(page, answer_unary, b'{"rid": "client-1", "input_ids": [1, 2]}')
    (sent,) = fake.generate
    assert sent["stream"] is False  # a cumulative stream would cost the square of the answer
    assert status == 200 and msgspec.json.decode(answer) == unary_answer("client-1")


def test_a_unary_client_with_output_flat_gets_the_unary_body(page: dict[str, Any]) -> None:
    status, answer, fake = run(page, answer_unary, FLAT_BODY)
    assert status == 200
    assert msgspec.json.decode(answer) == unary_answer("client-1")
    (sent,) = fake.generate
    assert sent["stream"] is False and sent["return_flat_raw_output_top_logprobs"] is True
    assert sent["rid"] == "client-1" and sent["routed_dp_rank"] == 0


async def refuse(fake: FakeSGLang, body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.0 400 Bad Request\r\nContent-Type: application/json\r\n\r\n")
    writer.write(b'{"error": {"message": "Input length exceeds the context length"}}')


@pytest.mark.parametrize("incremental", [True, False])
def test_a_unary_client_of_a_server_of_known_mode_is_asked_unary(
    page: dict[str, Any], incremental: bool
) -> None:
    """An incremental stream aggregated would repeat each frame's `meta_info`, a
    cumulative one the answer so far: SGLang's one answer costs the least."""
    deployment = msgspec.structs.replace(
        page["PAGE_DEPLOYMENT"], incremental_streaming_output=incremental
    )
    body = b'{"rid": "client-1", "input_ids": [1, 2], "stream": false}'
    status, answer, fake = run(page, answer_unary, body, DEPLOYMENT=deployment)
    (sent,) = fake.generate
    assert sent["stream"] is False
    assert status == 200 and msgspec.json.decode(answer) == unary_answer("client-1")


def test_an_engine_error_body_reaches_the_client_with_the_engine_s_status(
    page: dict[str, Any],
) -> None:
    status, answer, fake = run(page, refuse, FLAT_BODY)
    assert status == 400 and len(fake.generate) == 1 and fake.aborts == []
    assert answer == b'{"error":{"message":"Input length exceeds the context length"}}'  # SGLang's


def test_the_decode_leg_notes_the_prompt_logprobs_it_has_not(page: dict[str, Any]) -> None:
    bootstrap = Bootstrap("10.0.0.7", 8998, 42)
    status, answer, fake = run(page, answer_unary, FLAT_BODY, ROLE=Role.DECODE, BOOTSTRAP=bootstrap)
    assert status == 200
    meta = msgspec.json.decode(answer)["meta_info"]
    assert meta["input_logprobs_unavailable_reason"] == "disaggregated_decode"
    (sent,) = fake.generate
    assert (sent["bootstrap_host"], sent["bootstrap_port"], sent["bootstrap_room"]) == (
        "10.0.0.7",
        8998,
        42,
    )


async def stream_incremental(
    fake: FakeSGLang, body: dict[str, Any], writer: asyncio.StreamWriter
) -> None:
    await stream(INCREMENTAL, writer)


def test_a_streaming_client_gets_cumulative_frames_from_an_incremental_engine(
    page: dict[str, Any],
) -> None:
    status, answer, fake = run(page, stream_incremental, b'{"input_ids": [1, 2], "stream": true}')
    assert status == 200 and fake.generate[0]["stream"] is True
    *frames, done = events(answer)
    assert done == "[DONE]"
    cumulative = {
        " The": [791],
        " The answer": [791, 3363],
        " The answer.": [791, 3363, 13],
    }
    assert frames and all(cumulative[f["text"]] == f["output_ids"] for f in frames)
    assert frames[-1]["text"] == " The answer."
    assert frames[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 3}


def test_a_rejected_request_gets_sglang_s_answer_in_its_mode_and_reaches_no_engine(
    page: dict[str, Any],
) -> None:
    """SGLang refuses output-flat with stream=true after dispatch: a 200 stream with its frame."""
    body = b'{"input_ids": [1], "stream": true, "return_flat_raw_output_top_logprobs": true}'
    status, answer, fake = run(page, answer_unary, body)
    assert status == 200 and fake.generate == []
    error, done = events(answer)
    assert done == "[DONE]"
    assert error == {
        "error": {
            "message": "return_flat_raw_output_top_logprobs is only set on the finished "
            "response and does not support stream=True.",
            "type": "invalid_request_error",
            "code": 400,
            "retryable": False,
        }
    }
    status, answer, _ = run(page, answer_unary, body.replace(b"true,", b'false, "text": 1,'))
    assert status == 400 and msgspec.json.decode(answer)["error"]["message"].startswith("text ")


async def fail_mid_stream(
    fake: FakeSGLang, body: dict[str, Any], writer: asyncio.StreamWriter
) -> None:
    error = {"message": "out of memory", "type": "invalid_request_error", "code": 503}
    await stream([INCREMENTAL[0], b"data: " + msgspec.json.encode({"error": error})], writer)


def test_an_engine_error_mid_stream_reaches_the_client_as_sglang_writes_it(
    page: dict[str, Any],
) -> None:
    body = b'{"rid": "oom-1", "input_ids": [1, 2], "stream": true}'
    status, answer, fake = run(page, fail_mid_stream, body)
    assert status == 200
    first, error, done = events(answer)
    assert first["text"] == " The" and done == "[DONE]"
    assert error["error"]["message"] == "out of memory" and error["error"]["code"] == 503
    # The relay stopped reading: the engine request is aborted before the answer ends.
    assert fake.aborts == [{"rid": "oom-1"}]


async def stream_until_aborted(
    fake: FakeSGLang, body: dict[str, Any], writer: asyncio.StreamWriter
) -> None:
    writer.write(SSE_HEAD)
    for tokens in range(1, MAX_WAITING_FRAMES + 1):
        if fake.aborted.is_set():
            finish = {"type": "abort", "message": "Abort before prefill"}
            writer.write(frame("", [], tokens, finish) + b"\n\n")
            break
        writer.write(frame("x", [5], tokens) + b"\n\n")
        await writer.drain()
        await asyncio.sleep(0.01)
    writer.write(b"data: [DONE]\n\n")


def test_a_client_that_hangs_up_mid_stream_gets_the_engine_request_aborted(
    page: dict[str, Any],
) -> None:
    async def case() -> FakeSGLang:
        async with serve(page, stream_until_aborted) as (port, fake):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            body = b'{"rid": "gone-1", "input_ids": [1, 2], "stream": true}'
            writer.write(b"POST /generate HTTP/1.0\r\nContent-Length: %d\r\n\r\n" % len(body))
            writer.write(body)
            await reader.readuntil(b"data: ")  # the first frame is on its way
            writer.close()  # the client goes away
            await fake.aborted.wait()
            await asyncio.sleep(0.1)  # time for any repeat the plan would make
        return fake

    fake = asyncio.run(asyncio.wait_for(case(), TIMEOUT_S))
    # After the first token, one abort is enough: the rid is registered.
    assert fake.aborts == [{"rid": "gone-1"}]
    assert len(fake.generate) == 1
