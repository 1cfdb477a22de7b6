"""`Service` over an in-process engine (`EngineTransport`), against a stand-in that yields what
SGLang's tokenizer manager yields: the fake engine's answers, as Python dicts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from sglang_envelope import Deployment, EnvelopeError, Service, decode_client_request
from sglang_envelope.adapters.engine import EngineTransport
from sglang_envelope.testing.answers import Span, answer_object, plan_answer

DEPLOYMENT = Deployment(vocab_size=320, incremental_streaming_output=False)


class Request:
    """Stands in for SGLang's GenerateReqInput: the keyword arguments it was made with."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class Manager:
    """A tokenizer manager: `generate_request` yields the fake's outputs as dicts (a
    cumulative stream, or one unary answer), and raises SGLang's ValueError for a
    request it refuses (`max_new_tokens` 13 here); `abort_request` is recorded."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.aborted: list[str] = []

    async def generate_request(self, obj: Request, request: Any) -> AsyncIterator[Any]:
        kwargs = obj.kwargs
        self.requests.append(kwargs)
        params = kwargs.get("sampling_params") or {}
        if params.get("max_new_tokens") == 13:
            raise ValueError("max_new_tokens 13 is refused here")
        client = decode_client_request(
            {"input_ids": kwargs["input_ids"], **({"sampling_params": params} if params else {})}
        )
        plan = plan_answer(
            client, kwargs["rid"], vocab_size=320, context_length=1024, default_max_new_tokens=4
        )
        total = len(plan.output_ids)
        if not kwargs.get("stream"):
            yield answer_object(plan, Span(0, total, plan.finish, True), unary=True)
            return
        for made in range(1, total + 1):
            await asyncio.sleep(0)
            finish = plan.finish if made == total else None
            yield answer_object(plan, Span(0, made, finish, made == 1), unary=False)

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        self.aborted.append(rid)


class Engine:
    def __init__(self) -> None:
        self.tokenizer_manager = Manager()


async def served(body: dict[str, Any]) -> tuple[int, bytes, Manager]:
    engine = Engine()
    transport = EngineTransport(engine, request_type=Request)
    async with Service(transport, deployment=DEPLOYMENT) as service:
        answer = await service.generate(json.dumps(body).encode())
        data = b"".join([chunk async for chunk in answer.body])
    return answer.status, data, engine.tokenizer_manager


def test_a_unary_client_gets_sglang_s_one_answer() -> None:
    status, data, manager = asyncio.run(served({"input_ids": [5, 6], "rid": "mine"}))
    answer = msgspec.json.decode(data)
    assert status == 200 and answer["meta_info"]["id"] == "mine"  # the client's own rid
    assert answer["meta_info"]["finish_reason"] == {"type": "length", "length": 4}
    (sent,) = manager.requests
    assert sent["stream"] is False and sent["rid"] != "mine"  # asked unary, its own rid


def test_a_streaming_client_gets_sglang_s_frames_then_done() -> None:
    status, data, _ = asyncio.run(served({"input_ids": [5, 6], "stream": True}))
    frames = [msgspec.json.decode(e[6:]) for e in data.split(b"\n\n") if e[6:7] == b"{"]
    assert status == 200 and data.endswith(b"data: [DONE]\n\n")
    assert [len(f["output_ids"]) for f in frames] == [1, 2, 3, 4]


@pytest.mark.parametrize("stream", [False, True])
def test_sglang_s_own_refusal_reaches_the_client_in_its_mode(stream: bool) -> None:
    body = {"input_ids": [5, 6], "stream": stream, "sampling_params": {"max_new_tokens": 13}}
    status, data, _ = asyncio.run(served(body))
    if stream:
        assert status == 200 and b'"max_new_tokens 13 is refused here"' in data
        assert data.endswith(b"data: [DONE]\n\n")
    else:
        assert status == 400
        assert msgspec.json.decode(data) == {
            "error": {"message": "max_new_tokens 13 is refused here"}
        }


def test_an_id_outside_the_vocabulary_never_reaches_the_engine() -> None:
    status, _, manager = asyncio.run(served({"input_ids": [5, 999]}))
    assert status == 400 and manager.requests == []


def test_an_abort_goes_to_the_engine_s_tokenizer_manager() -> None:
    engine = Engine()
    transport = EngineTransport(engine, request_type=Request)
    assert asyncio.run(transport.abort(b'{"rid":"r1"}')) == 200
    assert engine.tokenizer_manager.aborted == ["r1"]


@pytest.mark.parametrize("engine", [object(), Engine()])
def test_what_is_not_an_engine_is_refused_at_once(engine: Any) -> None:
    with pytest.raises(EnvelopeError):
        EngineTransport(engine, request_type=7 if isinstance(engine, Engine) else Request)  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [False, True])
def test_header_overrides_run_the_request_under_the_service_s_own_rid(stream: bool) -> None:
    """With `header_overrides=True` the service sends the client's own body and sets the
    rid (and a pair's fields) in ``x-override-*`` headers: the engine runs the request
    under the service's rid, which its aborts name, as SGLang's HTTP server would."""

    async def main() -> tuple[bytes, Manager]:
        engine = Engine()
        transport = EngineTransport(engine, request_type=Request)
        async with Service(
            transport, deployment=DEPLOYMENT, header_overrides=True, rid=lambda: "e" * 32
        ) as service:
            body = {"input_ids": [5, 6], "rid": "mine", "stream": stream}
            answer = await service.generate(json.dumps(body).encode())
            data = b"".join([chunk async for chunk in answer.body])
        return data, engine.tokenizer_manager

    data, manager = asyncio.run(main())
    assert [sent["rid"] for sent in manager.requests] == ["e" * 32]
    assert b'"id":"mine"' in data  # the client still gets its own
