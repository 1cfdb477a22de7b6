"""A real prefill/decode pair, through the library, answers what an aggregated server answers.

Both legs are built by `build_engine_request` (roles prefill and decode, one
`Bootstrap`), sent at once and read to the end; the client's answer must equal
SGLang's direct answer to the same body on an aggregated server with the same
weights, volatile values aside, key order included.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest

from live.flow import (
    Answer,
    PdAnswer,
    answer_of,
    assert_same,
    body_of,
    client,
    direct,
    engine_request,
    engine_response,
    final_state,
    key_order,
    post_chunks,
    sender,
    sse_frames,
    through_pd,
    watched,
)
from live.pd import PdPair
from live.servers import LiveServer
from sglang_envelope import (
    Bootstrap,
    Role,
    decode_client_request,
    decode_envelope,
    encode_envelope,
    finalize_response,
    plan_abort,
    run_abort,
    to_worker_envelope,
)
from sglang_envelope.pair import merge_prefill

PROMPT = [5, 6, 7, 9, 10, 11, 12, 13]
GREEDY = {"temperature": 0, "max_new_tokens": 10}
LOGPROBS = {"return_logprob": True, "top_logprobs_num": 2}
#: The decode server computes with a KV cache it received, in other batch shapes than the
#: aggregated server: the same tokens, logprobs equal to about 1e-7 (float32).
PD_TOLERANCE = 1e-5


async def both(pair: PdPair, server: LiveServer, body: bytes) -> tuple[PdAnswer, Answer]:
    async with client() as http:
        bootstrap = (pair.bootstrap_host, pair.bootstrap_port)
        got = await through_pd(http, pair.prefill_url, pair.decode_url, body, bootstrap)
        want = await direct(http, server.url, body)
    return got, want


def check_prefill_leg(answer: PdAnswer) -> None:
    """The prefill leg made its one token and ended (`length` 0: decode makes the rest)."""
    meta = answer.prefill["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 0}
    assert meta["completion_tokens"] == 1
    assert answer.prefill_engine.stream  # the library's choice for prefill


def test_unary_client(pd_pair: PdPair, server: LiveServer) -> None:
    body = body_of({"input_ids": PROMPT, "sampling_params": GREEDY, "stream": False})
    got, want = asyncio.run(both(pd_pair, server, body))
    check_prefill_leg(got)
    assert not got.decode_engine.stream  # a unary client of a server not known incremental: unary
    assert want.status == got.decode.status == 200
    assert_same(got.decode.json(), want.json(), tolerance=PD_TOLERANCE)


def test_streaming_client(pd_pair: PdPair, server: LiveServer) -> None:
    body = body_of({"input_ids": PROMPT, "sampling_params": GREEDY, "stream": True})
    got, want = asyncio.run(both(pd_pair, server, body))
    check_prefill_leg(got)
    got_frames, want_frames = got.decode.frames(), want.frames()
    assert_same(
        final_state(got_frames, incremental=False),
        final_state(want_frames, incremental=False),
        tolerance=PD_TOLERANCE,
    )
    assert key_order(got_frames[0]) == key_order(want_frames[0])


def test_output_flat_unary_client(pd_pair: PdPair, server: LiveServer) -> None:
    """The seed's bug case: stream=false with output-flat, which SGLang builds only unary."""
    request = {
        "input_ids": PROMPT,
        "sampling_params": GREEDY,
        "stream": False,
        **LOGPROBS,
        "return_flat_raw_output_top_logprobs": True,
    }
    for b64 in (False, True):
        body = body_of({**request, "return_flat_raw_top_logprobs_b64": True} if b64 else request)
        got, want = asyncio.run(both(pd_pair, server, body))
        check_prefill_leg(got)
        assert not got.decode_engine.stream
        assert not got.prefill_engine.body.return_flat_raw_output_top_logprobs
        assert want.status == got.decode.status == 200
        assert_same(got.decode.json(), want.json(), tolerance=PD_TOLERANCE)


def merged(got: PdAnswer) -> dict[str, Any]:
    decode = got.decode.json()
    response = merge_prefill(got.prefill, decode)
    return finalize_response(
        response, engine=got.decode_engine, client_rid=decode["meta_info"]["id"]
    )


@pytest.mark.parametrize("flat", ["none", "json", "b64"])
def test_merge_prefill(pd_pair: PdPair, server: LiveServer, flat: str) -> None:
    """Prompt logprobs come from the prefill leg; merged, the answer is the aggregated one.
    Prompt-flat with Base64 stays on the prefill leg."""
    request: dict[str, Any] = {
        "input_ids": PROMPT,
        "sampling_params": GREEDY,
        "stream": False,
        **LOGPROBS,
        "logprob_start_len": 0,
    }
    if flat != "none":
        request["return_flat_raw_top_logprobs"] = True
    if flat == "b64":
        request["return_flat_raw_top_logprobs_b64"] = True
    got, want = asyncio.run(both(pd_pair, server, body_of(request)))
    check_prefill_leg(got)
    assert got.prefill_engine.body.return_flat_raw_top_logprobs_b64 is (flat == "b64")
    decode_meta = got.decode.json()["meta_info"]
    assert decode_meta["input_logprobs_unavailable_reason"] == "disaggregated_decode"
    assert_same(merged(got), want.json(), tolerance=PD_TOLERANCE)


async def abort_decode(pair: PdPair, body: bytes) -> tuple[dict[str, Any], Answer, float]:
    request = decode_client_request(body)
    envelope = decode_envelope(encode_envelope(to_worker_envelope(request, rid=uuid.uuid4().hex)))
    meeting = Bootstrap(pair.bootstrap_host, pair.bootstrap_port, uuid.uuid4().int >> 65)
    prefill, decode = (
        engine_request(envelope, role=role, bootstrap=meeting)
        for role in (Role.PREFILL, Role.DECODE)
    )
    first_token, finished = asyncio.Event(), asyncio.Event()
    async with client() as http:
        prefill_leg = asyncio.create_task(
            engine_response(post_chunks(http, pair.prefill_url, prefill), prefill)
        )
        chunks = watched(post_chunks(http, pair.decode_url, decode), first_token, finished)
        decode_leg = asyncio.create_task(
            answer_of(
                chunks, decode, client_rid=envelope.rid, client_streams=True, incremental=False
            )
        )
        await asyncio.wait_for(first_token.wait(), 60)
        assert not finished.is_set(), "the decode leg ended before it was aborted"
        plan = plan_abort(decode, first_token_seen=True)
        start = time.monotonic()
        await run_abort(
            plan, sender(http, pair.decode_url), first_token=first_token, finished=finished
        )
        answer = await asyncio.wait_for(decode_leg, plan.deadline_s)
        took = time.monotonic() - start
        return await asyncio.wait_for(prefill_leg, 30), answer, took


def test_abort_of_the_decode_leg(pd_pair: PdPair) -> None:
    sampling = {"max_new_tokens": 900, "ignore_eos": True, "temperature": 0}
    body = body_of({"input_ids": [5, 6, 7], "stream": True, "sampling_params": sampling})
    prefill, answer, took = asyncio.run(abort_decode(pd_pair, body))
    assert prefill["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
    last = sse_frames(answer.body)[-1]
    assert last["meta_info"]["finish_reason"]["type"] == "abort"
    assert last["meta_info"]["completion_tokens"] < 900
    assert took < 3.0
    assert json.loads(pd_pair.decode.server_info)["disaggregation_mode"] == "decode"
