"""An in-memory transport for the serving loop's tests: scripted answers, recorded aborts."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from sglang_envelope import AbortPolicy, Deployment, EngineReply, Service

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LIVE = [json.loads(line) for line in (FIXTURES / "live_answers.jsonl").read_text().splitlines()]


def live_case(name: str, incremental: bool = False) -> dict[str, Any]:
    return next(c for c in LIVE if c["name"] == name and c["incremental"] is incremental)


def events(text: str) -> list[bytes]:
    """The SSE events of a recorded stream, each with its blank line."""
    return [part.encode() + b"\n\n" for part in text.split("\n\n") if part]


class Script:
    """How the fake answers one engine request."""

    def __init__(
        self,
        status: int = 200,
        chunks: list[bytes] | None = None,
        *,
        delay_s: float = 0.0,
        first_delay_s: float = 0.0,
        fail: BaseException | None = None,
        fail_after: int | None = None,
        until_abort: bool = False,
        head_delay_s: float = 0.0,
    ) -> None:
        self.head_delay_s = head_delay_s
        self.status = status
        self.chunks = chunks or []
        self.delay_s = delay_s
        self.first_delay_s = first_delay_s
        self.fail = fail
        self.fail_after = fail_after
        self.until_abort = until_abort


def unary_of(chunks: list[bytes]) -> list[bytes]:
    """A script's chunks for a unary engine request: a cumulative stream's last frame, as
    SGLang's unary answer is (chunks that are not a stream stay as they are)."""
    frames = [c for c in chunks if c.startswith(b"data: {") and c.endswith(b"\n\n")]
    if not frames or len(frames) != len([c for c in chunks if c != DONE]):
        return chunks
    return [frames[-1][len(b"data: ") : -2]]


class FakeTransport:
    """Answers each engine request by `script(body)`; records requests, aborts and drains."""

    def __init__(self, script: Callable[[dict[str, Any]], Script]) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.aborts: list[dict[str, Any]] = []
        self.abort_times: list[float] = []
        self.read_to_end: list[str] = []
        self.closed: list[str] = []
        self.aborted: dict[str, asyncio.Event] = {}
        self.send_error: BaseException | None = None

    async def generate(self, body: bytes, headers: Mapping[str, str]) -> EngineReply:
        if self.send_error is not None:
            raise self.send_error
        request = json.loads(body)
        self.requests.append(request)
        rid = request["rid"]
        self.aborted[rid] = asyncio.Event()
        script = self.script(request)
        if not request["stream"]:
            script.chunks = unary_of(script.chunks)
        await asyncio.sleep(script.head_delay_s)  # SGLang sends a unary answer's head at its end

        async def close() -> None:
            self.closed.append(rid)

        return EngineReply(script.status, self._chunks(rid, script, request["stream"]), close)

    async def _chunks(self, rid: str, script: Script, streams: bool) -> AsyncIterator[bytes]:
        await asyncio.sleep(script.first_delay_s)
        for index, chunk in enumerate(script.chunks):
            if script.fail_after == index and script.fail is not None:
                raise script.fail
            if self.aborted[rid].is_set():
                break
            yield chunk.replace(b"RID", rid.encode())
            await asyncio.sleep(script.delay_s)
        if script.until_abort:
            await self.aborted[rid].wait()
            aborted = (
                b'{"text":"","output_ids":[],"meta_info":{"id":"'
                + rid.encode()
                + b'","finish_reason":{"type":"abort","message":"Aborted"}}}'
            )
            yield b"data: " + aborted + b"\n\n" + DONE if streams else aborted
        self.read_to_end.append(rid)

    async def abort(self, body: bytes) -> int:
        request = json.loads(body)
        self.aborts.append(request)
        self.abort_times.append(asyncio.get_running_loop().time())
        event = self.aborted.get(request["rid"])
        if event is not None:
            event.set()
        return 200


def frame(rid: str = "RID", ids: tuple[int, ...] = (7,), finish: Any = None, **meta: Any) -> bytes:
    meta_info: dict[str, Any] = {"id": rid, "finish_reason": finish, **meta}
    body = {"text": "x" * len(ids), "output_ids": list(ids), "meta_info": meta_info}
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
LENGTH = {"type": "length", "length": 2}


def simple_stream(rid: str = "RID") -> list[bytes]:
    return [frame(rid, (7,)), frame(rid, (7, 8), LENGTH), DONE]


def unary_body(rid: str = "RID") -> bytes:
    body = {"text": "xy", "output_ids": [7, 8], "meta_info": {"id": rid, "finish_reason": LENGTH}}
    return json.dumps(body, separators=(",", ":")).encode()


#: The SGLang server of the loop's tests, and an abort policy quick enough for them.
DEPLOYMENT = Deployment(vocab_size=320, incremental_streaming_output=False)
POLICY = AbortPolicy(retry_delays_s=(), deadline_s=0.5, first_token_wait_s=0.2)
#: For a test whose engine answer outlives its abort (its abort fails, or the answer is
#: scripted to come seconds later), which waits out the drain's deadline at its close: a
#: short deadline, and a short wait for a decode leg's first token.
QUICK_DRAIN = AbortPolicy(retry_delays_s=(), deadline_s=0.1, first_token_wait_s=0.05)


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 10))


def service(transport: FakeTransport, **options: Any) -> Service:
    options.setdefault("abort_policy", POLICY)
    options.setdefault("deployment", DEPLOYMENT)
    return Service(transport, **options)


def streamed(request: dict[str, Any]) -> Script:
    """SGLang's answer to `request` in its mode: a stream, or one unary body."""
    return Script(chunks=simple_stream() if request["stream"] else [unary_body()])


async def read(answer: Any) -> bytes:
    """An answer's whole body."""
    return b"".join([chunk async for chunk in answer.body])


def numbered(k: int) -> str:
    """The engine rid `counted` makes k-th."""
    return f"{k:032x}"


def counted() -> Callable[[], str]:
    """Engine rids 0, 1, 2, ... as 32 hex digits, so a test knows which sequence is which."""
    count = itertools.count()
    return lambda: numbered(next(count))


class Recording(FakeTransport):
    """Answers as `streamed` does, and records each body and its headers as sent."""

    def __init__(self) -> None:
        super().__init__(streamed)
        self.sent: list[tuple[bytes, dict[str, str]]] = []

    async def generate(self, body: bytes, headers: Mapping[str, str]) -> EngineReply:
        self.sent.append((body, dict(headers)))
        return await super().generate(body, headers)


def sse_data(written: bytes) -> list[bytes]:
    """The data of every event written, ``[DONE]`` last and only once."""
    assert written.endswith(b"\n\n" + DONE) and written.count(b"[DONE]") == 1
    return [event.removeprefix(b"data: ") for event in written.split(b"\n\n")[:-1]]
