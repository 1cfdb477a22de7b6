"""docs/frontend.md's two apps, written out as files and run as their readers run them.

`app_sources` reads the blocks whose first line is ``# app_starlette.py`` and
``# app_aiohttp.py``; `running_app` starts one (``uvicorn app_starlette:app``,
``python app_aiohttp.py``) in a subprocess pointed at an SGLang URL, waits
until it listens, and stops it with SIGTERM (its shutdown runs), killing it
only when it does not end.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parent.parent / "docs" / "frontend.md"
APPS = ("app_starlette.py", "app_aiohttp.py")
_BLOCK = re.compile(r"^```python\n(# (app_\w+\.py)\n.*?)^```", re.DOTALL | re.MULTILINE)
READY_S = 20.0


def app_sources() -> dict[str, str]:
    """Each app's file name -> its source, as the page gives it."""
    found = {match[2]: match[1] for match in _BLOCK.finditer(PAGE.read_text(encoding="utf-8"))}
    assert set(found) == set(APPS), f"docs/frontend.md's app blocks: {sorted(found)}"
    return found


def own_lines(source: str) -> int:
    """The lines of the user's own code: no imports, blanks, comments or docstrings."""
    count = 0
    for line in source.splitlines():
        text = line.strip()
        if not text or text.startswith(("#", "import ", "from ")):
            continue
        count += 1
    return count


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on, held bound for the block: connecting to it is
    refused, and no server (an app started by `running_app`) or connection's own end can
    take it. A port only found free may be taken again, and a connection whose own end
    gets the port it connects to connects to itself and hangs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        yield port


@contextlib.contextmanager
def held_port(port: int) -> Iterator[None]:
    """`port`, left by a server that stopped, held bound for the block (as `closed_port`)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # its TIME_WAITs
        sock.bind(("127.0.0.1", port))
        yield


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """The ASGI `app` under uvicorn in a thread of this process; yields its URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + READY_S
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(encoding="utf-8", errors="replace")[-2000:]
            raise RuntimeError(f"the app exited with {process.returncode}:\n{tail}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the app did not listen on {port} within {READY_S} s")


def _started(
    name: str, directory: Path, sglang_url: str, settings: dict[str, str]
) -> tuple[subprocess.Popen[bytes], int, Path]:
    """App `name` started from `directory` against `sglang_url`, with `settings` (its
    environment variables: ``VOCAB_SIZE``, ``MODEL_CONFIG``) and no others of the kind."""
    (directory / name).write_text(app_sources()[name], encoding="utf-8")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("VOCAB_SIZE", "MODEL_CONFIG")}
    env.update(settings, SGLANG_URL=sglang_url, PORT=str(port))
    env["PYTHONPATH"] = os.pathsep.join([str(PAGE.parent.parent), env.get("PYTHONPATH", "")])
    if name == "app_starlette.py":
        command = [sys.executable, "-m", "uvicorn", "app_starlette:app", "--port", str(port)]
        command += ["--log-level", "warning", "--timeout-graceful-shutdown", "10"]
    else:
        command = [sys.executable, name]
    log_path = directory / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=directory, env=env, stdout=log, stderr=log)
    return process, port, log_path


@contextlib.contextmanager
def running_app(
    name: str,
    directory: Path,
    sglang_url: str,
    vocab_size: int | None = None,
    *,
    settings: dict[str, str] | None = None,
) -> Iterator[str]:
    """Run app `name` from `directory` against `sglang_url`, told the model's `vocab_size`
    (``VOCAB_SIZE``) or given `settings`; yield its base URL."""
    with started_app(name, directory, sglang_url, vocab_size, settings=settings) as (url, _):
        yield url


@contextlib.contextmanager
def started_app(
    name: str,
    directory: Path,
    sglang_url: str,
    vocab_size: int | None = None,
    *,
    settings: dict[str, str] | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run app `name` as `running_app` does; yield its base URL and its process."""
    given = dict(settings or {})
    if vocab_size is not None:
        given["VOCAB_SIZE"] = str(vocab_size)
    process, port, log = _started(name, directory, sglang_url, given)
    try:
        _wait_listening(port, process, log)
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def failed_start(
    name: str, directory: Path, sglang_url: str, settings: dict[str, str]
) -> tuple[int, str]:
    """Start app `name` with `settings`, expecting it to stop at its start: its exit code
    and its log. Fails when it is still running after `READY_S`."""
    process, _, log = _started(name, directory, sglang_url, settings)
    try:
        code = process.wait(READY_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"{name} did not stop at its start") from None
    return code, log.read_text(encoding="utf-8", errors="replace")
