"""The chunk sources the stream readers take from the caller, and their closing.

A reader opens the source at the call (`_iterate`, `_aiterate`: refused with
`EnvelopeError` if it is not iterable) and, whenever it stops reading it (the
source's end, the terminal frame, a fault, the consumer closing the reader),
closes what it opened: an async source's iterator that has ``aclose`` (an
async generator, such as an httpx ``aiter_bytes()``) is awaited closed
(`_aclose`), a generator is closed (`_close`). The source's ``finally`` runs
then, not when the garbage collector finds it. Other iterators (a list's, a
file's) are left as they are: the reader did not open what they read.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Generator, Iterable, Iterator
from typing import Any

from sglang_envelope.errors.exceptions import EnvelopeError


def _iterate(items: Iterable[Any], what: str) -> Iterator[Any]:
    try:
        return iter(items)
    except TypeError:
        raise EnvelopeError(f"{what}: expected an iterable, got {type(items).__name__}") from None


def _close(iterator: Iterator[Any]) -> None:
    if isinstance(iterator, Generator):
        iterator.close()


def _feed_all(items: Iterable[Any], what: str, feed: Callable[[Any], object]) -> None:
    """Every item to `feed`, in order; the source closed (`_close`) however that ends."""
    iterator = _iterate(items, what)
    try:
        for item in iterator:
            feed(item)
    finally:
        _close(iterator)


def _aiterate(items: AsyncIterable[Any], what: str) -> AsyncIterator[Any]:
    try:
        return aiter(items)
    except TypeError:
        raise EnvelopeError(
            f"{what}: expected an async iterable, got {type(items).__name__}"
        ) from None


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


async def _afeed_all(items: AsyncIterable[Any], what: str, feed: Callable[[Any], object]) -> None:
    """`_feed_all` for an async source: its iterator awaited closed (`_aclose`) however it ends."""
    iterator = _aiterate(items, what)
    try:
        async for item in iterator:
            feed(item)
    finally:
        await _aclose(iterator)
