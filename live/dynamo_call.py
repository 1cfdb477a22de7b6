"""Send one native SGLang body to Dynamo's SGLang worker over Dynamo's own request plane.

Run with the live environment's interpreter and Dynamo on the path (`live/dynamo_host.py`):

    python live/dynamo_call.py BODY [--stop-after S] [--pair HOST:PORT] [--routing JSON]

The body goes to the endpoint ``dynamo.backend.generate`` as Dynamo's frontend carries
it: the client's body opaque under ``extra_args.sglang_tito``, its ids as
``token_ids``. With ``--stop-after`` the request is stopped then, as the frontend stops
it when its client goes away (``Context.stop_generating()``). With ``--routing`` the
request carries that object as its ``routing``, as a router's caller sets it.

With ``--pair`` (the prefill worker's bootstrap host and port) it goes to a
prefill/decode pair as Dynamo 1.6.1's frontend routes it: to the prefill worker
(``dynamo.prefill.generate``) first, with ``bootstrap_info`` (that host and port, a
fresh room); once the prefill worker's first item gives its ``disaggregated_params``,
to the decode worker with those as ``bootstrap_info``; the prefill worker's stream is
read to its end meanwhile, and what it streams is not passed on.

Prints one JSON line an item the (decode) worker streams back (``{"item": ...}``), one
an item of the prefill worker (``{"prefill": ...}``), then ``{"seconds": ...,
"error": ...}``: the time from sending to the stream's end, and Dynamo's error, if any.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import AsyncIterator
from typing import Any


def data_of(item: Any) -> Any:
    return item.data() if hasattr(item, "data") else item


async def prefill_first(runtime: Any, request: dict[str, Any], pair: str, context: Any) -> Any:
    """The prefill leg sent, its first item (the meeting point) read and printed."""
    host, port = pair.rsplit(":", 1)
    room = random.getrandbits(63)
    info = {"bootstrap_host": host, "bootstrap_port": int(port), "bootstrap_room": room}
    prefill = await runtime.endpoint("dynamo.prefill.generate").client()
    await prefill.wait_for_instances()
    stream = await prefill.round_robin({**request, "bootstrap_info": info}, context=context)
    first = data_of(await anext(aiter(stream)))
    print(json.dumps({"prefill": first}), flush=True)
    return stream, first["disaggregated_params"]


async def drain(stream: AsyncIterator[Any]) -> None:
    """The prefill leg read to its end, as the frontend reads it."""
    async for item in stream:
        print(json.dumps({"prefill": data_of(item)}), flush=True)


async def main(
    body: dict[str, Any],
    stop_after_s: float | None,
    pair: str | None,
    routing: dict[str, Any] | None,
) -> None:
    from dynamo._core import Context, DistributedRuntime

    runtime = DistributedRuntime(asyncio.get_running_loop(), "file", "tcp", event_plane="zmq")
    client = await runtime.endpoint("dynamo.backend.generate").client()
    await client.wait_for_instances()
    request = {
        "token_ids": body["input_ids"],
        "model": "tiny-gpt2",
        "sampling_options": {},
        "stop_conditions": {},
        "output_options": {},
        "extra_args": {"sglang_tito": body},
    }
    if routing is not None:
        request["routing"] = routing
    context = Context()
    if stop_after_s is not None:
        asyncio.get_running_loop().call_later(stop_after_s, context.stop_generating)
    started = time.monotonic()
    error = None
    draining = None
    try:
        if pair is not None:
            stream, meeting = await prefill_first(runtime, request, pair, context)
            draining = asyncio.ensure_future(drain(stream))
            request["bootstrap_info"] = meeting
        async for item in await client.round_robin(request, context=context):
            print(json.dumps({"item": data_of(item)}), flush=True)
        if draining is not None:
            await draining
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        if draining is not None and not draining.done():  # the prefill leg stopped too
            context.stop_generating()
            await asyncio.wait([draining], timeout=10)
    print(json.dumps({"seconds": time.monotonic() - started, "error": error}), flush=True)
    runtime.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("body")
    parser.add_argument("--stop-after", type=float)
    parser.add_argument("--pair")
    parser.add_argument("--routing", type=json.loads)
    args = parser.parse_args()
    asyncio.run(main(json.loads(args.body), args.stop_after, args.pair, args.routing))
