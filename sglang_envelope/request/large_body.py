"""A large body's `input_ids`, read a chunk at a time into one tuple sized once.

msgspec builds a tuple of token ids through a list, so a body of millions of
ids would hold them twice; `decode_large` reads them in chunks instead.
`int_chunks` is the reader, used for any JSON array of integers.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import msgspec
from msgspec import Raw

from sglang_envelope.request.decode_errors import DECODE_ERRORS
from sglang_envelope.request.fields import (
    TokenId,
    token_input_struct,
)
from sglang_envelope.request.limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_INPUT_IDS

__all__ = ["CHUNK_BYTES", "LARGE_BODY_BYTES", "decode_large", "int_chunks"]

#: Bodies longer than this decode `input_ids` a chunk at a time (`decode_large`).
LARGE_BODY_BYTES = 1 << 20
#: About how many bytes of `input_ids` each chunk holds.
CHUNK_BYTES = 1 << 18
#: A body of at most LARGE_BODY_BYTES is within every default bound: the default size,
#: and the default count of token ids (each takes two bytes or more).
assert (
    LARGE_BODY_BYTES <= DEFAULT_MAX_BODY_BYTES
    and LARGE_BODY_BYTES // 2 < DEFAULT_MAX_INPUT_IDS
)

#: A token-input client's fields with `input_ids` left as the client's JSON bytes.
_LeanRequest = token_input_struct("_LeanRequest", Raw)
_lean_decoder = msgspec.json.Decoder(_LeanRequest)
_id_chunk = msgspec.json.Decoder(list[TokenId])
_IDS_KEY = b'"input_ids"'


class _Counted:
    """Items whose count is known: `tuple()` allocates its result once, at that size."""

    __slots__ = ("count", "items")

    def __init__(self, items: Iterator[int], count: int) -> None:
        self.items = items
        self.count = count

    def __iter__(self) -> Iterator[int]:
        return self.items

    def __length_hint__(self) -> int:
        return self.count


def int_chunks(
    body: bytes,
    start: int,
    end: int,
    decoder: msgspec.json.Decoder[list[int]] = _id_chunk,
) -> Iterator[list[int]]:
    """The integers of the JSON array `body[start:end]` (well-formed: it was decoded
    before), a list of them a chunk cut at a comma, each read by `decoder` (token ids
    by default); `ValueError` when a chunk is not what `decoder` reads (a cut inside a
    string or an inner array makes one that is not JSON)."""
    position = start + 1  # past "["
    last = end - 1  # at "]"
    while True:
        cut = body.find(b",", min(position + CHUNK_BYTES, last), last)
        final = cut < 0
        try:
            yield decoder.decode(b"[" + body[position : last if final else cut] + b"]")
        except DECODE_ERRORS:
            raise ValueError("not an array of token ids") from None
        if final:
            return
        position = cut + 1


def decode_large(body: bytes) -> dict[str, Any] | None:
    """A large body's typed field values, without holding all its token ids twice:
    the ids a chunk at a time into a tuple sized once. The rules are the caller's.

    None when this path is not sure of the result (an error, or a key it cannot
    see as written): the typed decode then gives the verdict. `input_ids` must be
    written once, and the body hold no `\\u` escape (which could spell the key
    again), so the lean decode reads the one value the typed decode would.
    """
    if body.count(_IDS_KEY) != 1 or b"\\u" in body:
        return None
    try:
        lean = _lean_decoder.decode(body)
    except DECODE_ERRORS:
        return None
    raw: Raw = lean.input_ids  # type: ignore[attr-defined]  # a field of _LeanRequest
    size = len(raw)
    start = body.find(b"[", body.index(_IDS_KEY))
    if start < 0 or memoryview(body)[start : start + size] != memoryview(raw):
        return None
    count = body.count(b",", start, start + size) + 1
    chunks = int_chunks(body, start, start + size)
    try:
        ids = tuple(_Counted(itertools.chain.from_iterable(chunks), count))
    except ValueError:
        return None
    fields = msgspec.structs.asdict(lean)
    fields["input_ids"] = ids
    return fields
