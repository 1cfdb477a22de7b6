"""Where a prefill/decode pair meets (`Bootstrap`) and what the router decided
(`Routing`): the serving system's inputs to `build_engine_request`, checked when made.
"""

from __future__ import annotations

import types
from collections.abc import Mapping

import msgspec

from sglang_envelope.errors.exceptions import EnvelopeError, show_value
from sglang_envelope.request.checks import INT64
from sglang_envelope.request.envelope import check_text, is_utf8

__all__ = ["Bootstrap", "Routing"]

#: A data-parallel rank: SGLang's gate takes any signed 64-bit one, but a rank indexes
#: the server's data-parallel workers from 0, so one past 2**31 - 1 is the caller's
#: mistake (Dynamo's legacy in-band "unset", 2**32 - 1, among them).
_RANK = (0, 2**31 - 1)


def _check_int(where: str, value: object, low: int, high: int) -> None:
    if type(value) is not int or not low <= value <= high:
        raise EnvelopeError(
            f"{where} must be an integer in [{low}, {high}], got {show_value(value)}"
        )


class Bootstrap(msgspec.Struct, frozen=True):
    """Where a disaggregated pair meets to hand over the KV cache.

    `host`, `port` and `room` become SGLang's `bootstrap_host`, `bootstrap_port`
    and `bootstrap_room`; `prefill_dp_rank`, when given, its
    `disagg_prefill_dp_rank`, and on the prefill leg also its `routed_dp_rank`
    (SGLang's data-parallel controller routes only on that one). Checked when
    made: `EnvelopeError` names the field and what it must be.
    """

    host: str
    port: int
    room: int
    prefill_dp_rank: int | None = None

    def __post_init__(self) -> None:
        _check_int("bootstrap.port", self.port, 1, 65535)
        _check_int("bootstrap.room", self.room, 0, 2**63 - 1)
        if self.prefill_dp_rank is not None:
            _check_int("bootstrap.prefill_dp_rank", self.prefill_dp_rank, *_RANK)
        check_text(self.host, "bootstrap.host")


def _frozen_labels(where: str, value: object) -> Mapping[str, str] | None:
    """A read-only private copy of a mapping of strings to strings, checked."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise EnvelopeError(
            f"{where} must be a mapping of str to str, got {type(value).__name__}"
        )
    copy = dict(value)
    for key, item in copy.items():
        for what, text in (("key", key), ("value", item)):
            if type(text) is not str or not is_utf8(text):
                raise EnvelopeError(
                    f"{where} {what}s must be UTF-8 strings, got {show_value(text)}"
                )
    return types.MappingProxyType(copy)


class Routing(msgspec.Struct, frozen=True, kw_only=True):
    """What the router or worker decides for one engine request; every field optional.

    - `dp_rank` becomes `routed_dp_rank` (aggregated and decode; prefill takes
      its rank from `Bootstrap.prefill_dp_rank`).
    - `trace_header` (str to str) becomes `external_trace_header`.
    - `lora_path` becomes `lora_path`, replacing the client's.
    - `priority` becomes `priority`, replacing the client's.
    - `labels` (str to str) becomes `custom_labels`, SGLang's metric labels.

    Checked when made: `EnvelopeError` names the field. The mappings are
    kept as read-only copies.
    """

    dp_rank: int | None = None
    trace_header: Mapping[str, str] | None = None
    lora_path: str | None = None
    priority: int | None = None
    labels: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.dp_rank is not None:
            _check_int("routing.dp_rank", self.dp_rank, *_RANK)
        if self.priority is not None:
            _check_int("routing.priority", self.priority, *INT64)  # SGLang's bound
        if self.lora_path is not None:
            check_text(self.lora_path, "routing.lora_path")
        for name in ("trace_header", "labels"):
            frozen = _frozen_labels(f"routing.{name}", getattr(self, name))
            msgspec.structs.force_setattr(self, name, frozen)
