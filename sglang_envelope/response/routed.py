"""The routed experts of an SGLang answer (``meta_info.routed_experts``), both ways.

Asked with ``"return_routed_experts": true``, SGLang returns the experts its
Mixture-of-Experts router chose at each position, as one Base64 string of
little-endian int32 of shape ``[rows, num_hidden_layers, num_experts_per_tok]``.
Its rows cover positions ``[routed_experts_start_len, prompt + completion - 1)``,
prompt rows first; a stream carries the string on its terminal frame only, whole.

`decode_routed_experts` reads the string into rows (``[row][layer][k]``) and
`encode_routed_experts` writes rows back to SGLang's exact string;
`join_routed_experts` joins the strings of the parts of one generation (a
continuation) into the string one uninterrupted generation would carry. Sizes
are checked before any Base64 is decoded.
"""

from __future__ import annotations

import binascii
import sys
from array import array
from collections.abc import Sequence

from sglang_envelope.errors.exceptions import (
    EnvelopeError,
    LimitExceeded,
    ResponseError,
    show_value,
)
from sglang_envelope.response.flat import strict_b64decode

__all__ = [
    "DEFAULT_MAX_ROUTED_EXPERTS",
    "ROUTED_EXPERTS",
    "decode_routed_experts",
    "encode_routed_experts",
    "join_routed_experts",
    "routed_experts_bytes",
    "row_width",
]

#: The `meta_info` key SGLang writes them under.
ROUTED_EXPERTS = "routed_experts"
#: Most expert ids (rows x layers x k) one call decodes into Python objects, or joins:
#: 16M ids, a 128k-token sequence of a 61-layer, top-2 model.
DEFAULT_MAX_ROUTED_EXPERTS = 1 << 24

_INT32 = 4  # bytes an expert id takes on the wire
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_SWAP = sys.byteorder == "big"  # the wire is little-endian (flat checks the C int's size)


def row_width(layers: object, top_k: object) -> int:
    """The bytes one position's row takes: ``layers * top_k`` int32. Raises
    `EnvelopeError` naming the argument that is not an integer of at least 1."""
    for name, value in (("layers", layers), ("top_k", top_k)):
        if type(value) is not int or value < 1:
            raise EnvelopeError(
                f"{name} must be an integer >= 1, got {show_value(value)}"
            )
    return _INT32 * layers * top_k  # type: ignore[operator]


def routed_experts_bytes(value: object, *, name: str, max_ids: int) -> bytes:
    """The little-endian bytes of a ``routed_experts`` string, its size checked before the
    Base64 is decoded: `ResponseError` naming `name` for anything SGLang does not write,
    `LimitExceeded` past `max_ids` expert ids."""
    if type(value) is not str:
        raise ResponseError(f"{name} must be a Base64 string, got {show_value(value)}")
    if len(value) % 4:
        raise ResponseError(
            f"{name} is not Base64: {len(value)} characters, not a multiple of 4"
        )
    if len(value) // 4 * 3 > _INT32 * max_ids + 2:
        raise LimitExceeded(
            "max_ids",
            max_ids,
            f"{name} holds more than {max_ids} expert ids "
            f"({len(value)} Base64 characters)",
        )
    try:
        raw = strict_b64decode(value)
    except ValueError as error:  # binascii.Error, or text that is not ASCII
        raise ResponseError(f"{name} is not valid Base64: {error}") from None
    if len(raw) % _INT32:
        raise ResponseError(
            f"{name} decodes to {len(raw)} bytes, not a whole number of int32"
        )
    return raw


def decode_routed_experts(
    value: str, *, layers: int, top_k: int, max_ids: int = DEFAULT_MAX_ROUTED_EXPERTS
) -> list[list[list[int]]]:
    """The rows of a ``routed_experts`` string: ``rows[position][layer][k]``, the
    expert ids.

    `layers` and `top_k` are the model's ``num_hidden_layers`` and
    ``num_experts_per_tok`` (`Deployment.routed_experts_shape`). Raises
    `ResponseError` for a string that is not Base64 of int32 or whose size does
    not divide into rows of ``layers x top_k``, `LimitExceeded` past `max_ids`
    expert ids (checked before decoding), `EnvelopeError` for bad arguments.
    """
    width = row_width(layers, top_k)
    raw = routed_experts_bytes(value, name=ROUTED_EXPERTS, max_ids=_max_ids(max_ids))
    if len(raw) % width:
        raise ResponseError(
            f"{ROUTED_EXPERTS} has {len(raw) // _INT32} expert ids, "
            "not a whole number of rows "
            f"of {layers} layers x {top_k} experts"
        )
    ints = array("i", raw)
    if _SWAP:  # pragma: no cover - little-endian machines
        ints.byteswap()
    ids = ints.tolist()
    return [
        [ids[at : at + top_k] for at in range(row, row + layers * top_k, top_k)]
        for row in range(0, len(ids), layers * top_k)
    ]


def encode_routed_experts(rows: Sequence[Sequence[Sequence[int]]]) -> str:
    """SGLang's ``routed_experts`` string for `rows` (``rows[position][layer][k]``):
    Base64 of little-endian int32, as SGLang writes it. Every row must have the first
    row's layers and every layer its k: `EnvelopeError` names the first entry that is
    not an int32 in that shape."""
    if not _is_sequence(rows):
        raise EnvelopeError(f"rows must be a sequence of rows, got {show_value(rows)}")
    flat: list[int] = []
    shape: tuple[int, int] | None = None
    for r, row in enumerate(rows):
        if not _is_sequence(row) or not all(_is_sequence(layer) for layer in row):
            raise EnvelopeError(
                f"rows[{r}] must be a sequence of layers, each a sequence of ids"
            )
        row_shape = (len(row), len(row[0]) if row else 0)
        shape = row_shape if shape is None else shape
        if row_shape != shape or any(len(layer) != shape[1] for layer in row):
            raise EnvelopeError(
                f"rows[{r}] must have {shape[0]} layers of {shape[1]} experts, "
                "as rows[0] has"
            )
        for layer in row:
            flat.extend(layer)
    bad = next((i for i, e in enumerate(flat) if type(e) is not int), None)
    if bad is None:
        bad = next(
            (i for i, e in enumerate(flat) if not _INT32_MIN <= e <= _INT32_MAX), None
        )
    if bad is not None and shape is not None:  # an entry exists: rows[0] gave the shape
        position, at = divmod(bad, shape[0] * shape[1])
        where = f"rows[{position}][{at // shape[1]}][{at % shape[1]}]"
        raise EnvelopeError(
            f"{where} must be an int32 expert id, got {show_value(flat[bad])}"
        )
    native = array("i", flat)
    if _SWAP:  # pragma: no cover - little-endian machines
        native.byteswap()
    return binascii.b2a_base64(native.tobytes(), newline=False).decode("ascii")


def join_routed_experts(
    parts: Sequence[str], *, max_ids: int = DEFAULT_MAX_ROUTED_EXPERTS
) -> str:
    """The ``routed_experts`` string of one generation made in parts, from each part's.

    A continuation (`continuation_request`) asks SGLang for the rows from the
    last position its first part left without a row, so each part's rows follow
    the one before's: their bytes are joined in order. Raises `ResponseError` for
    a part that is not SGLang's string, `LimitExceeded` when the parts hold more
    than `max_ids` expert ids in all (checked before decoding).
    """
    if isinstance(parts, str) or not _is_sequence(parts):
        raise EnvelopeError(
            f"parts must be a sequence of strings, got {show_value(parts)}"
        )
    limit = _max_ids(max_ids)
    chunks: list[bytes] = []
    for index, part in enumerate(parts):
        raw = routed_experts_bytes(part, name=f"parts[{index}]", max_ids=limit)
        limit -= len(raw) // _INT32
        chunks.append(raw)
    return binascii.b2a_base64(b"".join(chunks), newline=False).decode("ascii")


def _max_ids(value: object) -> int:
    if type(value) is not int or value < 0:
        raise EnvelopeError(f"max_ids must be an integer >= 0, got {show_value(value)}")
    return value


def _is_sequence(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))
