"""The `sglang-envelope` command line: demo, normalize, aggregate, flat.

JSON results go to stdout, one line each; diagnostics go to stderr. A failure
prints `{"error": {...}}` on stdout as well, so a script always gets JSON.
Exit codes: 0 ok, 1 the engine answered with an error, 2 bad input or usage,
141 stdout was closed before the output was written.
This module holds the parser and the dispatch; each command is its own module.
See `docs/cli.md`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from sglang_envelope import EnvelopeError, __version__
from sglang_envelope.cli.aggregate import add_aggregate
from sglang_envelope.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_ENGINE_ERROR,
    EXIT_MEANINGS,
    EXIT_OK,
    Parser,
    Unreadable,
    exit_codes,
    fail,
)
from sglang_envelope.cli.demo import add_demo
from sglang_envelope.cli.flat import add_flat
from sglang_envelope.cli.normalize import add_normalize

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_ENGINE_ERROR",
    "EXIT_OK",
    "build_parser",
    "main",
]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: a subcommand each for demo, normalize, aggregate and flat."""
    parser = Parser(
        prog="sglang-envelope",
        description=(
            "The request/response contract of SGLang's native /generate endpoint."
        ),
        epilog=exit_codes(list(EXIT_MEANINGS)),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (add_demo, add_normalize, add_aggregate, add_flat):
        add(commands)
    return parser


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
        return fail(error)
    return code
