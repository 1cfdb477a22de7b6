"""The engine request: what a worker sends SGLang for its role.

`ROLE_PLANS` is the whole rule set, one row a role: whether the role needs a
`Bootstrap`, how its stream mode follows from the request, and whether it is
the prefill half of a disaggregated pair (which streams, makes one token and
leaves output-flat logprobs to decode).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec

from sglang_envelope._envelope import WorkerEnvelope, _is_utf8
from sglang_envelope._errors import EnvelopeError, show_value
from sglang_envelope._request import ClientRequest, TokenId

__all__ = ["ROLE_PLANS", "Bootstrap", "EngineBody", "EngineRequest", "Role", "build_engine_request"]

ACCEPT_SSE = "text/event-stream"
ACCEPT_JSON = "application/json"


class Role(str, enum.Enum):
    """A worker's part in serving one request."""

    AGGREGATED = "aggregated"
    DECODE = "decode"
    PREFILL = "prefill"


class Bootstrap(msgspec.Struct, frozen=True):
    """Where a disaggregated pair meets to hand over the KV cache.

    `host`, `port` and `room` become SGLang's `bootstrap_host`, `bootstrap_port`
    and `bootstrap_room`; `prefill_dp_rank`, when given, its
    `disagg_prefill_dp_rank`. Checked when made: `EnvelopeError` names the
    field and what it must be.
    """

    host: str
    port: int
    room: int
    prefill_dp_rank: int | None = None

    def __post_init__(self) -> None:
        for name, low, high in _BOOTSTRAP_RANGES:
            value = getattr(self, name)
            if value is None and name == "prefill_dp_rank":
                continue
            if type(value) is not int or not low <= value <= high:
                raise EnvelopeError(
                    f"bootstrap.{name} must be an integer in [{low}, {high}], "
                    f"got {show_value(value)}"
                )
        if not isinstance(self.host, str) or not self.host or not _is_utf8(self.host):
            raise EnvelopeError(
                f"bootstrap.host must be a non-empty UTF-8 string, got {show_value(self.host)}"
            )


_BOOTSTRAP_RANGES = (("port", 1, 65535), ("room", 0, 2**63 - 1), ("prefill_dp_rank", 0, 2**31 - 1))


class EngineBody(ClientRequest, frozen=True, kw_only=True, omit_defaults=True):
    """The keyword arguments of SGLang's `GenerateReqInput` for one engine request.

    `stream` is always set, so the body always states its stream mode.
    """

    bootstrap_host: str | None = None
    bootstrap_port: int | None = None
    bootstrap_room: int | None = None
    disagg_prefill_dp_rank: int | None = None


class RolePlan(NamedTuple):
    """How one role turns an envelope into an engine request."""

    needs_bootstrap: bool
    #: True: always stream. False: stream unless the request is output-flat,
    #: which SGLang builds only on a finished (unary) response.
    always_streams: bool
    #: Prefill computes the prompt and one token for the KV handoff: it drops
    #: output-flat (decode provides it), keeps prompt-flat and Base64 only while
    #: a flat flag stays, and clamps sampling to one sequence of one token.
    is_prefill: bool


ROLE_PLANS: dict[Role, RolePlan] = {
    Role.AGGREGATED: RolePlan(needs_bootstrap=False, always_streams=False, is_prefill=False),
    Role.DECODE: RolePlan(needs_bootstrap=True, always_streams=False, is_prefill=False),
    Role.PREFILL: RolePlan(needs_bootstrap=True, always_streams=True, is_prefill=True),
}

# A Role is a str, so one lookup serves Role.DECODE and "decode" alike.
_PLANS_BY_NAME: dict[str, tuple[Role, RolePlan]] = {
    role.value: (role, plan) for role, plan in ROLE_PLANS.items()
}

#: What prefill sets in `sampling_params`, and what it removes.
PREFILL_SAMPLING_OVERRIDES: dict[str, Any] = {"n": 1, "max_new_tokens": 1}
PREFILL_SAMPLING_REMOVED = ("min_new_tokens",)

_encoder = msgspec.json.Encoder()


class EngineRequest(msgspec.Struct, frozen=True):
    """One request for SGLang, built for a role.

    `body` holds exactly the `GenerateReqInput` keyword arguments; `to_dict()`
    gives them as a dict (`GenerateReqInput(**d)`), `to_json()` as the HTTP body.
    """

    role: Role
    body: EngineBody

    @property
    def rid(self) -> str:
        """The request id SGLang will know this request by."""
        return self.body.rid or ""

    @property
    def stream(self) -> bool:
        """Whether SGLang answers with SSE frames (else one JSON body)."""
        return bool(self.body.stream)

    @property
    def accept(self) -> str:
        """The `Accept` header for this request's answer."""
        return ACCEPT_SSE if self.stream else ACCEPT_JSON

    def to_dict(self) -> dict[str, Any]:
        """The keyword arguments of SGLang's `GenerateReqInput`, as plain data."""
        result: dict[str, Any] = msgspec.to_builtins(self.body)
        return result

    def to_json(self) -> bytes:
        """The HTTP body for `POST /generate`."""
        return _encoder.encode(self.body)


def _prefill_sampling(sampling: dict[str, Any] | None) -> dict[str, Any]:
    kept = {k: v for k, v in (sampling or {}).items() if k not in PREFILL_SAMPLING_REMOVED}
    return kept | PREFILL_SAMPLING_OVERRIDES


def _check_bootstrap(role: Role, plan: RolePlan, bootstrap: Bootstrap | None) -> None:
    if plan.needs_bootstrap and bootstrap is None:
        raise EnvelopeError(f"role {role.value!r} needs a Bootstrap (host, port, room)")
    if not plan.needs_bootstrap and bootstrap is not None:
        raise EnvelopeError(f"role {role.value!r} takes no Bootstrap")
    if bootstrap is not None and not isinstance(bootstrap, Bootstrap):
        raise EnvelopeError(f"bootstrap must be a Bootstrap, got {type(bootstrap).__name__}")


def _check_input_ids(input_ids: Sequence[int]) -> list[int]:
    try:
        ids: list[int] = msgspec.convert(input_ids, list[TokenId])
    except (msgspec.ValidationError, UnicodeEncodeError) as error:  # text with lone surrogates
        raise EnvelopeError(f"input_ids: {error}") from None
    if not ids:
        raise EnvelopeError("input_ids cannot be empty.")
    return ids


def build_engine_request(
    envelope: WorkerEnvelope,
    *,
    input_ids: Sequence[int],
    role: Role | str,
    bootstrap: Bootstrap | None = None,
) -> EngineRequest:
    """Build the request a worker in `role` sends SGLang for `envelope`.

    Raises `EnvelopeError` for the caller's mistakes: an unknown role, a missing
    or unexpected `bootstrap`, `input_ids` that are not token ids.
    """
    try:
        role, plan = _PLANS_BY_NAME[role]
    except (KeyError, TypeError):  # TypeError: an unhashable role
        roles = ", ".join(r.value for r in Role)
        raise EnvelopeError(f"role must be one of {roles}, got {show_value(role)}") from None
    _check_bootstrap(role, plan, bootstrap)
    if not isinstance(envelope, WorkerEnvelope):
        raise EnvelopeError(f"envelope must be a WorkerEnvelope, got {type(envelope).__name__}")
    request = envelope.request
    fields = msgspec.structs.asdict(request)
    fields["rid"] = envelope.rid
    # The envelope's own ids were checked when it was decoded; others are checked here.
    same_ids = input_ids is request.input_ids
    fields["input_ids"] = request.input_ids if same_ids else _check_input_ids(input_ids)
    output_flat = request.return_flat_raw_output_top_logprobs
    fields["stream"] = plan.always_streams or not output_flat
    if plan.is_prefill:
        prompt_flat = request.return_flat_raw_top_logprobs
        fields["return_flat_raw_output_top_logprobs"] = False
        fields["return_flat_raw_top_logprobs_b64"] = (
            request.return_flat_raw_top_logprobs_b64 and prompt_flat
        )
        fields["sampling_params"] = _prefill_sampling(request.sampling_params)
    if bootstrap is not None:
        fields["bootstrap_host"] = bootstrap.host
        fields["bootstrap_port"] = bootstrap.port
        fields["bootstrap_room"] = bootstrap.room
        fields["disagg_prefill_dp_rank"] = bootstrap.prefill_dp_rank
    return EngineRequest(role, EngineBody(**fields))
