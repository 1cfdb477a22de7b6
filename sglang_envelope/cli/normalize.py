"""`sglang-envelope normalize`: a client's body -> the engine request for a role."""

from __future__ import annotations

import argparse
import uuid

from sglang_envelope import (
    Bootstrap,
    Deployment,
    EnvelopeError,
    RequestRejected,
    Role,
    Routing,
    build_engine_request,
    decode_client_request,
    to_worker_envelope,
)
from sglang_envelope.cli.common import (
    EXIT_OK,
    Commands,
    Parser,
    add_command,
    add_file,
    emit,
    read_bounded,
    utf8,
)
from sglang_envelope.limits import DEFAULT_MAX_BODY_BYTES
from sglang_envelope.releases.target import (
    KNOWN_RELEASES,
    TRANSPORTS,
    UNKNOWN_FIELD_POLICIES,
    Target,
)
from sglang_envelope.request.engine import ROLE_PLANS

__all__ = ["add_normalize", "cmd_normalize"]

#: The library's names for what `normalize` takes, and the option that sets each.
_NORMALIZE_OPTIONS = {
    "bootstrap.host": "--bootstrap-host",
    "bootstrap.port": "--bootstrap-port",
    "bootstrap.room": "--bootstrap-room",
    "bootstrap.prefill_dp_rank": "--prefill-dp-rank",
    "routing.dp_rank": "--dp-rank",
    "max_token_id": "--max-token-id",
}


def _as_options(error: EnvelopeError) -> EnvelopeError:
    """A caller's mistake, with the library's argument names replaced by the options."""
    text = str(error)
    for name, option in _NORMALIZE_OPTIONS.items():
        text = text.replace(name, option)
    return EnvelopeError(text)


def _vocab_size(text: str) -> int | None:
    """`--vocab-size`: a positive integer, or ``none`` to check no id."""
    if text == "none":
        return None
    try:
        size = int(text)
    except ValueError:
        size = 0
    if size < 1:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer or none, got {text!r}"
        )
    return size


def _bootstrap(role: Role, args: argparse.Namespace) -> Bootstrap | None:
    parts = (args.bootstrap_host, args.bootstrap_port, args.bootstrap_room)
    if not ROLE_PLANS[role].needs_bootstrap:
        if parts != (None, None, None) or args.prefill_dp_rank is not None:
            raise EnvelopeError(
                f"role {role.value!r} takes no --bootstrap-* or --prefill-dp-rank options"
            )
        return None
    if None in parts:
        raise EnvelopeError(
            f"role {role.value!r} needs --bootstrap-host, --bootstrap-port "
            "and --bootstrap-room"
        )
    return Bootstrap(
        host=args.bootstrap_host,
        port=args.bootstrap_port,
        room=args.bootstrap_room,
        prefill_dp_rank=args.prefill_dp_rank,
    )


def cmd_normalize(args: argparse.Namespace) -> int:
    """Client request -> `{"accept": ..., "body": {...}}`,
    the engine request for a role."""
    role = Role(args.role)
    try:
        bootstrap = _bootstrap(role, args)
        routing = None if args.dp_rank is None else Routing(dp_rank=args.dp_rank)
        data = read_bounded(args.file, DEFAULT_MAX_BODY_BYTES)
        target = Target(
            sglang=args.sglang,
            transport=args.transport,
            unknown_fields=args.unknown_fields,
        )
        request = decode_client_request(
            data, max_token_id=args.max_token_id, target=target
        )
        rid = args.rid if args.rid is not None else (request.rid or uuid.uuid4().hex)
        envelope = to_worker_envelope(request, rid=rid)
        engine = build_engine_request(
            envelope,
            input_ids=request.input_ids,
            role=role,
            deployment=Deployment(vocab_size=args.vocab_size),
            bootstrap=bootstrap,
            routing=routing,
        )
    except RequestRejected:
        raise
    except EnvelopeError as error:
        raise _as_options(error) from None
    emit({"accept": engine.accept, "body": engine.to_dict()})
    return EXIT_OK


def add_normalize(commands: Commands[Parser]) -> None:
    """The `normalize` subcommand and its options."""
    normalize = add_command(
        commands,
        "normalize",
        "turn a client's /generate body into the engine request for a role",
        "Check a client's token-input /generate body against the contract and print the "
        'engine request for --role as {"accept": ..., "body": {...}}.',
    )
    add_file(normalize, "the client's JSON body")
    normalize.add_argument(
        "--role",
        required=True,
        choices=[role.value for role in Role],
        help="the worker's part: aggregated (the whole request on one engine), decode or "
        "prefill (the two halves of a disaggregated pair; both need --bootstrap-*)",
    )
    normalize.add_argument(
        "--rid", type=utf8, help="request id (default: the client's rid, else uuid4 hex)"
    )
    normalize.add_argument(
        "--bootstrap-host", metavar="H", type=utf8, help="prefill bootstrap host"
    )
    normalize.add_argument(
        "--bootstrap-port", metavar="P", type=int, help="bootstrap port"
    )
    normalize.add_argument(
        "--bootstrap-room", metavar="N", type=int, help="bootstrap room"
    )
    normalize.add_argument(
        "--prefill-dp-rank",
        metavar="N",
        type=int,
        help=(
            "the prefill worker's data-parallel rank (decode fetches the KV cache "
            "from it; the prefill request is routed to it)"
        ),
    )
    normalize.add_argument(
        "--dp-rank",
        metavar="N",
        type=int,
        help="the data-parallel rank to route to (routed_dp_rank); prefill routes to "
        "--prefill-dp-rank when it is given",
    )
    _add_server_args(normalize)
    normalize.set_defaults(run=cmd_normalize)


def _add_server_args(normalize: Parser) -> None:
    """normalize's arguments describing the SGLang server: its deployment and target."""
    normalize.add_argument(
        "--vocab-size",
        metavar="N|none",
        type=_vocab_size,
        required=True,
        help="the model's vocabulary: input ids, token_ids_logprob and logit_bias keys "
        "outside [0, N) are refused (one such id stops every SGLang process); "
        "none: no id is checked",
    )
    normalize.add_argument(
        "--max-token-id",
        metavar="N",
        type=int,
        help="the model's largest token id: larger input ids are refused",
    )
    normalize.add_argument(
        "--sglang",
        choices=KNOWN_RELEASES,
        default=KNOWN_RELEASES[-1],
        help="the SGLang release the request is for (default: %(default)s)",
    )
    normalize.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default="http",
        help="how the request reaches SGLang: http, its /generate route, or engine, "
        "in-process (default: %(default)s)",
    )
    normalize.add_argument(
        "--unknown-fields",
        choices=UNKNOWN_FIELD_POLICIES,
        default="reject",
        help="keys the release tables do not know: reject them, or pass them through "
        "unchanged for a newer SGLang (default: %(default)s)",
    )
