"""`sglang-envelope flat`: a response's flat top-logprob fields -> nested rows."""

from __future__ import annotations

import argparse

import msgspec

from sglang_envelope import LimitExceeded, ResponseError
from sglang_envelope.cli.common import (
    EXIT_OK,
    Commands,
    Parser,
    add_command,
    add_file,
    emit,
    read_bounded,
)
from sglang_envelope.flat import DEFAULT_MAX_NESTED_POSITIONS, decode_flat_top_logprobs
from sglang_envelope.limits import DEFAULT_MAX_BYTES

__all__ = ["FLAT_MAX_BYTES", "add_flat", "cmd_flat"]

#: Largest input `flat` reads (it takes one response or meta_info object).
FLAT_MAX_BYTES = DEFAULT_MAX_BYTES
_decoder = msgspec.json.Decoder()


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
    data = read_bounded(args.file, FLAT_MAX_BYTES)
    if len(data) > FLAT_MAX_BYTES:
        raise LimitExceeded("max_bytes", FLAT_MAX_BYTES)
    try:
        document = _decoder.decode(data)
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
    """The `flat` subcommand and its options."""
    flat = add_command(
        commands,
        "flat",
        "decode a response's flat top-logprob fields into nested rows",
        "Decode the flat top-logprob fields (JSON lists or Base64) of a response, or of "
        'a bare meta_info object, into SGLang\'s nested rows: {"<side>_top_logprobs": '
        "[null | [[logprob, token_id, null], ...], ...]}.",
    )
    add_file(flat, "a response with meta_info, or a meta_info object")
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
