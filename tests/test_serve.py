"""The serving loop (`Service`) over an in-memory transport: modes, errors, rids, aborts."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import anyio
import msgspec
import pytest

from sglang_envelope import (
    CLIENT_GONE,
    EngineReply,
    EnvelopeError,
    Service,
    UpstreamError,
    aggregate_sse,
    decode_client_request,
    encode_envelope,
    error_response,
    to_worker_envelope,
)
from tests.serve_fakes import (
    DEPLOYMENT,
    DONE,
    LENGTH,
    QUICK_DRAIN,
    FakeTransport,
    Script,
    events,
    frame,
    live_case,
    read,
    run,
    service,
    simple_stream,
    streamed,
    unary_body,
)

STREAM = b'{"rid": "client-a", "input_ids": [5, 6], "stream": true}'
UNARY = b'{"rid": "client-a", "input_ids": [5, 6]}'
FLAT = b'{"input_ids": [5, 6], "return_flat_raw_output_top_logprobs": true}'


def served(body: bytes, script: Any = streamed) -> tuple[Any, bytes, FakeTransport]:
    """The answer to `body` over a fake answering by `script`, its bytes, and the fake."""

    async def main() -> tuple[Any, bytes, FakeTransport]:
        transport = FakeTransport(script)
        async with service(transport) as svc:
            answer = await svc.generate(body)
            return answer, await read(answer), transport

    result: tuple[Any, bytes, FakeTransport] = run(main())
    return result


def test_a_streaming_client_gets_every_frame_under_its_own_rid() -> None:
    answer, body, transport = served(STREAM)
    assert (answer.status, answer.media_type) == (200, "text/event-stream; charset=utf-8")
    engine_rid = transport.requests[0]["rid"]
    assert re.fullmatch("[0-9a-f]{32}", engine_rid), "the engine runs under an owned rid"
    assert body.count(b'"meta_info":{"id":"client-a"') == 2 and engine_rid.encode() not in body
    assert body.endswith(DONE)
    assert transport.read_to_end == [engine_rid] and transport.aborts == []


def test_a_unary_client_of_a_cumulative_server_is_asked_unary() -> None:
    answer, body, transport = served(UNARY)
    assert transport.requests[0]["stream"] is False, "a cumulative stream would cost n^2"
    assert (answer.status, answer.media_type) == (200, "application/json")
    response = msgspec.json.decode(body)
    assert response["output_ids"] == [7, 8] and response["meta_info"]["id"] == "client-a"


@pytest.mark.parametrize("incremental", [True, False, None])
def test_a_unary_client_is_asked_unary_whatever_the_server_s_mode(
    incremental: bool | None,
) -> None:
    deployment = msgspec.structs.replace(DEPLOYMENT, incremental_streaming_output=incremental)
    increments = [frame("RID", (7,)), frame("RID", (8,), LENGTH), DONE]

    async def main() -> tuple[bytes, FakeTransport]:
        transport = FakeTransport(lambda request: Script(chunks=increments))
        async with service(transport, deployment=deployment) as svc:
            return await read(await svc.generate(UNARY)), transport

    body, transport = run(main())
    # Asked unary: the fake answers a unary request with the stream's last frame.
    assert transport.requests[0]["stream"] is False
    response = msgspec.json.decode(body)
    assert response["output_ids"] == [8] and response["meta_info"]["id"] == "client-a"


def test_output_flat_is_asked_unary_and_answered_as_sglang_answers() -> None:
    async def main() -> tuple[bytes, FakeTransport]:
        transport = FakeTransport(streamed)
        async with service(transport) as svc:
            return await read(await svc.generate(FLAT)), transport

    body, transport = run(main())
    assert transport.requests[0]["stream"] is False
    meta = msgspec.json.decode(body)["meta_info"]
    assert meta["id"] == transport.requests[0]["rid"], "no client rid: the engine's is given"


@pytest.mark.parametrize(
    "body",
    [b'{"text": "hi"}', b'{"text": "hi", "stream": true}', FLAT[:-1] + b', "stream": true}'],
)
def test_a_refused_request_never_reaches_the_engine(body: bytes) -> None:
    async def main() -> tuple[Any, bytes, FakeTransport]:
        transport = FakeTransport(streamed)
        answer = await service(transport).generate(body)
        return answer, await read(answer), transport

    answer, written, transport = run(main())
    assert transport.requests == []
    stream = b'"stream": true' in body
    with pytest.raises(EnvelopeError) as caught:
        decode_client_request(body)
    expected = error_response(caught.value, stream=stream)
    assert (answer.status, answer.media_type, written) == tuple(expected)


@pytest.mark.parametrize(
    ("error", "status"),
    [(ConnectionRefusedError(), 502), (TimeoutError(), 504), (UpstreamError("down"), 502)],
)
@pytest.mark.parametrize("body", [STREAM, UNARY])
def test_an_unreachable_sglang_is_answered_502_or_504(
    error: BaseException, status: int, body: bytes
) -> None:
    async def main() -> tuple[Any, bytes]:
        transport = FakeTransport(streamed)
        transport.send_error = error
        answer = await service(transport).generate(body)
        return answer, await read(answer)

    answer, written = run(main())
    assert (answer.status, answer.media_type) == (status, "application/json")
    assert set(msgspec.json.decode(written)) == {"error"}


def test_a_connection_broken_mid_stream_ends_with_an_error_frame_and_done() -> None:
    def script(request: dict[str, Any]) -> Script:
        return Script(chunks=simple_stream(), fail=ConnectionResetError("reset"), fail_after=1)

    async def main() -> bytes:
        return await read(await service(FakeTransport(script)).generate(STREAM))

    written = run(main())
    first, error, done = events(written.decode())
    assert b'"meta_info":{"id":"client-a"' in first and done == DONE
    assert json.loads(error[6:])["error"]["code"] == 502


@pytest.mark.parametrize("body", [STREAM, UNARY])
def test_sglang_s_error_status_and_body_are_carried_through(body: bytes) -> None:
    error = b'{"error":{"message":"Input length (9) exceeds the maximum allowed length"}}'

    def script(request: dict[str, Any]) -> Script:
        return Script(400, [error])

    async def main() -> tuple[Any, bytes]:
        answer = await service(FakeTransport(script)).generate(body)
        return answer, await read(answer)

    answer, written = run(main())
    if body is STREAM:  # the engine's refusal of a streaming client: a 200 stream
        assert answer.status == 200 and written.endswith(DONE)
        assert json.loads(written.split(b"\n\n")[0][6:])["error"]["code"] == 400
    else:
        assert (answer.status, written) == (400, error)


def long_stream(request: dict[str, Any]) -> Script:
    return Script(chunks=[frame("RID", (7,))] * 3, delay_s=0.01, until_abort=True)


def test_a_stream_closed_early_is_aborted_once_and_read_to_its_end() -> None:
    async def main() -> FakeTransport:
        transport = FakeTransport(long_stream)
        async with service(transport) as svc:
            answer = await svc.generate(STREAM)
            first = await answer.body.__anext__()
            assert b"client-a" in first
            await answer.body.aclose()
        return transport

    transport = run(main())
    rid = transport.requests[0]["rid"]
    assert transport.aborts == [{"rid": rid}]
    assert transport.read_to_end == [rid] and transport.closed == [rid]


@pytest.mark.parametrize("sequences", [1, 2])
@pytest.mark.parametrize("left", ["closed", "dropped"])
def test_a_stream_left_before_its_first_chunk_is_aborted_at_once(left: str, sequences: int) -> None:
    """A streaming body closed, or dropped (Starlette drops it when the client is gone
    before the answer's head is written), before a chunk was read is aborted then, not
    at the service's close, and its connection released."""

    async def main() -> tuple[FakeTransport, int]:
        transport = FakeTransport(long_stream)
        async with service(transport) as svc:
            body = {**json.loads(STREAM), "sampling_params": {"n": sequences}}
            answer = await svc.generate(json.dumps(body).encode())
            if left == "closed":
                await answer.body.aclose()
            del answer
            for _ in range(100):  # the abort runs in a task of its own
                if len(transport.closed) == sequences:
                    break
                await asyncio.sleep(0.01)
            aborted = len(transport.aborts)
        return transport, aborted

    transport, aborted = run(main())
    assert aborted == len(transport.requests) == sequences
    assert sorted(transport.closed) == sorted(r["rid"] for r in transport.requests)


def test_a_stream_cancelled_by_an_anyio_cancel_scope_is_still_aborted() -> None:
    async def main() -> FakeTransport:
        transport = FakeTransport(long_stream)
        svc = service(transport)
        answer = await svc.generate(STREAM)
        with anyio.move_on_after(0.05):  # Starlette cancels a stream whose client left so
            async for _ in answer.body:
                pass
        await svc.aclose()
        return transport

    transport = anyio.run(main)
    assert len(transport.aborts) == 1 and transport.read_to_end == [transport.requests[0]["rid"]]


def slow_unary(request: dict[str, Any]) -> Script:
    return Script(chunks=[unary_body()], first_delay_s=3.0)


def test_a_unary_client_gone_is_aborted_before_the_answer_comes() -> None:
    async def main() -> tuple[Any, float, FakeTransport]:
        transport = FakeTransport(slow_unary)
        gone_at: list[float] = []

        async def disconnected() -> bool:
            gone_at.append(asyncio.get_running_loop().time())
            return len(gone_at) > 1

        svc = service(transport, disconnect_poll_s=0.05)
        answer = await svc.generate(FLAT, disconnected=disconnected)
        answered_at = asyncio.get_running_loop().time()
        await svc.aclose()
        took = transport.abort_times[0] - gone_at[-1]
        assert answered_at - gone_at[-1] < 0.5, "the client's answer does not wait for SGLang's"
        return answer, took, transport

    answer, took, transport = run(main())
    assert answer.status == CLIENT_GONE
    assert len(transport.aborts) == 1 and took < 0.5
    assert transport.requests[0]["stream"] is False, "output-flat: a unary engine request"


def test_a_unary_client_gone_before_sglang_s_head_is_aborted() -> None:
    async def main() -> tuple[Any, FakeTransport, float]:
        transport = FakeTransport(lambda request: Script(chunks=[unary_body()], head_delay_s=3))
        calls: list[float] = []

        def disconnected() -> bool:  # a sync test, as aiohttp's
            calls.append(asyncio.get_running_loop().time())
            return len(calls) > 2

        svc = service(transport, disconnect_poll_s=0.05, abort_policy=QUICK_DRAIN)
        answer = await svc.generate(FLAT, disconnected=disconnected)
        await svc.aclose()
        return answer, transport, transport.abort_times[0] - calls[-1]

    answer, transport, took = run(main())
    assert answer.status == CLIENT_GONE and len(transport.aborts) == 1 and took < 0.5


def cancelled_handler(script: Any) -> FakeTransport:
    """The fake after an output-flat handler over it was cancelled 50 ms in."""

    async def main() -> FakeTransport:
        transport = FakeTransport(script)
        svc = service(transport, abort_policy=QUICK_DRAIN)
        task = asyncio.ensure_future(svc.generate(FLAT))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await svc.aclose()
        return transport

    result: FakeTransport = run(main())
    return result


def test_a_cancelled_unary_handler_aborts() -> None:
    transport = cancelled_handler(slow_unary)
    assert len(transport.aborts) == 1


def test_a_one_process_frontend_and_a_worker_answer_alike() -> None:
    async def main() -> tuple[bytes, bytes]:
        direct = await read(await service(FakeTransport(streamed)).generate(UNARY))
        envelope = to_worker_envelope(decode_client_request(UNARY), rid="frontend-7")
        wire = encode_envelope(envelope)
        via = await read(await service(FakeTransport(streamed)).generate_envelope(wire))
        return direct, via

    direct, via = run(main())
    assert direct == via


def test_the_readers_see_what_a_direct_client_sees() -> None:
    case = live_case("logprobs")

    def script(request: dict[str, Any]) -> Script:
        return Script(chunks=events(case["stream"]))

    async def main() -> bytes:
        body = json.dumps({**case["body"], "stream": True}).encode()
        return await read(await service(FakeTransport(script)).generate(body))

    written = run(main())
    direct = aggregate_sse([case["stream"].encode()])
    assert aggregate_sse([written])["output_ids"] == direct["output_ids"]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("deployment", None),
        ("abort_policy", 3),
        ("disconnect_poll_s", 0),
        ("max_bytes", -1),
        ("prefill", "x"),
        ("header_overrides", 1),
        ("rid", "not callable"),
        ("on_abort", "not callable"),
        ("on_abort", asyncio.sleep),  # it would never be awaited: never told
        ("rid", asyncio.sleep),
    ],
)
def test_service_arguments_are_checked(option: str, value: Any) -> None:
    options = {"deployment": DEPLOYMENT, option: value}
    with pytest.raises(EnvelopeError, match=option):
        Service(FakeTransport(streamed), **options)


def test_a_transport_without_its_methods_is_refused() -> None:
    with pytest.raises(EnvelopeError, match="generate"):
        Service(object(), deployment=DEPLOYMENT)  # type: ignore[arg-type]


def test_200_concurrent_requests_some_gone_leave_no_task_behind() -> None:
    async def main() -> tuple[FakeTransport, set[asyncio.Task[Any]], int]:
        transport = FakeTransport(
            lambda request: (
                Script(chunks=simple_stream(), delay_s=0.01)
                if request["stream"]
                else Script(chunks=[unary_body()], first_delay_s=0.05)
            )
        )
        svc = service(transport)

        async def one(index: int) -> None:
            answer = await svc.generate(STREAM if index % 2 else UNARY)
            async for _ in answer.body:
                if index % 4 == 1:  # a streaming client that leaves after one frame
                    break
            await answer.body.aclose()

        await asyncio.gather(*(one(index) for index in range(200)))
        await svc.aclose()
        return transport, asyncio.all_tasks() - {asyncio.current_task()}, svc.aborts_pending

    transport, left, pending = asyncio.run(main())  # no wait_for: its task would be counted
    assert left == set() and pending == 0
    assert len(transport.aborts) == 50 and len(transport.closed) == 200


@pytest.mark.parametrize(
    ("frame_body", "output"),
    [
        ({"text": "", "output_ids": []}, False),
        ({"text": "", "output_ids": [], "meta_info": {}}, False),
        ({"text": "a", "output_ids": []}, True),
        ({"output_ids": [3]}, True),
    ],
)
def test_the_first_output_is_dynamo_s(frame_body: dict[str, Any], output: bool) -> None:
    from sglang_envelope.serve.watch import is_output

    assert is_output(frame_body) is output


class DownAborts(FakeTransport):
    """Aborts fail: the transport to SGLang broke, or returns nonsense."""

    def __init__(self, failure: BaseException | None) -> None:
        super().__init__(long_stream)
        self.failure = failure

    async def abort(self, body: bytes) -> int:
        if self.failure is not None:
            raise self.failure
        return "no status"  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("failure", "reported"),
    [(ConnectionRefusedError(), UpstreamError), (None, EnvelopeError)],
)
def test_an_abort_that_fails_is_reported_not_lost(
    failure: BaseException | None, reported: type[Exception]
) -> None:
    reports: list[tuple[Any, Any]] = []

    async def main() -> None:
        svc = service(
            DownAborts(failure),
            abort_policy=QUICK_DRAIN,
            on_abort=lambda e, o: reports.append((e, o)),
        )
        answer = await svc.generate(STREAM)
        await answer.body.__anext__()
        await answer.body.aclose()
        await svc.aclose()

    run(main())
    ((engine, outcome),) = reports
    assert isinstance(outcome, reported) and engine.body.rid


def test_an_answer_over_max_bytes_is_refused() -> None:
    async def main() -> tuple[int, bytes]:
        svc = service(FakeTransport(streamed), max_bytes=64)
        answer = await svc.generate(FLAT)
        return answer.status, await read(answer)

    status, body = run(main())
    assert status == 502 and b"max_bytes" in body


def test_a_stream_the_watch_cannot_read_is_still_relayed_as_the_readers_judge_it() -> None:
    def script(request: dict[str, Any]) -> Script:
        return Script(chunks=[b"data: not json\n\n", DONE])

    async def main() -> bytes:
        return await read(await service(FakeTransport(script)).generate(STREAM))

    written = run(main())
    assert written.endswith(DONE) and b'"error"' in written


def test_a_drain_stops_at_its_bound() -> None:
    from sglang_envelope.serve.watch import WatchedReply

    async def main() -> bool:
        async def chunks() -> Any:
            while True:
                yield b"x" * 100
                await asyncio.sleep(0)

        async def close() -> None:
            pass

        watched = WatchedReply(streamed=True)
        watched.attach(EngineReply(200, chunks(), close))
        await watched.drain(250)
        await watched.release()
        return watched.finished.is_set()

    assert run(main()) is False, "stopped at the bound, not at the end"


def test_a_handler_cancelled_while_sglang_s_head_is_awaited_aborts() -> None:
    transport = cancelled_handler(lambda request: Script(chunks=[unary_body()], head_delay_s=3))
    assert len(transport.aborts) == 1


def test_a_transport_s_own_bug_is_not_hidden() -> None:
    async def main() -> None:
        transport = FakeTransport(streamed)
        transport.send_error = RuntimeError("a bug in the transport")
        await service(transport).generate(UNARY)

    with pytest.raises(RuntimeError, match="a bug"):
        run(main())


@pytest.mark.parametrize("status", [99, 600, "200"])
def test_an_engine_reply_with_no_http_status_is_refused(status: Any) -> None:
    from sglang_envelope.serve.transport import check_reply

    async def chunks() -> Any:
        yield b""

    async def close() -> None:
        pass

    with pytest.raises(EnvelopeError, match=r"EngineReply\.status"):
        check_reply(EngineReply(status, chunks(), close))


def test_a_reader_of_an_answer_given_up_is_told_so() -> None:
    from sglang_envelope.serve.watch import WatchedReply

    async def main() -> None:
        async def chunks() -> Any:
            await asyncio.sleep(10)
            yield b""

        async def close() -> None:
            pass

        watched = WatchedReply(streamed=True)
        watched.attach(EngineReply(200, chunks(), close))
        reading = asyncio.ensure_future(watched.__anext__())
        await asyncio.sleep(0.01)
        await watched.release()
        with pytest.raises(EnvelopeError, match="given up"):
            await asyncio.wait_for(reading, 1)

    run(main())
