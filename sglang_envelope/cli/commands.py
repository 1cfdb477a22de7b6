"""The commands of a pipeline: `normalize`, `aggregate` and `flat`.

Each reads one input (FILE, or stdin), bounded, runs one step of the library
on it and prints the result as one line of JSON: `normalize` a client's body
as the engine request for a role, `aggregate` SGLang's answer as the final
response, `flat` a response's flat top-logprob fields as nested rows.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import sys
import uuid
from collections.abc import Iterator
from typing import BinaryIO

import msgspec

from sglang_envelope import (
    Bootstrap,
    ClientRequest,
    Deployment,
    EnvelopeError,
    LimitExceeded,
    RequestRejected,
    ResponseError,
    Role,
    Routing,
    WorkerEnvelope,
    aggregate_sse,
    build_engine_request,
    decode_client_request,
    parse_unary,
    to_worker_envelope,
)
from sglang_envelope.cli.common import (
    EXIT_OK,
    Commands,
    Parser,
    Unreadable,
    add_command,
    emit,
)
from sglang_envelope.flat import DEFAULT_MAX_NESTED_POSITIONS, decode_flat_top_logprobs
from sglang_envelope.limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_BYTES
from sglang_envelope.releases.target import (
    KNOWN_RELEASES,
    TRANSPORTS,
    UNKNOWN_FIELD_POLICIES,
    Target,
)
from sglang_envelope.request.engine import ROLE_PLANS

__all__ = [
    "FLAT_MAX_BYTES",
    "add_aggregate",
    "add_flat",
    "add_normalize",
    "cmd_aggregate",
    "cmd_flat",
    "cmd_normalize",
]

#: How many bytes a command reads at a time.
_CHUNK = 64 * 1024
#: Largest input `flat` reads (it takes one response or meta_info object).
FLAT_MAX_BYTES = DEFAULT_MAX_BYTES

#: The library's names for what `normalize` takes, and the option that sets each.
_NORMALIZE_OPTIONS = {
    "bootstrap.host": "--bootstrap-host",
    "bootstrap.port": "--bootstrap-port",
    "bootstrap.room": "--bootstrap-room",
    "bootstrap.prefill_dp_rank": "--prefill-dp-rank",
    "routing.dp_rank": "--dp-rank",
    "max_token_id": "--max-token-id",
}


def _unreadable(path: str, error: OSError) -> Unreadable:
    name = "stdin" if path == "-" else repr(path)
    return Unreadable(f"cannot read {name}: {error.strerror or error}")


@contextlib.contextmanager
def _opened(path: str) -> Iterator[BinaryIO]:
    """`path` opened for binary reading; "-" is stdin (left open)."""
    if path == "-":
        yield sys.stdin.buffer
        return
    try:
        stream = open(path, "rb")  # noqa: SIM115 -- closed below
    except OSError as error:
        raise _unreadable(path, error) from None
    with stream:
        yield stream


def _read(path: str, stream: BinaryIO, size: int) -> bytes:
    """At most `size` bytes of `stream`; `Unreadable` when it cannot be read."""
    try:
        return stream.read(size)
    except OSError as error:
        raise _unreadable(path, error) from None


def _read_up_to(path: str, stream: BinaryIO, size: int) -> bytes:
    """At most `size` bytes, a chunk at a time: no buffer of `size` is made up front."""
    parts: list[bytes] = []
    while size > 0 and (chunk := _read(path, stream, min(size, _CHUNK))):
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


def _read_bounded(path: str, limit: int) -> bytes:
    """At most `limit + 1` bytes: enough for the parser to see the input is too big."""
    with _opened(path) as stream:
        return _read_up_to(path, stream, limit + 1)


def _add_file(parser: argparse.ArgumentParser, what: str) -> None:
    """The optional FILE argument: '-' or left out is stdin."""
    parser.add_argument(
        "file",
        nargs="?",
        default="-",
        metavar="FILE",
        help=f"{what} (default or '-': stdin)",
    )


def _utf8(value: str) -> str:
    """An option that is copied into the JSON output: it must be valid UTF-8."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"not valid UTF-8: {value!r}") from None
    return value


def _as_options(error: EnvelopeError) -> EnvelopeError:
    """A caller's mistake, with the library's argument names replaced by the options."""
    text = str(error)
    for name, option in _NORMALIZE_OPTIONS.items():
        text = text.replace(name, option)
    return EnvelopeError(text)


def _int_at_least(low: int, text: str, expected: str) -> int:
    """An argparse type's integer >= `low`; `expected` says what the option takes."""
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def _vocab_size(text: str) -> int | None:
    """`--vocab-size`: a positive integer, or ``none`` to check no id."""
    if text == "none":
        return None
    return _int_at_least(1, text, "a positive integer or none")


def _non_negative_int(text: str) -> int:
    """`--max-positions`: an integer >= 0."""
    return _int_at_least(0, text, "an integer >= 0")


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


def _enveloped(request: ClientRequest, rid: str) -> WorkerEnvelope:
    """`request`'s envelope under `rid`; the only rid it can refuse is `--rid`'s."""
    try:
        return to_worker_envelope(request, rid=rid)
    except EnvelopeError as error:
        raise EnvelopeError(f"--{error}") from None


def cmd_normalize(args: argparse.Namespace) -> int:
    """Client request -> `{"accept": ..., "body": {...}}`,
    the engine request for a role."""
    role = Role(args.role)
    try:
        bootstrap = _bootstrap(role, args)
        routing = None if args.dp_rank is None else Routing(dp_rank=args.dp_rank)
        data = _read_bounded(args.file, DEFAULT_MAX_BODY_BYTES)
        target = Target(
            sglang=args.sglang,
            transport=args.transport,
            unknown_fields=args.unknown_fields,
        )
        request = decode_client_request(
            data, max_token_id=args.max_token_id, target=target
        )
        rid = args.rid if args.rid is not None else (request.rid or uuid.uuid4().hex)
        envelope = _enveloped(request, rid)
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
    normalize = add_command(
        commands,
        "normalize",
        "turn a client's /generate body into the engine request for a role",
        "Check a client's token-input /generate body against the contract and print the "
        'engine request for --role as {"accept": ..., "body": {...}}.',
    )
    _add_file(normalize, "the client's JSON body")
    normalize.add_argument(
        "--role",
        required=True,
        choices=[role.value for role in Role],
        help="the worker's part: aggregated (the whole request on one engine), decode or "
        "prefill (the two halves of a disaggregated pair; both need --bootstrap-*)",
    )
    normalize.add_argument(
        "--rid", type=_utf8, help="request id (default: the client's rid, else uuid4 hex)"
    )
    normalize.add_argument(
        "--bootstrap-host", metavar="H", type=_utf8, help="prefill bootstrap host"
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


def _head(path: str, stream: BinaryIO, limit: int) -> bytes:
    """The input's first chunk, or, while the chunks read are only whitespace, all of
    them and the next (past `limit` bytes, as they are): enough to see its first byte
    that is not whitespace."""
    head = [_read(path, stream, _CHUNK)]
    size = len(head[0])
    while head[-1] and not head[-1].strip() and size <= limit:
        head.append(_read(path, stream, _CHUNK))
        size += len(head[-1])
    return b"".join(head)


def cmd_aggregate(args: argparse.Namespace) -> int:
    """SGLang's answer (SSE transcript or unary JSON body) -> the final response."""
    limit = args.max_bytes
    if limit < 1:
        raise EnvelopeError(f"--max-bytes: expected a positive integer, got {limit}")
    with _opened(args.file) as stream:
        head = _head(args.file, stream, limit)
        if head.lstrip()[:1] == b"{":
            body = head + _read_up_to(args.file, stream, limit + 1 - len(head))
            response = parse_unary(body, max_bytes=limit)
        else:
            rest = iter(functools.partial(_read, args.file, stream, _CHUNK), b"")
            frames = itertools.chain([head], rest)
            response = aggregate_sse(
                frames, incremental=args.incremental, max_bytes=limit
            )
    emit(response)
    return EXIT_OK


def add_aggregate(commands: Commands[Parser]) -> None:
    aggregate = add_command(
        commands,
        "aggregate",
        "turn SGLang's answer (SSE or unary JSON) into the final response",
        "Read SGLang's answer to /generate, an SSE transcript or a unary JSON body "
        "(input whose first non-blank byte is '{'), and print the final response.",
        engine=True,
    )
    _add_file(aggregate, "the SSE transcript or JSON body")
    mode = aggregate.add_mutually_exclusive_group()
    mode.add_argument(
        "--incremental",
        dest="incremental",
        action="store_true",
        default=None,
        help="frames are deltas (SGLang's incremental_streaming_output); "
        "without --incremental or --cumulative the mode is read from the frames",
    )
    mode.add_argument(
        "--cumulative",
        dest="incremental",
        action="store_false",
        help="frames hold everything so far (SGLang's default mode)",
    )
    aggregate.add_argument(
        "--max-bytes",
        metavar="N",
        type=int,
        default=DEFAULT_MAX_BYTES,
        help=f"largest input accepted, in bytes (default {DEFAULT_MAX_BYTES})",
    )
    aggregate.set_defaults(run=cmd_aggregate)


def cmd_flat(args: argparse.Namespace) -> int:
    """A response (or bare meta_info) -> `{"<side>_top_logprobs": [...]}`, nested rows."""
    data = _read_bounded(args.file, FLAT_MAX_BYTES)
    if len(data) > FLAT_MAX_BYTES:
        raise LimitExceeded("max_bytes", FLAT_MAX_BYTES)
    try:
        document = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError) as error:
        raise ResponseError(f"the input is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise ResponseError(
            "the input must be a JSON object: a response or its meta_info"
        )
    meta_info = document.get("meta_info", document)
    if not isinstance(meta_info, dict):
        raise ResponseError("meta_info must be a JSON object")
    flat = decode_flat_top_logprobs(meta_info, side=args.side)
    if flat is None:
        raise ResponseError(f"meta_info has no {args.side}_top_logprobs_* flat fields")
    emit({f"{args.side}_top_logprobs": flat.to_nested(max_positions=args.max_positions)})
    return EXIT_OK


def add_flat(commands: Commands[Parser]) -> None:
    flat = add_command(
        commands,
        "flat",
        "decode a response's flat top-logprob fields into nested rows",
        "Decode the flat top-logprob fields (JSON lists or Base64) of a response, or of "
        'a bare meta_info object, into SGLang\'s nested rows: {"<side>_top_logprobs": '
        "[null | [[logprob, token_id, null], ...], ...]}.",
    )
    _add_file(flat, "a response with meta_info, or a meta_info object")
    flat.add_argument(
        "--side",
        choices=["output", "input"],
        default="output",
        help="which fields to decode: output_top_logprobs_* (the generated tokens', the "
        "default) or input_top_logprobs_* (the prompt's)",
    )
    flat.add_argument(
        "--max-positions",
        metavar="N",
        type=_non_negative_int,
        default=DEFAULT_MAX_NESTED_POSITIONS,
        help="most positions (null prefix plus rows) to print; more is refused with "
        f"limit_exceeded (default {DEFAULT_MAX_NESTED_POSITIONS})",
    )
    flat.set_defaults(run=cmd_flat)
