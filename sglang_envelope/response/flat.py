"""The flat top-logprob fields of SGLang's `/generate` response, both ways.

SGLang 0.5.23 can write a side's top logprobs as one `[rows, k]` array of
logprobs and one of token ids, as JSON lists or Base64 of little-endian
float32 and int32, leading positions without top logprobs counted, not
stored (docs/flat-logprobs.md). `decode_flat_top_logprobs` reads them without
a Python object per element; `encode_flat_top_logprobs` writes them exactly
as SGLang's tokenizer manager does.
"""

from __future__ import annotations

import binascii
import math
import sys
from array import array
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any, ClassVar, Literal, NoReturn

import msgspec

from sglang_envelope.errors.exceptions import (
    EnvelopeError,
    LimitExceeded,
    ResponseError,
    show_value,
)

__all__ = [
    "DEFAULT_MAX_NESTED_POSITIONS",
    "MAX_POSITIONS",
    "FlatTopLogprobs",
    "decode_flat_top_logprobs",
    "encode_flat_top_logprobs",
    "strict_b64decode",
]

Side = Literal["input", "output"]
NestedRows = list[list[tuple[float, int, None]] | None]

#: Most positions (null prefix plus rows) one response may cover when decoded;
#: 2**24 is above every context length SGLang serves.
MAX_POSITIONS = 1 << 24

#: Most positions (null prefix plus rows) `to_nested()` builds by default: a
#: million-token prompt. The null prefix, and rows when k is 0, are counted, not
#: stored, so a few bytes can ask for any number of them; this bounds the list.
DEFAULT_MAX_NESTED_POSITIONS = 1 << 20

# Field suffixes after "{side}_top_logprobs_", in the order SGLang writes them.
_JSON_FORM = ("val_flat", "idx_flat")
_B64_FORM = ("val_flat_b64", "idx_flat_b64", "val_flat_b64_dtype", "idx_flat_b64_dtype")
_LAYOUT = ("shape", "null_prefix")
_DTYPES = {"val_flat_b64_dtype": "float32", "idx_flat_b64_dtype": "int32"}
# Element types a JSON list may hold. orjson writes NaN and ±Infinity as null.
_JSON_TYPES: dict[str, frozenset[type]] = {
    "val_flat": frozenset({float, int, type(None)}),
    "idx_flat": frozenset({int}),
}
_KEYS = {
    side: {
        suffix: f"{side}_top_logprobs_{suffix}"
        for suffix in _JSON_FORM + _B64_FORM + _LAYOUT
    }
    for side in ("input", "output")
}
_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_SEQUENCES = frozenset({list, tuple})
_NUMBERS = frozenset({float, int})
_INTS = frozenset({int})
_SWAP = sys.byteorder == "big"  # the wire is little-endian
if array("f").itemsize != 4 or array("i").itemsize != 4:  # pragma: no cover
    raise ImportError("sglang_envelope needs 4-byte C float and int")


def _keys(side: object) -> dict[str, str]:
    keys = _KEYS.get(side) if isinstance(side, str) else None
    if keys is None:
        raise EnvelopeError(f"side must be 'input' or 'output', got {show_value(side)}")
    return keys


class FlatTopLogprobs(msgspec.Struct, frozen=True):
    """One side's top logprobs as SGLang's flat arrays (`decode_flat_top_logprobs`).

    `shape` is `(rows, k)`; `values` (logprobs) and `token_ids` hold `rows * k`
    entries, row-major, for positions `null_prefix` to `null_prefix + rows - 1`.
    From Base64 they are zero-copy memoryviews of float32 and int32; from JSON,
    tuples of the numbers as sent (a JSON null logprob, orjson's rendering of
    NaN and ±Infinity, reads as NaN). Instances are immutable and unhashable.
    One built by hand is checked when made: `EnvelopeError` names the field.
    """

    null_prefix: int
    shape: tuple[int, int]
    values: Sequence[float]
    token_ids: Sequence[int]

    # Memoryviews cannot be hashed.
    __hash__: ClassVar[None] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if type(self.null_prefix) is not int or self.null_prefix < 0:
            raise EnvelopeError(
                f"null_prefix must be an integer >= 0, got {show_value(self.null_prefix)}"
            )
        shape = self.shape
        if not (
            type(shape) is tuple
            and len(shape) == 2
            and all(type(n) is int and n >= 0 for n in shape)
        ):
            raise EnvelopeError(
                "shape must be a tuple (rows, k) of integers >= 0, "
                f"got {show_value(shape)}"
            )
        for name in ("values", "token_ids"):
            items = getattr(self, name)
            is_sequence = isinstance(items, Sequence) and not isinstance(
                items, (str, bytes)
            )
            size = len(items) if is_sequence else None
            if size != shape[0] * shape[1]:
                raise EnvelopeError(
                    f"{name} must be a sequence of rows * k = "
                    f"{show_value(shape[0] * shape[1])} items, "
                    f"got {show_value(items) if size is None else f'{size} items'}"
                )

    def __repr__(self) -> str:
        return f"FlatTopLogprobs(null_prefix={self.null_prefix}, shape={self.shape})"

    def to_nested(
        self, *, max_positions: int = DEFAULT_MAX_NESTED_POSITIONS
    ) -> NestedRows:
        """SGLang's nested rows: None per uncovered position, else k entries
        `(logprob, token_id, None)`.

        A row with no entries (k == 0) is None too, as SGLang's nested format
        has it. The text slot is None, as with `return_text_in_logprobs` off.
        Raises `LimitExceeded` (``bound="max_nested_positions"``) before
        building anything when the list would have more than `max_positions`
        entries (null prefix plus rows); `EnvelopeError` when `max_positions`
        is not an integer >= 0.
        """
        if type(max_positions) is not int or max_positions < 0:
            raise EnvelopeError(
                f"max_positions must be an integer >= 0, got {show_value(max_positions)}"
            )
        rows, k = self.shape
        if self.null_prefix + rows > max_positions:
            raise LimitExceeded(
                "max_nested_positions",
                max_positions,
                "the nested rows would hold "
                f"{show_value(self.null_prefix + rows)} positions "
                f"(null prefix {show_value(self.null_prefix)} "
                f"plus {show_value(rows)} rows); the limit is {max_positions}",
            )
        nested: NestedRows = [None] * self.null_prefix
        if k == 0:
            nested.extend(repeat(None, rows))
            return nested
        entries = list(zip(self.values, self.token_ids, repeat(None)))
        nested.extend(entries[start : start + k] for start in range(0, rows * k, k))
        return nested


def decode_flat_top_logprobs(
    meta_info: Mapping[str, object], *, side: Side
) -> FlatTopLogprobs | None:
    """Read the flat top-logprob fields of one side of a response's `meta_info`.

    Returns None when `meta_info` has none of that side's flat fields. Sizes are
    checked against the shape before any Base64 is decoded. Raises
    `ResponseError` naming the key for any missing, mistyped or inconsistent
    field, and `LimitExceeded` when the fields cover more than `MAX_POSITIONS`.
    """
    keys = _keys(side)
    if not isinstance(meta_info, Mapping):
        raise ResponseError(
            f"meta_info must be a JSON object, got {type(meta_info).__name__}"
        )
    b64 = [keys[s] for s in _B64_FORM if keys[s] in meta_info]
    plain = [keys[s] for s in _JSON_FORM if keys[s] in meta_info]
    if b64 and plain:
        raise ResponseError(
            f"{plain[0]} and {b64[0]} are both present; expected one form"
        )
    if not (b64 or plain or any(keys[s] in meta_info for s in _LAYOUT)):
        return None

    def field(suffix: str) -> tuple[str, object]:
        key = keys[suffix]
        if key not in meta_info:
            raise ResponseError(
                f"{key} is missing; the other flat top-logprob fields need it"
            )
        return key, meta_info[key]

    rows, k = _shape(*field("shape"))
    null_prefix = _count(*field("null_prefix"))
    if null_prefix + rows > MAX_POSITIONS:
        raise LimitExceeded(
            "max_positions",
            MAX_POSITIONS,
            f"{keys['null_prefix']} ({show_value(null_prefix)}) "
            f"plus rows ({show_value(rows)}) exceed {MAX_POSITIONS} positions",
        )
    count = rows * k
    if not b64:
        values = _from_json(*field("val_flat"), count, _JSON_TYPES["val_flat"])
        token_ids = _from_json(*field("idx_flat"), count, _JSON_TYPES["idx_flat"])
        return FlatTopLogprobs(null_prefix, (rows, k), values, token_ids)
    for suffix, dtype in _DTYPES.items():
        key, marker = field(suffix)
        if type(marker) is not str or marker != dtype:
            raise ResponseError(f"{key} must be {dtype!r}, got {show_value(marker)}")
    val_raw = _from_b64(*field("val_flat_b64"), count, "f")
    idx_raw = _from_b64(*field("idx_flat_b64"), count, "i")
    return FlatTopLogprobs(
        null_prefix,
        (rows, k),
        memoryview(val_raw).cast("f"),
        memoryview(idx_raw).cast("i"),
    )


def _count(key: str, value: object) -> int:
    if type(value) is not int or value < 0:
        raise ResponseError(
            f"{key} must be a non-negative integer, got {show_value(value)}"
        )
    return value


def _shape(key: str, value: object) -> tuple[int, int]:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        rows, k = value
        if type(rows) is int and type(k) is int and rows >= 0 and k >= 0:
            return rows, k
    raise ResponseError(
        f"{key} must be [rows, k], two non-negative integers; got {show_value(value)}"
    )


def _from_json(
    key: str, items: object, count: int, types: frozenset[type]
) -> tuple[Any, ...]:
    if not isinstance(items, (list, tuple)):
        raise ResponseError(f"{key} must be a list, got {type(items).__name__}")
    if len(items) != count:
        raise ResponseError(
            f"{key} must hold rows * k = {show_value(count)} numbers, got {len(items)}"
        )
    if not types.issuperset(map(type, items)):
        expected = " or ".join(sorted(t.__name__ for t in types))
        _reject(
            list(items), lambda i: f"{key}[{i}]", expected, lambda v: type(v) in types
        )
    if type(None) in types and None in items:  # orjson's null for NaN and ±Infinity
        return tuple(math.nan if item is None else item for item in items)
    return tuple(items)


if sys.version_info >= (3, 11):

    def strict_b64decode(text: str) -> bytes:
        return binascii.a2b_base64(text, strict_mode=True)

else:  # pragma: no cover - Python 3.10 has no strict mode
    import re

    _CANONICAL = re.compile(r"[A-Za-z0-9+/]*={0,2}")

    def strict_b64decode(text: str) -> bytes:
        if _CANONICAL.fullmatch(text) is None:
            raise binascii.Error("a character outside the alphabet or misplaced padding")
        return binascii.a2b_base64(text)


def _from_b64(key: str, text: object, count: int, typecode: str) -> bytes:
    """The native-order bytes of `count` 4-byte items, checked before decoding."""
    if type(text) is not str:
        raise ResponseError(f"{key} must be a Base64 string, got {type(text).__name__}")
    size = 4 * count
    if len(text) != (size + 2) // 3 * 4:
        raise ResponseError(
            f"{key} must be {show_value((size + 2) // 3 * 4)} Base64 characters "
            f"for rows * k = {show_value(count)} 4-byte items, got {len(text)}"
        )
    try:
        raw = strict_b64decode(text)
    except ValueError as error:  # binascii.Error, or text that is not ASCII
        raise ResponseError(f"{key} is not valid Base64: {error}") from None
    if len(raw) != size:
        raise ResponseError(f"{key} decodes to {len(raw)} bytes, expected {size}")
    if _SWAP:
        native = array(typecode, raw)
        native.byteswap()
        raw = native.tobytes()
    return raw


def encode_flat_top_logprobs(
    nested: Sequence[Sequence[Sequence[object]] | None],
    *,
    side: Side,
    top_logprobs_num: int,
    b64: bool = False,
) -> dict[str, object]:
    """The flat fields SGLang 0.5.23 writes for nested top-logprob rows, exactly.

    `nested` is what `FlatTopLogprobs.to_nested()` returns (or SGLang's nested
    `{side}_top_logprobs`): per position None or a list of `[logprob, token_id,
    text]`; the text is ignored. Leading None or empty rows form the null
    prefix; k is the length of the first other row, or `top_logprobs_num` when
    there is none. With `b64`, logprobs are rounded to float32 as numpy rounds
    them (±inf beyond its range). Raises `ResponseError` for rows SGLang rejects
    (with SGLang's message), malformed entries, and, with `b64`, token ids
    outside int32 or logprobs beyond float64; `EnvelopeError` for a bad `side`
    or `top_logprobs_num`.
    """
    keys = _keys(side)
    if type(top_logprobs_num) is not int or top_logprobs_num < 0:
        raise EnvelopeError(
            "top_logprobs_num must be a non-negative integer, "
            f"got {show_value(top_logprobs_num)}"
        )
    if not isinstance(nested, (list, tuple)):
        raise ResponseError(f"nested must be a list of rows, got {type(nested).__name__}")
    null_prefix, k = _layout(nested, top_logprobs_num)

    def where(flat_index: int) -> str:
        return f"nested[{null_prefix + flat_index // k}][{flat_index % k}]"

    entries = [entry for row in nested[null_prefix:] if row for entry in row]
    if not _SEQUENCES.issuperset(map(type, entries)) or not {3}.issuperset(
        map(len, entries)
    ):
        _reject(entries, where, "[logprob, token_id, text]", _is_entry)
    values: list[Any] = list(map(itemgetter(0), entries))
    token_ids: list[Any] = list(map(itemgetter(1), entries))
    if not _NUMBERS.issuperset(map(type, values)):
        _reject(values, where, "a float logprob", lambda v: type(v) in _NUMBERS)
    if not _INTS.issuperset(map(type, token_ids)):
        _reject(token_ids, where, "an int token id", lambda i: type(i) is int)
    data: tuple[object, ...]
    if b64:
        data = (*_base64_arrays(values, token_ids, where), *_DTYPES.values())
    else:
        data = (values, token_ids)
    suffixes = (_B64_FORM if b64 else _JSON_FORM) + _LAYOUT  # in SGLang's order
    layout = ([len(nested) - null_prefix, k], null_prefix)
    return {
        keys[key]: value for key, value in zip(suffixes, (*data, *layout), strict=True)
    }


def _base64_arrays(
    values: list[Any], token_ids: list[Any], where: Callable[[int], str]
) -> tuple[str, ...]:
    """The logprobs as little-endian float32 and the ids as int32, each in Base64."""
    try:
        val_arr = array("f", values)  # beyond float32 gives ±inf, as numpy's cast does
    except OverflowError:  # an int beyond float64, which numpy rejects too
        _reject(values, where, "a logprob within float64", _fits_double)
    try:
        idx_arr = array("i", token_ids)
    except OverflowError:  # numpy raises OverflowError too
        _reject(
            token_ids, where, "an int32 token id", lambda i: _INT32_MIN <= i <= _INT32_MAX
        )
    if _SWAP:
        val_arr.byteswap()
        idx_arr.byteswap()
    return tuple(
        binascii.b2a_base64(a.tobytes(), newline=False).decode()
        for a in (val_arr, idx_arr)
    )


def _layout(
    nested: Sequence[Sequence[object] | None], top_logprobs_num: int
) -> tuple[int, int]:
    """(null_prefix, k), rejecting what SGLang's `flat_top_logprobs_layout` rejects."""
    for index, row in enumerate(nested):
        if row is not None and type(row) not in _SEQUENCES:
            raise ResponseError(
                f"nested[{index}] must be a list of entries or None, "
                f"got {show_value(row)}"
            )
    null_prefix = 0
    while null_prefix < len(nested) and not nested[null_prefix]:
        null_prefix += 1
    first = nested[null_prefix] if null_prefix < len(nested) else None
    k = top_logprobs_num if first is None else len(first)
    for index in range(null_prefix, len(nested)):
        row = nested[index]
        if row is None or len(row) != k:
            raise ResponseError(
                "Flat top logprobs require rectangular rows with nulls only in the "
                f"leading prefix; row {index} has {None if row is None else len(row)} "
                "entries "
                f"(expected {k})."
            )
    return null_prefix, k


def _is_entry(entry: object) -> bool:
    return type(entry) in _SEQUENCES and len(entry) == 3  # type: ignore[arg-type]


def _fits_double(value: float) -> bool:
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _reject(
    items: Sequence[Any],
    where: Callable[[int], str],
    expected: str,
    ok: Callable[[Any], bool],
) -> NoReturn:
    """Raise `ResponseError` for the first of `items` that is not `ok`."""
    index, bad = next((i, v) for i, v in enumerate(items) if not ok(v))
    raise ResponseError(f"{where(index)} must be {expected}, got {show_value(bad)}")
