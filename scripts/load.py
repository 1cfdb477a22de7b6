"""A load test of docs/frontend.md's two apps against `FakeEngine`, beside a passthrough proxy.

Everything runs on loopback, in processes of its own: the fake SGLang (uvicorn,
with a recorder of when each generation started and each abort arrived), the
Starlette app and the aiohttp app of docs/frontend.md (as their readers run
them, `tests/apps.py`), and a plain Starlette + httpx passthrough proxy. This
process is the clients (aiohttp). For each concurrency (32, 128, 512) and mode
(streaming, unary):

1. **Throughput**: that many clients, each sending requests back to back for a
   fixed time, through each of the three; requests/s, p50 and p99 latency, and
   each app's ratios to the passthrough's.
2. **Hang-ups** (the two apps): the same clients, half of the requests left at a
   random point (a stream after a random number of frames, a unary client after
   a random delay). Each one whose generation was running when it left must be
   aborted at the engine exactly once, within 1 s of leaving; nothing may be
   running at the end.

    python scripts/load.py            # the long form: 32, 128 and 512 clients, 5 s phases
    python scripts/load.py --short    # CI's short form: 32 and 128 clients, 1 s phases

It exits 1 when a hang-up check fails (the ratios are reported, not asserted:
they measure the machine): a client that left whose generation was not aborted
(or ran on to its end more than 1 s after the client left), an abort later than
1 s, or a generation still running at the end. `dispatched_after_leaving` counts
the clients whose request reached the engine after they left (it was on its way,
or the app had not yet seen the client go): each must be aborted too. Every loop
is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.apps import APPS, free_port, started_app  # noqa: E402

VOCAB = 320
CONCURRENCY = (32, 128, 512)
MODES = ("stream", "unary")
#: What each request asks: tokens (a hang-up phase's are longer, so that clients leave
#: mid-generation), and the engine's seconds between them.
TOKENS = 16
HANG_UP_TOKENS = 200
FRAME_DELAY_S = 0.002
#: The hang-up bound: a left client's generation aborted at the engine within this.
ABORT_WITHIN_S = 1.0
PASSTHROUGH = "passthrough"

PROXY_SOURCE = """
import os

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

limits = httpx.Limits(max_connections=int(os.environ["CONNECTIONS"]))
client = httpx.AsyncClient(base_url=os.environ["SGLANG_URL"], timeout=None, limits=limits)


async def generate(request: Request) -> StreamingResponse:
    sent = client.build_request(
        "POST", "/generate", content=await request.body(),
        headers={"content-type": "application/json"},
    )
    answer = await client.send(sent, stream=True)
    return StreamingResponse(
        answer.aiter_raw(), answer.status_code,
        media_type=answer.headers.get("content-type"), background=BackgroundTask(answer.aclose),
    )


app = Starlette(routes=[Route("/generate", generate, methods=["POST"])])
"""

ENGINE_SOURCE = """
import json
import sys
import time

import uvicorn

from sglang_envelope.testing import FakeEngine

engine = FakeEngine(frame_delay=float(sys.argv[2]), max_recorded=1_000_000)
started = {}  # engine rid -> [the prompt's client id, monotonic time it arrived]
aborted = {}  # rid -> [monotonic time of each abort post]
ended = {}  # rid -> monotonic time its answer was sent whole


async def reply(send, body):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send):
    path = scope.get("path")
    if path == "/load/stats":
        outcomes = [[o.rid, o.ending] for o in engine.outcomes]
        stats = {"started": started, "aborted": aborted, "ended": ended, "outcomes": outcomes}
        await reply(send, json.dumps({**stats, "running": engine.running}).encode())
        return
    if path == "/load/reset":
        started.clear()
        aborted.clear()
        ended.clear()
        engine.outcomes.clear()
        await reply(send, b"")
        return
    if scope["type"] != "http" or path not in ("/generate", "/abort_request"):
        await engine(scope, receive, send)
        return
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(parts)
    request = json.loads(body)
    if path == "/abort_request":
        aborted.setdefault(request.get("rid", ""), []).append(time.monotonic())
    elif request.get("rid") is not None:
        started[request["rid"]] = [request["input_ids"][1:], time.monotonic()]
    replayed = [False]

    async def replay():
        if replayed[0]:
            return await receive()
        replayed[0] = True
        return {"type": "http.request", "body": body, "more_body": False}

    await engine(scope, replay, send)
    if path == "/generate" and request.get("rid") is not None:
        ended[request["rid"]] = time.monotonic()


uvicorn.run(app, port=int(sys.argv[1]), log_level="warning", backlog=4096)
"""


def client_ids(index: int) -> list[int]:
    """A prompt that names client request `index`: [5, a, b], each within the vocabulary."""
    return [5, 1 + index % 300, 1 + index // 300 % 300]


@contextlib.contextmanager
def process(source: str, directory: Path, name: str, *args: str, env: Any = None) -> Iterator[None]:
    (directory / name).write_text(source, encoding="utf-8")
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    log = (directory / f"{name}.log").open("wb")
    child = subprocess.Popen(
        [sys.executable, *args], cwd=directory, env=environment, stdout=log, stderr=log
    )
    try:
        yield
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        log.close()


async def wait_listening(url: str, timeout: float = 20.0) -> None:
    import aiohttp

    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(url + "/health"):
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not listen within {timeout} s")


async def one(
    session: Any, url: str, body: dict[str, Any], leave: float | None
) -> tuple[str, float]:
    """One request: ("done", seconds) read to its end, ("left", monotonic leave time),
    or ("error", status)."""
    start = time.monotonic()
    tokens = body["sampling_params"]["max_new_tokens"]
    if body["stream"]:  # leaving after a random number of chunks
        frames = tokens + 2 if leave is None else max(1, int(leave * tokens))
        async with session.post(url + "/generate", json=body) as answer:
            if answer.status != 200:
                return "error", answer.status
            seen = 0
            async for _ in answer.content.iter_any():
                seen += 1
                if seen >= frames:
                    answer.close()  # the connection is closed: the client left
                    return "left", time.monotonic()
        return "done", time.monotonic() - start

    async def fetch() -> int:
        async with session.post(url + "/generate", json=body) as answer:
            await answer.read()
            return int(answer.status)

    try:  # leaving after a random delay, up to 1.5x the generation's own time
        wait = None if leave is None else leave * tokens * FRAME_DELAY_S * 1.5
        status = await asyncio.wait_for(fetch(), wait)
    except asyncio.TimeoutError:
        return "left", time.monotonic()
    return ("done", time.monotonic() - start) if status == 200 else ("error", status)


async def phase(
    url: str, clients: int, mode: str, seconds: float, hang_ups: bool, first: int
) -> dict[str, Any]:
    """`clients` loops for `seconds` (and at most 200 requests each): what they did."""
    import aiohttp

    latencies: list[float] = []
    errors: list[float] = []
    left: dict[int, float] = {}
    counter = [first]
    end = time.monotonic() + seconds
    rng = random.Random(clients * 7 + len(mode))
    connector = aiohttp.TCPConnector(limit=0, force_close=hang_ups)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def loop() -> None:
            for _ in range(200):
                if time.monotonic() >= end:
                    return
                index = counter[0]
                counter[0] += 1
                body = {"input_ids": client_ids(index), "stream": mode == "stream"}
                body["sampling_params"] = {"max_new_tokens": HANG_UP_TOKENS if hang_ups else TOKENS}
                leave = rng.random() if hang_ups and rng.random() < 0.5 else None
                kind, value = await one(session, url, body, leave)
                if kind == "left":
                    left[index] = value
                elif kind == "done":
                    latencies.append(value)
                else:
                    errors.append(value)

        start = time.monotonic()
        await asyncio.gather(*(loop() for _ in range(clients)))
        took = time.monotonic() - start
    return {
        "latencies": latencies,
        "errors": errors,
        "left": left,
        "seconds": took,
        "next": counter[0],
    }


async def engine_stats(engine_url: str, reset: bool = False) -> dict[str, Any]:
    import aiohttp

    path = "/load/reset" if reset else "/load/stats"
    async with aiohttp.ClientSession() as session, session.get(engine_url + path) as answer:
        return {} if reset else json.loads(await answer.read())


async def check_hang_ups(engine_url: str, left: dict[int, float]) -> dict[str, Any]:
    """Every left client whose generation ran: aborted once at the engine within 1 s."""
    deadline = time.monotonic() + 10
    stats = await engine_stats(engine_url)
    while stats["running"] and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        stats = await engine_stats(engine_url)
    endings = dict(stats["outcomes"])
    by_client = {}
    for rid, (ids, at) in stats["started"].items():
        by_client[(ids[0] - 1) + (ids[1] - 1) * 300] = (rid, at)
    late, unaborted, posts, delays = [], [], [], []
    after = 0
    for index, at in left.items():
        rid, dispatched_at = by_client.get(index, (None, 0.0))
        if rid is None:  # left before its request was dispatched: nothing ran
            continue
        if dispatched_at > at:  # it reached the engine after its client left: aborted too
            after += 1
        ending = endings.get(rid)
        ran_on = stats["ended"].get(rid, 0.0) - at > ABORT_WITHIN_S
        if ending in ("length", "stop") and not ran_on:  # it ended (about) as it left
            continue
        times = stats["aborted"].get(rid, [])
        if ending != "abort" or not times:
            unaborted.append((index, ending))
            continue
        posts.append(len(times))
        delay = times[0] - at
        delays.append(delay)
        if delay > ABORT_WITHIN_S:
            late.append((index, round(delay, 3)))
    return {
        "left": len(left),
        "aborted": len(delays),
        "late": late,
        "unaborted": unaborted,
        "running": stats["running"],
        "max_abort_s": max(delays, default=0.0),
        "posts": max(posts, default=0),
        "dispatched_after_leaving": after,
    }


def summary(result: dict[str, Any]) -> dict[str, float]:
    latencies = sorted(result["latencies"])
    if not latencies:
        return {"rps": 0.0, "p50": 0.0, "p99": 0.0}
    return {
        "rps": len(latencies) / result["seconds"],
        "p50": statistics.median(latencies),
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
    }


async def measure(
    urls: dict[str, str], engine_url: str, seconds: float, concurrency: tuple[int, ...]
) -> tuple[list[Any], bool, int]:
    """The rows; whether every client that left was aborted and nothing ran on; how many
    of those aborts came more than 1 s after the client left."""
    rows, ok, first, late = [], True, 0, 0
    for clients in concurrency:
        for mode in MODES:
            base: dict[str, float] = {}
            for name in (PASSTHROUGH, *APPS):
                result = await phase(urls[name], clients, mode, seconds, False, first)
                first = result["next"]
                numbers = summary(result)
                base = numbers if name == PASSTHROUGH else base
                row: dict[str, Any] = {"app": name, "clients": clients, "mode": mode, **numbers}
                row["errors"] = len(result["errors"])
                if name != PASSTHROUGH:
                    await engine_stats(engine_url, reset=True)
                    gone = await phase(urls[name], clients, mode, seconds, True, first)
                    first = gone["next"]
                    checked = await check_hang_ups(engine_url, gone["left"])
                    row["hang_ups"] = checked
                    ok = ok and not checked["unaborted"] and checked["running"] == 0
                    late += len(checked["late"])
                    for key in ("rps", "p50", "p99"):
                        row[key + "_x"] = numbers[key] / base[key] if base[key] else 0.0
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows, ok, late


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| clients | mode | app | req/s | x passthrough | p50 x | p99 x | left: aborted (late, "
        "not aborted) | slowest abort | running at end |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for row in rows:
        if row["app"] == PASSTHROUGH:
            lines.append(
                f"| {row['clients']} | {row['mode']} | passthrough | {row['rps']:.0f} | 1.00x "
                "| 1.00x | 1.00x | | | |"
            )
            continue
        hung = row["hang_ups"]
        lines.append(
            f"| {row['clients']} | {row['mode']} | {row['app'].removesuffix('.py')} "
            f"| {row['rps']:.0f} | {row['rps_x']:.2f}x | {row['p50_x']:.2f}x "
            f"| {row['p99_x']:.2f}x | {hung['left']}: {hung['aborted']} "
            f"({len(hung['late'])}, {len(hung['unaborted'])}) "
            f"| {hung['max_abort_s'] * 1000:.0f} ms | {hung['running']} |"
        )
    return "\n".join(lines)


async def main(seconds: float, concurrency: tuple[int, ...]) -> int:
    """Run every phase; 1 when a client that left was not aborted, or its abort came
    more than 1 s after it left, or something ran on."""
    with tempfile.TemporaryDirectory() as temporary:
        directory = Path(temporary)
        engine_port = free_port()
        engine_url = f"http://127.0.0.1:{engine_port}"
        engine_args = ("engine.py", str(engine_port), str(FRAME_DELAY_S))
        proxy_port = free_port()
        proxy = (
            "-m", "uvicorn", "proxy:app", "--port", str(proxy_port), "--log-level", "warning",
            "--backlog", "4096",
        )  # fmt: skip
        env = {"SGLANG_URL": engine_url, "CONNECTIONS": "256"}
        with contextlib.ExitStack() as stack:
            stack.enter_context(process(ENGINE_SOURCE, directory, "engine.py", *engine_args))
            await wait_listening(engine_url)
            stack.enter_context(process(PROXY_SOURCE, directory, "proxy.py", *proxy, env=env))
            urls = {PASSTHROUGH: f"http://127.0.0.1:{proxy_port}"}
            for name in APPS:
                urls[name], _ = stack.enter_context(started_app(name, directory, engine_url, VOCAB))
            await wait_listening(urls[PASSTHROUGH])
            rows, ok, late = await measure(urls, engine_url, seconds, concurrency)
    print(table(rows))
    print("hang-up checks (each aborted, nothing running):", "ok" if ok else "FAILED")
    print(f"aborts later than 1 s: {late}")
    return 0 if ok and not late else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="CI's short form")
    arguments = parser.parse_args()
    # A SIGTERM ends it as an exception does: the processes it started are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    concurrency = CONCURRENCY[:2] if arguments.short else CONCURRENCY
    seconds = 1.0 if arguments.short else 5.0
    run = main(seconds, concurrency)
    sys.exit(asyncio.run(asyncio.wait_for(run, 900)))
