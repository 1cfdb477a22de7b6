"""The checks of `Service`'s arguments, as a table read by plain lookups."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Final

from sglang_envelope.cancel.plan import AbortPolicy, check_argument
from sglang_envelope.errors.exceptions import EnvelopeError, show_value
from sglang_envelope.releases.target import Target
from sglang_envelope.request.deployment import Deployment
from sglang_envelope.request.envelope import WorkerEnvelope, check_text
from sglang_envelope.request.routing import Routing
from sglang_envelope.serve.pair import PrefillServer

__all__ = [
    "ARGUMENT_TYPES",
    "check_answer_arguments",
    "check_disconnected",
    "check_request_arguments",
    "check_service_arguments",
]

#: Argument -> the types it may have (None: may be None).
ARGUMENT_TYPES: Final[Mapping[str, tuple[type | None, ...]]] = {
    "deployment": (Deployment,),
    "prefill": (PrefillServer, None),
    "target": (Target,),
    "routing": (Routing, None),
    "abort_policy": (AbortPolicy,),
    "client_incremental": (bool,),
    "header_overrides": (bool,),
}


def _check_transport(name: str, transport: object) -> None:
    for method in ("generate", "abort"):
        if not callable(getattr(transport, method, None)):
            raise EnvelopeError(f"{name} must have an async {method}() method")


def _check_prefill(prefill: PrefillServer) -> None:
    _check_transport("prefill.transport", prefill.transport)
    try:
        prefill.bootstrap()  # its address, checked as each request's will be
    except EnvelopeError as error:
        raise EnvelopeError(f"prefill: {error}") from None


def _check_hook(name: str, hook: object) -> None:
    """A function the service calls and never awaits: `EnvelopeError` naming `name` for
    anything else, an async function included (it would never run)."""
    if not callable(hook) or inspect.iscoroutinefunction(hook):
        raise EnvelopeError(
            f"{name} must be a function, called and not awaited, got {show_value(hook)}"
        )


def check_service_arguments(arguments: Mapping[str, Any]) -> None:
    """Raise `EnvelopeError` naming the first of `Service`'s arguments that is wrong."""
    _check_transport("transport", arguments["transport"])
    for name, kinds in ARGUMENT_TYPES.items():
        value = arguments[name]
        if value is None and None in kinds:
            continue
        if not any(kind is not None and type(value) is kind for kind in kinds):
            names = " or ".join(
                "None" if kind is None else kind.__name__ for kind in kinds
            )
            raise EnvelopeError(f"{name} must be a {names}, got {type(value).__name__}")
    if arguments["prefill"] is not None:
        _check_prefill(arguments["prefill"])
    _check_hook("rid", arguments["rid"])
    if arguments["on_abort"] is not None:
        _check_hook("on_abort", arguments["on_abort"])
    poll = arguments["disconnect_poll_s"]
    if type(poll) not in (int, float) or not 0 < poll <= 60:
        raise EnvelopeError(
            f"disconnect_poll_s: expected seconds in (0, 60], got {show_value(poll)}"
        )
    idle = arguments["idle_timeout_s"]
    if idle is not None and (
        type(idle) not in (int, float) or not 0 < idle < float("inf")
    ):
        raise EnvelopeError(
            "idle_timeout_s: expected None (no bound, by choice) or finite seconds > 0, "
            f"got {show_value(idle)}"
        )
    limit = arguments["max_bytes"]
    if type(limit) is not int or limit < 1:
        raise EnvelopeError(
            f"max_bytes: expected a positive int, got {show_value(limit)}"
        )


def check_answer_arguments(envelope: object, client_rid: object, body: object) -> None:
    """Raise `EnvelopeError` naming the first of `Service.answer`'s arguments that is
    wrong, before anything is sent: the caller's mistake, not the client's."""
    check_argument("envelope", envelope, WorkerEnvelope, "a WorkerEnvelope")
    check_text(client_rid, "client_rid")
    if body is not None and type(body) is not bytes:
        raise EnvelopeError(f"body must be bytes or None, got {type(body).__name__}")


def check_disconnected(disconnected: object) -> None:
    """Raise `EnvelopeError` unless `disconnected` is None or a callable (the framework's
    test for a client gone)."""
    if disconnected is not None and not callable(disconnected):
        raise EnvelopeError(
            "disconnected must be a callable or None, got " + type(disconnected).__name__
        )


def check_request_arguments(
    headers: object, chunks: object, receive: object, disconnected: object
) -> None:
    """Raise `EnvelopeError` naming the first of `Service.generate_request`'s arguments
    that is wrong, before its body is read."""
    if receive is not None and disconnected is not None:
        raise EnvelopeError("generate_request takes disconnected or receive, not both")
    check_argument("headers", headers, Mapping, "a mapping")
    if not callable(getattr(chunks, "__aiter__", None)):
        raise EnvelopeError(
            f"chunks must be an async iterable of bytes, got {type(chunks).__name__}"
        )
    if receive is not None and not callable(receive):
        raise EnvelopeError(
            f"receive must be a callable or None, got {type(receive).__name__}"
        )
    check_disconnected(disconnected)
