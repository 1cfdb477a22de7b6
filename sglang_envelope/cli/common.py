"""What every command shares: exit codes, JSON output, failures, the parser's pieces.

JSON results go to stdout, one line each; diagnostics go to stderr. A failure
prints `{"error": {...}}` on stdout as well, so a script always gets JSON.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import msgspec

from sglang_envelope.errors.exceptions import (
    EngineError,
    LimitExceeded,
    RequestRejected,
    ResponseError,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_ENGINE_ERROR",
    "EXIT_OK",
    "Commands",
    "Parser",
    "Unreadable",
    "add_command",
    "emit",
    "error_json",
    "exit_codes",
    "fail",
]

EXIT_OK = 0
EXIT_ENGINE_ERROR = 1
EXIT_BAD_INPUT = 2
#: stdout was closed before the output was written (128 + SIGPIPE, as a shell reports it).
EXIT_BROKEN_PIPE = 141

encoder = msgspec.json.Encoder()


class Unreadable(Exception):
    """The input file could not be opened or read."""


# --- output -------------------------------------------------------------------


def emit(value: Any) -> None:
    """`value` as one line of compact JSON on stdout."""
    sys.stdout.buffer.write(encoder.encode(value) + b"\n")
    sys.stdout.flush()


#: Each kind of failure: the `type` of its `{"error": ...}`, and the facts it carries
#: besides `message`. A failure is the first kind it is an instance of.
ERROR_KINDS: tuple[tuple[type[Exception], str, tuple[str, ...]], ...] = (
    (RequestRejected, "request_rejected", ("code", "field")),
    (EngineError, "engine_error", ("code",)),
    (LimitExceeded, "limit_exceeded", ("bound", "limit")),
    (ResponseError, "response_error", ()),
    (Unreadable, "unreadable_input", ()),
    (Exception, "invalid_argument", ()),
)


def error_json(error: Exception) -> dict[str, Any]:
    """The `{"error": {...}}` object printed for a failure; `type` names its kind."""
    name, facts = next((n, f) for kind, n, f in ERROR_KINDS if isinstance(error, kind))
    shown = {fact: getattr(error, fact) for fact in facts}
    return {"error": {"type": name, **shown, "message": str(error)}}


def fail(error: Exception) -> int:
    """Report `error` on stderr and as JSON on stdout; the exit code for it."""
    print(f"sglang-envelope: error: {error}", file=sys.stderr)
    emit(error_json(error))
    return EXIT_ENGINE_ERROR if isinstance(error, EngineError) else EXIT_BAD_INPUT


# --- parser pieces ------------------------------------------------------------

#: What each exit code means, as every --help says it.
EXIT_MEANINGS = {
    EXIT_OK: "ok",
    EXIT_ENGINE_ERROR: "the engine answered with an error",
    EXIT_BAD_INPUT: "bad input or usage",
    EXIT_BROKEN_PIPE: "stdout was closed before the output was written",
}


def exit_codes(codes: Sequence[int]) -> str:
    """The --help footer that lists `codes` and their meanings."""
    return "exit codes: " + ", ".join(f"{code} {EXIT_MEANINGS[code]}" for code in codes)


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors also printed as `{"error": {"type": "usage", ...}}`."""

    def error(self, message: str) -> NoReturn:
        # Non-UTF-8 argv bytes arrive as lone surrogates, which JSON cannot carry.
        text = message.encode("utf-8", "backslashreplace").decode("utf-8")
        emit({"error": {"type": "usage", "message": text}})
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {text}\n")


Commands = argparse._SubParsersAction  # the type of add_subparsers()


def add_command(
    commands: Commands[Parser],
    name: str,
    summary: str,
    description: str,
    *,
    engine: bool = False,
) -> Parser:
    """A subcommand whose --help ends with its exit codes (1 only for an `engine`
    reader's; 2 includes a usage error, for every command)."""
    codes = (EXIT_OK, EXIT_ENGINE_ERROR) if engine else (EXIT_OK,)
    epilog = exit_codes((*codes, EXIT_BAD_INPUT, EXIT_BROKEN_PIPE))
    return commands.add_parser(name, help=summary, description=description, epilog=epilog)
