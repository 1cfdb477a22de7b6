"""The README's worker flow over httpx, SGLang's direct answers, and how the suite compares them.

`through_library` is the README's frontend and worker in one: the client's body
through `decode_client_request`, `to_worker_envelope`, the envelope's wire form and
back, `build_engine_request`, the POST, then `relay_sse_async`,
`aggregate_sse_async` or `parse_unary`, and `finalize_response`. `direct` posts
the client's body to SGLang as it is. `comparable` and `key_order` say what of
two answers must be equal: every value but the volatile ones, and every key in
its order.
"""

from __future__ import annotations

import array
import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from sglang_envelope import (
    Bootstrap,
    Deployment,
    EngineRequest,
    Role,
    Target,
    WorkerEnvelope,
    aggregate_sse_async,
    build_engine_request,
    decode_client_request,
    decode_envelope,
    encode_envelope,
    finalize_response,
    parse_unary,
    relay_sse_async,
    to_worker_envelope,
)

#: meta_info keys whose values change from one run of the same request to the next.
VOLATILE_META = frozenset(
    {"id", "e2e_latency", "response_sent_to_client_ts", "cached_tokens", "cached_tokens_details"}
)
VOLATILE = "<volatile>"
#: meta_info lists an incremental stream sends a piece of in each frame.
DELTA_META = (
    "output_token_logprobs",
    "output_top_logprobs",
    "output_token_ids_logprobs",
    "output_token_entropy",
)
TIMEOUT = httpx.Timeout(120.0, connect=10.0)
DEFAULT_TARGET = Target()


@dataclass
class Answer:
    """What a client got: the status, the content type and the body's bytes."""

    status: int
    content_type: str
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def frames(self) -> list[dict[str, Any]]:
        return sse_frames(self.body)


def client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=TIMEOUT)


def body_of(request: dict[str, Any]) -> bytes:
    return json.dumps(request).encode()


async def direct(http: httpx.AsyncClient, url: str, body: bytes) -> Answer:
    """SGLang's own answer to the client's body, posted as it is."""
    answer = await http.post(
        f"{url}/generate", content=body, headers={"Content-Type": "application/json"}
    )
    return Answer(answer.status_code, answer.headers.get("content-type", ""), answer.content)


async def post_chunks(
    http: httpx.AsyncClient, url: str, engine: EngineRequest
) -> AsyncIterator[bytes]:
    """The README's `post`: the engine request's answer as it arrives."""
    headers = {"Content-Type": "application/json", "Accept": engine.accept}
    request = http.build_request(
        "POST", f"{url}/generate", content=engine.to_json(), headers=headers
    )
    answer = await http.send(request, stream=True)
    try:
        async for chunk in answer.aiter_bytes():
            yield chunk
    finally:
        await answer.aclose()


async def collect(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in chunks])


#: What every server of the suite is (`live/servers.py`'s flags and the tiny model); a
#: server's own flags (incremental, no tokenizer) are left to SGLang.
DEPLOYMENT = Deployment(
    vocab_size=320, context_length=1024, max_req_input_len=1018, num_reserved_tokens=0,
    allow_auto_truncate=False, dp_size=1,
)  # fmt: skip


def engine_request(
    envelope: WorkerEnvelope, *, role: Role, bootstrap: Bootstrap | None = None
) -> EngineRequest:
    """`build_engine_request` for the envelope's own ids: the suite's one call of it."""
    return build_engine_request(
        envelope,
        input_ids=envelope.request.input_ids,
        role=role,
        deployment=DEPLOYMENT,
        bootstrap=bootstrap,
    )


def make_engine(
    body: bytes,
    *,
    role: Role = Role.AGGREGATED,
    bootstrap: Bootstrap | None = None,
    target: Target = DEFAULT_TARGET,
) -> tuple[str, EngineRequest, bool]:
    """The client's body as the worker's engine request: (client rid, request, client streams)."""
    request = decode_client_request(body, target=target)
    envelope = to_worker_envelope(request, rid=request.rid or uuid.uuid4().hex)
    wire = encode_envelope(envelope)
    envelope = decode_envelope(wire, target=target)  # the worker's side of the wire
    return envelope.rid, engine_request(envelope, role=role, bootstrap=bootstrap), envelope.stream


async def answer_of(
    chunks: AsyncIterator[bytes],
    engine: EngineRequest,
    *,
    client_rid: str,
    client_streams: bool,
    incremental: bool,
) -> Answer:
    """The worker's answer to its client, from the engine's answer (the README's branches)."""
    if client_streams:
        relayed = relay_sse_async(chunks, client_incremental=incremental)
        return Answer(200, "text/event-stream; charset=utf-8", await collect(relayed))
    if engine.stream:
        response = dict(await aggregate_sse_async(chunks))
    else:
        response = dict(parse_unary(await collect(chunks)))
    final = finalize_response(response, engine=engine, client_rid=client_rid)
    return Answer(200, "application/json", json.dumps(final).encode())


async def through_library(
    http: httpx.AsyncClient,
    url: str,
    body: bytes,
    *,
    incremental: bool = False,
    target: Target = DEFAULT_TARGET,
) -> Answer:
    """The client's answer through the README's frontend and an aggregated worker."""
    rid, engine, streams = make_engine(body, target=target)
    chunks = post_chunks(http, url, engine)
    return await answer_of(
        chunks, engine, client_rid=rid, client_streams=streams, incremental=incremental
    )


async def library_and_direct(url: str, body: bytes, target: Target) -> tuple[Answer, Answer]:
    """The client's answer through the library (for `target`), and SGLang's own."""
    async with client() as http:
        want = await direct(http, url, body)
        got = await through_library(http, url, body, target=target)
    return got, want


async def direct_once(url: str, body: bytes) -> Answer:
    """SGLang's own answer to `body`, over a client of its own."""
    async with client() as http:
        return await direct(http, url, body)


def sse_frames(data: bytes) -> list[dict[str, Any]]:
    """The JSON frames of an SSE body that ends with `data: [DONE]`."""
    events = data.decode().split("\n\n")
    assert events[-1] == "", f"the stream does not end with a blank line: {data[-80:]!r}"
    assert events[-2] == "data: [DONE]", f"the stream does not end with [DONE]: {data[-80:]!r}"
    frames = []
    for event in events[:-2]:
        assert event.startswith("data: "), f"not a data event: {event[:80]!r}"
        frames.append(json.loads(event[len("data: ") :]))
    return frames


def final_state(frames: list[dict[str, Any]], *, incremental: bool) -> dict[str, Any]:
    """What a stream says in all: its last frame, with an incremental stream's pieces joined."""
    assert frames, "a stream without frames"
    if not incremental:
        return frames[-1]
    last: dict[str, Any] = json.loads(json.dumps(frames[-1]))
    if "text" in last:
        last["text"] = "".join(frame.get("text", "") for frame in frames)
    last["output_ids"] = [i for frame in frames for i in frame.get("output_ids", [])]
    for key in DELTA_META:
        if key in last["meta_info"]:
            last["meta_info"][key] = [
                item for frame in frames for item in frame["meta_info"].get(key) or []
            ]
    return last


def comparable(response: Any) -> Any:
    """`response` with each volatile meta_info value replaced by a marker (the keys stay)."""
    if isinstance(response, list):
        return [comparable(item) for item in response]
    if not isinstance(response, dict) or not isinstance(response.get("meta_info"), dict):
        return response
    meta = {
        key: VOLATILE if key in VOLATILE_META else value
        for key, value in response["meta_info"].items()
    }
    return {**response, "meta_info": meta}


def key_order(response: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The top-level keys and the meta_info keys of a response, in order."""
    return list(response), list(response.get("meta_info") or {})


def _floats(text: str) -> list[float]:
    values = array.array("f")
    values.frombytes(base64.b64decode(text))
    return values.tolist()


def differences(got: Any, want: Any, *, tolerance: float, path: str = "") -> list[str]:
    """Where `got` differs from `want` (floats within `tolerance`, relative or absolute;
    a Base64 float32 array is compared as its numbers)."""
    if isinstance(want, float) and isinstance(got, float):
        close = abs(got - want) <= tolerance * max(1.0, abs(want))
        return [] if close else [f"{path}: {got!r} != {want!r}"]
    if isinstance(want, dict) and isinstance(got, dict):
        if list(got) != list(want):
            return [f"{path}: keys {list(got)} != {list(want)}"]
        found = []
        for key, value in want.items():
            mine = got[key]
            if key.endswith("_val_flat_b64") and isinstance(value, str) and isinstance(mine, str):
                mine, value = _floats(mine), _floats(value)
            found += differences(mine, value, tolerance=tolerance, path=f"{path}.{key}")
        return found
    if isinstance(want, list) and isinstance(got, list) and len(got) == len(want):
        found = []
        for index, (mine, value) in enumerate(zip(got, want, strict=True)):
            found += differences(mine, value, tolerance=tolerance, path=f"{path}[{index}]")
        return found
    return [] if got == want and type(got) is type(want) else [f"{path}: {got!r} != {want!r}"]


def assert_same(got: dict[str, Any], want: dict[str, Any], *, tolerance: float = 0.0) -> None:
    """Equal values but the volatile ones (floats within `tolerance`), and equal keys in equal
    order at both levels."""
    got, want = comparable(got), comparable(want)
    got_meta, want_meta = got.get("meta_info", {}), want.get("meta_info", {})
    missing = [key for key in want_meta if key not in got_meta]
    extra = [key for key in got_meta if key not in want_meta]
    assert (missing, extra) == ([], []), "meta_info keys missing and extra"
    assert key_order(got) == key_order(want), "the keys' order differs"
    assert differences(got, want, tolerance=tolerance) == []


@dataclass
class PdAnswer:
    """Both legs of a disaggregated request: the prefill leg's response, the client's answer."""

    prefill: dict[str, Any]
    decode: Answer
    prefill_engine: EngineRequest
    decode_engine: EngineRequest


async def engine_response(chunks: AsyncIterator[bytes], engine: EngineRequest) -> dict[str, Any]:
    """SGLang's final response to `engine` (aggregated when it streams), not finalized."""
    if engine.stream:
        return dict(await aggregate_sse_async(chunks))
    return dict(parse_unary(await collect(chunks)))


async def through_pd(
    http: httpx.AsyncClient,
    prefill_url: str,
    decode_url: str,
    body: bytes,
    bootstrap: tuple[str, int],
) -> PdAnswer:
    """The client's answer through a prefill and a decode worker: both legs sent at once,
    both read to the end (an unread prefill leg is aborted, and decode then waits)."""
    request = decode_client_request(body)
    envelope = decode_envelope(encode_envelope(to_worker_envelope(request, rid=uuid.uuid4().hex)))
    meeting = Bootstrap(*bootstrap, room=uuid.uuid4().int >> 65)
    legs = [
        engine_request(envelope, role=r, bootstrap=meeting) for r in (Role.PREFILL, Role.DECODE)
    ]
    prefill, decode = await asyncio.gather(
        engine_response(post_chunks(http, prefill_url, legs[0]), legs[0]),
        answer_of(
            post_chunks(http, decode_url, legs[1]),
            legs[1],
            client_rid=envelope.rid,
            client_streams=envelope.stream,
            incremental=False,
        ),
    )
    return PdAnswer(prefill, decode, *legs)


def sender(http: httpx.AsyncClient, url: str) -> Callable[[bytes], Awaitable[int]]:
    """`run_abort`'s `send`: POST /abort_request on `url`."""

    async def send(body: bytes) -> int:
        answer = await http.post(
            f"{url}/abort_request", content=body, headers={"Content-Type": "application/json"}
        )
        return answer.status_code

    return send


async def watched(
    chunks: AsyncIterator[bytes], first_token: asyncio.Event, finished: asyncio.Event
) -> AsyncIterator[bytes]:
    """The engine's chunks; `first_token` is set at the first output id, `finished` at the end."""
    try:
        async for chunk in chunks:
            if b'"output_ids":[' in chunk and b'"output_ids":[]' not in chunk:
                first_token.set()
            yield chunk
    finally:
        finished.set()
