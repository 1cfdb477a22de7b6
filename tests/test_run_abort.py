"""run_abort carries out an abort plan, against a real HTTP server on the loopback interface.

The server is stdlib asyncio streams on 127.0.0.1, bounded in requests and time.
Like SGLang's tokenizer manager with a rid it has not registered yet, it can
ignore an abort (answering 200 all the same); an abort it honours ends the
generation, which sets the worker's `finished` event.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_envelope import (
    AbortPolicy,
    Bootstrap,
    EnvelopeError,
    Role,
    build_engine_request,
    decode_client_request,
    plan_abort,
    run_abort,
    to_worker_envelope,
)
from sglang_envelope.types import AbortOutcome, AbortPlan, AbortSend
from tests.strategies import DEPLOYMENT, abort_statuses, run_abort_delays

MAX_REQUESTS = 32
TEST_TIMEOUT_S = 20.0
RID = "3f1c9a7e5b2d4c6a8e0f1a2b3c4d5e6f"


@dataclass
class AbortServer:
    """POST /abort_request on 127.0.0.1; `honour(n)` decides whether abort n (from 1) takes."""

    honour: Callable[[int], bool]
    finished: asyncio.Event
    delay_s: Callable[[int], float] = lambda n: 0.0
    bodies: list[Any] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            headers = dict(line.split(": ", 1) for line in header_lines if line and ": " in line)
            length = int(headers.get("Content-Length", "0"))
            assert length <= 4096
            body = await reader.readexactly(length)
            assert len(self.bodies) < MAX_REQUESTS
            status = "404 Not Found"
            if request_line == "POST /abort_request HTTP/1.1":
                self.bodies.append(json.loads(body))
                await asyncio.sleep(self.delay_s(len(self.bodies)))
                if self.honour(len(self.bodies)):
                    self.finished.set()
                status = "200 OK"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n".encode())
            await writer.drain()
        finally:
            writer.close()

    async def send(self, body: bytes) -> int:
        """The worker's transport: one POST /abort_request, its status."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(
                b"POST /abort_request HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            status_line = await reader.readline()
            return int(status_line.split()[1])
        finally:
            writer.close()


def serve(
    test: Callable[[AbortServer], Awaitable[None]],
    honour: Callable[[int], bool],
    delay_s: Callable[[int], float] = lambda n: 0.0,
) -> None:
    async def main() -> None:
        server = AbortServer(honour, asyncio.Event(), delay_s)
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        server.port = listener.sockets[0].getsockname()[1]
        try:
            await test(server)
        finally:
            listener.close()
            await listener.wait_closed()

    asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT_S))


def engine(role: Role, *, stream: bool) -> Any:
    body = {
        "input_ids": [1, 2, 3],
        "stream": stream,
        "return_flat_raw_output_top_logprobs": not stream,
    }
    if not stream:
        body.update(return_logprob=True, top_logprobs_num=1)
    envelope = to_worker_envelope(decode_client_request(body), rid=RID)
    bootstrap = None if role is Role.AGGREGATED else Bootstrap("127.0.0.1", 8998, 5)
    request = build_engine_request(
        envelope,
        deployment=DEPLOYMENT,
        input_ids=envelope.request.input_ids,
        role=role,
        bootstrap=bootstrap,
    )
    assert request.stream is stream
    return request


def test_a_unary_abort_is_repeated_until_the_server_honours_it() -> None:
    policy = AbortPolicy(retry_delays_s=(0.01, 0.02, 0.04, 0.08), deadline_s=5.0)
    plan = plan_abort(engine(Role.AGGREGATED, stream=False), first_token_seen=False, policy=policy)

    async def test(server: AbortServer) -> None:
        outcome = await run_abort(plan, server.send, finished=server.finished)
        assert server.bodies == [{"rid": RID}, {"rid": RID}]  # the first was ignored
        assert [send.status for send in outcome.sends] == [200, 200]
        assert outcome.stopped == "finished"
        assert outcome.waited_s == 0.0 and not outcome.first_token_seen
        assert outcome.sends[1].at_s - outcome.sends[0].at_s >= 0.01

    serve(test, honour=lambda n: n >= 2)


def test_without_a_finished_event_every_repeat_is_sent() -> None:
    policy = AbortPolicy(retry_delays_s=(0.0, 0.01, 0.0), deadline_s=5.0)
    plan = plan_abort(engine(Role.DECODE, stream=False), first_token_seen=False, policy=policy)

    async def test(server: AbortServer) -> None:
        outcome = await run_abort(plan, server.send)
        assert len(server.bodies) == 4 and outcome.stopped == "schedule"
        assert outcome.sends == tuple(sorted(outcome.sends, key=lambda send: send.at_s))

    serve(test, honour=lambda n: n >= 2)


def test_streaming_decode_waits_for_its_first_token_then_aborts_once() -> None:
    """A streamed token proves SGLang registered the rid: one accepted abort is enough."""
    policy = AbortPolicy(retry_delays_s=(0.01,) * 5, first_token_wait_s=5.0, deadline_s=10.0)
    plan = plan_abort(engine(Role.DECODE, stream=True), first_token_seen=False, policy=policy)
    assert plan.wait_for_first_token
    first_token = asyncio.Event()

    async def test(server: AbortServer) -> None:
        asyncio.get_running_loop().call_later(0.05, first_token.set)
        outcome = await run_abort(
            plan, server.send, first_token=first_token, finished=server.finished
        )
        assert outcome.first_token_seen and 0.04 <= outcome.waited_s < 5.0
        assert len(outcome.sends) == 1 and outcome.stopped == "first_token"
        assert outcome.sends[0].at_s >= outcome.waited_s
        assert server.finished.is_set()

    serve(test, honour=lambda n: first_token.is_set())


def test_without_a_token_decode_waits_out_its_bound_then_repeats() -> None:
    policy = AbortPolicy(retry_delays_s=(0.01,) * 5, first_token_wait_s=0.05, deadline_s=10.0)
    plan = plan_abort(engine(Role.DECODE, stream=True), first_token_seen=False, policy=policy)

    async def test(server: AbortServer) -> None:
        for first_token in (None, asyncio.Event()):
            server.bodies.clear()
            server.finished.clear()
            outcome = await run_abort(
                plan, server.send, first_token=first_token, finished=server.finished
            )
            assert not outcome.first_token_seen and outcome.waited_s >= 0.04
            assert outcome.sends[0].at_s >= outcome.waited_s
            assert len(server.bodies) == 2 and outcome.stopped == "finished"

    serve(test, honour=lambda n: n % 2 == 0)


def test_repeats_never_go_out_after_the_deadline() -> None:
    """Slow answers eat the schedule: no repeat is sent once the deadline would pass."""
    policy = AbortPolicy(retry_delays_s=(0.02,) * 10, deadline_s=0.3)
    plan = plan_abort(engine(Role.PREFILL, stream=True), first_token_seen=False, policy=policy)
    assert len(plan.retry_delays_s) == 10

    async def test(server: AbortServer) -> None:
        outcome = await run_abort(plan, server.send, finished=server.finished)
        assert outcome.stopped == "deadline"
        assert 1 <= len(outcome.sends) < 11
        assert all(send.at_s <= plan.deadline_s + 1e-9 for send in outcome.sends)

    serve(test, honour=lambda n: False, delay_s=lambda n: 0.1)


def test_a_repeat_that_hangs_is_cut_at_the_deadline() -> None:
    policy = AbortPolicy(retry_delays_s=(0.01,), deadline_s=0.2)
    plan = plan_abort(engine(Role.AGGREGATED, stream=True), first_token_seen=False, policy=policy)

    async def test(server: AbortServer) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        outcome = await run_abort(plan, server.send, finished=server.finished)
        assert loop.time() - start < TEST_TIMEOUT_S / 2
        assert outcome.stopped == "deadline" and len(outcome.sends) == 1
        assert len(server.bodies) == 2  # the repeat reached the server, its answer never came

    serve(test, honour=lambda n: False, delay_s=lambda n: 0.0 if n == 1 else 5.0)


def test_a_finished_generation_is_not_aborted() -> None:
    plan = plan_abort(engine(Role.AGGREGATED, stream=False), first_token_seen=False)
    finished = asyncio.Event()

    async def never(body: bytes) -> int:
        raise AssertionError("sent")

    async def run() -> AbortOutcome:
        finished.set()
        return await run_abort(plan, never, finished=finished)

    outcome = asyncio.run(run())
    assert outcome == AbortOutcome(
        waited_s=0.0, first_token_seen=False, sends=(), stopped="finished"
    )


def test_a_generation_that_ends_during_a_pause_ends_the_pause() -> None:
    """The answer ended 20 ms into a 30 s pause: no repeat, and the call returns then,
    not at the pause's end (a service's shutdown awaits it)."""
    policy = AbortPolicy(retry_delays_s=(30.0, 30.0), deadline_s=60.0)
    plan = plan_abort(engine(Role.AGGREGATED, stream=False), first_token_seen=False, policy=policy)
    log: list[float] = []

    async def run() -> AbortOutcome:
        finished = asyncio.Event()
        asyncio.get_running_loop().call_later(0.02, finished.set)
        outcome = await run_abort(plan, _sends_to(log), finished=finished)
        left = [task for task in asyncio.all_tasks() if "Event.wait" in repr(task.get_coro())]
        assert left == []  # no waiter left behind
        return outcome

    outcome = asyncio.run(asyncio.wait_for(run(), 5.0))
    assert outcome.stopped == "finished" and len(outcome.sends) == len(log) == 1


def test_an_exception_from_send_propagates() -> None:
    plan = plan_abort(engine(Role.AGGREGATED, stream=False), first_token_seen=False)

    async def refused(body: bytes) -> int:
        raise ConnectionRefusedError("no server")

    with pytest.raises(ConnectionRefusedError):
        asyncio.run(run_abort(plan, refused))


@pytest.mark.parametrize("failing", [1, 2])
def test_a_timeout_of_send_s_own_propagates(failing: int) -> None:
    """A `send` whose own transport times out raises `TimeoutError`: that is its failure,
    not the plan's deadline, on the first post as on a repeat."""
    policy = AbortPolicy(retry_delays_s=(0.0,), first_token_wait_s=0.0, deadline_s=5.0)
    plan = plan_abort(engine(Role.AGGREGATED, stream=False), first_token_seen=False, policy=policy)
    posts: list[bytes] = []

    async def timing_out(body: bytes) -> int:
        posts.append(body)
        if len(posts) == failing:
            raise TimeoutError("the transport's own timeout")
        return 200

    with pytest.raises(TimeoutError, match="the transport's own timeout"):
        asyncio.run(run_abort(plan, timing_out))
    assert len(posts) == failing


async def _ok(body: bytes) -> int:
    return 200


def _plan() -> AbortPlan:
    return plan_abort(engine(Role.AGGREGATED, stream=True), first_token_seen=True)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: run_abort(object(), _ok), "plan must be an AbortPlan, got object"),  # type: ignore[arg-type]
        (lambda: run_abort(_plan(), None), "send must be an async callable, got NoneType"),  # type: ignore[arg-type]
        (
            lambda: run_abort(_plan(), _ok, first_token=object()),  # type: ignore[arg-type]
            "first_token must be an asyncio.Event or None, got object",
        ),
        (
            lambda: run_abort(_plan(), _ok, finished=True),  # type: ignore[arg-type]
            "finished must be an asyncio.Event or None, got bool",
        ),
        (lambda: run_abort(_plan(), lambda body: 200), "send must return an awaitable, got int"),  # type: ignore[arg-type,return-value]
        (
            lambda: run_abort(_plan(), _as_async("200")),
            r"send must return an HTTP status \(an int\), got '200'",
        ),
        (
            lambda: run_abort(_plan(), _as_async(True)),
            r"send must return an HTTP status \(an int\), got True",
        ),
    ],
)
def test_caller_mistakes_name_the_argument(
    call: Callable[[], Awaitable[AbortOutcome]], message: str
) -> None:
    async def run() -> None:
        await call()

    with pytest.raises(EnvelopeError, match=message):
        asyncio.run(run())


def _as_async(status: Any) -> Callable[[bytes], Awaitable[int]]:
    async def send(body: bytes) -> int:
        return status  # type: ignore[no-any-return]

    return send


@settings(max_examples=30, deadline=None)
@given(
    run_abort_delays,
    st.sampled_from([0.0, 0.002, 0.004]),
    st.sampled_from([0.0, 0.003, 0.01]),
    st.sampled_from(list(Role)),
    st.booleans(),
    st.booleans(),
    st.lists(abort_statuses, min_size=8, max_size=8),
)
def test_what_it_did_keeps_the_plan(
    delays: tuple[float, ...],
    wait: float,
    deadline: float,
    role: Role,
    token_at_start: bool,
    first_token_seen: bool,
    statuses: list[int],
) -> None:
    policy = AbortPolicy(retry_delays_s=delays, first_token_wait_s=wait, deadline_s=deadline)
    stream = role is Role.PREFILL or first_token_seen
    plan = plan_abort(engine(role, stream=stream), first_token_seen=first_token_seen, policy=policy)
    bodies: list[bytes] = []

    async def send(body: bytes) -> int:
        bodies.append(body)
        return statuses[len(bodies) - 1]

    async def run() -> AbortOutcome:
        first_token = asyncio.Event()
        if token_at_start:
            first_token.set()
        return await run_abort(plan, send, first_token=first_token)

    outcome = asyncio.run(run())
    assert bodies == [plan.body] * len(outcome.sends)
    assert 1 <= len(outcome.sends) <= 1 + len(plan.retry_delays_s)
    assert [send.status for send in outcome.sends] == statuses[: len(outcome.sends)]
    assert outcome.first_token_seen is token_at_start
    assert outcome.sends[0].at_s >= outcome.waited_s
    assert all(send.at_s <= plan.deadline_s + 1e-9 for send in outcome.sends[1:])
    assert (outcome.waited_s > 0) <= plan.wait_for_first_token
    if token_at_start and 200 <= statuses[0] < 300:
        assert outcome == AbortOutcome(
            waited_s=outcome.waited_s,
            first_token_seen=True,
            sends=(AbortSend(outcome.sends[0].at_s, statuses[0]),),
            stopped="first_token",
        )
    elif outcome.stopped == "schedule":
        assert len(outcome.sends) == 1 + len(plan.retry_delays_s)


def test_a_generation_that_ends_while_decode_waits_is_not_aborted() -> None:
    """A decode request that fails before its first token ends the wait at once."""
    policy = AbortPolicy(first_token_wait_s=30.0, deadline_s=60.0)
    plan = plan_abort(engine(Role.DECODE, stream=True), first_token_seen=False, policy=policy)

    async def never(body: bytes) -> int:
        raise AssertionError("sent")

    async def run() -> AbortOutcome:
        first_token, finished = asyncio.Event(), asyncio.Event()
        asyncio.get_running_loop().call_later(0.02, finished.set)
        outcome = await run_abort(plan, never, first_token=first_token, finished=finished)
        left = [task for task in asyncio.all_tasks() if "Event.wait" in repr(task.get_coro())]
        assert left == []  # no waiter left behind
        return outcome

    outcome = asyncio.run(asyncio.wait_for(run(), TEST_TIMEOUT_S))
    assert outcome.stopped == "finished" and outcome.sends == ()
    assert 0.01 <= outcome.waited_s < 30.0 and not outcome.first_token_seen


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("body", b'{"abort_all":true}'),
        ("body", b'{"rid":""}'),
        ("body", b'{"rid":null}'),
        ("deadline_s", math.nan),
        ("retry_delays_s", (-1.0,)),
    ],
)
def test_a_plan_tampered_with_after_it_was_made_is_not_posted(name: str, value: Any) -> None:
    """A frozen plan can still be written by force; run_abort checks it again before posting."""
    plan = _plan()
    msgspec.structs.force_setattr(plan, name, value)
    posted: list[bytes] = []

    async def send(body: bytes) -> int:
        posted.append(body)
        return 200

    with pytest.raises(EnvelopeError, match=name):
        asyncio.run(run_abort(plan, send))
    assert posted == []


def test_importing_the_library_does_not_import_asyncio() -> None:
    """Only run_abort and the async readers need asyncio; they import it when called."""
    code = "import sys, sglang_envelope; print(sglang_envelope.__file__, 'asyncio' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    location, imported = result.stdout.split()
    assert Path(location).resolve().parents[1] == Path(__file__).resolve().parents[1]
    assert imported == "False"


def _decode_plan(**policy: Any) -> AbortPlan:
    """A plan that waits for decode's first token, with this policy."""
    plan = plan_abort(
        engine(Role.DECODE, stream=True), first_token_seen=False, policy=AbortPolicy(**policy)
    )
    assert plan.wait_for_first_token
    return plan


def _sends_to(log: list[float]) -> Callable[[bytes], Awaitable[int]]:
    """A transport that posts when called (the time goes in `log`) and is answered 200."""

    def send(body: bytes) -> Awaitable[int]:
        loop = asyncio.get_running_loop()
        log.append(loop.time())
        answer: asyncio.Future[int] = loop.create_future()
        answer.set_result(200)
        return answer

    return send


def test_a_token_seen_before_the_call_ends_the_wait_at_once() -> None:
    plan = _decode_plan(first_token_wait_s=30.0, deadline_s=60.0)

    async def run() -> AbortOutcome:
        first_token = asyncio.Event()
        first_token.set()
        return await run_abort(plan, _sends_to([]), first_token=first_token)

    outcome = asyncio.run(asyncio.wait_for(run(), TEST_TIMEOUT_S))
    assert outcome.waited_s < 1.0 and outcome.first_token_seen
    assert outcome.stopped == "first_token" and [send.status for send in outcome.sends] == [200]


def test_without_any_event_the_whole_wait_is_slept() -> None:
    plan = _decode_plan(first_token_wait_s=0.05, deadline_s=10.0, retry_delays_s=())
    log: list[float] = []

    async def run() -> tuple[float, AbortOutcome]:
        start = asyncio.get_running_loop().time()
        return start, await run_abort(plan, _sends_to(log))

    start, outcome = asyncio.run(asyncio.wait_for(run(), TEST_TIMEOUT_S))
    assert outcome.waited_s >= 0.045 and not outcome.first_token_seen
    assert log[0] - start >= 0.045  # the abort went out after the wait
    assert outcome.stopped == "schedule" and len(outcome.sends) == 1


def test_a_sleep_that_overruns_the_deadline_sends_no_repeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop may wake late: a repeat due before the deadline is not sent after it."""
    plan = plan_abort(
        engine(Role.AGGREGATED, stream=True),
        first_token_seen=False,
        policy=AbortPolicy(retry_delays_s=(0.01, 0.01), deadline_s=0.1),
    )
    sleep = asyncio.sleep

    async def late(delay: float) -> None:
        await sleep(delay + 0.2)

    monkeypatch.setattr(asyncio, "sleep", late)
    log: list[float] = []
    outcome = asyncio.run(asyncio.wait_for(run_abort(plan, _sends_to(log)), TEST_TIMEOUT_S))
    assert outcome.stopped == "deadline"
    assert len(log) == len(outcome.sends) == 1
