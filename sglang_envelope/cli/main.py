"""The `sglang-envelope` command line: demo, normalize, aggregate, flat.

JSON results go to stdout, one line each; diagnostics go to stderr. A failure
prints `{"error": {...}}` on stdout as well, so a script always gets JSON.
Exit codes: 0 ok, 1 the engine answered with an error, 2 bad input or usage,
141 stdout was closed before the output was written.
See `docs/cli.md`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO, NoReturn

import msgspec

from sglang_envelope import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_NESTED_POSITIONS,
    Bootstrap,
    Deployment,
    EngineError,
    EnvelopeError,
    LimitExceeded,
    RequestRejected,
    ResponseError,
    Role,
    Routing,
    __version__,
    aggregate_sse,
    build_engine_request,
    decode_client_request,
    decode_flat_top_logprobs,
    encode_envelope,
    error_response,
    parse_unary,
    relay_sse,
    to_worker_envelope,
)
from sglang_envelope.cli.demo import (
    DEMO_BOOTSTRAP,
    DEMO_DEPLOYMENT,
    DEMO_RID,
    DEMO_SSE_TRANSCRIPT,
    SEED_REQUEST,
    demo_unary_body,
)
from sglang_envelope.releases.target import (
    KNOWN_RELEASES,
    TRANSPORTS,
    UNKNOWN_FIELD_POLICIES,
    Target,
)
from sglang_envelope.request.engine import ROLE_PLANS

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_ENGINE_ERROR",
    "EXIT_OK",
    "build_parser",
    "main",
]

EXIT_OK = 0
EXIT_ENGINE_ERROR = 1
EXIT_BAD_INPUT = 2
#: stdout was closed before the output was written (128 + SIGPIPE, as a shell reports it).
EXIT_BROKEN_PIPE = 141

#: Largest input `flat` reads (it takes one response or meta_info object).
FLAT_MAX_BYTES = DEFAULT_MAX_BYTES
_CHUNK = 64 * 1024
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


class Unreadable(Exception):
    """The input file could not be opened or read."""


# --- output -------------------------------------------------------------------


def _emit(value: Any) -> None:
    sys.stdout.buffer.write(_encoder.encode(value) + b"\n")
    sys.stdout.flush()


def error_json(error: Exception) -> dict[str, Any]:
    """The `{"error": {...}}` object printed for a failure; `type` names its kind."""
    facts: dict[str, Any]
    if isinstance(error, RequestRejected):
        facts = {"type": "request_rejected", "code": error.code, "field": error.field}
        facts["message"] = error.message
    elif isinstance(error, EngineError):
        facts = {"type": "engine_error", "code": error.code, "message": error.message}
    elif isinstance(error, LimitExceeded):
        facts = {"type": "limit_exceeded", "bound": error.bound, "limit": error.limit}
        facts["message"] = str(error)
    elif isinstance(error, ResponseError):
        facts = {"type": "response_error", "message": str(error)}
    elif isinstance(error, Unreadable):
        facts = {"type": "unreadable_input", "message": str(error)}
    else:
        facts = {"type": "invalid_argument", "message": str(error)}
    return {"error": facts}


def _fail(error: Exception) -> int:
    print(f"sglang-envelope: error: {error}", file=sys.stderr)
    _emit(error_json(error))
    return EXIT_ENGINE_ERROR if isinstance(error, EngineError) else EXIT_BAD_INPUT


# --- input --------------------------------------------------------------------


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


def _chunks(path: str, stream: BinaryIO, first: bytes) -> Iterator[bytes]:
    """`first`, then the rest of `stream` in chunks."""
    yield first
    while chunk := _read(path, stream, _CHUNK):
        yield chunk


# --- commands -----------------------------------------------------------------


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
        raise argparse.ArgumentTypeError(f"expected a positive integer or none, got {text!r}")
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
            f"role {role.value!r} needs --bootstrap-host, --bootstrap-port and --bootstrap-room"
        )
    return Bootstrap(
        host=args.bootstrap_host,
        port=args.bootstrap_port,
        room=args.bootstrap_room,
        prefill_dp_rank=args.prefill_dp_rank,
    )


def cmd_normalize(args: argparse.Namespace) -> int:
    """Client request -> `{"accept": ..., "body": {...}}`, the engine request for a role."""
    role = Role(args.role)
    try:
        bootstrap = _bootstrap(role, args)
        routing = None if args.dp_rank is None else Routing(dp_rank=args.dp_rank)
        data = _read_bounded(args.file, DEFAULT_MAX_BODY_BYTES)
        target = Target(
            sglang=args.sglang, transport=args.transport, unknown_fields=args.unknown_fields
        )
        request = decode_client_request(data, max_token_id=args.max_token_id, target=target)
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
    _emit({"accept": engine.accept, "body": engine.to_dict()})
    return EXIT_OK


def cmd_aggregate(args: argparse.Namespace) -> int:
    """SGLang's answer (SSE transcript or unary JSON body) -> the final response."""
    limit = args.max_bytes
    if limit < 1:
        raise EnvelopeError(f"--max-bytes: expected a positive integer, got {limit}")
    with _opened(args.file) as stream:
        first = _read(args.file, stream, _CHUNK)
        if first.lstrip()[:1] == b"{":
            body = first + _read_up_to(args.file, stream, limit + 1 - len(first))
            response = parse_unary(body, max_bytes=limit)
        else:
            chunks = _chunks(args.file, stream, first)
            response = aggregate_sse(chunks, incremental=args.incremental, max_bytes=limit)
    _emit(response)
    return EXIT_OK


def _non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def cmd_flat(args: argparse.Namespace) -> int:
    """A response (or bare meta_info) -> `{"<side>_top_logprobs": [...]}`, nested rows."""
    data = _read_bounded(args.file, FLAT_MAX_BYTES)
    if len(data) > FLAT_MAX_BYTES:
        raise LimitExceeded("max_bytes", FLAT_MAX_BYTES)
    try:
        document = _decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as error:
        raise ResponseError(f"the input is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise ResponseError("the input must be a JSON object: a response or its meta_info")
    meta_info = document.get("meta_info", document)
    if not isinstance(meta_info, dict):
        raise ResponseError("meta_info must be a JSON object")
    flat = decode_flat_top_logprobs(meta_info, side=args.side)
    if flat is None:
        raise ResponseError(f"meta_info has no {args.side}_top_logprobs_* flat fields")
    _emit({f"{args.side}_top_logprobs": flat.to_nested(max_positions=args.max_positions)})
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """The whole job on built-in data, as readable text."""
    _demo_request()
    _demo_rejection()
    _demo_unary()
    _demo_stream()
    return EXIT_OK


# --- demo sections --------------------------------------------------------------


def _say(text: str = "") -> None:
    print(text)


def _heading(text: str) -> None:
    _say()
    _say(f"== {text}")


def _json(value: Any) -> str:
    return _encoder.encode(value).decode()


def _demo_request() -> None:
    _say("sglang-envelope demo: one request through the frontend, the worker and back")
    _heading("1. The client's request")
    _say(f"  {SEED_REQUEST.decode()}")
    request = decode_client_request(SEED_REQUEST)
    envelope = to_worker_envelope(request, rid=DEMO_RID)
    _heading(f"2. The worker envelope (rid {DEMO_RID!r}): stream stays {_json(envelope.stream)}")
    _say(f"  {encode_envelope(envelope).decode()}")
    _heading("3. The engine request for each role")
    for role in Role:
        bootstrap = DEMO_BOOTSTRAP if ROLE_PLANS[role].needs_bootstrap else None
        engine = build_engine_request(
            envelope,
            input_ids=request.input_ids,
            role=role,
            deployment=DEMO_DEPLOYMENT,
            bootstrap=bootstrap,
        )
        _say(f"  {role.value}: stream {_json(engine.stream)}, Accept: {engine.accept}")
        _say(f"    {engine.to_json().decode()}")
    _say("  (prefill streams, drops output-flat, which decode provides, and makes one token)")


def _demo_rejection() -> None:
    _heading('4. The same request with "stream": true')
    streaming = SEED_REQUEST.replace(b'"stream": false', b'"stream": true')
    try:
        decode_client_request(streaming)
    except RequestRejected as error:
        _say(f"  rejected: code {error.code}, field {error.field}")
        _say(f"  {error.message}")
        status, content_type, body = error_response(error, stream=True)
        _say(f"  the client's answer (error_response, stream=True): {status} {content_type}")
        for event in body.decode().split("\n\n")[:-1]:
            _say(f"    {event}")
    else:  # pragma: no cover -- the rule table says otherwise
        raise AssertionError("the streaming request was accepted")


def _demo_unary() -> None:
    _heading("5. A unary response with Base64 output-flat fields")
    meta_info = parse_unary(demo_unary_body())["meta_info"]
    for key, value in meta_info.items():
        if key.startswith("output_top_logprobs_"):
            _say(f"  {key}: {_json(value)}")
    flat = decode_flat_top_logprobs(meta_info, side="output")
    assert flat is not None  # the demo body has them
    _say()
    _say(f"  {'position':>8}  {'token id':>8}  {'logprob':>8}")
    for position, row in enumerate(flat.to_nested()):
        for logprob, token_id, _text in row or ():
            _say(f"  {position:>8}  {token_id:>8}  {logprob:>8.4f}")


def _demo_stream() -> None:
    _heading("6. An SSE transcript (incremental frames), aggregated")
    for line in DEMO_SSE_TRANSCRIPT.decode().splitlines():
        if line:
            _say(f"  {line}")
    _say("  final response:")
    _say(f"  {_json(aggregate_sse([DEMO_SSE_TRANSCRIPT]))}")
    _heading("7. The same stream relayed to a streaming client (cumulative, SGLang's default)")
    events = [event + b"\n\n" for event in DEMO_SSE_TRANSCRIPT.split(b"\n\n") if event]
    for line in b"".join(relay_sse(events)).decode().splitlines():
        if line:
            _say(f"  {line}")


# --- parser -------------------------------------------------------------------

#: What each exit code means, as every --help says it.
_EXIT_MEANINGS = {
    EXIT_OK: "ok",
    EXIT_ENGINE_ERROR: "the engine answered with an error",
    EXIT_BAD_INPUT: "bad input or usage",
    EXIT_BROKEN_PIPE: "stdout was closed before the output was written",
}
#: The exit codes each command ends with (2 includes a usage error, for every command).
_COMMAND_EXITS = {
    "demo": (EXIT_OK, EXIT_BAD_INPUT, EXIT_BROKEN_PIPE),
    "normalize": (EXIT_OK, EXIT_BAD_INPUT, EXIT_BROKEN_PIPE),
    "aggregate": (EXIT_OK, EXIT_ENGINE_ERROR, EXIT_BAD_INPUT, EXIT_BROKEN_PIPE),
    "flat": (EXIT_OK, EXIT_BAD_INPUT, EXIT_BROKEN_PIPE),
}


def _exit_codes(codes: Sequence[int]) -> str:
    return "exit codes: " + ", ".join(f"{code} {_EXIT_MEANINGS[code]}" for code in codes)


_EPILOG = _exit_codes(list(_EXIT_MEANINGS))


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors also printed as `{"error": {"type": "usage", ...}}`."""

    def error(self, message: str) -> NoReturn:
        # argv bytes that are not UTF-8 arrive as lone surrogates, which JSON cannot carry.
        text = message.encode("utf-8", "backslashreplace").decode("utf-8")
        _emit({"error": {"type": "usage", "message": text}})
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {text}\n")


_Commands = argparse._SubParsersAction  # the type of add_subparsers()


def _command(commands: _Commands[_Parser], name: str, summary: str, description: str) -> _Parser:
    epilog = _exit_codes(_COMMAND_EXITS[name])
    return commands.add_parser(name, help=summary, description=description, epilog=epilog)


def _utf8(value: str) -> str:
    """An option that is copied into the JSON output: it must be valid UTF-8."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"not valid UTF-8: {value!r}") from None
    return value


def _add_file(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "file", nargs="?", default="-", metavar="FILE", help=f"{what} (default or '-': stdin)"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: one subcommand each for demo, normalize, aggregate and flat."""
    parser = _Parser(
        prog="sglang-envelope",
        description="The request/response contract of SGLang's native /generate endpoint.",
        epilog=_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for add in (_add_demo, _add_normalize, _add_aggregate, _add_flat):
        add(commands)
    return parser


def _add_demo(commands: _Commands[_Parser]) -> None:
    demo = _command(
        commands,
        "demo",
        "show the whole job on built-in data",
        "Show, on built-in data: a request becoming a worker envelope and the engine "
        "request for each role; the same request with stream true, rejected; a unary "
        "response's Base64 flat top logprobs decoded; an SSE transcript aggregated, "
        "and relayed to a streaming client.",
    )
    demo.set_defaults(run=cmd_demo)


def _add_normalize(commands: _Commands[_Parser]) -> None:
    normalize = _command(
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
    normalize.add_argument("--bootstrap-port", metavar="P", type=int, help="bootstrap port")
    normalize.add_argument("--bootstrap-room", metavar="N", type=int, help="bootstrap room")
    normalize.add_argument(
        "--prefill-dp-rank",
        metavar="N",
        type=int,
        help="the prefill worker's data-parallel rank (decode fetches the KV cache from it; "
        "the prefill request is routed to it)",
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


def _add_server_args(normalize: _Parser) -> None:
    """normalize's arguments that describe the SGLang server: its deployment and target."""
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


def _add_aggregate(commands: _Commands[_Parser]) -> None:
    aggregate = _command(
        commands,
        "aggregate",
        "turn SGLang's answer (SSE or unary JSON) into the final response",
        "Read SGLang's answer to /generate, an SSE transcript or a unary JSON body "
        "(input whose first non-blank byte is '{'), and print the final response.",
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


def _add_flat(commands: _Commands[_Parser]) -> None:
    flat = _command(
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on `argv` (default: `sys.argv[1:]`); returns the exit code."""
    try:
        return _run(build_parser().parse_args(argv))
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as a process killed by SIGPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _run(args: argparse.Namespace) -> int:
    try:
        code: int = args.run(args)
    except (EnvelopeError, Unreadable) as error:
        return _fail(error)
    return code
