"""The engine request: what a worker sends SGLang for its role.

`ROLE_PLANS` is the whole rule set, one row a role: whether the role needs a
`Bootstrap`, how its stream mode follows from the request, and whether it is
the prefill half of a disaggregated pair (which streams, makes one token and
leaves output-flat logprobs to decode).

SGLang 0.5.22 and 0.5.23 can set a few `GenerateReqInput` fields from
``x-override-*`` headers after they parse the body
(``srt/entrypoints/request_headers.py``, applied in ``serve_generate_request``):
`header_overrides` gives the headers that send the client's own body bytes as its
engine request, never encoding a large body again, when the two differ only in
those fields.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, NamedTuple

import msgspec
from msgspec import UNSET, Raw

from sglang_envelope.errors.exceptions import EnvelopeError, show_value
from sglang_envelope.releases.target import Target
from sglang_envelope.request.deployment import Deployment, check_engine_body
from sglang_envelope.request.envelope import WorkerEnvelope
from sglang_envelope.request.fields import RequestFields, SamplingParams, TokenId
from sglang_envelope.request.passed import (
    NO_PASSED_FIELDS,
    PassedFields,
    raw_value,
    with_passed_fields,
    with_passed_values,
)
from sglang_envelope.request.routing import Bootstrap, Routing
from sglang_envelope.request.rules import reject
from sglang_envelope.request.types import ClientRequest

__all__ = [
    "OVERRIDE_HEADERS",
    "OVERRIDE_RELEASES",
    "ROLE_PLANS",
    "EngineBody",
    "EngineRequest",
    "Role",
    "RoleName",
    "build_engine_request",
    "header_overrides",
]

ACCEPT_SSE = "text/event-stream"
ACCEPT_JSON = "application/json"


class Role(str, enum.Enum):
    """A worker's part in serving one request.

    `str(role)` and `f"{role}"` give its value.
    """

    AGGREGATED = "aggregated"
    DECODE = "decode"
    PREFILL = "prefill"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return self.value.__format__(spec)


#: A role's value, accepted wherever a `Role` is.
RoleName = Literal["aggregated", "decode", "prefill"]


class EngineBody(RequestFields, frozen=True, omit_defaults=True):
    """The keyword arguments of SGLang's `GenerateReqInput` for one engine request.

    The client's fields plus those only the serving system sets; not a
    `ClientRequest`. `stream` is always set, so the body always states its
    stream mode. Mappings are held as `msgspec.Raw` JSON bytes.
    """

    bootstrap_host: str | None = None
    bootstrap_port: int | None = None
    bootstrap_room: int | None = None
    disagg_prefill_dp_rank: int | None = None
    routed_dp_rank: int | None = None
    external_trace_header: Raw | None = None
    custom_labels: Raw | None = None


class RolePlan(NamedTuple):
    """How one role turns an envelope into an engine request."""

    needs_bootstrap: bool
    #: True: always stream. False: the client's mode: SGLang streams to a streaming
    #: client and answers a unary one with one body, as the client asked (a stream
    #: aggregated would cost more than the answer: a cumulative stream repeats the
    #: answer in every frame, an incremental one repeats its `meta_info`).
    always_streams: bool
    #: Prefill computes the prompt and one token for the KV handoff: it drops
    #: output-flat (decode provides it), keeps prompt-flat and Base64 only while
    #: a flat flag stays, and clamps sampling to one sequence of one token.
    is_prefill: bool


ROLE_PLANS: dict[Role, RolePlan] = {
    Role.AGGREGATED: RolePlan(
        needs_bootstrap=False, always_streams=False, is_prefill=False
    ),
    Role.DECODE: RolePlan(needs_bootstrap=True, always_streams=False, is_prefill=False),
    Role.PREFILL: RolePlan(needs_bootstrap=True, always_streams=True, is_prefill=True),
}

# A Role is a str, so one lookup serves Role.DECODE and "decode" alike.
_PLANS_BY_NAME: dict[str, tuple[Role, RolePlan]] = {
    role.value: (role, plan) for role, plan in ROLE_PLANS.items()
}

#: What prefill sets in `sampling_params`: one sequence of one token (UNSET: removed).
_PREFILL_SAMPLING: dict[str, Any] = {"n": 1, "max_new_tokens": 1, "min_new_tokens": UNSET}

_encoder = msgspec.json.Encoder()
_to_builtins = msgspec.to_builtins
_astuple = msgspec.structs.astuple
_force_setattr = msgspec.structs.force_setattr
_replace = msgspec.structs.replace


class EngineRequest(msgspec.Struct, frozen=True):
    """One request for SGLang, built for a role by `build_engine_request` (the only way
    to make one: made otherwise, it raises `EnvelopeError`).

    `body` holds exactly the `GenerateReqInput` keyword arguments; `to_dict()`
    gives them as a dict (`GenerateReqInput(**d)`), `to_json()` as the HTTP body.
    """

    role: Role
    body: EngineBody
    #: Keys the tables do not know that the client sent to a target with
    #: `unknown_fields="pass"`; `to_json()` and `to_dict()` carry them unchanged.
    passed: PassedFields = NO_PASSED_FIELDS

    def __post_init__(self) -> None:
        raise EnvelopeError("an EngineRequest is made only by build_engine_request")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled and copied as what it is: a request already built."""
        return (_made, (self.role, self.body, self.passed))

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

    @property
    def headers(self) -> dict[str, str]:
        """The HTTP headers for `POST /generate` with `to_json()` as the body (a new
        dict): SGLang refuses a body sent without ``Content-Type: application/json``."""
        return {"Content-Type": ACCEPT_JSON, "Accept": self.accept}

    def to_dict(self) -> dict[str, Any]:
        """The keyword arguments of SGLang's `GenerateReqInput` (a new dict, with the
        data `to_json()` carries: for SGLang run in-process, ``GenerateReqInput(**d)``),
        made without a JSON round trip: ``input_ids`` a list, mappings decoded."""
        kwargs: dict[str, Any] = _to_builtins(self.body, enc_hook=raw_value)
        ids = kwargs.get("input_ids")
        if type(ids) is tuple:
            kwargs["input_ids"] = list(ids)
        if self.passed is NO_PASSED_FIELDS:  # the usual request
            return kwargs
        return with_passed_values(kwargs, self.passed)

    def to_json(self) -> bytes:
        """The HTTP body for `POST /generate`."""
        if self.passed is NO_PASSED_FIELDS:  # the usual request: the body as it is
            return _encoder.encode(self.body)
        return with_passed_fields(_encoder.encode(self.body), self.passed)


class _Built(EngineRequest, frozen=True):
    """An `EngineRequest` being made by `_made`: it skips the refusal, and is made an
    `EngineRequest` before it is handed out."""

    def __post_init__(self) -> None:
        pass


def _made(role: Role, body: EngineBody, passed: PassedFields) -> EngineRequest:
    """The `EngineRequest` of `role` holding `body` and the keys `passed` on (none: the
    one `NO_PASSED_FIELDS`, an unpickled copy of it too)."""
    if passed is not NO_PASSED_FIELDS and passed == NO_PASSED_FIELDS:
        passed = NO_PASSED_FIELDS
    request = _Built(role, body, passed)
    _force_setattr(request, "__class__", EngineRequest)
    return request


def _prefill_sampling(sampling: SamplingParams | Any | None) -> SamplingParams:
    if isinstance(sampling, SamplingParams):
        return msgspec.structs.replace(sampling, **_PREFILL_SAMPLING)
    return SamplingParams(**_PREFILL_SAMPLING)


def _check_bootstrap(role: Role, plan: RolePlan, bootstrap: Bootstrap | None) -> None:
    if plan.needs_bootstrap and bootstrap is None:
        raise EnvelopeError(f"role {role.value!r} needs a Bootstrap (host, port, room)")
    if not plan.needs_bootstrap and bootstrap is not None:
        raise EnvelopeError(f"role {role.value!r} takes no Bootstrap")
    if bootstrap is not None and type(bootstrap) is not Bootstrap:
        raise EnvelopeError(
            f"bootstrap must be a Bootstrap, got {type(bootstrap).__name__}"
        )


def _check_input_ids(input_ids: Sequence[int]) -> tuple[int, ...]:
    if isinstance(input_ids, (str, bytes, bytearray, memoryview, Mapping)):
        raise EnvelopeError(
            f"input_ids must be a sequence of token ids, got {type(input_ids).__name__}"
        )
    try:
        ids: tuple[int, ...] = msgspec.convert(input_ids, tuple[TokenId, ...])
    except (msgspec.ValidationError, UnicodeEncodeError, RecursionError) as error:
        raise EnvelopeError(f"input_ids: {error}") from None
    if not ids:
        raise EnvelopeError("input_ids cannot be empty.")
    return ids


def _check_one_sequence(role: Role, sampling: SamplingParams | Any | None) -> None:
    """A prefill/decode pair carries one sequence: n > 1 is fanned out by the caller
    (`Sequences.samples()`), one request a sample."""
    n = sampling.n if isinstance(sampling, SamplingParams) else None
    if isinstance(n, int) and n > 1:
        raise reject("parallel_sampling", n=n, role=role.value)


#: How many fields an engine body takes from the client's request.
_CLIENT_FIELD_COUNT = len(RequestFields.__struct_fields__)

#: The serving fields of an `EngineBody`, after the client's, in order.
_SERVING_FIELDS = EngineBody.__struct_fields__[_CLIENT_FIELD_COUNT:]
_NO_SERVING = (None,) * len(_SERVING_FIELDS)
_RID = EngineBody.__struct_fields__.index("rid")
_STREAM = EngineBody.__struct_fields__.index("stream")
_INPUT_IDS = EngineBody.__struct_fields__.index("input_ids")
assert _SERVING_FIELDS[:4] == (
    "bootstrap_host",
    "bootstrap_port",
    "bootstrap_room",
    "disagg_prefill_dp_rank",
)


def _describe(target: Target) -> str:
    return (
        f"SGLang {target.sglang} over {target.transport} "
        f"(unknown fields: {target.unknown_fields})"
    )


def _refuse_other_target(target: object, checked: Target) -> None:
    if type(target) is not Target:
        raise EnvelopeError(f"target must be a Target, got {type(target).__name__}")
    raise EnvelopeError(
        f"the request was checked for {_describe(checked)}, not for {_describe(target)}: "
        "decode it with that target (decode_envelope(..., target=...)) first"
    )


def _labels_json(labels: Mapping[str, str] | None) -> Raw | None:
    return None if labels is None else Raw(_encoder.encode(dict(labels)))


def build_engine_request(
    envelope: WorkerEnvelope,
    *,
    input_ids: Sequence[int] | None,
    role: Role | RoleName,
    deployment: Deployment,
    bootstrap: Bootstrap | None = None,
    routing: Routing | None = None,
    target: Target | None = None,
) -> EngineRequest:
    """Build the request a worker in `role` sends SGLang for `envelope`.

    `target` is the SGLang the request goes to (None: `envelope.target`); a
    request checked for another target is refused with `EnvelopeError`.
    `deployment` is the server it goes to: the request is refused, as
    `RequestRejected` in SGLang's words, where that server would refuse it after
    dispatch (`DEPLOYMENT_RULES`: ids outside its vocabulary, the context length,
    its flags). `routing` carries what the router decided (`Routing`); its
    `lora_path` and `priority` replace the client's. On the prefill leg the rank
    is `bootstrap.prefill_dp_rank`, else `routing.dp_rank` (as Dynamo does).
    A prefill or decode leg carries one sequence: n > 1 is `parallel_sampling`
    (fan it out with `Sequences.samples()`); the aggregated role passes n on.
    `input_ids` None keeps the request's own prompt, ids or `text` (which both
    legs of a pair carry, as SGLang's router sends it); ids given go with a text.

    Raises `EnvelopeError` for the caller's mistakes: an unknown role, a missing
    or unexpected `bootstrap`, a `deployment` that is not a `Deployment`,
    `input_ids` that are not token ids.
    """
    _check_arguments(envelope, deployment, routing)
    try:
        role, plan = _PLANS_BY_NAME[role]
    except (KeyError, TypeError):  # TypeError: an unhashable role
        roles = ", ".join(r.value for r in Role)
        message = f"role must be one of {roles}, got {show_value(role)}"
        raise EnvelopeError(message) from None
    _check_bootstrap(role, plan, bootstrap)
    request = envelope.request
    if plan.needs_bootstrap:
        _check_one_sequence(role, request.sampling_params)
    if target is not None and target != request.target:
        _refuse_other_target(target, request.target)
    # An EngineBody is the client's fields (a ClientRequest's first ones), the frontend's
    # rid and the role's stream mode among them, then the serving fields.
    values = list(_astuple(request)[:_CLIENT_FIELD_COUNT])
    values[_RID] = envelope.rid
    values[_STREAM] = plan.always_streams or request.stream is True
    # The envelope's own ids were checked when it was made; others are checked here.
    if input_ids is not request.input_ids and input_ids is not None:
        values[_INPUT_IDS] = _check_input_ids(input_ids)
    serving = _NO_SERVING if bootstrap is None else _serving_fields_at(bootstrap)
    body = EngineBody(*values, *serving)
    changes = _prefill_fields(request, bootstrap, routing) if plan.is_prefill else {}
    if routing is not None:
        changes.update(_routed(role, routing))
    if changes:
        body = _replace(body, **changes)  # every other change, by name
    check_engine_body(deployment, body)
    return _made(role, body, request.passed_fields)


def _check_arguments(envelope: object, deployment: object, routing: object) -> None:
    if type(deployment) is not Deployment:
        raise EnvelopeError(
            f"deployment must be a Deployment, got {type(deployment).__name__}: "
            "describe the SGLang server with Deployment.from_server_info(...) "
            "or Deployment(vocab_size=...)"
        )
    if type(envelope) is not WorkerEnvelope:
        raise EnvelopeError(
            f"envelope must be a WorkerEnvelope, got {type(envelope).__name__}"
        )
    if routing is not None and type(routing) is not Routing:
        raise EnvelopeError(f"routing must be a Routing, got {type(routing).__name__}")


def _serving_fields_at(bootstrap: Bootstrap) -> tuple[Any, ...]:
    """The engine body's serving fields where the prefill/decode pair meets, in order
    (the router's are set by name: `_routed`)."""
    return (
        bootstrap.host,
        bootstrap.port,
        bootstrap.room,
        bootstrap.prefill_dp_rank,
        *_NO_SERVING[4:],
    )


def _prefill_fields(
    request: ClientRequest, bootstrap: Bootstrap | None, routing: Routing | None
) -> dict[str, Any]:
    """What the prefill leg changes: no output-flat (decode provides it), Base64 only
    with prompt-flat, one sequence of one token, and its rank as Dynamo picks it: the
    rank decode fetches the KV cache from (`bootstrap.prefill_dp_rank`), else the
    router's `routing.dp_rank`."""
    rank = None if bootstrap is None else bootstrap.prefill_dp_rank
    if rank is None and routing is not None:
        rank = routing.dp_rank
    return {
        "return_flat_raw_output_top_logprobs": False,
        "return_flat_raw_top_logprobs_b64": (
            request.return_flat_raw_top_logprobs_b64
            and request.return_flat_raw_top_logprobs
        ),
        "sampling_params": _prefill_sampling(request.sampling_params),
        "routed_dp_rank": rank,
    }


def _routed(role: Role, routing: Routing) -> dict[str, Any]:
    """The engine body's fields the router decided (the prefill leg's rank is its
    bootstrap's: `_prefill_fields`)."""
    fields: dict[str, Any] = {
        "external_trace_header": _labels_json(routing.trace_header),
        "custom_labels": _labels_json(routing.labels),
    }
    if role is not Role.PREFILL:
        fields["routed_dp_rank"] = routing.dp_rank
    if routing.lora_path is not None:
        fields["lora_path"] = routing.lora_path
    if routing.priority is not None:
        fields["priority"] = routing.priority
    return fields


#: Engine body field -> the header SGLang sets it from (``_HEADER_OVERRIDES``).
OVERRIDE_HEADERS: Final[Mapping[str, str]] = {
    "rid": "x-override-rid",
    "bootstrap_host": "x-override-bootstrap-host",
    "bootstrap_port": "x-override-bootstrap-port",
    "bootstrap_room": "x-override-bootstrap-room",
    "routed_dp_rank": "x-override-routed-dp-rank",
    "disagg_prefill_dp_rank": "x-override-disagg-prefill-dp-rank",
    "priority": "x-override-priority",
}
#: The releases whose HTTP server reads the override headers.
OVERRIDE_RELEASES: Final = frozenset({"0.5.22", "0.5.23"})

_CLIENT_FIELDS: Final = frozenset(RequestFields.__struct_fields__)
#: Fields SGLang reads the same when absent and at this value.
_ABSENT_MEANS: Final[Mapping[str, object]] = {"stream": False}


def header_overrides(
    engine: EngineRequest, request: ClientRequest
) -> dict[str, str] | None:
    """The headers that send `request`'s own body as `engine` (None when they cannot).

    `engine` must have been built from `request` (`build_engine_request`). The
    headers are `engine.headers` and one ``x-override-*`` header for each
    field where the two differ; None when a field differs that no header sets
    (a prefill leg's stream mode and sampling, a routing label) or that a header
    cannot carry (a rid that is not ASCII), and when the target's release reads no
    override headers. The server must run with
    ``SGLANG_ENABLE_REQUEST_HEADER_OVERRIDES=1``. Raises `EnvelopeError` for
    arguments of the wrong type.
    """
    if not isinstance(engine, EngineRequest) or not isinstance(request, ClientRequest):
        raise EnvelopeError(
            "header_overrides takes an EngineRequest and its ClientRequest"
        )
    if (
        request.target.sglang not in OVERRIDE_RELEASES
        or engine.passed != request.passed_fields
    ):
        return None
    body = engine.body
    headers = engine.headers
    for name in body.__struct_fields__:
        value = getattr(body, name)
        # A serving field's start is its default, None (`_NO_SERVING`).
        start = getattr(request, name) if name in _CLIENT_FIELDS else None
        if start is None:
            start = _ABSENT_MEANS.get(name)
        if value is start or value == start:
            continue
        header = OVERRIDE_HEADERS.get(name)
        text = value if type(value) is str else str(value) if type(value) is int else None
        if header is None or text is None or not text.isascii():
            return None  # no header sets it, or none can carry it
        headers[header] = text
    return headers
