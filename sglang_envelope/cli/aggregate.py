"""`sglang-envelope aggregate`: SGLang's answer (SSE or unary JSON) -> final response."""

from __future__ import annotations

import argparse

from sglang_envelope import EnvelopeError, aggregate_sse, parse_unary
from sglang_envelope.cli.common import (
    CHUNK,
    EXIT_OK,
    Commands,
    Parser,
    add_command,
    add_file,
    chunks,
    emit,
    opened,
    read,
    read_up_to,
)
from sglang_envelope.limits import DEFAULT_MAX_BYTES

__all__ = ["add_aggregate", "cmd_aggregate"]


def cmd_aggregate(args: argparse.Namespace) -> int:
    """SGLang's answer (SSE transcript or unary JSON body) -> the final response."""
    limit = args.max_bytes
    if limit < 1:
        raise EnvelopeError(f"--max-bytes: expected a positive integer, got {limit}")
    with opened(args.file) as stream:
        first = read(args.file, stream, CHUNK)
        if first.lstrip()[:1] == b"{":
            body = first + read_up_to(args.file, stream, limit + 1 - len(first))
            response = parse_unary(body, max_bytes=limit)
        else:
            frames = chunks(args.file, stream, first)
            response = aggregate_sse(
                frames, incremental=args.incremental, max_bytes=limit
            )
    emit(response)
    return EXIT_OK


def add_aggregate(commands: Commands[Parser]) -> None:
    """The `aggregate` subcommand and its options."""
    aggregate = add_command(
        commands,
        "aggregate",
        "turn SGLang's answer (SSE or unary JSON) into the final response",
        "Read SGLang's answer to /generate, an SSE transcript or a unary JSON body "
        "(input whose first non-blank byte is '{'), and print the final response.",
        engine=True,
    )
    add_file(aggregate, "the SSE transcript or JSON body")
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
