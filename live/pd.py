"""A real prefill/decode pair for the live suite: two SGLang servers, KV cache over Mooncake TCP.

Both servers load `cpu_shim/sitecustomize.py` (Mooncake's sender on its generic path, no
CUDA) and Mooncake's CPU wheel from the live environment; SGLang advertises 127.0.0.1 for
the bootstrap server and the KV sessions. The decode server backs up retracted requests
in CPU tensors (the inferred `host_pool` pins memory through CUDA).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from live.servers import (
    CPU_SHIM,
    LiveServer,
    free_ports,
    launch,
    live_dir,
    sglang_environment,
    wait_ready,
)

PD_READY_TIMEOUT_S = 180.0
#: How long a leg waits for its other half in the suite (SGLang's default: 300 s).
PD_LONE_LEG_TIMEOUT_S = 60


@dataclass
class PdPair:
    """A prefill and a decode server, and the prefill's bootstrap server."""

    prefill: LiveServer
    decode: LiveServer
    bootstrap_host: str
    bootstrap_port: int

    @property
    def prefill_url(self) -> str:
        return self.prefill.url

    @property
    def decode_url(self) -> str:
        return self.decode.url

    @property
    def url(self) -> str:
        """The decode server: where a client's answer comes from."""
        return self.decode.url

    @property
    def server_info(self) -> bytes:
        return self.decode.server_info

    @property
    def model_config(self) -> bytes:
        return self.decode.model_config

    def alive(self) -> bool:
        return self.prefill.alive() and self.decode.alive()

    @property
    def running(self) -> bool:
        return self.prefill.running and self.decode.running

    @property
    def owned(self) -> bool:
        return self.prefill.owned

    @property
    def in_use(self) -> bool:
        return self.prefill.in_use or self.decode.in_use

    def describe_death(self) -> str:
        return "\n".join(s.describe_death() for s in (self.prefill, self.decode) if not s.alive())

    def stop(self) -> None:
        self.decode.stop()
        self.prefill.stop()

    def relaunch(self) -> None:
        """Start both servers again, on their ports (the bootstrap port too), and wait."""
        for server in (self.prefill, self.decode):
            server.stop()
            server.launch()
        wait_ready([self.prefill, self.decode], timeout=PD_READY_TIMEOUT_S)


def pd_variables(lone_leg_timeout_s: int = PD_LONE_LEG_TIMEOUT_S) -> dict[str, str]:
    """What both halves of a pair set: Mooncake over TCP on loopback, and how long a leg
    waits for its other half (SGLang's default: 300 s)."""
    return {
        "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": str(lone_leg_timeout_s),
        "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": str(lone_leg_timeout_s),
        "SGLANG_HOST_IP": "127.0.0.1",
        "HOST_IP": "127.0.0.1",
        "MC_FORCE_TCP": "1",
        "MOONCAKE_PROTOCOL": "tcp",
        "SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX": "false",
    }


def pd_path() -> list[Path]:
    """What both halves of a pair put first on their path: the CPU shim, Mooncake."""
    return [CPU_SHIM, live_dir() / "mooncake"]


def pd_environment(lone_leg_timeout_s: int = PD_LONE_LEG_TIMEOUT_S) -> dict[str, str]:
    """The environment of both PD servers: the CPU shim, Mooncake over TCP on loopback, and
    how long a leg waits for its other half (SGLang's default: 300 s)."""
    return sglang_environment(pd_path()) | pd_variables(lone_leg_timeout_s)


def start_pd_pair(
    *,
    log_dir: Path | None = None,
    lone_leg_timeout_s: int = PD_LONE_LEG_TIMEOUT_S,
    model: str = "tiny-gpt2",
    flags: tuple[str, ...] = (),
) -> PdPair:
    """Start a prefill and a decode server of `model` with `flags` (both at once) and wait
    until both are ready."""
    prefill_port, decode_port, bootstrap_port = free_ports(3)
    env = pd_environment(lone_leg_timeout_s)
    logs = Path(tempfile.mkdtemp(prefix="sglang-live-pd-")) if log_dir is None else log_dir
    common = (
        "--disaggregation-transfer-backend", "mooncake_tcp",
        "--disaggregation-bootstrap-port", str(bootstrap_port),
        *flags,
    )  # fmt: skip
    prefill = launch(
        "prefill",
        (*common, "--disaggregation-mode", "prefill"),
        port=prefill_port,
        env=env,
        log_dir=logs,
        model=model,
    )
    decode = launch(
        "decode",
        (
            *common,
            "--disaggregation-mode", "decode",
            # The inferred host_pool backup pins memory through CUDA.
            "--disaggregation-decode-retraction-backup", "cpu_tensor",
        ),
        port=decode_port,
        env=env,
        log_dir=logs,
        model=model,
    )  # fmt: skip
    wait_ready([prefill, decode], timeout=PD_READY_TIMEOUT_S)
    return PdPair(prefill, decode, "127.0.0.1", bootstrap_port)
