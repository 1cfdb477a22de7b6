"""docs/responses.md's Python examples run as written, on SGLang's own streams."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec

from sglang_envelope.stream import SseDecoder
from tests.strategies import SGLANG_ANSWERS

DOC = Path(__file__).resolve().parent.parent / "docs" / "responses.md"


def examples() -> dict[str, Any]:
    """Every python block of the page, executed in order in one namespace."""
    namespace: dict[str, Any] = {}
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert blocks
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    return namespace


def answer(name: str) -> dict[str, Any]:
    return next(case for case in SGLANG_ANSWERS if case["name"] == name)


async def delivered(data: bytes, size: int = 37) -> AsyncIterator[bytes]:
    for at in range(0, len(data), size):
        await asyncio.sleep(0)
        yield data[at : at + size]


def test_the_examples_aggregate_sglangs_streams() -> None:
    found = examples()
    for name in ("logprobs_incremental", "logprobs_cumulative"):
        case = answer(name)
        body = case["body"].encode()
        chunks = [body[at : at + 97] for at in range(0, len(body), 97)]
        assert found["final_response"](chunks) == case["expected"]
        assert asyncio.run(found["final_response_async"](delivered(body))) == case["expected"]
        assert msgspec.json.decode(found["unary_answer"](chunks)) == case["expected"]


def test_the_relay_example_sends_sglangs_cumulative_frames() -> None:
    incremental = answer("logprobs_incremental")["body"].encode()
    cumulative = answer("logprobs_cumulative")["body"].encode()
    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    asyncio.run(examples()["relay_cumulative"](delivered(incremental), send))
    decoder = SseDecoder()
    relayed = decoder.feed(b"".join(sent))
    decoder.close()
    expected = SseDecoder().feed(cumulative)
    assert decoder.done
    assert relayed[-1] == expected[-1]
    assert [frame["output_ids"] for frame in relayed] == [f["output_ids"] for f in expected]


def test_the_relay_section_example_streams_to_a_cumulative_client() -> None:
    """The relay section's example: SGLang's own incremental stream, any chunking."""
    engine = answer("logprobs_incremental")["body"].encode()
    cumulative = answer("logprobs_cumulative")["body"].encode()
    for size in (37, 4096):
        sent: list[bytes] = []

        async def send(data: bytes, sent: list[bytes] = sent) -> None:
            sent.append(data)

        asyncio.run(examples()["stream_to_client"](delivered(engine, size), send))
        assert b"".join(sent).endswith(b"data: [DONE]\n\n")
        relayed = SseDecoder().feed(b"".join(sent))
        assert relayed[-1] == SseDecoder().feed(cumulative)[-1]


def test_the_disaggregated_example_merges_prefill_logprobs() -> None:
    unary = answer("logprobs_unary")
    full = msgspec.json.decode(unary["body"].encode())
    decode_side = {**full, "meta_info": {**full["meta_info"], "input_token_logprobs": []}}
    merged = examples()["disaggregated"](unary["body"].encode(), msgspec.json.encode(decode_side))
    assert merged == unary["expected"]
