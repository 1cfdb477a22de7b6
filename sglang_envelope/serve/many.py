"""Many sequences, served as one answer: a batch of prompts, or n samples of each.

SGLang runs each sample of an n > 1 request under a fresh random rid, which
an abort by the request's own rid does not reach, and a prefill/decode pair
carries one sequence. So `Service` fans a body of many sequences out into
one-sample requests (`Sequences.samples()`), each under an engine rid of its
own (and, on a pair, a bootstrap room of its own), and `answer_many` merges
their answers back into the one SGLang gives:

- a unary client gets the JSON array, one answer a sequence, in index order;
- a streaming client gets each sequence's frames as they come, each with
  ``"index": k`` as its last key, and one ``data: [DONE]`` once all have ended;
  an error frame ends the whole stream, as SGLang's does;
- the first answer (in index order) that is not 200 is the client's: every
  other sequence is stopped and aborted, since the client will not read it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final

import msgspec

from sglang_envelope.errors.answers import EVENT_STREAM, JSON
from sglang_envelope.errors.exceptions import EnvelopeError
from sglang_envelope.request.envelope import WorkerEnvelope, to_worker_envelope
from sglang_envelope.request.sequences import one_prompt, samples_per_prompt
from sglang_envelope.request.types import ClientRequest
from sglang_envelope.response.sse import SSE_DONE, SseDecoder, indexed_event
from sglang_envelope.serve.answer import Answer, refused, started, whole_answer

if TYPE_CHECKING:
    import asyncio

__all__ = ["answer_many", "fan_out", "indexed_events", "samples_of"]

_ERROR: Final = b'{"error"'


def samples_of(
    request: ClientRequest, client_rid: str
) -> tuple[ClientRequest, ...] | None:
    """`request`'s one-sample requests when it asks for n > 1 samples, each named
    `f"{client_rid}_{k}"` (SGLang's scheme for a string rid), else None."""
    if samples_per_prompt(request) == 1:
        return None
    return one_prompt(msgspec.structs.replace(request, rid=client_rid)).samples()


async def fan_out(
    answer: Callable[[WorkerEnvelope, str], Awaitable[Answer]],
    samples: Sequence[ClientRequest],
    rid: Callable[[], str],
) -> Answer:
    """The one answer to `samples` (one-sample requests, in index order), each run by
    `answer(envelope, client_rid)` under an engine rid `rid()` of its own, and given
    back under its own rid (its engine rid when it has none)."""
    stream = samples[0].stream is True
    try:
        envelopes = [to_worker_envelope(sample, rid=rid()) for sample in samples]
    except EnvelopeError as exc:
        return refused(exc, stream)
    answers = [
        answer(envelope, envelope.request.rid or envelope.rid) for envelope in envelopes
    ]
    return await answer_many(answers, stream=stream)


async def answer_many(answers: Sequence[Awaitable[Answer]], *, stream: bool) -> Answer:
    """The one answer to the sequences whose own answers `answers` are, in index order.

    Each awaitable is one sequence's `Service.answer`; they run at once. As soon
    as one is not 200 (or raises), the others are cancelled (which aborts them)
    and the first such answer in index order is the client's.
    """
    import asyncio

    tasks = [asyncio.ensure_future(answer) for answer in answers]
    settled = asyncio.Event()  # set when one has failed, or all are made
    left = len(tasks)

    def ended(task: asyncio.Future[Answer]) -> None:
        nonlocal left
        left -= 1
        if left == 0 or _failed(task):
            settled.set()

    for task in tasks:
        task.add_done_callback(ended)
    try:
        await settled.wait()
    except BaseException:  # cancelled: the client left
        await _stop_all(tasks)
        raise
    failed = next((task for task in tasks if _failed(task)), None)
    if failed is not None:
        await _stop_all(tasks, keep=failed)
        return failed.result()  # raises what it raised
    bodies = [task.result().body for task in tasks]
    if stream:
        return Answer(200, {"content-type": EVENT_STREAM}, await started(_merged(bodies)))
    parts = []
    for body in bodies:  # each a whole unary answer
        parts.append(b"".join([chunk async for chunk in body]))
    return whole_answer(200, JSON, b"[" + b",".join(parts) + b"]")


async def _stop_all(
    tasks: Sequence[asyncio.Future[Answer]], keep: asyncio.Future[Answer] | None = None
) -> None:
    """Cancel the answers still being made, and close those made (but `keep`): a body
    with a cleanup (the abort) is handed out started (`started`), so closing it runs
    the cleanup."""
    import asyncio

    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    made = [task for task in tasks if not task.cancelled() and task.exception() is None]
    for task in made:
        if task is not keep:
            await task.result().body.aclose()


def _failed(task: asyncio.Future[Answer]) -> bool:
    if not task.done() or task.cancelled():
        return False
    return task.exception() is not None or task.result().status != 200


def indexed_events(decoder: SseDecoder, chunk: bytes, index: int) -> tuple[bytes, bool]:
    """The events of one sequence's `chunk`, each frame with ``"index"`` added last.

    Returns them, and whether an error frame (sent as it is) ended the stream.
    ``data: [DONE]`` is dropped: the merged stream sends its own.
    """
    out: list[bytes] = []
    for payload in decoder.feed_payloads(chunk):
        data = bytes(payload).strip()
        if data.startswith(_ERROR):
            out.append(b"data: " + data + b"\n\n")
            return b"".join(out), True
        out.append(indexed_event(data, index))
    return b"".join(out), False


async def _merged(
    bodies: list[AsyncGenerator[bytes, None]],
) -> AsyncGenerator[bytes, None]:
    """The sequences' streams, frames interleaved as they come, under one ``[DONE]``."""
    import asyncio

    decoders = [SseDecoder() for _ in bodies]
    ready: asyncio.Queue[tuple[int, asyncio.Future[bytes]]] = asyncio.Queue()
    reads: dict[int, asyncio.Future[bytes]] = {}  # the read under way of each sequence

    def read(k: int) -> None:
        future = asyncio.ensure_future(anext(bodies[k]))
        future.add_done_callback(lambda done: ready.put_nowait((k, done)))
        reads[k] = future

    try:
        yield b""  # dropped by `started`: from here on, a body closed is settled
        for k in range(len(bodies)):
            read(k)
        while reads:
            k, done = await ready.get()
            del reads[k]
            error = done.exception()
            if isinstance(error, StopAsyncIteration):  # that sequence has ended
                continue
            if error is not None:
                raise error
            events, ended = indexed_events(decoders[k], done.result(), k)
            if events:
                yield events
            if ended:
                yield SSE_DONE
                return
            read(k)
        yield SSE_DONE
    finally:
        await _stop(list(reads.values()), bodies)


async def _stop(
    reads: Sequence[asyncio.Future[bytes]], bodies: list[AsyncGenerator[bytes, None]]
) -> None:
    import asyncio

    for read in reads:
        read.cancel()
    await asyncio.gather(*reads, return_exceptions=True)
    for body in bodies:
        await body.aclose()
