"""Reading SGLang's ``GET /v1/loads`` answer: is the engine idle?

A pure function of the answer's bytes. SGLang 0.5.21 to 0.5.23 answer
(`entrypoints/v1_loads.py`, `managers/load_snapshot.py`)::

    {"timestamp": "...", "version": "0.5.23", "accelerator": ..., "num_accelerators": 1,
     "loads": [{"timestamp": ..., "dp_rank": 0, "num_running_reqs": 0,
                "num_waiting_reqs": 0, ...}, ...]}

one load per DP rank. `num_running_reqs` is the running batch's size and
`num_waiting_reqs` the waiting queue's, with the disaggregation queues
(prefill bootstrap; decode prealloc, transfer and retracted) added in.
"""

from __future__ import annotations

import msgspec

from sglang_envelope.errors.exceptions import EnvelopeError, LimitExceeded, ResponseError

__all__ = ["DEFAULT_MAX_LOADS_BYTES", "EngineLoad", "engine_idle", "read_loads"]

#: The largest ``/v1/loads`` answer read (a load is about 1 KiB; 1024 DP ranks fit).
DEFAULT_MAX_LOADS_BYTES = 1 << 20


class _Load(msgspec.Struct):
    num_running_reqs: int
    num_waiting_reqs: int


class _Loads(msgspec.Struct):
    loads: list[_Load]


_decoder = msgspec.json.Decoder(_Loads)


class EngineLoad(msgspec.Struct, frozen=True, kw_only=True):
    """The requests a ``/v1/loads`` answer shows, summed over its DP ranks."""

    #: Requests in running batches (`num_running_reqs`).
    running: int
    #: Requests queued (`num_waiting_reqs`).
    waiting: int
    #: How many DP ranks the answer lists.
    ranks: int

    @property
    def idle(self) -> bool:
        """No running and no waiting request, on at least one rank."""
        return self.ranks > 0 and self.running == 0 and self.waiting == 0


def read_loads(body: bytes, *, max_bytes: int = DEFAULT_MAX_LOADS_BYTES) -> EngineLoad:
    """The running and waiting requests of a ``GET /v1/loads`` answer body (JSON bytes).

    Reads only ``loads[i].num_running_reqs`` and ``loads[i].num_waiting_reqs``
    (other keys are ignored). Raises `LimitExceeded` for a body over
    `max_bytes` (before parsing it), `ResponseError` naming the key for a body
    of another shape, and `EnvelopeError` for arguments of the wrong type.
    """
    if type(body) is not bytes:
        raise EnvelopeError(f"body must be bytes, got {type(body).__name__}")
    if type(max_bytes) is not int or max_bytes < 0:
        raise EnvelopeError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
    if len(body) > max_bytes:
        raise LimitExceeded(
            "max_bytes",
            max_bytes,
            f"the /v1/loads answer is {len(body)} bytes, more than max_bytes={max_bytes}",
        )
    try:
        loads = _decoder.decode(body).loads
    # A ValidationError names the key.
    except (msgspec.DecodeError, RecursionError) as error:
        raise ResponseError(
            f"the /v1/loads answer is not SGLang's shape: {error}"
        ) from None
    for index, load in enumerate(loads):
        for name in ("num_running_reqs", "num_waiting_reqs"):
            if getattr(load, name) < 0:
                raise ResponseError(
                    f"the /v1/loads answer's loads[{index}].{name} is negative"
                )
    return EngineLoad(
        running=sum(load.num_running_reqs for load in loads),
        waiting=sum(load.num_waiting_reqs for load in loads),
        ranks=len(loads),
    )


def engine_idle(body: bytes, *, max_bytes: int = DEFAULT_MAX_LOADS_BYTES) -> bool:
    """Whether a ``GET /v1/loads`` answer shows the engine idle: every DP rank with no
    running and no waiting request (`read_loads(body).idle`). An answer listing no rank
    is not idle: it shows nothing. Raises what `read_loads` raises."""
    return read_loads(body, max_bytes=max_bytes).idle
