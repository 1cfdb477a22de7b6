"""Send one native SGLang body to Dynamo's SGLang worker over Dynamo's own request plane.

Run with the live environment's interpreter and Dynamo on the path (`live/dynamo_host.py`):

    python live/dynamo_call.py BODY [STOP_AFTER_S]

The body goes to the endpoint ``dynamo.backend.generate`` as Dynamo's frontend carries
it: the client's body opaque under ``extra_args.sglang_tito``, its ids as
``token_ids``. With STOP_AFTER_S the request is stopped then, as the frontend stops it
when its client goes away (``Context.stop_generating()``). Prints one JSON line an
item the worker streams back (``{"item": ...}``), then ``{"seconds": ..., "error":
...}``: the time from sending to the stream's end, and Dynamo's error, if any.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any


async def main(body: dict[str, Any], stop_after_s: float | None) -> None:
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
    context = Context()
    if stop_after_s is not None:
        asyncio.get_running_loop().call_later(stop_after_s, context.stop_generating)
    started = time.monotonic()
    error = None
    try:
        async for item in await client.round_robin(request, context=context):
            data = item.data() if hasattr(item, "data") else item
            print(json.dumps({"item": data}), flush=True)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"seconds": time.monotonic() - started, "error": error}), flush=True)
    runtime.shutdown()


if __name__ == "__main__":
    stop = float(sys.argv[2]) if len(sys.argv) > 2 else None
    asyncio.run(main(json.loads(sys.argv[1]), stop))
