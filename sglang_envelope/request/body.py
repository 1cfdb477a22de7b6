"""A client's body as JSON bytes, its size bounded before any work on it.

A body may be bytes, any bytes-like object, text or a parsed mapping; its size
is read once, from its buffer (never from a `__len__` of the caller's), and
what is decoded is bytes of the library's own, or an envelope's `msgspec.Raw`.

A mapping gives the bytes the client would have sent written compactly
(`msgspec.json.encode`), so both meet `max_body_bytes` alike. Before any
encoding its containers are walked once: a lower bound of the encoded size
refuses a body too large (a cycle counts as endless), and what JSON cannot
carry (a key that is not a string, a value that is not a JSON type, a float
that is not finite) is refused naming its field, rather than converted as an
encoder would (`{1: ...}` as `"1"`, a NaN as null, bytes as base64).

msgspec builds a tuple of token ids through a list, so a body of millions of
ids would hold them twice; `decode_large` reads them a chunk at a time into one
tuple sized once (`int_chunks`, the reader of any JSON array of integers).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from itertools import chain
from typing import Any, Final

import msgspec
from msgspec import Raw

from sglang_envelope.errors.exceptions import RequestRejected
from sglang_envelope.request.decode_errors import DECODE_ERRORS
from sglang_envelope.request.fields import TokenId, token_input_struct
from sglang_envelope.request.limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_INPUT_IDS
from sglang_envelope.request.rules import reject

__all__ = [
    "CHUNK_BYTES",
    "DEEPEST",
    "LARGE_BODY_BYTES",
    "as_json",
    "decode_large",
    "int_chunks",
    "mapping_json",
]


def as_json(body: object, limit: int) -> bytes | Raw:
    """The body as JSON bytes (bytes or an envelope's Raw, never the caller's object),
    refused as too large before any work on it."""
    if type(body) is bytes or type(body) is Raw:  # the usual bodies
        data = body
    elif isinstance(body, (bytes, bytearray, memoryview)):
        # Bytes of its own, measured once, from the buffer the copy is made from.
        with memoryview(body) as view:
            if view.nbytes > limit:
                raise reject("body_too_large", size=view.nbytes, limit=limit)
            if not view.c_contiguous:  # msgspec reads only contiguous buffers
                detail = "memoryview: underlying buffer is not C-contiguous"
                raise reject("not_json", detail=detail)
            data = view.tobytes()
    elif isinstance(body, str):
        if str.__len__(body) > limit:  # each character is at least one byte
            raise reject("body_too_large", size=str.__len__(body), limit=limit)
        try:
            data = str.encode(body, "utf-8")
        except UnicodeError as error:
            raise reject("not_json", detail=str(error)) from None
    elif isinstance(body, Mapping):
        data = mapping_json(body, limit)
    else:
        raise reject("not_object", got=type(body).__name__)
    if len(data) > limit:
        raise reject("body_too_large", size=len(data), limit=limit)
    return data


_CONTAINERS = (Mapping, list, tuple)
#: The Python types a JSON value is made of (bool is an int).
_JSON_TYPES = (str, int, float, type(None), *_CONTAINERS)
#: The exact types JSON decodes to: each is one of `_JSON_TYPES`, told by a set lookup
#: where `issubclass` of an ABC such as `Mapping` costs a fraction of a microsecond.
_PLAIN_SCALARS = frozenset((str, int, bool, type(None)))
_PLAIN_CONTAINERS = frozenset((dict, list, tuple))
_PLAIN_TYPES = _PLAIN_SCALARS | _PLAIN_CONTAINERS | {float}


def _is_mapping(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)


def _is_container(value: Any) -> bool:
    return type(value) in _PLAIN_CONTAINERS or isinstance(value, _CONTAINERS)


def _look(value: Any) -> tuple[list[Any], int] | None:
    """A container's own containers (a mapping's values, a list's items), and the fewest
    bytes compact JSON writes it in, leaving those out; None when JSON cannot carry one
    of its own keys or items (those inside its containers are theirs).

    Each item takes a byte or more and a comma between two; a key its characters,
    two quotes and a colon.
    """
    if _is_mapping(value):
        return _look_at_members(value)
    return _look_at_items(value)


def _look_at_members(mapping: Mapping[Any, Any]) -> tuple[list[Any], int] | None:
    """`_look` of a mapping: a body's few members, a Python step each."""
    count = len(mapping)
    size = 1 + max(count, 1) + 3 * count  # braces, commas, keys' quotes and colons
    children = []
    for key, item in mapping.items():
        if not isinstance(key, str):
            return None
        size += len(key)
        kind = type(item)
        if kind in _PLAIN_SCALARS:
            size += 1
        elif kind in _PLAIN_CONTAINERS or (
            kind is not float and isinstance(item, _CONTAINERS)
        ):
            children.append(item)
        elif issubclass(kind, _JSON_TYPES) and (
            not isinstance(item, float) or math.isfinite(item)
        ):
            size += 1  # a float, or a subclass of a type JSON carries
        else:
            return None
    return children, size


def _look_at_items(items: Any) -> tuple[list[Any], int] | None:
    """`_look` of a list or tuple: told by the set of its items' types, so that a
    prompt's ids are looked at without a Python step each."""
    count = len(items)
    size = 1 + max(count, 1)  # the brackets, and a comma between two items
    kinds = set(map(type, items))
    if kinds <= _PLAIN_SCALARS:  # the usual list of ids, or of strings
        return [], size + count
    if kinds <= _PLAIN_TYPES:  # the types JSON decodes to: told apart by type alone
        if float in kinds and not all(
            map(math.isfinite, [item for item in items if type(item) is float])
        ):
            return None
        children = [item for item in items if type(item) in _PLAIN_CONTAINERS]
    else:
        if not all(issubclass(kind, _JSON_TYPES) for kind in kinds):
            return None
        floats = [item for item in items if isinstance(item, float)]
        if not all(map(math.isfinite, floats)):
            return None
        children = [item for item in items if _is_container(item)]
    return children, size + count - len(children)


#: Nesting deeper than this is refused before any walk: msgspec cannot encode it
#: (it recurses on Python's stack, 1,000 frames deep), and the bounds refuse far less.
DEEPEST: Final = 900


def _within(body: Mapping[str, Any], limit: int) -> bool | str | None:
    """False when `body` as compact JSON would be longer than `limit` bytes (or holds
    itself), None when JSON cannot carry something in it, "deep" when it nests deeper
    than `DEEPEST`, counted before encoding.

    The lower bound of each container is computed once, however often JSON
    would repeat it (a list held twice counts twice, but is walked once). The
    work is that of walking the body's own containers, down to `DEEPEST`, not
    their JSON: a list holding no containers is counted without a Python loop.
    """
    sizes: dict[int, int] = {}  # by id(): the lower bound of each container done
    pending: set[int] = set()  # containers being walked: met again, a cycle
    # (container, its containers, its own bytes, depth); its containers None: not looked
    stack: list[tuple[Any, list[Any] | None, int, int]] = [(body, None, 0, 1)]
    while stack:
        value, children, size, depth = stack.pop()
        key = id(value)
        # First visit: check it, then walk the containers inside first.
        if children is None:
            if key in sizes:
                continue
            if key in pending:
                return False
            if depth > DEEPEST:
                return "deep"
            looked = _look(value)
            if looked is None:
                return None
            children, size = looked
            if children:
                pending.add(key)
                stack.append((value, children, size, depth))
                for child in children:
                    stack.append((child, None, 0, depth + 1))
                continue
        else:
            pending.discard(key)
            for child in children:
                size += sizes[id(child)]
        sizes[key] = min(limit + 1, size)
    return sizes[id(body)] <= limit


def _entries(value: Any) -> Any:
    """A container's items with the step that reaches each: `.key` or `[index]`."""
    if _is_mapping(value):
        return ((f".{key}", item) for key, item in value.items())
    return ((f"[{index}]", item) for index, item in enumerate(value))


def _fault_in(value: Any) -> tuple[str, str] | None:
    """What JSON cannot carry among `value`'s own keys and items:
    (the step to it, what)."""
    if _is_mapping(value):
        for key in value:
            if not isinstance(key, str):
                return "", f"keys must be strings, got a `{type(key).__name__}` key"
    for step, item in _entries(value):
        if not issubclass(type(item), _JSON_TYPES):  # as `_look` tests it
            return step, f"JSON cannot carry a `{type(item).__name__}`"
        if isinstance(item, float) and not math.isfinite(item):
            return step, f"JSON cannot carry {item}"
    return None


def _first_fault(body: Mapping[str, Any]) -> RequestRejected:
    """The refusal of the first thing in `body` JSON cannot carry, naming its field.

    Called once `_within` has seen one: a walk of the containers, each once,
    each linked to the one that holds it, so that only the faulty field's path
    is spelled out.
    """
    # By id(): the container holding it, and the step.
    parents: dict[int, tuple[Any, str]] = {}
    seen: set[int] = set()
    stack: list[Any] = [body]
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        fault = _fault_in(value)
        if fault is not None:
            step, detail = fault
            parts = [step]
            while id(value) in parents:
                value, step = parents[id(value)]
                parts.append(step)
            path = "".join(reversed(parts)).removeprefix(".")
            return reject("invalid_value", path=path or "body", detail=detail)
        children = []
        for step, item in _entries(value):
            if _is_container(item) and id(item) not in seen and id(item) not in parents:
                # The first that holds it, met before it.
                parents[id(item)] = (value, step)
                children.append(item)
        stack.extend(reversed(children))
    return reject("not_json", detail="the mapping holds a value JSON cannot carry")


def mapping_json(body: Mapping[str, Any], limit: int) -> bytes:
    """`body` as compact JSON, refused before encoding when too large or not JSON."""
    within = _within(body, limit)
    if within is None:
        raise _first_fault(body)
    if within == "deep":
        raise reject(
            "not_json", detail=f"the mapping is nested deeper than {DEEPEST} levels"
        )
    if not within:
        raise reject("body_too_large", size=f"over {limit}", limit=limit)
    try:
        data = msgspec.json.encode(body)
    # A UnicodeError is a ValueError.
    except (TypeError, ValueError, RecursionError) as error:
        raise reject("not_json", detail=str(error)) from None
    if len(data) > limit:
        raise reject("body_too_large", size=len(data), limit=limit)
    return data


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
        ids = tuple(_Counted(chain.from_iterable(chunks), count))
    except ValueError:
        return None
    fields = msgspec.structs.asdict(lean)
    fields["input_ids"] = ids
    return fields
