"""The serving loop's bounds in production: its pools, SGLang's silence, shutdown, and
the bytes a unary client costs.

- Aborts go over a lane of their own: with the generate pool full of the very
  generations they free, they still reach the engine at once; a request whose
  client left while it waited for a connection is never dispatched; a full pool
  is the service's own 503 with ``Retry-After``, never SGLang's 504.
- A unary client is asked unary on a cumulative server, so 600 tokens with top-20
  logprobs cost about SGLang's own unary answer, not the square of it.
- SGLang silent for `idle_timeout_s`: 504 in SGLang's shape, and an abort.
- `aclose(deadline_s)`: streams end with an error frame and ``[DONE]``, unary
  clients get 503, every engine request is aborted, within the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx
import msgspec
import pytest

from sglang_envelope import AbortPolicy, Deployment, EngineReply, Service
from sglang_envelope.adapters.aiohttp import AiohttpTransport
from sglang_envelope.adapters.httpx import HttpxTransport
from sglang_envelope.testing import FakeEngine
from tests.apps import serving
from tests.serve_fakes import (
    DONE,
    POLICY,
    FakeTransport,
    Script,
    frame,
    read,
    run,
    service,
)

ADAPTERS = ("httpx", "aiohttp")
LONG = {"max_new_tokens": 400, "temperature": 0}


def transport_of(adapter: str, url: str, **options: Any) -> Any:
    if adapter == "httpx":
        return HttpxTransport(url, **options)
    return AiohttpTransport(url, **options)


@contextlib.contextmanager
def engine_served(**options: Any) -> Iterator[tuple[str, FakeEngine]]:
    engine = FakeEngine(**options)
    with serving(engine) as url:
        yield url, engine


async def until(test: Any, timeout: float) -> float:
    """Seconds until `test()` holds; fails past `timeout`."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not test():
        assert loop.time() - start < timeout, "not within the time allowed"
        await asyncio.sleep(0.01)
    return loop.time() - start


# --- aborts have a lane of their own ---


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_with_the_pool_full_of_the_generations_they_free_the_aborts_reach_the_engine(
    adapter: str,
) -> None:
    """101 streams on 100 connections, every client gone: 100 aborts at once, the
    101st never dispatched (before: the aborts waited behind the generations)."""
    body = json.dumps({"input_ids": [5, 6, 7], "sampling_params": LONG, "stream": True})
    gone = asyncio.Event

    async def main(url: str, engine: FakeEngine) -> tuple[list[int], float]:
        left = gone()
        transport = transport_of(adapter, url, connections=100)
        async with (
            transport,
            Service(transport, deployment=Deployment(vocab_size=320), abort_policy=POLICY) as svc,
        ):
            answers = [
                asyncio.ensure_future(svc.generate(body, disconnected=left.is_set))
                for _ in range(101)
            ]
            await until(lambda: engine.running == 100, 10)
            await until(lambda: sum(a.done() for a in answers) == 100, 10)
            await asyncio.sleep(0.2)  # time enough for the 101st to pass, were it free to
            done = [answer for answer in answers if answer.done()]
            waiting = [answer for answer in answers if not answer.done()]
            assert len(done) == 100 and len(waiting) == 1, "the 101st waits for a connection"
            left.set()  # the 101st client leaves while it waits for a connection
            (last,) = waiting
            assert (await last).status == 499
            for answer in done:  # each client reads its first frame, then hangs up
                body_of = answer.result().body
                await body_of.__anext__()
                await body_of.aclose()
            took = await until(lambda: len(engine.outcomes) == 100, 20)
            statuses = [answer.status for answer in await asyncio.gather(*answers)]
            await until(lambda: engine.running == 0, 20)
        return statuses, took

    with engine_served(frame_delay=0.05) as (url, engine):
        statuses, took = run_long(main(url, engine))
    assert statuses == [200] * 100 + [499]
    assert took < 2.0, f"the aborts reached the engine after {took:.1f} s"
    assert {outcome.ending for outcome in engine.outcomes} == {"abort"}
    assert len(engine.requests) == 100, "the client that left while waiting was not dispatched"
    assert sorted(a["rid"] for a in engine.aborts) == sorted(o.rid for o in engine.outcomes)


def run_long(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 60))


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_full_pool_is_the_service_s_own_503_with_retry_after(adapter: str) -> None:
    slow = {"input_ids": [5], "sampling_params": LONG, "stream": True}

    async def main(url: str) -> tuple[Any, bytes, float]:
        transport = transport_of(adapter, url, connections=1, pool_wait_s=0.2)
        async with transport, Service(transport, deployment=Deployment(vocab_size=320)) as svc:
            holding = await svc.generate(json.dumps(slow))
            start = time.monotonic()
            refused = await svc.generate(json.dumps({**slow, "stream": False}))
            took = time.monotonic() - start
            data = await read(refused)
            await holding.body.aclose()
        return refused, data, took

    with engine_served(frame_delay=0.02) as (url, _):
        answer, data, took = run_long(main(url))
    assert (answer.status, answer.headers["retry-after"]) == (503, "1")
    assert json.loads(data) == {
        "error": {"message": "all 1 connections to SGLang stayed busy for 0.2 s"}
    }
    assert 0.15 < took < 2.0


def test_a_send_cancelled_in_the_turn_it_gets_a_connection_gives_it_back() -> None:
    """Python 3.11's `asyncio.wait_for` kept such a connection and went on: the send of
    a client gone went out, after the service had settled it as never sent."""
    from sglang_envelope.serve.transport import Slots

    async def main() -> tuple[bool, bool]:
        slots = Slots(1, 5.0)
        release = await slots.take()
        waiting = asyncio.ensure_future(slots.take())
        await asyncio.sleep(0.01)
        release()  # the connection goes to the waiting send...
        waiting.cancel()  # ...in the turn its client leaves
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await asyncio.sleep(0)
        again = await asyncio.wait_for(slots.take(), 1)
        again()
        return waiting.cancelled(), slots._free.locked()

    assert asyncio.run(main()) == (True, False)


def test_the_pool_settings_are_checked_naming_the_field() -> None:
    from sglang_envelope import EnvelopeError

    with pytest.raises(EnvelopeError, match=r"^connections: expected an int >= 1, got 0"):
        HttpxTransport("http://127.0.0.1:1", connections=0)
    with pytest.raises(EnvelopeError, match=r"^pool_wait_s: expected finite seconds >= 0"):
        AiohttpTransport("http://127.0.0.1:1", pool_wait_s=-1)


# --- a unary client's answer costs what SGLang's own unary answer costs ---


class Counting:
    """A transport that counts the bytes it pulls from the engine."""

    def __init__(self, inner: HttpxTransport) -> None:
        self.inner = inner
        self.slots = inner.slots
        self.pulled = 0

    async def generate(self, body: bytes, headers: Mapping[str, str]) -> EngineReply:
        reply = await self.inner.generate(body, headers)

        async def counted() -> AsyncIterator[bytes]:
            async for chunk in reply.chunks:
                self.pulled += len(chunk)
                yield chunk

        return EngineReply(reply.status, counted(), reply.close, reply.headers)

    async def abort(self, body: bytes) -> int:
        return await self.inner.abort(body)


TOP_20 = {
    "input_ids": [5, 6, 7],
    "sampling_params": {"max_new_tokens": 600, "temperature": 0},
    "return_logprob": True,
    "top_logprobs_num": 20,
}


@pytest.mark.parametrize("incremental", [False, True])
def test_600_tokens_with_top_20_logprobs_cost_about_sglang_s_own_unary_answer(
    incremental: bool,
) -> None:
    """A cumulative stream aggregated pulled 68.8 MB and was cut (502); an incremental
    one, each frame's ``meta_info`` again (2.1x). A unary client is asked unary on both."""
    bound = 1.2
    engine = FakeEngine(incremental=incremental, max_recorded=10)

    async def main() -> tuple[int, bytes, int, bytes]:
        asgi = httpx.ASGITransport(app=engine)
        async with httpx.AsyncClient(transport=asgi, base_url="http://sglang") as http:
            own = (await http.post("/generate", json=TOP_20)).content  # SGLang's unary answer
            counting = Counting(HttpxTransport("http://sglang", client=http))
            svc = Service(counting, deployment=engine.deployment)
            answer = await svc.generate(json.dumps(TOP_20))
            return answer.status, await read(answer), counting.pulled, own

    status, data, pulled, own = run_long(main())
    assert status == 200
    response, expected = msgspec.json.decode(data), msgspec.json.decode(own)
    assert response["output_ids"] == expected["output_ids"] and len(response["output_ids"]) == 600
    assert len(response["meta_info"]["output_top_logprobs"][-1]) == 20
    assert pulled <= bound * len(own), (pulled, len(own))


def test_a_cumulative_stream_past_max_bytes_is_relayed_whole_a_frame_past_it_is_cut() -> None:
    """`max_bytes` bounds each frame of a cumulative stream (the answer so far), never
    their sum: SGLang delivers that whole, and the relay holds one event at a time."""
    ids = [tuple(range(1, k + 1)) for k in range(1, 41)]
    chunks = [frame("RID", i, {"type": "length", "length": 40} if len(i) == 40 else None)
              for i in ids] + [DONE]  # fmt: skip
    size = sum(map(len, chunks))
    stream = b'{"input_ids": [5], "stream": true}'

    async def main(max_bytes: int) -> bytes:
        transport = FakeTransport(lambda request: Script(chunks=chunks))
        async with service(transport, max_bytes=max_bytes) as svc:
            return await read(await svc.generate(stream))

    whole = run(main(size // 4))  # the stream is 4x the bound; each frame is within it
    assert whole.endswith(DONE) and b"limit_exceeded" not in whole
    assert json.loads(whole.split(b"\n\n")[-3][6:])["output_ids"] == list(range(1, 41))
    cut = run(main(len(chunks[-2]) - 1))  # the last frame is over the bound
    assert b"limit_exceeded" in cut and cut.endswith(DONE)


# --- SGLang's silence ---


def silent_after_one_frame(request: dict[str, Any]) -> Script:
    return Script(chunks=[frame("RID", (7,))], until_abort=True)


def test_a_stream_silent_past_idle_timeout_ends_with_a_504_frame_and_an_abort() -> None:
    async def main() -> tuple[bytes, FakeTransport, float]:
        transport = FakeTransport(silent_after_one_frame)
        async with service(transport, idle_timeout_s=0.3) as svc:
            start = time.monotonic()
            data = await read(await svc.generate(b'{"input_ids": [5], "stream": true}'))
            return data, transport, time.monotonic() - start

    data, transport, took = run(main())
    events = data.split(b"\n\n")
    assert data.endswith(DONE) and json.loads(events[0][6:])["output_ids"] == [7]
    error = json.loads(events[-3][6:])["error"]
    assert (error["code"], error["message"]) == (504, "SGLang sent nothing for 0.3 s")
    assert transport.aborts == [{"rid": transport.requests[0]["rid"]}]
    assert 0.25 < took < 2.0


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_whose_head_never_comes_is_a_504_in_sglang_s_shape_and_aborted(
    stream: bool,
) -> None:
    async def main() -> tuple[Any, bytes, FakeTransport]:
        transport = FakeTransport(lambda request: Script(head_delay_s=30))
        async with service(transport, idle_timeout_s=0.2) as svc:
            body = json.dumps({"input_ids": [5], "stream": stream})
            answer = await svc.generate(body)
            return answer, await read(answer), transport

    answer, data, transport = run(main())
    assert answer.status == 504, "no stream was begun: the status is kept"
    assert json.loads(data) == {"error": {"message": "SGLang sent nothing for 0.2 s"}}
    assert transport.aborts[0] == {"rid": transport.requests[0]["rid"]}


def test_the_idle_timeout_is_checked_and_off_only_by_choice() -> None:
    from sglang_envelope import EnvelopeError

    transport = FakeTransport(silent_after_one_frame)
    for wrong in (0, -1.0, float("inf"), "5"):
        with pytest.raises(EnvelopeError, match=r"^idle_timeout_s: expected None"):
            service(transport, idle_timeout_s=wrong)
    service(transport, idle_timeout_s=None)


# --- shutdown ---


class AbortsHang(FakeTransport):
    """A transport whose aborts never answer."""

    async def abort(self, body: bytes) -> int:
        self.aborts.append(json.loads(body))
        await asyncio.sleep(3600)
        return 200


#: aclose's deadline in its test, which an abort that hangs waits out.
CLOSE_S = 0.3


@pytest.mark.parametrize("kind", [FakeTransport, AbortsHang])
def test_aclose_ends_every_answer_aborts_each_and_keeps_its_deadline(kind: type) -> None:
    stalled = json.dumps({"input_ids": [5], "stream": True})
    waiting = json.dumps({"input_ids": [6]})

    async def main() -> tuple[bytes, Any, bytes, Any, float, Any]:
        transport = kind(silent_after_one_frame)
        svc = service(transport)
        streamed = await svc.generate(stalled)
        first = await streamed.body.__anext__()
        unary = asyncio.ensure_future(svc.generate(waiting))
        await until(lambda: len(transport.requests) == 2, 5)
        start = time.monotonic()
        await svc.aclose(deadline_s=CLOSE_S)
        took = time.monotonic() - start
        rest = await read(streamed)
        refused = await unary
        later = await svc.generate(waiting)
        return first + rest, refused, await read(refused), later, took, transport

    data, refused, refusal, later, took, transport = run(main())
    assert data.endswith(DONE) and json.loads(data.split(b"\n\n")[-3][6:])["error"]["code"] == 503
    assert (refused.status, json.loads(refusal)) == (
        503,
        {"error": {"message": "the service is shutting down"}},
    )
    assert later.status == 503, "a request after aclose is refused"
    assert sorted(a["rid"] for a in transport.aborts) == sorted(
        r["rid"] for r in transport.requests
    )
    assert took < CLOSE_S + 0.5, f"aclose took {took:.1f} s"


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_aclose_aborts_a_stalled_request_once_when_the_engine_ends_it_at_once(
    adapter: str,
) -> None:
    """The engine ends each request at its first abort, so with the default schedule (6
    aborts, 1.55 s) each is aborted once and its abort stops, the answer seen ended:
    also a unary one, whose head SGLang sends only at the answer's end (before: its send
    was cancelled at the stop, its end never seen, and the whole schedule sent)."""
    stalled = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 3}}
    outcomes: list[Any] = []

    async def main(url: str, engine: FakeEngine) -> bytes:
        transport = transport_of(adapter, url)
        async with transport:
            svc = Service(
                transport,
                deployment=Deployment(vocab_size=320),
                on_abort=lambda engine_request, outcome: outcomes.append(outcome),
            )
            streamed = await svc.generate({**stalled, "stream": True})
            unary = asyncio.ensure_future(svc.generate(stalled))
            await until(lambda: engine.running == 2, 10)
            await svc.aclose()
            assert (await unary).status == 503 and svc.aborts_pending == 0
            await until(lambda: engine.running == 0, 10)
            return await read(streamed)

    with engine_served(frame_delay=30.0) as (url, engine):
        data = run_long(main(url, engine))
        rids = sorted(json.loads(request)["rid"] for request in engine.requests)
        aborted = sorted(abort["rid"] for abort in engine.aborts)
    assert data.endswith(DONE) and len(rids) == 2
    assert aborted == rids, "each request aborted once"
    assert [(o.stopped, len(o.sends)) for o in outcomes] == [("finished", 1)] * 2


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_aclose_answers_a_request_waiting_for_a_connection_503_never_sent(
    adapter: str,
) -> None:
    """Shutdown cancels a send still waiting for the pool's one connection: its client is
    answered 503, as every client in flight is, and the request never reaches SGLang."""

    async def main(url: str, engine: FakeEngine) -> list[int]:
        transport = transport_of(adapter, url, connections=1)
        async with transport:
            svc = Service(transport, deployment=Deployment(vocab_size=320))
            answers = [asyncio.ensure_future(svc.generate({"input_ids": [5, 6, 7]})) for _ in "ab"]
            await until(lambda: engine.running == 1, 10)
            await svc.aclose()
            return [answer.status for answer in await asyncio.gather(*answers)]

    with engine_served(frame_delay=30.0) as (url, engine):
        assert run_long(main(url, engine)) == [503, 503]
        assert len(engine.requests) == len(engine.aborts) == 1


class AbortsIgnored(FakeTransport):
    """A transport whose engine answers every abort 200 and ignores it; it records when
    each answer's connection is released."""

    def __init__(self, script: Any) -> None:
        super().__init__(script)
        self.closed_at: list[float] = []

    async def abort(self, body: bytes) -> int:
        self.aborts.append(json.loads(body))
        self.abort_times.append(asyncio.get_running_loop().time())
        return 200

    async def generate(self, body: bytes, headers: Mapping[str, str]) -> EngineReply:
        reply = await super().generate(body, headers)

        async def close() -> None:
            self.closed_at.append(asyncio.get_running_loop().time())
            await reply.close()

        return EngineReply(reply.status, reply.chunks, close, reply.headers)


def test_an_answer_that_never_ends_is_released_at_the_plan_s_deadline() -> None:
    """The deadline counts from the abort's start, repeats included: the drain is not
    given a deadline of its own after the schedule (before: 1.0 s of repeats, then 1.2 s
    more of draining)."""
    policy = AbortPolicy(retry_delays_s=(0.5, 0.5), deadline_s=1.2, first_token_wait_s=0.0)

    async def main() -> AbortsIgnored:
        transport = AbortsIgnored(lambda request: Script(until_abort=True))
        svc = service(transport, abort_policy=policy)
        await svc.generate(b'{"input_ids": [5], "stream": true}')  # no token comes
        await svc.aclose(deadline_s=5.0)
        return transport

    transport = run(main())
    assert len(transport.aborts) == 3, "every repeat sent: the engine ignored them"
    released = transport.closed_at[0] - transport.abort_times[0]
    assert released < policy.deadline_s + 0.3, f"released {released:.2f} s after the abort"
