"""The serving loop's edges: a bad engine rid, a worker envelope sent as it came, a handler of
many sequences cancelled, a transport's own bug mid-stream, and transport failures."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from sglang_envelope import (
    EnvelopeError,
    Service,
    UpstreamError,
    decode_client_request,
    to_worker_envelope,
)
from sglang_envelope.serve.transport import as_upstream_error
from tests.serve_fakes import (
    DEPLOYMENT,
    DONE,
    POLICY,
    FakeTransport,
    Recording,
    Script,
    counted,
    frame,
    numbered,
    read,
    run,
    service,
    sse_data,
    streamed,
    unary_body,
)


async def served(svc: Service, body: Any) -> tuple[Any, bytes]:
    async with svc:
        answer = await svc.generate(body)
        return answer, await read(answer)


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_request_the_service_cannot_give_an_engine_rid_is_refused_in_its_mode(
    stream: bool,
) -> None:
    request = decode_client_request(json.dumps({"input_ids": [5, 6], "stream": stream}))
    transport = FakeTransport(streamed)
    answer, written = run(served(service(transport, rid=lambda: ""), request))
    message = "rid must be a non-empty UTF-8 string, got ''"
    assert transport.requests == [], "nothing reaches the engine"
    if stream:
        assert (answer.status, answer.media_type) == (200, "text/event-stream; charset=utf-8")
        error = json.loads(sse_data(written)[0])["error"]
        assert (error["message"], error["type"], error["code"]) == (message, "envelope_error", 500)
    else:
        assert (answer.status, answer.media_type) == (500, "application/json")
        assert json.loads(written) == {"error": {"message": message}}


def test_a_batch_the_service_cannot_give_engine_rids_is_refused_before_any_is_sent() -> None:
    transport = FakeTransport(streamed)
    body = b'{"input_ids": [[5], [6]], "stream": true}'
    answer, written = run(served(service(transport, rid=lambda: ""), body))
    assert answer.status == 200 and transport.requests == [] and transport.aborts == []
    error = json.loads(sse_data(written)[0])["error"]
    assert error["message"] == "rid must be a non-empty UTF-8 string, got ''"


def test_a_worker_envelope_with_header_overrides_sends_the_clients_bytes_as_they_came() -> None:
    client = b'{"rid": "mine",  "input_ids": [5, 6], "stream": true}'
    wire = b'{"rid": "frontend-7", "request": ' + client + b"}"
    transport = Recording()
    svc = Service(transport, deployment=DEPLOYMENT, header_overrides=True, rid=counted())

    async def main() -> bytes:
        async with svc:
            return await read(await svc.generate_envelope(wire))

    written = run(main())
    ((sent, headers),) = transport.sent
    assert sent == client, "the client's body, spacing and all, not encoded again"
    assert headers["x-override-rid"] == numbered(0)
    assert written.count(b'"meta_info":{"id":"mine"') == 2 and written.endswith(DONE)


def test_a_handler_of_many_sequences_cancelled_aborts_every_one_of_them() -> None:
    async def main() -> FakeTransport:
        transport = FakeTransport(lambda request: Script(until_abort=True))
        svc = service(transport)
        body = b'{"input_ids": [5], "sampling_params": {"n": 3}}'
        task = asyncio.ensure_future(svc.generate(body))
        while len(transport.requests) < 3:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await svc.aclose()
        return transport

    transport = run(main())
    sent = sorted(request["rid"] for request in transport.requests)
    assert len(set(sent)) == 3
    assert sorted(abort["rid"] for abort in transport.aborts) == sent


def test_a_transport_bug_in_one_streamed_sequence_reaches_the_reader_and_stops_the_rest() -> None:
    bug = RuntimeError("a bug in the transport")

    def script(request: dict[str, Any]) -> Script:
        if request["rid"] == numbered(1):  # 0 is the request's own rid; the samples 1 and 2
            return Script(chunks=[frame(), frame(ids=(7, 8))], fail=bug, fail_after=1)
        return Script(chunks=[frame()], until_abort=True)

    async def main() -> tuple[list[bytes], FakeTransport]:
        transport = FakeTransport(script)
        svc = service(transport, rid=counted())
        body = b'{"input_ids": [5], "stream": true, "sampling_params": {"n": 2}}'
        answer = await svc.generate(body)
        got: list[bytes] = []
        with pytest.raises(RuntimeError) as info:
            async for chunk in answer.body:
                got.append(chunk)
        assert info.value is bug
        await svc.aclose()
        return got, transport

    got, transport = run(main())
    assert b"[DONE]" not in b"".join(got), "the stream does not pretend to have ended well"
    assert numbered(2) in {abort["rid"] for abort in transport.aborts}, "the other is stopped"
    assert numbered(1) in transport.closed, "the broken answer's connection is released"


@pytest.mark.parametrize("status", [502, 504])
def test_an_upstream_error_given_to_as_upstream_error_comes_back_as_itself(status: int) -> None:
    error = UpstreamError("the router is down", status)
    assert as_upstream_error(error) is error and error.status == status


@pytest.mark.parametrize(
    ("raised", "message", "status"),
    [
        (ConnectionResetError("reset by peer"), "ConnectionResetError: reset by peer", 502),
        (EOFError("eof"), "EOFError: eof", 502),
        (TimeoutError("read timed out"), "SGLang did not answer in time", 504),
        (asyncio.TimeoutError(), "SGLang did not answer in time", 504),
    ],
)
def test_a_transport_failure_becomes_the_upstream_error_a_gateway_answers(
    raised: BaseException, message: str, status: int
) -> None:
    error = as_upstream_error(raised)
    assert type(error) is UpstreamError and error.status == status
    assert error.message.endswith(message)


class _TimingOut:
    """A hand-written transport whose SGLang never answers in time (asyncio's own timeout)."""

    async def generate(self, body: bytes, headers: Any) -> Any:
        await asyncio.wait_for(asyncio.sleep(1), 0.001)

    async def abort(self, body: bytes) -> int:
        return 200


@pytest.mark.parametrize("stream", [False, True])
def test_a_transport_timing_out_under_asyncio_gives_the_client_a_504(stream: bool) -> None:
    """asyncio.TimeoutError is a class of its own before Python 3.11: a timeout all the same."""
    served = Service(_TimingOut(), deployment=DEPLOYMENT, abort_policy=POLICY)

    async def answer() -> tuple[int, bytes]:
        body = json.dumps({"input_ids": [5, 6], "stream": stream}).encode()
        got = await served.generate(body)
        data = await read(got)
        await served.aclose()
        return got.status, data

    status, data = run(answer())
    assert status == 504
    assert json.loads(data) == {"error": {"message": "SGLang did not answer in time"}}


class Pooled(FakeTransport):
    """A fake with one connection (`Slots`), as the library's own transports have."""

    def __init__(self, script: Any) -> None:
        from sglang_envelope.serve.transport import Slots

        super().__init__(script)
        self.slots = Slots(1, 0.5)


def test_a_send_that_fails_gives_its_connection_back() -> None:
    """The engine unreachable: 502, and the pool's one connection is free again (else the
    next request would wait for it and get the pool's 503)."""
    fake = Pooled(streamed)
    fake.send_error = ConnectionRefusedError("refused")

    async def main() -> tuple[int, int, bytes]:
        async with service(fake) as svc:
            failed = await svc.generate({"input_ids": [1, 2]})
            await read(failed)
            fake.send_error = None
            answer = await svc.generate({"input_ids": [1, 2]})
            return failed.status, answer.status, await read(answer)

    failed, status, body = run(main())
    assert (failed, status) == (502, 200)
    assert json.loads(body)["output_ids"] == [7, 8]


def test_without_an_idle_timeout_the_answer_is_read_as_it_comes() -> None:
    fake = Pooled(lambda request: Script(chunks=[unary_body()], head_delay_s=0.05))
    answer, body = run(served(service(fake, idle_timeout_s=None), {"input_ids": [1]}))
    assert answer.status == 200
    assert json.loads(body) == json.loads(unary_body(fake.requests[0]["rid"]))


def test_a_unary_answer_cut_mid_body_is_sglang_s_502() -> None:
    """The connection breaking while a unary answer is read: the transport's failure as
    the service's own 502, not the transport's exception."""
    body = unary_body()
    cut = ConnectionResetError("cut")
    fail = Script(chunks=[body[:9], body[9:]], fail=cut, fail_after=1)
    answer, body = run(served(service(Pooled(lambda request: fail)), {"input_ids": [1]}))
    assert answer.status == 502
    assert "cut" in json.loads(body)["error"]["message"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        ({"envelope": None}, r"^envelope must be a WorkerEnvelope, got NoneType$"),
        ({"client_rid": None}, r"^client_rid must be a non-empty UTF-8 string, got None$"),
        ({"client_rid": ""}, r"^client_rid must be a non-empty UTF-8 string, got ''$"),
        ({"client_rid": 7}, r"^client_rid must be a non-empty UTF-8 string, got 7$"),
        ({"body": "{}"}, r"^body must be bytes or None, got str$"),
    ],
)
def test_answer_refuses_a_wrong_argument_before_anything_is_sent(
    stream: bool, wrong: dict[str, Any], message: str
) -> None:
    """`Service.answer`'s caller's mistakes raise `EnvelopeError` naming the argument at
    once: nothing reaches SGLang (a wrong `client_rid` was found only once the answer
    was read whole, or written into every frame as it was)."""
    request = decode_client_request({"input_ids": [5, 6], "stream": stream})
    arguments: dict[str, Any] = {
        "envelope": to_worker_envelope(request, rid="e-1"),
        "client_rid": "c-1",
        **wrong,
    }
    transport = FakeTransport(streamed)

    async def main() -> None:
        async with service(transport, header_overrides=True) as svc:
            answer = await svc.answer(**arguments)
            await read(answer)

    with pytest.raises(EnvelopeError, match=message):
        run(main())
    assert transport.requests == []


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_that_meets_stop_serving_before_dispatch_is_never_sent(stream: bool) -> None:
    """`stop_serving` (a signal's, `close_on`) that comes while a request looks at its
    client, after the service's own check and before the engine request is sent: the
    request is refused 503 and never reaches SGLang (it was sent, out of the reach of the
    stop that had come, and of every stop but a later one)."""
    transport = FakeTransport(streamed)

    async def main() -> tuple[int, bytes]:
        svc = service(transport)
        stopped: list[bool] = []

        async def disconnected() -> bool:
            if not stopped:
                svc.stop_serving()
                stopped.append(True)
            return False

        body = json.dumps({"input_ids": [5, 6], "stream": stream}).encode()
        answer = await svc.generate(body, disconnected=disconnected)
        written = await read(answer)
        await svc.aclose()
        return answer.status, written

    status, written = run(main())
    assert (status, transport.requests) == (503, [])
    assert json.loads(written)["error"]["message"] == "the service is shutting down"
