"""NVIDIA Dynamo 1.6.1 for the live suite: its HTTP frontend and its in-process SGLang worker.

(Not named ``dynamo.py``: `live/dynamo_call.py` runs from this folder, where such a file
would stand for Dynamo's own package.)

`live/setup.sh` installs Dynamo beside the live environment's SGLang (``pip
--target``, into ``dynamo/site``). Both processes run with the live environment's
interpreter, that folder and the repository on the path, and no etcd or NATS: file
discovery (a folder of their own), a TCP request plane, a ZMQ event plane, all on
loopback. Each is started in its own process group and stopped by it
(`servers.LiveServer`). `start_worker` runs Dynamo's own worker (``python -m
dynamo.sglang``), or a worker file of the user's (docs/dynamo.md's), with the suite's
CPU flags; `start_pair` runs two, a prefill and a decode worker whose KV cache moves
over Mooncake's TCP transport as in `live/pd.py`; `call` sends a native body to the
worker (or the pair) over Dynamo's request plane, as the frontend carries it
(`live/dynamo_call.py`).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from live.pd import pd_path, pd_variables
from live.servers import (
    COMMON_FLAGS,
    LiveServer,
    ServerFailed,
    free_port,
    live_dir,
    sglang_environment,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
READY_TIMEOUT_S = 180.0
MODEL = "tiny-gpt2"
#: What Dynamo's worker logs once the model is registered and requests are taken.
REGISTERED = "Model registration succeeded"
#: The suite's launch flags Dynamo's worker does not take (it serves no HTTP of SGLang's).
_NOT_FOR_DYNAMO = ("--sleep-on-idle",)


def dynamo_environment(store: Path, pair: bool = False) -> dict[str, str]:
    """Dynamo on one machine: file discovery in `store`, TCP and ZMQ on loopback; for a
    `pair`, Mooncake over TCP and the CPU shim as `live/pd.py`'s servers have them."""
    path = [live_dir() / "dynamo" / "site", ROOT]
    env = sglang_environment([*pd_path(), *path] if pair else path)
    if pair:
        env.update(pd_variables())
    env.update(
        DYN_FILE_KV=str(store),
        DYN_DISCOVERY_BACKEND="file",
        DYN_REQUEST_PLANE="tcp",
        DYN_EVENT_PLANE="zmq",
        DYN_SGLANG_ENABLE_GENERATE="true",  # the frontend's native POST /generate
        DYN_TCP_RPC_HOST="127.0.0.1",
        DYN_TCP_RESPONSE_STREAM_HOST="127.0.0.1",
        DYN_EVENT_PLANE_HOST="127.0.0.1",
        DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS="0",  # stopped with nothing in flight
        PYTHONHASHSEED="0",
    )
    return env


def log_of(worker: LiveServer) -> str:
    return "" if worker.log is None else worker.log.read_text(errors="replace")


@dataclass
class Dynamo:
    """A Dynamo worker, or a prefill/decode pair of them (`worker` the decode one), and
    once started their frontend, sharing one discovery folder."""

    worker: LiveServer
    store: Path
    frontend: LiveServer | None = None
    prefill: LiveServer | None = None
    #: The prefill worker's bootstrap server, "HOST:PORT", for a pair.
    bootstrap: str | None = None

    def stop(self) -> None:
        """Each process stopped by its process group, all at once."""
        started = [s for s in (self.frontend, self.worker, self.prefill) if s is not None]
        with ThreadPoolExecutor(len(started)) as pool:
            list(pool.map(LiveServer.stop, started))

    def log(self) -> str:
        """The (decode) worker's log."""
        return log_of(self.worker)


def _python() -> str:
    return str(live_dir() / "venv" / "bin" / "python")


def _launch(
    name: str, worker_file: Path | None, store: Path, pair_flags: tuple[str, ...] = ()
) -> LiveServer:
    """Dynamo's SGLang worker (its own, or `worker_file` run the same way), not waiting;
    with `pair_flags`, a half of a prefill/decode pair."""
    logs = Path(tempfile.mkdtemp(prefix="dynamo-live-"))
    program = ["-m", "dynamo.sglang"] if worker_file is None else [str(worker_file)]
    common = [flag for flag in COMMON_FLAGS if flag not in _NOT_FOR_DYNAMO]
    command = (
        _python(), *program,
        "--model-path", str(live_dir() / MODEL), "--served-model-name", MODEL,
        *common, "--port", str(free_port()), "--log-level", "warning",
        "--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq",
        *pair_flags,
    )  # fmt: skip
    worker = LiveServer(
        name=name,
        url="",
        log=logs / f"{name}.log",
        command=command,
        env=dynamo_environment(store, pair=bool(pair_flags)),
    )
    worker.launch()
    return worker


def _registered(dynamo: Dynamo) -> Dynamo:
    """`dynamo` once each of its workers has registered its model (stopped if one fails)."""
    workers = [dynamo.worker] if dynamo.prefill is None else [dynamo.prefill, dynamo.worker]
    deadline = time.monotonic() + READY_TIMEOUT_S
    for worker in workers:
        while REGISTERED not in log_of(worker):
            if not worker.running or time.monotonic() > deadline:
                tail = log_of(worker)[-3000:]
                dynamo.stop()
                raise ServerFailed(f"Dynamo's {worker.name} did not register:\n{tail}")
            time.sleep(0.5)
    return dynamo


def start_worker(worker_file: Path | None = None) -> Dynamo:
    """Dynamo's SGLang worker (its own, or `worker_file` run the same way), registered."""
    store = Path(tempfile.mkdtemp(prefix="dynamo-kv-"))
    return _registered(Dynamo(_launch("dynamo-worker", worker_file, store), store))


def start_pair(worker_file: Path | None = None) -> Dynamo:
    """A prefill and a decode worker (Dynamo's own, or `worker_file` run the same way) of
    one model, Mooncake over TCP between them, both registered."""
    store = Path(tempfile.mkdtemp(prefix="dynamo-kv-"))
    port = free_port()
    common = (
        "--disaggregation-transfer-backend", "mooncake_tcp",
        "--disaggregation-bootstrap-port", str(port),
    )  # fmt: skip
    prefill = _launch(
        "dynamo-prefill", worker_file, store, (*common, "--disaggregation-mode", "prefill")
    )
    decode = _launch(
        "dynamo-decode",
        worker_file,
        store,
        (
            *common,
            "--disaggregation-mode", "decode",
            # The inferred host_pool backup pins memory through CUDA (as in live/pd.py).
            "--disaggregation-decode-retraction-backup", "cpu_tensor",
        ),
    )  # fmt: skip
    pair = Dynamo(decode, store, prefill=prefill, bootstrap=f"127.0.0.1:{port}")
    return _registered(pair)


#: A body the frontend serves once it routes to the workers: one greedy token, streamed.
PROBE = {
    "model": MODEL,
    "input_ids": [5, 6],
    "stream": True,
    "sampling_params": {"temperature": 0, "max_new_tokens": 1},
}


def start_frontend(dynamo: Dynamo) -> LiveServer:
    """Dynamo's HTTP frontend over the worker's discovery folder, once it serves a body.

    Listing the model is not enough: for a pair, the frontend lists it as soon as the
    decode worker registers, and answers 503 ("Prefill router target is still
    activating") until its prefill router has found the prefill worker.
    """
    port = free_port()
    command = (
        _python(), "-m", "dynamo.frontend", "--http-host", "127.0.0.1",
        "--http-port", str(port), "--discovery-backend", "file", "--request-plane", "tcp",
        "--event-plane", "zmq", "--router-mode", "round-robin",
    )  # fmt: skip
    logs = Path(tempfile.mkdtemp(prefix="dynamo-front-"))
    front = LiveServer(
        name="dynamo-frontend",
        url=f"http://127.0.0.1:{port}",
        log=logs / "frontend.log",
        command=command,
        env=dynamo_environment(dynamo.store),
    )
    front.launch()
    dynamo.frontend = front
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            models = httpx.get(f"{front.url}/v1/models", timeout=2.0).json()
            listed = any(m.get("id") == MODEL for m in models.get("data", []))
            if listed and _serves(front):
                return front
        except (httpx.HTTPError, ValueError):
            pass
        if not front.running or time.monotonic() > deadline:
            front.stop()
            raise ServerFailed(f"Dynamo's frontend is not ready:\n{front.tail()}")
        time.sleep(0.5)


def _serves(front: LiveServer) -> bool:
    """Whether the frontend streams `PROBE`'s answer (not its 503 of a router still
    activating)."""
    probe = httpx.post(f"{front.url}/generate", json=PROBE, timeout=30.0)
    return probe.status_code == 200 and b"finish_reason" in probe.content


@dataclass
class Call:
    """What the worker streamed back for one body: its items, or Dynamo's error."""

    items: list[dict[str, Any]]
    error: str | None
    seconds: float
    #: What the prefill worker of a pair streamed back (the meeting point first).
    prefill: list[dict[str, Any]] = field(default_factory=list)

    @property
    def answers(self) -> list[dict[str, Any]]:
        """The SGLang objects the items carry (``engine_data.sglang_response``)."""
        return [item["engine_data"]["sglang_response"] for item in self.items]


def call(
    dynamo: Dynamo,
    body: dict[str, Any],
    stop_after_s: float | None = None,
    routing: dict[str, Any] | None = None,
) -> Call:
    """`body` sent to the worker over Dynamo's request plane (`live/dynamo_call.py`), with
    `routing` as the request's ``routing`` when given."""
    command = [_python(), str(HERE / "dynamo_call.py"), json.dumps(body)]
    if stop_after_s is not None:
        command += ["--stop-after", str(stop_after_s)]
    if routing is not None:
        command += ["--routing", json.dumps(routing)]
    if dynamo.bootstrap is not None:
        command += ["--pair", dynamo.bootstrap]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=dynamo_environment(dynamo.store),
        timeout=180,
        start_new_session=True,
        check=False,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines or "seconds" not in lines[-1]:
        raise AssertionError(f"dynamo_call failed:\n{done.stderr[-3000:]}")
    result = lines[-1]
    items = [line["item"] for line in lines[:-1] if "item" in line]
    prefill = [line["prefill"] for line in lines[:-1] if "prefill" in line]
    return Call(items, result.get("error"), float(result["seconds"]), prefill)
