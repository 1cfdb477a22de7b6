"""Real SGLang servers for the live suite: started in their own process group, stopped by it.

`start_server` launches one `sglang.launch_server` on a free port (always with
`--sleep-on-idle`, so an idle server does not busy-poll a core) and waits for
`GET /health` (`live/pd.py` starts a prefill/decode pair). `LiveServer.stop` sends SIGTERM to
the launcher (it ends its own scheduler and detokenizer), waits, then SIGKILLs
whatever is left of its process group. `attach` wraps a server someone else
runs: it is never stopped.

The environment is the one `live/setup.sh` builds, in `$SGLANG_ENVELOPE_LIVE`
(default ``~/.cache/sglang-envelope-live``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
READY_TIMEOUT_S = 120.0
STOP_WAIT_S = 15.0
PR_SET_PDEATHSIG = 1  # prctl(2)

#: The launch flags every server of the suite gets (a 2-core CPU machine, the tiny model).
COMMON_FLAGS: tuple[str, ...] = (
    "--device", "cpu",
    "--attention-backend", "torch_native",
    "--sampling-backend", "pytorch",
    "--disable-cuda-graph",
    "--dtype", "float32",
    "--host", "127.0.0.1",
    "--max-total-tokens", "4096",
    "--max-running-requests", "4",
    "--context-length", "1024",
    "--chunked-prefill-size", "512",
    "--tp", "1",
    "--sleep-on-idle",
)  # fmt: skip

#: The Mixture-of-Experts model (`make_model.py --moe`) and the flag that returns its routing.
MOE_MODEL = "tiny-moe"
MOE_FLAGS = ("--enable-return-routed-experts",)
#: The CPU shims (`cpu_shim/sitecustomize.py`): Mooncake's sender, the routed-experts cache.
CPU_SHIM = HERE / "cpu_shim"

#: The flags of each kind of aggregated server the suite starts.
KIND_FLAGS: dict[str, tuple[str, ...]] = {
    "default": (),
    "incremental": ("--incremental-streaming-output",),
    "skip_tokenizer": ("--skip-tokenizer-init",),
    "sglang_0_5_22": (),
    "overrides": (),
    "moe": MOE_FLAGS,
}
#: The model each kind serves, when not the GPT-2 one.
KIND_MODEL: dict[str, str] = {"moe": MOE_MODEL}
#: The environment variables a kind of server runs with, beyond the suite's own.
KIND_ENV: dict[str, dict[str, str]] = {
    "overrides": {"SGLANG_ENABLE_REQUEST_HEADER_OVERRIDES": "1"},
}
#: Directories of the live environment put first on a kind's PYTHONPATH: SGLang 0.5.22's
#: code (`pip install --no-deps --target`) runs on 0.5.23's dependencies.
KIND_PATH: dict[str, tuple[str, ...]] = {"sglang_0_5_22": ("sglang-0.5.22",)}


class ServerFailed(RuntimeError):
    """A server did not start, or died: the message holds its log's tail."""


def live_dir() -> Path:
    """The directory `live/setup.sh` builds."""
    default = Path.home() / ".cache" / "sglang-envelope-live"
    return Path(os.environ.get("SGLANG_ENVELOPE_LIVE", str(default))).expanduser()


def free_port() -> int:
    """A TCP port nobody listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports, held open together while chosen."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def log_tail(path: Path | None, lines: int = 40) -> str:
    if path is None or not path.exists():
        return "(no log)"
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


@dataclass
class LiveServer:
    """One SGLang HTTP server: ours (`process` set) or attached to (`process` None)."""

    name: str
    url: str
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    server_info: bytes = b""
    model_config: bytes = b""
    command: tuple[str, ...] = field(default=(), repr=False)
    env: dict[str, str] | None = field(default=None, repr=False)

    @property
    def owned(self) -> bool:
        """Whether the suite runs this server (else it is attached to and never stopped)."""
        return bool(self.command)

    @property
    def running(self) -> bool:
        """Whether the suite's launcher process runs (False for an attached server)."""
        return self.process is not None and self.process.poll() is None

    @property
    def in_use(self) -> bool:
        """Whether it should be serving: attached, or launched and not stopped since."""
        return not self.owned or self.process is not None

    def launch(self) -> None:
        """Start the launcher (not waiting): its own session and process group, its log a file."""
        assert self.log is not None and self.command, "only a server of the suite is launched"
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # setsid: the launcher's pid is its process group's id
                preexec_fn=_end_with_parent,
            )

    def health(self, timeout: float = 5.0) -> bool:
        """Whether `GET /health` answers 200 now (SGLang generates a token for it)."""
        try:
            return httpx.get(f"{self.url}/health", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False

    def alive(self) -> bool:
        """Whether the server's launcher still runs (ours) and its HTTP server answers.

        Cheap (`GET /model_info`): SGLang's `/health` generates a token and takes
        about a second on an idle `--sleep-on-idle` server. When a scheduler dies, SGLang
        ends all its processes, the launcher included.
        """
        if self.process is not None and self.process.poll() is not None:
            return False
        try:
            answer = httpx.get(f"{self.url}/model_info", timeout=5.0)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200

    def tail(self, lines: int = 40) -> str:
        return log_tail(self.log, lines)

    def describe_death(self) -> str:
        code = None if self.process is None else self.process.poll()
        return f"SGLang server {self.name} at {self.url} is dead (exit {code}); log tail:\n" + (
            self.tail()
        )

    def load_info(self) -> None:
        """Read `/get_server_info` and the served model's config.json."""
        self.server_info = httpx.get(f"{self.url}/get_server_info", timeout=10).content
        model_path = json.loads(self.server_info)["model_path"]
        self.model_config = (Path(model_path) / "config.json").read_bytes()

    def relaunch(self) -> None:
        """Start a stopped (or dead) server of the suite again, on its port, and wait for it."""
        self.stop()
        self.launch()
        wait_ready([self])

    def stop(self) -> None:
        """SIGTERM the launcher, wait up to STOP_WAIT_S, then SIGKILL its process group."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(STOP_WAIT_S)
        with contextlib.suppress(ProcessLookupError):  # the group is gone already
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        self.process = None


def _end_with_parent() -> None:
    """In the launcher, before SGLang runs: SIGTERM when the suite's process dies (Linux), so
    that a killed test run does not leave its servers running."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def attach(name: str, url: str) -> LiveServer:
    """A server someone else runs, at `url`; it must answer `/health`."""
    server = LiveServer(name=name, url=url.rstrip("/"))
    if not server.health():
        raise ServerFailed(f"{name}: no SGLang server answers {server.url}/health")
    server.load_info()
    return server


def sglang_environment(extra_path: Sequence[Path] = ()) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SGLANG_USE_CPU_ENGINE", None)  # its CPU kernels are not on the package index
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if extra_path:
        parts = [str(path) for path in extra_path]
        if env.get("PYTHONPATH"):
            parts.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def launch(
    name: str,
    flags: Sequence[str],
    *,
    port: int | None = None,
    env: dict[str, str] | None = None,
    log_dir: Path | None = None,
    log_level: str = "warning",
    model: str = "tiny-gpt2",
) -> LiveServer:
    """Start a server of `model` (a directory of the live environment), not waiting for it:
    its own session and process group, its log a file."""
    root = live_dir()
    python = root / "venv" / "bin" / "python"
    if not python.exists():
        raise ServerFailed(f"{python} is missing: run live/setup.sh first")
    port = free_port() if port is None else port
    logs = Path(tempfile.mkdtemp(prefix="sglang-live-")) if log_dir is None else log_dir
    log = logs / f"{name}.log"
    command = (
        str(python), "-m", "sglang.launch_server",
        "--model-path", str(root / model),
        *COMMON_FLAGS,
        "--log-level", log_level,
        "--port", str(port),
        *flags,
    )  # fmt: skip
    server = LiveServer(
        name=name,
        url=f"http://127.0.0.1:{port}",
        log=log,
        command=command,
        env=sglang_environment() if env is None else env,
    )
    server.launch()
    return server


def wait_ready(servers: Sequence[LiveServer], timeout: float = READY_TIMEOUT_S) -> None:
    """Wait until every server answers `/health`; stop them all and raise if one dies."""
    deadline = time.monotonic() + timeout
    waiting = list(servers)
    while waiting:
        for server in list(waiting):
            if server.process is not None and server.process.poll() is not None:
                message = server.describe_death()
                for other in servers:
                    other.stop()
                raise ServerFailed(message)
            if server.health(timeout=2.0):
                waiting.remove(server)
        if waiting and time.monotonic() > deadline:
            names = ", ".join(server.name for server in waiting)
            tails = "\n".join(f"--- {server.name}:\n{server.tail()}" for server in waiting)
            for other in servers:
                other.stop()
            raise ServerFailed(f"not ready within {timeout:.0f} s: {names}\n{tails}")
        if waiting:
            time.sleep(0.5)
    for server in servers:
        server.load_info()


def start_server(kind: str = "default", *, log_dir: Path | None = None) -> LiveServer:
    """Start an aggregated server of `kind` (a key of KIND_FLAGS) and wait until it is ready."""
    path = [live_dir() / name for name in KIND_PATH.get(kind, ())]
    if kind in KIND_MODEL:
        path.insert(0, CPU_SHIM)
    env = sglang_environment(path) | KIND_ENV.get(kind, {})
    model = KIND_MODEL.get(kind, "tiny-gpt2")
    server = launch(kind, KIND_FLAGS[kind], env=env, log_dir=log_dir, model=model)
    wait_ready([server])
    return server
