"""Aborts that outlive the task that asked for them.

A client that goes away cancels the task answering it. Under anyio (Starlette,
FastAPI) every ``await`` in that task's ``finally`` is cancelled too, so an
abort awaited there never reaches SGLang. `Aborts.start` therefore runs each
abort in a task of its own, begun without suspending: it carries out
`plan_abort`'s plan with `run_abort` while the answer is read to its end, then
releases the connection. `Aborts` keeps every such task until it ends, and
`Aborts.wait` awaits them all, for a server's shutdown.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from sglang_envelope.cancel.plan import AbortPolicy, plan_abort
from sglang_envelope.cancel.run import AbortOutcome, run_abort
from sglang_envelope.request.engine import EngineRequest
from sglang_envelope.serve.legs import Leg
from sglang_envelope.serve.transport import as_upstream_error, transport_failures
from sglang_envelope.serve.watch import WatchedReply

if TYPE_CHECKING:
    import asyncio

__all__ = ["AbortReport", "Aborts"]

#: What a finished abort reports: what was done, or why it could not be done.
AbortReport = Callable[[EngineRequest, "AbortOutcome | Exception"], object]

#: At most this many bytes of an abandoned answer are read to its end.
DRAIN_MAX_BYTES = 1 << 26


class Aborts:
    """The aborts under way, each in its own task."""

    __slots__ = ("_policy", "_read_elsewhere", "_report", "_tasks")

    def __init__(self, policy: AbortPolicy, report: AbortReport | None) -> None:
        self._policy = policy
        self._report = report
        self._tasks: set[asyncio.Task[None]] = set()
        #: The answers whose abort waits for the caller's `reading`, not its own drain.
        self._read_elsewhere: set[WatchedReply] = set()

    def start(self, leg: Leg, reading: asyncio.Future[Any] | None = None) -> None:
        """Abort `leg` and read its answer to the end (or let `reading` do it), detached.

        Never suspends, so it can run in a cancelled task's ``finally``. A leg
        already being aborted is left to that abort; when that abort waits for a
        reading of the caller's, a call without `reading` (that reader has stopped)
        reads the rest of the answer for it.
        """
        watched = leg.watched
        if watched.aborting:
            if reading is None and watched in self._read_elsewhere:
                self._read_elsewhere.discard(watched)
                self._detach(_drain(leg))
            return
        watched.aborting = True
        if reading is not None:
            self._read_elsewhere.add(watched)
        self._detach(self._abort(leg, reading))

    def release(self, watched: WatchedReply) -> None:
        """Release an answer read to its end, detached (never suspends)."""
        self._detach(watched.release())

    def _detach(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` in a task of its own, kept until it ends (`wait`)."""
        import asyncio

        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def pending(self) -> int:
        """How many aborts and releases are still under way."""
        return len(self._tasks)

    async def wait(self, timeout_s: float) -> None:
        """Until every abort under way has ended (each bounded by its plan's deadline);
        past `timeout_s`, those left are cancelled, their connections released."""
        import asyncio

        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while self._tasks:
            left = end - loop.time()
            if left <= 0:
                for task in self._tasks:
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)
                return
            await asyncio.wait(set(self._tasks), timeout=left)

    async def _abort(self, leg: Leg, reading: asyncio.Future[Any] | None) -> None:
        import asyncio

        engine = leg.engine
        watched = leg.watched
        plan = plan_abort(
            engine, first_token_seen=watched.first_output.is_set(), policy=self._policy
        )
        if reading is None:
            reading = asyncio.ensure_future(_drain(leg))
        loop = asyncio.get_running_loop()
        ends = loop.time() + plan.deadline_s  # the answer is read no longer than this
        result: AbortOutcome | Exception
        try:
            try:
                result = await run_abort(
                    plan,
                    leg.transport.abort,
                    first_token=watched.first_output,
                    finished=watched.finished,
                )
            except transport_failures() as error:
                result = as_upstream_error(error)
            except Exception as error:  # reported, not lost: the caller's hook sees it
                result = error
            await asyncio.wait([reading], timeout=max(0.0, ends - loop.time()))
        finally:  # also when cancelled (`wait` past its bound)
            for task in (reading, leg.sending):  # a send still under way is given up
                task.cancel()
            await asyncio.gather(reading, leg.sending, return_exceptions=True)
            self._read_elsewhere.discard(watched)
            await watched.release()
        if self._report is not None:
            self._report(engine, result)


async def _drain(leg: Leg) -> None:
    """Read the leg's answer to its end once it has come (nothing if it never does)."""
    try:
        await leg.sending
    except Exception:  # not sent: nothing to read
        return
    await leg.watched.drain(DRAIN_MAX_BYTES)
