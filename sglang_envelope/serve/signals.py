"""A callback on a process's signals, chained to their handlers (`Service.close_on`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["calling_on"]


@contextlib.contextmanager
def calling_on(signals: tuple[int, ...], callback: Callable[[], None]) -> Iterator[None]:
    """While the block runs, each of `signals` calls `callback` in the running loop's
    thread, then the handler it had; the handlers are put back after the block. Use it
    inside the running loop, in the main thread."""
    import asyncio
    import signal

    loop = asyncio.get_running_loop()
    previous = {number: signal.getsignal(number) for number in signals}

    def handler(number: int, frame: Any) -> None:
        loop.call_soon_threadsafe(callback)
        chained = previous[number]
        if callable(chained):
            chained(number, frame)

    for number in signals:
        signal.signal(number, handler)
    try:
        yield
    finally:
        for number, chained in previous.items():
            signal.signal(number, chained)
