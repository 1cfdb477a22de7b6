"""The `sglang-envelope` command line: its parser, and the dispatch to each command.

The commands are `demo` (`cli/demo.py`) and `normalize`, `aggregate` and `flat`
(`cli/commands.py`); what they share, exit codes and output included, is in
`cli/common.py`. See `docs/cli.md`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from sglang_envelope import EnvelopeError, __version__
from sglang_envelope.cli.commands import add_aggregate, add_flat, add_normalize
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
        args = build_parser().parse_args(argv)
        try:
            code: int = args.run(args)
        except (EnvelopeError, Unreadable) as error:
            code = fail(error)
        return code
    except BrokenPipeError:
        # The reader went away (`| head`) before a result or a failure was written:
        # stop quietly, as a process killed by SIGPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
