"""The iterables the readers take from the caller, opened at the call and closed.

A reader opens the caller's iterable at the call (`EnvelopeError` if it is
not one) and, whenever it stops reading it (its end, the terminal frame, a
fault, the consumer closing the reader), closes a generator (`close_source`)
or awaits an async iterator's ``aclose`` (`aclose_source`; an httpx
``aiter_bytes()``), so that its ``finally`` runs then; other iterators are
the caller's to close. `relay_chunks` drives a relay over one so.
"""

from __future__ import annotations

from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Generator,
    Iterable,
    Iterator,
)
from typing import Any, Protocol, TypeVar

from sglang_envelope.errors.exceptions import EnvelopeError

T = TypeVar("T")

__all__ = [
    "aclose_source",
    "afeed_all",
    "feed_all",
    "open_async_source",
    "open_source",
    "relay_chunks",
    "relay_chunks_async",
]


def open_source(items: Iterable[Any], what: str) -> Iterator[Any]:
    try:
        return iter(items)
    except TypeError:
        raise EnvelopeError(
            f"{what}: expected an iterable, got {type(items).__name__}"
        ) from None


def close_source(iterator: Iterator[Any]) -> None:
    if isinstance(iterator, Generator):
        iterator.close()


def feed_all(items: Iterable[Any], what: str, feed: Callable[[Any], object]) -> None:
    """Every item to `feed`, in order; the source closed (`close_source`) however it
    ends."""
    iterator = open_source(items, what)
    try:
        for item in iterator:
            feed(item)
    finally:
        close_source(iterator)


def open_async_source(items: AsyncIterable[Any], what: str) -> AsyncIterator[Any]:
    try:
        return aiter(items)
    except TypeError:
        raise EnvelopeError(
            f"{what}: expected an async iterable, got {type(items).__name__}"
        ) from None


async def aclose_source(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


async def afeed_all(
    items: AsyncIterable[Any], what: str, feed: Callable[[Any], object]
) -> None:
    """`feed_all` for an async source: its iterator awaited closed (`aclose_source`)."""
    iterator = open_async_source(items, what)
    try:
        async for item in iterator:
            feed(item)
    finally:
        await aclose_source(iterator)


class Relay(Protocol[T]):
    """A sans-I/O relay (`relay`, `relay_frames`): feed engine chunks or frames, get the
    client's pieces (bytes, or frames) for each, then close."""

    ended: bool

    def feed(self, chunk: Any) -> list[T]: ...

    def close(self) -> list[T]: ...


def relay_chunks(relay: Relay[T], chunks: Iterator[Any]) -> Iterator[T]:
    """The client's pieces of `relay` over `chunks`: each chunk's, then the close's
    (after a failure, the failure's last); the source closed (`close_source`) however
    that ends."""
    try:
        for chunk in chunks:
            out = relay.feed(chunk)
            if relay.ended:  # a failure: the source is closed before it goes out
                break
            yield from out
        else:
            out = relay.close()
    finally:
        close_source(chunks)
    yield from out


async def relay_chunks_async(
    relay: Relay[T], chunks: AsyncIterator[Any]
) -> AsyncIterator[T]:
    """`relay_chunks` over an async source, its iterator closed (`aclose_source`)."""
    try:
        async for chunk in chunks:
            out = relay.feed(chunk)
            if relay.ended:  # a failure: the source is closed before it goes out
                break
            for piece in out:
                yield piece
        else:
            out = relay.close()
    finally:
        await aclose_source(chunks)
    for piece in out:
        yield piece
