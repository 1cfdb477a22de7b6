"""A prefill/decode pair served as one request, over in-memory transports."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec
import pytest

from sglang_envelope import AbortPolicy, EnvelopeError, Service
from sglang_envelope.pair import PrefillServer
from tests.serve_fakes import (
    DEPLOYMENT,
    DONE,
    LENGTH,
    POLICY,
    QUICK_DRAIN,
    FakeTransport,
    Script,
    events,
    frame,
    read,
    run,
    sse_data,
)

LOGPROBS = b'{"input_ids": [5, 6, 7], "return_logprob": true, "logprob_start_len": 0'
PROMPT = [[-1.5, 5, None], [-2.5, 6, None], [-0.5, 7, None]]


def prefill_script(request: dict[str, Any]) -> Script:
    meta = {"input_token_logprobs": PROMPT, "output_token_logprobs": [[-0.1, 9, None]]}
    return Script(chunks=[frame("RID", (9,), {"type": "length", "length": 0}, **meta), DONE])


def decode_script(request: dict[str, Any]) -> Script:
    logprobs = {"input_token_logprobs": [], "output_token_logprobs": [[-0.1, 7, None]]}
    first = frame("RID", (7,), None, **logprobs)
    logprobs["output_token_logprobs"] = [[-0.1, 7, None], [-0.2, 8, None]]
    return Script(chunks=[first, frame("RID", (7, 8), LENGTH, **logprobs), DONE], delay_s=0.01)


def pair(
    prefill: FakeTransport, decode: FakeTransport, **options: Any
) -> Service:  # the decode server is the service's own transport
    server = PrefillServer(prefill, "10.0.0.1", 8998)
    options.setdefault("abort_policy", POLICY)
    return Service(decode, deployment=DEPLOYMENT, prefill=server, **options)


def test_both_legs_go_out_with_one_room_and_are_read_to_the_end() -> None:
    async def main() -> tuple[bytes, FakeTransport, FakeTransport]:
        prefill, decode = FakeTransport(prefill_script), FakeTransport(decode_script)
        async with pair(prefill, decode) as svc:
            body = await read(await svc.generate(b'{"input_ids": [5, 6, 7], "stream": true}'))
        return body, prefill, decode

    body, prefill, decode = run(main())
    (p,), (d,) = prefill.requests, decode.requests
    assert p["bootstrap_room"] == d["bootstrap_room"] and p["rid"] == d["rid"]
    assert (p["bootstrap_host"], p["bootstrap_port"]) == ("10.0.0.1", 8998)
    assert prefill.read_to_end == [p["rid"]] and decode.read_to_end == [d["rid"]]
    assert prefill.aborts == decode.aborts == [] and body.endswith(DONE)


def test_a_streaming_client_gets_the_prompt_logprobs_in_every_frame() -> None:
    async def main() -> bytes:
        async with pair(FakeTransport(prefill_script), FakeTransport(decode_script)) as svc:
            return await read(await svc.generate(LOGPROBS + b', "stream": true}'))

    frames = [json.loads(e[6:]) for e in events(run(main()).decode())[:-1]]
    assert [f["meta_info"]["input_token_logprobs"] for f in frames] == [PROMPT, PROMPT]
    assert frames[-1]["output_ids"] == [7, 8]


def test_a_unary_client_gets_the_prompt_logprobs() -> None:
    async def main() -> bytes:
        async with pair(FakeTransport(prefill_script), FakeTransport(decode_script)) as svc:
            return await read(await svc.generate(LOGPROBS + b"}"))

    meta = msgspec.json.decode(run(main()))["meta_info"]
    assert meta["input_token_logprobs"] == PROMPT
    assert "input_logprobs_unavailable_reason" not in meta


def waits_for_its_peer(request: dict[str, Any]) -> Script:
    return Script(until_abort=True)  # a lone leg waits (SGLang: 300 s) unless aborted


def test_a_decode_leg_refused_up_front_aborts_the_prefill_leg_at_once() -> None:
    error = b'{"error":{"message":"routed_dp_rank=1 out of range [0, 1)"}}'

    async def main() -> tuple[Any, bytes, FakeTransport, float]:
        prefill = FakeTransport(waits_for_its_peer)
        decode = FakeTransport(lambda request: Script(400, [error]))
        loop = asyncio.get_running_loop()
        start = loop.time()
        async with pair(prefill, decode) as svc:
            answer = await svc.generate(b'{"input_ids": [5, 6, 7]}')
            body = await read(answer)
        return answer, body, prefill, loop.time() - start

    answer, body, prefill, took = run(main())
    assert (answer.status, body) == (400, error)
    assert len(prefill.aborts) == 1 and took < 1.0


def test_a_decode_leg_refused_in_its_stream_aborts_the_prefill_leg() -> None:
    refusal = b'data: {"error":{"message":"routed_dp_rank=1 out of range [0, 1)","code":400}}\n\n'

    async def main() -> tuple[bytes, FakeTransport]:
        prefill = FakeTransport(waits_for_its_peer)
        decode = FakeTransport(lambda request: Script(chunks=[refusal, DONE]))
        async with pair(prefill, decode) as svc:
            body = await read(await svc.generate(b'{"input_ids": [5, 6, 7], "stream": true}'))
        return body, prefill

    body, prefill = run(main())
    assert b"out of range" in body and body.endswith(DONE)
    assert len(prefill.aborts) == 1


def test_a_failed_prefill_aborts_the_decode_leg_and_gives_its_error() -> None:
    error = b'{"error":{"message":"prefill failed"}}'

    async def main(body: bytes) -> tuple[Any, bytes, FakeTransport]:
        prefill = FakeTransport(lambda request: Script(500, [error]))
        decode = FakeTransport(waits_for_its_peer)
        async with pair(prefill, decode, abort_policy=QUICK_DRAIN) as svc:
            answer = await svc.generate(body)
            return answer, await read(answer), decode

    answer, body, decode = run(main(b'{"input_ids": [5, 6, 7]}'))
    assert (answer.status, body) == (500, error) and len(decode.aborts) == 1
    answer, body, decode = run(main(b'{"input_ids": [5, 6, 7], "stream": true}'))
    assert answer.status == 200 and b"prefill failed" in body and body.endswith(DONE)
    assert len(decode.aborts) == 1


def decode_frame(ids: tuple[int, ...], finish: Any = None) -> bytes:
    logprobs = [[-0.1, i, None] for i in ids]
    return frame("RID", ids, finish, input_token_logprobs=[], output_token_logprobs=logprobs)


def pair_answer(decode_chunks: list[bytes]) -> bytes:
    """What a streaming client asking for prompt logprobs gets from a pair whose decode
    server sends `decode_chunks` (each read on its own)."""

    async def main() -> bytes:
        decode = FakeTransport(lambda request: Script(chunks=decode_chunks, delay_s=0.001))
        async with pair(FakeTransport(prefill_script), decode) as svc:
            return await read(await svc.generate(LOGPROBS + b', "stream": true}'))

    written: bytes = run(main())
    return written


def test_a_pair_relays_sglangs_error_frame_as_it_came_after_frames_given_prompt_logprobs() -> None:
    error = b'{"error":{"message":"boom","code":503}}'
    data = sse_data(pair_answer([decode_frame((7,)), b"data: " + error + b"\n\n", DONE]))
    first = json.loads(data[0])
    assert first["meta_info"]["input_token_logprobs"] == PROMPT
    assert first["output_ids"] == [7]
    assert json.loads(data[1]) == {
        "error": {
            "message": "boom",
            "type": "invalid_request_error",
            "code": 503,
            "retryable": False,
        }
    }, "no prompt logprobs are put into an error frame"
    assert data[2:] == [b"[DONE]"]


def test_a_pair_relays_a_malformed_middle_frame_as_it_came_without_prompt_logprobs() -> None:
    middle = decode_frame((7, 8))[:-3] + b"\n\n"  # its last brace lost
    assert middle.count(b'"finish_reason":null') == 1
    chunks = [decode_frame((7,)), middle, decode_frame((7, 8, 9), LENGTH | {"length": 3}), DONE]
    data = sse_data(pair_answer(chunks))
    assert len(data) == 4 and data[-1] == b"[DONE]"
    first, last = json.loads(data[0]), json.loads(data[2])
    assert first["meta_info"]["input_token_logprobs"] == PROMPT
    assert last["meta_info"]["input_token_logprobs"] == PROMPT and last["output_ids"] == [7, 8, 9]
    engine_rid = first["meta_info"]["id"]
    assert b"data: " + data[1] + b"\n\n" == middle.replace(b"RID", engine_rid.encode()), (
        "the frame goes out as a direct connection would deliver it"
    )


def test_a_prefill_failing_mid_stream_leaves_the_decode_answer_read_to_its_end() -> None:
    # The relay stops at the prefill's failure; the decode leg's abort, which SGLang ends
    # at once, must still see its answer end rather than hold it to the plan's deadline.
    error = b'{"error":{"message":"prefill failed"}}'
    patient = AbortPolicy(retry_delays_s=(), deadline_s=5.0, first_token_wait_s=0.2)

    async def main() -> tuple[bytes, FakeTransport, float]:
        prefill = FakeTransport(lambda request: Script(500, [error], head_delay_s=0.05))
        decode = FakeTransport(lambda request: Script(chunks=[frame()], until_abort=True))
        loop = asyncio.get_running_loop()
        async with pair(prefill, decode, abort_policy=patient) as svc:
            body = await read(await svc.generate(b'{"input_ids": [5, 6, 7], "stream": true}'))
            start = loop.time()
        return body, decode, loop.time() - start

    body, decode, closing = run(main())
    assert b"prefill failed" in body and body.endswith(DONE)
    assert len(decode.aborts) == 1
    (request,) = decode.requests
    assert decode.read_to_end == [request["rid"]]
    assert closing < 1.0  # not the plan's 5 s deadline


@pytest.mark.parametrize(
    ("host", "port", "message"),
    [
        ("10.0.0.1", 0, r"^prefill: bootstrap\.port must be an integer in \[1, 65535\], got 0$"),
        ("", 8998, r"^prefill: bootstrap\.host must be a non-empty UTF-8 string, got ''$"),
    ],
)
def test_a_prefill_server_at_an_address_sglang_refuses_is_named_at_start(
    host: str, port: int, message: str
) -> None:
    """A `PrefillServer` whose bootstrap address no request could carry is refused when
    the service is made, naming it; it answered every request 500 instead."""
    prefill = PrefillServer(FakeTransport(lambda request: Script()), host, port)
    with pytest.raises(EnvelopeError, match=message):
        Service(FakeTransport(lambda request: Script()), deployment=DEPLOYMENT, prefill=prefill)
