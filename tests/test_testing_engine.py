"""`sglang_envelope.testing.FakeEngine` against SGLang 0.5.23's recorded answers, and the readers.

The fake runs in process (``httpx.ASGITransport``) and under the real uvicorn
server with real httpx clients: its answers have the live server's keys in the
live order (``tests/fixtures/live_answers.jsonl``), its refusals the live bytes
(``tests/fixtures/live_refusals.jsonl``), and the library's readers read them.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import msgspec
import pytest
import uvicorn

from live.record_refusals import OTHER_LAYER, OWN_WORDS
from sglang_envelope import (
    Deployment,
    EngineError,
    EnvelopeError,
    aggregate_sse,
    error_response,
    parse_unary,
    relay_sse,
)
from sglang_envelope.flat import decode_flat_top_logprobs
from sglang_envelope.testing import FakeEngine, token_text
from sglang_envelope.testing.answers import ABORTED

FIXTURES = Path(__file__).parent / "fixtures"
LIVE = [json.loads(line) for line in (FIXTURES / "live_answers.jsonl").read_text().splitlines()]
REFUSALS = [
    json.loads(line) for line in (FIXTURES / "live_refusals.jsonl").read_text().splitlines()
]
#: The keys whose values are timings or a generated id.
VOLATILE = ("id", "e2e_latency", "response_sent_to_client_ts")
T = TypeVar("T")


def run(make: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await asyncio.wait_for(make(), 5)

    return asyncio.run(main())


def in_process(engine: FakeEngine) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=engine), base_url="http://fake")


@asynccontextmanager
async def served(engine: FakeEngine) -> AsyncIterator[httpx.AsyncClient]:
    """`engine` under a real uvicorn server on a free port, and an httpx client for it."""
    config = uvicorn.Config(engine, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve())
    while not server.started:
        assert not task.done(), "uvicorn did not start"
        await asyncio.sleep(0.005)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            yield client
    finally:
        server.should_exit = True
        await task


def frames_of(body: bytes) -> list[Any]:
    events = body.decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""], body[-60:]
    return [json.loads(event.removeprefix("data: ")) for event in events[:-2]]


def steady(response: Any) -> Any:
    """A response without its timings and id."""
    meta = {k: v for k, v in response["meta_info"].items() if k not in VOLATILE}
    return {**response, "meta_info": meta}


async def post(client: httpx.AsyncClient, body: Any) -> httpx.Response:
    return await client.post("/generate", json=body)


def test_the_answers_have_the_live_server_s_keys_in_its_order() -> None:
    async def answers(case: dict[str, Any]) -> tuple[bytes, bytes]:
        async with in_process(FakeEngine(incremental=case["incremental"])) as client:
            stream = await post(client, {**case["body"], "stream": True})
            unary = await post(client, case["body"])
            return stream.content, unary.content

    for case in LIVE:
        stream, unary = run(functools.partial(answers, case))
        got, live = frames_of(stream), frames_of(case["stream"].encode())
        if case["name"] != "stop_ids":  # the fake's ids never hit the live stop id
            assert len(got) == len(live), case["name"]
        for mine, theirs in [(got[0], live[0]), (got[1], live[1]), (got[-1], live[-1])]:
            assert list(mine) == list(theirs) == ["text", "output_ids", "meta_info"]
            assert list(mine["meta_info"]) == list(theirs["meta_info"]), case["name"]
        unary_live = json.loads(case["unary"])
        assert list(json.loads(unary)["meta_info"]) == list(unary_live["meta_info"]), case["name"]


BODIES: dict[str, dict[str, Any]] = {
    "plain": {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 5}},
    "logprobs": {
        "input_ids": [5, 6, 7, 8],
        "return_logprob": True,
        "logprob_start_len": 1,
        "top_logprobs_num": 3,
        "token_ids_logprob": [1, 7],
        "return_text_in_logprobs": True,
    },
    "prompt_flat_b64": {
        "input_ids": [5, 6, 7],
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": 2,
        "return_flat_raw_top_logprobs": True,
        "return_flat_raw_top_logprobs_b64": True,
    },
    "stop": {"input_ids": [5, 6, 7], "sampling_params": {"stop_token_ids": [129]}},
}


@pytest.mark.parametrize("name", sorted(BODIES))
@pytest.mark.parametrize("incremental", [False, True])
def test_streams_aggregate_to_the_unary_answer(name: str, incremental: bool) -> None:
    body = {**BODIES[name], "rid": "r1"}

    async def answers() -> tuple[httpx.Response, httpx.Response]:
        async with in_process(FakeEngine(incremental=incremental, tokens_per_frame=2)) as client:
            return await post(client, {**body, "stream": True}), await post(client, body)

    stream, unary = run(answers)
    assert stream.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert unary.headers["content-type"] == "application/json"
    want = parse_unary(unary.content)
    assert steady(aggregate_sse([stream.content], incremental=incremental)) == steady(want)
    relayed = b"".join(relay_sse([stream.content], client_incremental=not incremental))
    assert steady(aggregate_sse([relayed], incremental=not incremental)) == steady(want)
    assert want["text"] == "".join(map(token_text, want["output_ids"]))
    assert want["meta_info"]["id"] == "r1"


def test_length_stop_and_determinism() -> None:
    async def answers() -> list[Any]:
        async with in_process(FakeEngine(default_max_new_tokens=4)) as client:
            bodies = [BODIES["plain"], BODIES["plain"], {"input_ids": [5, 6, 7]}, BODIES["stop"]]
            return [(await post(client, body)).json() for body in bodies]

    five, again, default, stop = run(answers)
    assert five["output_ids"] == again["output_ids"] and len(five["output_ids"]) == 5
    assert five["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    assert len(default["output_ids"]) == 4 and default["output_ids"] == five["output_ids"][:4]
    assert stop["meta_info"]["finish_reason"] == {"type": "stop", "matched": 129}
    assert stop["output_ids"][-1] == 129 and 129 not in stop["output_ids"][:-1]


def test_output_flat_is_on_the_unary_answer_and_decodes() -> None:
    body = {**BODIES["prompt_flat_b64"], "return_flat_raw_output_top_logprobs": True}

    async def answers() -> tuple[httpx.Response, httpx.Response]:
        async with in_process(FakeEngine()) as client:
            return await post(client, body), await post(client, {**body, "stream": True})

    unary, stream = run(answers)
    meta = parse_unary(unary.content)["meta_info"]
    assert "output_top_logprobs" not in meta and "output_top_logprobs_val_flat_b64" in meta
    flat = decode_flat_top_logprobs(meta, side="output")
    assert flat is not None and flat.shape == (16, 2)
    # SGLang refuses output-flat on a stream, in-stream (the library's own check).
    assert stream.status_code == 200 and b"does not support stream=True" in stream.content


def replayable(line: dict[str, Any]) -> bool:
    return line["layer"] in ("pydantic", "gate", "engine") and line["case"] not in OTHER_LAYER


def test_refusals_are_sglang_s_bytes() -> None:
    lines = [line for line in REFUSALS if replayable(line)]

    async def answers() -> list[httpx.Response]:
        engine = FakeEngine(context_length=1024)
        async with in_process(engine) as client:
            headers = {"Content-Type": "application/json"}
            sent = [line["request"].encode() for line in lines]
            got = [await client.post("/generate", content=body, headers=headers) for body in sent]
            assert list(engine.requests) == sent and engine.running == 0
            return got

    exact = 0
    for line, got in zip(lines, run(answers), strict=True):
        answer = (got.status_code, got.headers["content-type"], got.content)
        if line["code"] in OWN_WORDS:  # SGLang's shape, in the library's words
            status, content_type, _ = answer
            assert (status, content_type) == (line["status"], line["content_type"]), line["case"]
        else:
            assert answer == (line["status"], line["content_type"], line["body"].encode())
            exact += 1
    assert exact >= 60


def test_the_fake_serves_what_a_worker_sends_and_refuses_what_sglang_does() -> None:
    body = {"input_ids": [1, 2], "bootstrap_room": 7, "routed_dp_rank": 0, "not_a_field": 1}

    async def answers() -> list[httpx.Response]:
        async with in_process(FakeEngine(max_body_bytes=200)) as client:
            return [
                await post(client, body),
                await post(client, {**body, "routed_dp_rank": 1, "stream": True}),
                await client.post("/generate", content=b'{"input_ids": [1]}'),
                await post(client, {"input_ids": [1] * 100}),
                await post(client, {"input_ids": [320]}),
            ]

    served_, rank, untyped, large, vocab = run(answers)
    assert served_.status_code == 200 and len(served_.json()["output_ids"]) == 16
    assert rank.status_code == 200 and rank.content == (
        b'data: {"error":{"message":"routed_dp_rank=1 out of range [0, 1)",'
        b'"type":"invalid_request_error","code":400,"retryable":false}}\n\ndata: [DONE]\n\n'
    )
    assert untyped.status_code == 400 and untyped.json()["object"] == "error"
    assert large.status_code == 413
    assert vocab.status_code == 400 and b"outside the model's vocabulary" in vocab.content


def test_server_info_makes_the_live_deployment() -> None:
    async def info() -> bytes:
        async with in_process(FakeEngine()) as client:
            return (await client.get("/get_server_info")).content

    config = (FIXTURES / "live_model_config.json").read_bytes()
    live_info = (FIXTURES / "live_server_info.json").read_bytes()
    mine = Deployment.from_server_info(run(info), model_config=config)
    assert mine == Deployment.from_server_info(live_info, model_config=config)
    # A server without --enable-return-routed-experts answers return_routed_experts with no
    # routed experts (the library's own rule refuses it): the fake checks as SGLang does.
    assert (
        msgspec.structs.replace(mine, enable_return_routed_experts=None) == FakeEngine().deployment
    )
    live = json.loads(live_info)
    fake = FakeEngine().server_info()
    assert {key: live[key] for key in fake if key not in ("model_path", "tokenizer_path")} == {
        key: value for key, value in fake.items() if key not in ("model_path", "tokenizer_path")
    }


def test_fail_after_gives_sglang_s_error_frame_and_unary_error() -> None:
    message = "The running request was aborted by a backend error."

    async def answers() -> tuple[httpx.Response, httpx.Response]:
        async with in_process(FakeEngine(fail_after=2, fail_status=503)) as client:
            return await post(client, {**BODIES["plain"], "stream": True}), await post(
                client, BODIES["plain"]
            )

    stream, unary = run(answers)
    events = stream.content.split(b"\n\n")
    error = {"message": message, "type": "invalid_request_error", "code": 503, "retryable": False}
    assert len(events) == 5 and events[2] == b"data: " + msgspec.json.encode({"error": error})
    with pytest.raises(EngineError, match="backend error") as raised:
        aggregate_sse([stream.content])
    assert raised.value.code == 503
    assert (unary.status_code, unary.json()) == (503, {"error": {"message": message}})
    assert (unary.status_code, unary.content) == error_response(EngineError(message, 503))[::2]


async def first_frame(response: httpx.Response) -> tuple[AsyncIterator[str], Any]:
    lines = response.aiter_lines()
    async for line in lines:
        if line.startswith("data: "):
            return lines, json.loads(line.removeprefix("data: "))
    raise AssertionError("no frame")


async def rest_of(lines: AsyncIterator[str]) -> list[str]:
    return [line async for line in lines if line]


def slow(body: dict[str, Any], rid: str) -> dict[str, Any]:
    return {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 200}, "rid": rid, **body}


def test_an_abort_mid_stream_ends_it_with_sglang_s_abort_frame() -> None:
    engine = FakeEngine(frame_delay=0.01)

    async def scenario() -> tuple[Any, list[str]]:
        async with served(engine) as client:
            stream = client.stream("POST", "/generate", json=slow({"stream": True}, "r-1"))
            async with stream as response:
                lines, first = await first_frame(response)
                aborted = await client.post("/abort_request", json={"rid": "r-1"})
                assert (aborted.status_code, aborted.content) == (200, b"")
                return first, await rest_of(lines)

    first, rest = run(scenario)
    assert first["meta_info"]["id"] == "r-1" and rest[-1] == "data: [DONE]"
    last = json.loads(rest[-2].removeprefix("data: "))
    assert last["meta_info"]["finish_reason"] == {
        "type": "abort",
        "message": "Aborted",
        "status_code": None,
        "err_type": None,
    }
    assert len(last["output_ids"]) < 200
    assert list(engine.aborts) == [{"rid": "r-1"}]
    assert [o.ending for o in engine.outcomes] == ["abort"] and engine.running == 0


def test_an_incremental_aborted_stream_aggregates_to_its_tokens() -> None:
    engine = FakeEngine(incremental=True, frame_delay=0.01)
    body = slow({"stream": True, "return_logprob": True, "top_logprobs_num": 2}, "i")

    async def scenario() -> httpx.Response:
        async with in_process(engine) as client:
            answer = asyncio.ensure_future(post(client, body))
            while not engine.running:
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.03)
            await client.post("/abort_request", json={"rid": "i"})
            return await answer

    response = aggregate_sse([run(scenario).content], incremental=True)
    meta = response["meta_info"]
    assert meta["finish_reason"] == ABORTED
    made = engine.outcomes[0].completion_tokens
    assert 0 < made < 200 and len(response["output_ids"]) == made
    assert meta["output_token_logprobs_length"] == len(meta["output_top_logprobs"]) == made


def test_abort_matches_by_prefix_as_sglang_s_scheduler_does() -> None:
    engine = FakeEngine(frame_delay=0.01)

    async def scenario() -> dict[str, str]:
        async with in_process(engine) as client:
            rids = ["a", "ab", "b"]
            tasks = [asyncio.ensure_future(post(client, slow({}, rid))) for rid in rids]
            while engine.running < 3:
                await asyncio.sleep(0.005)
            for body in ({"rid": "zz"}, {"rid": ""}, {"rid": "a"}, {"rid": "a"}):
                assert (await client.post("/abort_request", json=body)).status_code == 200
            answers = [(await task).json() for task in tasks[:2]]
            assert engine.running == 1
            await client.post("/abort_request", json={"abort_all": True})
            answers.append((await tasks[2]).json())
            return {a["meta_info"]["id"]: a["meta_info"]["finish_reason"]["type"] for a in answers}

    assert run(scenario) == {"a": "abort", "ab": "abort", "b": "abort"}
    assert [abort.get("rid") for abort in engine.aborts] == ["zz", "", "a", "a", None]
    assert sorted(o.rid for o in engine.outcomes) == ["a", "ab", "b"]


def test_a_client_that_goes_away_ends_its_generation() -> None:
    engine = FakeEngine(frame_delay=0.01)

    async def scenario() -> None:
        async with served(engine) as client:
            async with client.stream("POST", "/generate", json=slow({"stream": True}, "s")) as r:
                await first_frame(r)
            while engine.running:  # the stream's generation ends with its client
                await asyncio.sleep(0.005)
            assert [o.ending for o in engine.outcomes] == ["disconnect"]
            unary = asyncio.ensure_future(post(client, slow({}, "u")))
            while engine.running < 1:
                await asyncio.sleep(0.005)
            unary.cancel()
            while engine.running:
                await asyncio.sleep(0.005)

    run(scenario)
    assert engine.disconnects == 2 and not engine.aborts
    assert sorted((o.rid, o.ending) for o in engine.outcomes) == [
        ("s", "disconnect"),
        ("u", "disconnect"),
    ]


def test_a_duplicate_rid_is_refused_as_sglang_refuses_it() -> None:
    engine = FakeEngine(frame_delay=0.01)

    async def scenario() -> httpx.Response:
        async with in_process(engine) as client:
            first = asyncio.ensure_future(post(client, slow({}, "same")))
            while engine.running < 1:
                await asyncio.sleep(0.005)
            second = await post(client, slow({}, "same"))
            await client.post("/abort_request", json={"rid": "same"})
            await first
            return second

    assert run(scenario).json() == {"error": {"message": "Duplicate request ID detected: same"}}


def test_routes_and_options_are_checked() -> None:
    async def answers() -> list[int]:
        async with in_process(FakeEngine()) as client:
            return [
                (await client.get("/generate")).status_code,
                (await client.get("/nowhere")).status_code,
                (await client.get("/health")).status_code,
                (await client.post("/abort_request", content=b"[")).status_code,
            ]

    assert run(answers) == [405, 404, 200, 400]
    options: list[dict[str, Any]] = [
        {"frame_delay": -1},
        {"fail_after": -1},
        {"vocab_size": 2},
        {"fail_status": 200},
    ]
    for option in options:
        with pytest.raises(EnvelopeError, match=next(iter(option))):
            FakeEngine(**option)


def test_nothing_in_the_package_but_the_demo_imports_testing() -> None:
    package = Path(__file__).resolve().parent.parent / "sglang_envelope"
    importers = [
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if "testing" not in path.relative_to(package).parts
        and "sglang_envelope.testing" in path.read_text(encoding="utf-8")
    ]
    assert importers == ["cli/demo.py"]


def test_the_routes_answer_as_sglang_s_fastapi_app_does() -> None:
    body = {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2}}

    async def answers() -> list[httpx.Response]:
        async with in_process(FakeEngine()) as client:
            return [
                await client.put("/generate", json=body),
                await client.get("/health_generate"),
                await client.get("/ready"),
                await client.get("/generate"),
                await client.put("/abort_request", json={}),
                await client.post("/health"),
            ]

    put, health, ready, *refused = run(answers)
    assert put.status_code == 200 and len(put.json()["output_ids"]) == 2
    assert [(r.status_code, r.content) for r in (health, ready)] == [(200, b"")] * 2
    # Starlette's 405 says which methods the route takes.
    allowed = [set(r.headers["allow"].split(", ")) for r in refused]
    assert [r.status_code for r in refused] == [405] * 3
    assert allowed == [{"POST", "PUT"}, {"POST"}, {"GET"}]


def test_a_stream_s_refusal_is_sent_as_sglang_s_streaming_response_sends_it() -> None:
    # The live SGLang 0.5.23 sends a streaming client's refusal through its
    # StreamingResponse: chunked, with no Content-Length; a unary one whole.
    body = {"input_ids": [5, 6], "sampling_params": {"temperature": -1}}

    async def answers() -> list[httpx.Response]:
        async with in_process(FakeEngine()) as client:
            return [await post(client, {**body, "stream": stream}) for stream in (True, False)]

    stream, unary = run(answers)
    assert stream.status_code == 200 and stream.content.startswith(b'data: {"error"')
    assert stream.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert "content-length" not in stream.headers
    assert unary.status_code == 400
    assert unary.headers["content-length"] == str(len(unary.content))


def test_a_path_with_a_trailing_slash_is_redirected_as_starlette_redirects_it() -> None:
    # The live SGLang 0.5.23 answers POST /generate/ with 307 and the path without the
    # slash, on the host the client asked (Starlette's redirect_slashes).
    async def answers() -> list[httpx.Response]:
        async with in_process(FakeEngine()) as client:
            return [
                await client.post("/generate/?x=1", json={"input_ids": [5]}),
                await client.get("/health/"),
                await client.get("/nowhere/"),
                await client.get("//generate"),
            ]

    generate, health, nowhere, doubled = run(answers)
    assert (generate.status_code, generate.content) == (307, b"")
    assert generate.headers["location"] == "http://fake/generate?x=1"
    assert (health.status_code, health.headers["location"]) == (307, "http://fake/health")
    assert nowhere.status_code == 404 and doubled.status_code == 404
