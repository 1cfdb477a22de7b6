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

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from sglang_envelope import (
    Bootstrap,
    EngineRequest,
    Role,
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
    request = http.build_request("POST", f"{url}/generate", content=engine.to_json(), headers=headers)
    answer = await http.send(request, stream=True)
    try:
        async for chunk in answer.aiter_bytes():
            yield chunk
    finally:
        await answer.aclose()


async def collect(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in chunks])


def make_engine(
    body: bytes, *, role: Role = Role.AGGREGATED, bootstrap: Bootstrap | None = None
) -> tuple[str, EngineRequest, bool]:
    """The client's body as the worker's engine request: (client rid, request, client streams)."""
    request = decode_client_request(body)
    envelope = to_worker_envelope(request, rid=request.rid or uuid.uuid4().hex)
    envelope = decode_envelope(encode_envelope(envelope))  # the worker's side of the wire
    engine = build_engine_request(
        envelope, input_ids=envelope.request.input_ids, role=role, bootstrap=bootstrap
    )
    return envelope.rid, engine, envelope.stream


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
    http: httpx.AsyncClient, url: str, body: bytes, *, incremental: bool = False
) -> Answer:
    """The client's answer through the README's frontend and an aggregated worker."""
    rid, engine, streams = make_engine(body)
    chunks = post_chunks(http, url, engine)
    return await answer_of(
        chunks, engine, client_rid=rid, client_streams=streams, incremental=incremental
    )


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
    last = json.loads(json.dumps(frames[-1]))
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


def assert_same(got: dict[str, Any], want: dict[str, Any]) -> None:
    """Equal values but the volatile ones, and equal keys in equal order at both levels."""
    got, want = comparable(got), comparable(want)
    shared = [key for key in want if key in got and key != "meta_info"]
    assert {k: got[k] for k in shared} == {k: want[k] for k in shared}
    got_meta, want_meta = got.get("meta_info", {}), want.get("meta_info", {})
    shared = [key for key in want_meta if key in got_meta]
    assert {k: got_meta[k] for k in shared} == {k: want_meta[k] for k in shared}
    missing = [key for key in want_meta if key not in got_meta]
    extra = [key for key in got_meta if key not in want_meta]
    assert (missing, extra) == ([], []), "meta_info keys missing and extra"
    assert key_order(got) == key_order(want)
