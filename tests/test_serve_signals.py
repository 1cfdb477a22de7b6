"""`Service.close_on`: a signal stops serving at once, then runs the handler it had."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from tests.serve_fakes import FakeTransport, Script, read, run, service, simple_stream


def test_a_signal_stops_serving_then_runs_the_handler_it_had() -> None:
    seen: list[int] = []

    def previous(number: int, frame: Any) -> None:
        seen.append(number)

    async def main() -> tuple[int, bytes, int]:
        transport = FakeTransport(lambda request: Script(chunks=simple_stream()))
        svc = service(transport)
        with svc.close_on(signal.SIGUSR1):
            os.kill(os.getpid(), signal.SIGUSR1)
            for _ in range(100):  # the handler runs between bytecodes, the callback soon
                await asyncio.sleep(0.01)
                if seen:
                    break
            answer = await svc.generate(b'{"input_ids": [5], "stream": false}')
            return answer.status, await read(answer), len(transport.requests)

    before = signal.signal(signal.SIGUSR1, previous)
    try:
        status, body, sent = run(main())
        assert signal.getsignal(signal.SIGUSR1) is previous  # put back after the block
    finally:
        signal.signal(signal.SIGUSR1, before)
    assert seen == [signal.SIGUSR1]  # the handler it had, chained
    assert status == 503 and b"error" in body and sent == 0  # serving had stopped


def test_a_signal_whose_handler_is_the_default_only_stops_serving() -> None:
    async def main() -> int:
        svc = service(FakeTransport(lambda request: Script(chunks=simple_stream())))
        with svc.close_on(signal.SIGUSR2):
            assert signal.getsignal(signal.SIGUSR2) is not signal.SIG_IGN
            signal.raise_signal(signal.SIGUSR2)
            await asyncio.sleep(0.05)
            answer = await svc.generate(b'{"input_ids": [5]}')
            return answer.status

    before = signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # not callable: not chained
    try:
        assert run(main()) == 503
        assert signal.getsignal(signal.SIGUSR2) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGUSR2, before)


def test_a_signal_that_cannot_be_handled_is_named_and_every_handler_put_back() -> None:
    """`close_on(SIGUSR1, SIGKILL)`: SIGKILL cannot be handled, so nothing is: SIGUSR1's
    handler is the one it had (it was left calling the service's `stop_serving`), and the
    mistake is an `EnvelopeError` naming the signal, as is what is not a signal number."""
    from sglang_envelope import EnvelopeError

    def previous(number: int, frame: Any) -> None:
        pass

    async def main() -> list[str]:
        svc = service(FakeTransport(lambda request: Script()))
        refused = []
        for signals in ((signal.SIGUSR1, signal.SIGKILL), ("SIGTERM",), (99999,)):
            try:
                with svc.close_on(*signals):
                    pass
            except EnvelopeError as error:
                refused.append(str(error))
        return refused

    before = signal.signal(signal.SIGUSR1, previous)
    try:
        refused = run(main())
        assert signal.getsignal(signal.SIGUSR1) is previous
    finally:
        signal.signal(signal.SIGUSR1, before)
    assert refused[0].startswith(f"signals: {int(signal.SIGKILL)} cannot be handled")
    assert refused[1:] == [
        "signals: expected signal numbers, got 'SIGTERM'",
        "signals: 99999: signal number out of range",
    ]
