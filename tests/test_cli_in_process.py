"""The demo's transport: an ASGI app called in this process, as a server would call it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from sglang_envelope import UpstreamError
from sglang_envelope.cli.in_process import InProcess
from sglang_envelope.testing import FakeEngine


def test_an_abort_reaches_the_app_and_a_stream_closed_early_tells_it_the_client_left() -> None:
    engine = FakeEngine(frame_delay=0.01)

    async def main() -> tuple[int, int, Any]:
        transport = InProcess(engine)
        body = json.dumps({"input_ids": [5], "rid": "r-1", "stream": True,
                           "sampling_params": {"max_new_tokens": 500}}).encode()  # fmt: skip
        reply = await transport.generate(body, {"content-type": "application/json"})
        first = await reply.chunks.__anext__()
        aborted = await transport.abort(b'{"rid": "r-1"}')
        await reply.close()  # the app's request ends: its receive says the client left
        return reply.status, aborted, first

    status, aborted, first = asyncio.run(asyncio.wait_for(main(), 10))
    assert status == 200 and aborted == 200 and first.startswith(b"data: ")
    assert list(engine.aborts) == [{"rid": "r-1"}] and engine.running == 0


@pytest.mark.parametrize("failure", [None, ValueError("the app broke")])
def test_an_app_that_answers_nothing_is_an_upstream_error(failure: Exception | None) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        if failure is not None:
            raise failure

    async def main() -> None:
        await InProcess(app).generate(b"{}", {})

    expected = ValueError if failure is not None else UpstreamError
    with pytest.raises(expected, match=r"the app broke|answered nothing to POST /generate"):
        asyncio.run(main())
