"""The fake engine's rollout controls: ``GET /v1/loads``, pause and continue generation.

As SGLang 0.5.23 has them (`entrypoints/v1_loads.py`, `http_server.py`,
`TokenizerManager.pause_generation`):

- ``GET /v1/loads`` answers one load per DP rank in SGLang's shape, every
  generation counted as running on rank 0 (a paused one too: the fake has no
  waiting queue), with only the core keys when ``include=core`` is asked;
- ``POST /pause_generation`` reads ``{"mode": "abort" | "retract" |
  "in_place"}`` (default ``"abort"``): ``"abort"`` aborts every running
  generation; in every mode no generation makes a token until
  ``POST /continue_generation``, which reads ``{"torch_empty_cache": bool}``.
  Both answer 200 with SGLang's ``{"message": ..., "status": "ok"}``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Final, Literal, Protocol

import msgspec

from sglang_envelope.testing.requests import ClientGone, Message, Receive, Send, read_body
from sglang_envelope.testing.server import JSON, answer, pydantic_error

__all__ = ["Pause", "loads_body", "parse_continue", "parse_pause", "serve_control"]

_ENCODE = msgspec.json.Encoder().encode
PAUSED: Final = b'{"message":"Generation paused successfully.","status":"ok"}'
CONTINUED: Final = b'{"message":"Generation continued successfully.","status":"ok"}'


class Pause:
    """Whether generation is paused; `wait` returns once it is not."""

    __slots__ = ("_resumed",)

    def __init__(self) -> None:
        self._resumed = asyncio.Event()
        self._resumed.set()

    @property
    def paused(self) -> bool:
        return not self._resumed.is_set()

    def pause(self) -> None:
        self._resumed.clear()

    def resume(self) -> None:
        self._resumed.set()

    async def wait(self, stopped: asyncio.Event) -> None:
        """Until generation is not paused, or `stopped` is set."""
        if self._resumed.is_set():
            return
        waiters = [asyncio.ensure_future(self._resumed.wait())]
        waiters.append(asyncio.ensure_future(stopped.wait()))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()


class _PauseReq(msgspec.Struct):
    mode: Literal["abort", "retract", "in_place"] = "abort"


class _ContinueReq(msgspec.Struct):
    torch_empty_cache: bool = True


def _read(body: bytes, kind: type[msgspec.Struct]) -> Any:
    try:
        return msgspec.json.decode(body, type=kind)
    except (msgspec.DecodeError, RecursionError) as error:
        return ValueError(f"{kind.__name__.strip('_')} body: {error}")


def parse_pause(body: bytes) -> str | ValueError:
    """The pause mode `body` asks for, or why SGLang's parse refuses it."""
    read = _read(body, _PauseReq)
    return read.mode if isinstance(read, _PauseReq) else read


def parse_continue(body: bytes) -> ValueError | None:
    """None for a body ``/continue_generation`` takes, else why SGLang refuses it."""
    read = _read(body, _ContinueReq)
    return None if isinstance(read, _ContinueReq) else read


_CORE: Final[dict[str, Any]] = {
    "timestamp": 0.0,
    "dp_rank": 0,
    "num_running_reqs": 0,
    "num_waiting_reqs": 0,
    "num_waiting_uncached_tokens": 0,
    "num_used_tokens": 0,
    "num_total_tokens": 0,
    "num_active_tokens": 0,
    "num_prealloc_ready_tokens": 0,
    "max_total_num_tokens": 4096,
    "max_running_requests": 4096,
    "token_usage": 0.0,
    "gen_throughput": 0.0,
    "cache_hit_rate": 0.0,
    "utilization": 0.0,
    "total_prefill_uncached_tokens": 0,
    "total_prefill_busy_us": 0,
    "decode_moments": None,
}


def loads_body(*, running: int, dp_size: int, query: bytes) -> bytes:
    """The ``/v1/loads`` answer: `running` generations on rank 0 of `dp_size`."""
    core_only = b"include=core" in query
    now = datetime.now(timezone.utc)
    loads = []
    for rank in range(dp_size):
        load = {
            **_CORE,
            "timestamp": now.timestamp(),
            "dp_rank": rank,
            "num_running_reqs": running if rank == 0 else 0,
        }
        if not core_only:
            load["queues"] = {
                "waiting": 0,
                "grammar": 0,
                "paused": 0,
                "retracted": 0,
                "prealloc_ready": 0,
            }
        loads.append(load)
    return _ENCODE(
        {
            "timestamp": now.isoformat(),
            "version": "0.5.23",
            "accelerator": None,
            "num_accelerators": 1,
            "loads": loads,
        }
    )


class _Haltable(Protocol):
    def halt(self, why: Literal["abort", "disconnect"]) -> None: ...


async def serve_control(
    scope: Message,
    receive: Receive,
    send: Send,
    running: Mapping[str, _Haltable],
    pause: Pause,
) -> None:
    """``POST /pause_generation`` or ``POST /continue_generation``,
    on the fake's generations."""
    try:
        body = await read_body(receive, scope["headers"], 65536)
    except ClientGone:
        return
    pausing = scope["path"] == "/pause_generation"
    if isinstance(body, Exception):
        read: Any = body
    else:
        read = parse_pause(body) if pausing else parse_continue(body)
    if isinstance(read, Exception):
        await answer(send, *pydantic_error(str(read)))
    elif pausing:
        if read == "abort":
            for generation in list(running.values()):
                generation.halt("abort")
        pause.pause()
        await answer(send, 200, JSON, PAUSED)
    else:
        pause.resume()
        await answer(send, 200, JSON, CONTINUED)
