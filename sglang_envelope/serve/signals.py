"""A callback on a process's signals, chained to their handlers (`Service.close_on`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from sglang_envelope.errors.exceptions import EnvelopeError, show_value

__all__ = ["calling_on"]


@contextlib.contextmanager
def calling_on(signals: tuple[int, ...], callback: Callable[[], None]) -> Iterator[None]:
    """While the block runs, each of `signals` calls `callback` in the running loop's
    thread, then the handler it had; the handlers are put back after the block. Use it
    inside the running loop, in the main thread. Raises `EnvelopeError` naming a signal
    that is not one, or that cannot be handled (``SIGKILL``; outside the main thread),
    with every handler as it was."""
    import asyncio
    import signal

    loop = asyncio.get_running_loop()
    previous: dict[int, Any] = {}
    for number in signals:
        if type(number) is bool or not isinstance(number, int):
            raise EnvelopeError(
                f"signals: expected signal numbers, got {show_value(number)}"
            )
        try:
            previous[number] = signal.getsignal(number)
        except ValueError as error:
            raise EnvelopeError(f"signals: {number}: {error}") from None

    def handler(number: int, frame: Any) -> None:
        loop.call_soon_threadsafe(callback)
        chained = previous[number]
        if callable(chained):
            chained(number, frame)

    installed: list[int] = []
    try:
        for number in signals:
            try:
                signal.signal(number, handler)
            except (OSError, ValueError) as error:  # SIGKILL, SIGSTOP; another thread
                raise EnvelopeError(
                    f"signals: {number} cannot be handled: {error}"
                ) from None
            installed.append(number)
        yield
    finally:
        for number in installed:
            signal.signal(number, previous[number])
