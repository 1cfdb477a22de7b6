"""One engine answer, watched as it is read: its first output, its end, and the rest.

`WatchedReply` is the async iterator the readers (`relay_sse_async`,
`aggregate_sse_async`) read SGLang's answer through. It sets `first_output`
when a frame carries output, by Dynamo's rule (non-empty ``output_ids`` or
``text``), and `finished` when the answer's body has ended. Closing it does
not close the connection: an answer given up early is read to its end by
`drain`, while its abort goes out, and only then released (`release`).

`until_done_or_gone` waits for an answer while it watches the client: it polls a
framework's test (`Disconnected`), or waits on a `ClientListener`, which hears the
client leave on its ASGI ``receive``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from sglang_envelope.errors.exceptions import EnvelopeError, ResponseError, UpstreamError
from sglang_envelope.response.sse import SseDecoder
from sglang_envelope.serve.transport import EngineReply

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "ClientListener",
    "Disconnected",
    "WatchedReply",
    "is_gone",
    "is_output",
    "read_all",
    "read_past_done",
    "until_done_or_gone",
]


def is_output(frame: dict[str, Any]) -> bool:
    """Whether an SSE frame carries output (Dynamo's rule: ``output_ids`` or ``text``)."""
    return bool(frame.get("output_ids")) or bool(frame.get("text"))


#: The answer's end; its failure is put in the queue as the exception itself.
_END: Final = object()
#: Put in the queue to wake a reader waiting on it (`WatchedReply.stop`).
_WAKE: Final = object()


class WatchedReply:
    """SGLang's answer to one engine request, read once, by one reader at a time.

    One task of its own reads the transport's chunks (a cancelled reader must
    not break the transport's iterator, which an abort still reads to the end);
    readers take them from a queue one chunk ahead. With `idle_s`, a reader that
    waits longer than that for SGLang's next chunk is stopped with `UpstreamError`
    504 (`stop`); the answer is still read by the abort that follows (`drain`).
    """

    __slots__ = (
        "_decoder",
        "_idle_s",
        "_pump",
        "_queue",
        "_released",
        "_stop",
        "aborting",
        "attached",
        "finished",
        "first_output",
        "reply",
    )

    def __init__(self, *, streamed: bool, idle_s: float | None = None) -> None:
        import asyncio

        #: SGLang's answer, once its head has arrived (`attach`).
        self.reply: EngineReply | None = None
        self.attached = asyncio.Event()
        self.first_output = asyncio.Event()
        self.finished = asyncio.Event()
        # A unary answer has no frames: its first output is its end.
        self._decoder: SseDecoder | None = SseDecoder() if streamed else None
        self._released = False
        self._idle_s = idle_s
        self._stop: EnvelopeError | None = None
        #: Set when an abort of this answer has begun (`Aborts.start`).
        self.aborting = False
        self._queue: asyncio.Queue[object] = asyncio.Queue(maxsize=1)
        self._pump: asyncio.Future[None] | None = None

    def attach(self, reply: EngineReply) -> None:
        """SGLang's answer has arrived: read it, in a task of its own."""
        import asyncio

        self.reply = reply
        self._pump = asyncio.ensure_future(self._read(reply))
        self.attached.set()

    @property
    def status(self) -> int:
        """SGLang's HTTP status."""
        assert self.reply is not None, "read only once the answer has arrived"
        return self.reply.status

    async def _read(self, reply: EngineReply) -> None:
        try:
            async for chunk in reply.chunks:
                await self._queue.put(chunk)
        except Exception as error:  # the reader gets it, in order
            await self._queue.put(error)
        else:
            await self._queue.put(_END)

    def stop(self, error: EnvelopeError) -> None:
        """Stop the reader: its next read raises `error`, every one after it too (never
        suspends). SGLang's answer is not finished: `drain` still reads it."""
        self._stop = error
        if self._queue.empty():
            self._queue.put_nowait(_WAKE)

    def __aiter__(self) -> WatchedReply:
        return self

    async def __anext__(self) -> bytes:
        while True:
            if self._stop is not None:
                raise self._stop
            if self.finished.is_set():
                raise StopAsyncIteration
            item = await self._next_item()
            if item is not _WAKE:
                return self._chunk(item)

    async def _next_item(self) -> object:
        """The queue's next item, waiting at most `idle_s` for SGLang (then `stop`)."""
        import asyncio

        if self._idle_s is None or not self._queue.empty():
            return await self._queue.get()
        timer = asyncio.get_running_loop().call_later(self._idle_s, self._idled)
        try:
            return await self._queue.get()
        finally:
            timer.cancel()

    def _idled(self) -> None:
        self.stop(UpstreamError(f"SGLang sent nothing for {self._idle_s:g} s", 504))

    def _chunk(self, item: object) -> bytes:
        """The chunk `item` is; at the answer's end, StopAsyncIteration or its failure."""
        if item is _END or isinstance(item, Exception):
            self.finished.set()
            self.first_output.set()
            if isinstance(item, Exception):
                raise item
            raise StopAsyncIteration
        chunk: bytes = item  # type: ignore[assignment]
        if self._decoder is not None:
            self._watch(chunk)
        return chunk

    def _watch(self, chunk: bytes) -> None:
        """Look for the first output in `chunk`; stop looking once found or unreadable."""
        decoder = self._decoder
        assert decoder is not None
        try:
            frames = decoder.feed(chunk)
        except EnvelopeError:  # the reader reports it; the watch only stops
            self._decoder = None
            return
        if any(is_output(frame) for frame in frames) or decoder.done:
            self.first_output.set()
            self._decoder = None

    async def aclose(self) -> None:
        """A reader stopped: keep the connection, for `drain` (this never suspends)."""

    async def drain(self, max_bytes: int) -> None:
        """Read and drop the rest of the answer once it has arrived, up to `max_bytes`
        (a reader stopped or not: `stop` does not stop the drain)."""
        await self.attached.wait()
        read = 0
        while not self.finished.is_set() and read <= max_bytes:
            item = await self._queue.get()
            if item is _WAKE:
                continue
            try:
                read += len(self._chunk(item))
            except Exception:  # StopAsyncIteration at its end, or its failure
                return

    async def release(self) -> None:
        """Stop reading and release the connection, once."""
        import asyncio

        if not self._released and self.reply is not None and self._pump is not None:
            self._released = True
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
            # A reader still waiting is told the answer ended.
            while not self._queue.empty():
                self._queue.get_nowait()
            self._queue.put_nowait(ResponseError("SGLang's answer was given up"))
            await self.reply.close()


async def read_past_done(watched: WatchedReply) -> None:
    """After the last frame its reader needs, SGLang's answer ends: read on until it does.

    SGLang's own ``data: [DONE]`` may still come (after an error frame, which
    ends a reader); anything else leaves the answer unfinished, so it is aborted.
    """
    async for chunk in watched:
        if chunk.strip() != b"data: [DONE]":
            return


async def read_all(watched: WatchedReply, max_bytes: int) -> bytes:
    """The whole answer; `ResponseError` past `max_bytes`."""
    parts: list[bytes] = []
    size = 0
    async for chunk in watched:
        size += len(chunk)
        if size > max_bytes:
            raise ResponseError(f"SGLang's answer is over max_bytes ({max_bytes} bytes)")
        parts.append(chunk)
    return b"".join(parts)


#: The framework's test for a client gone: sync or async (Starlette's
#: ``request.is_disconnected``).
Disconnected = Callable[[], "bool | Awaitable[bool]"]


class ClientListener:
    """A client's departure, heard on its ASGI ``receive`` (``request.receive``),
    once its body has been read: a `Disconnected` that is never polled.

    The first call begins listening, and tells a departure the server already knows of;
    `until_done_or_gone` then waits on `heard`, which ends with the client's
    ``http.disconnect`` (or with a ``receive`` that fails: the connection is broken).
    `close` stops listening.
    """

    __slots__ = ("_receive", "heard")

    def __init__(self, receive: Callable[[], Awaitable[Mapping[str, Any]]]) -> None:
        self._receive = receive
        self.heard: asyncio.Future[None] | None = None

    async def __call__(self) -> bool:
        import asyncio

        if self.heard is None:
            self.heard = asyncio.ensure_future(self._listen())
        # The listener's first receive runs first: at once when the client has gone.
        await asyncio.sleep(0)
        return self.heard.done()

    async def _listen(self) -> None:
        try:
            while True:
                message = await self._receive()
                if message.get("type") == "http.disconnect":
                    return
        except Exception:  # the connection is broken: its client has gone
            return

    def close(self) -> None:
        """Stop listening (never suspends)."""
        if self.heard is not None:
            self.heard.cancel()


async def until_done_or_gone(
    reading: asyncio.Future[Any], disconnected: Disconnected | None, poll_s: float
) -> bool:
    """Wait for `reading`; True as soon as `disconnected()` says the client went away (a
    `ClientListener`: as soon as it hears so)."""
    import asyncio

    if disconnected is None:
        await asyncio.wait([reading])
        return False
    if isinstance(disconnected, ClientListener):
        if disconnected.heard is None:
            await disconnected()
        heard = disconnected.heard
        assert heard is not None
        await asyncio.wait([reading, heard], return_when=asyncio.FIRST_COMPLETED)
        return not reading.done()
    while not reading.done():
        await asyncio.wait([reading], timeout=poll_s)
        if not reading.done() and await is_gone(disconnected):
            return True
    return False


async def is_gone(disconnected: Disconnected) -> bool:
    """Whether `disconnected()` says the client went away (sync or async)."""
    gone = disconnected()
    if inspect.isawaitable(gone):
        gone = await gone
    return gone is True
