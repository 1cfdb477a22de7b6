"""A client's body as JSON bytes, its size bounded before any work on it.

A body may be bytes, any bytes-like object, text or a parsed mapping; its size
is read once, from its buffer (never from a `__len__` of the caller's), and
what is decoded is bytes of the library's own, or an envelope's `msgspec.Raw`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from msgspec import Raw

from sglang_envelope.request.rules import reject

__all__ = ["as_json", "json_size"]


def json_size(data: object) -> int | None:
    """The size in bytes of JSON text held as bytes, or None for another type: read from
    its buffer, never from a `__len__` of the caller's."""
    if type(data) is bytes or type(data) is Raw:
        return len(data)
    if isinstance(data, (bytes, bytearray, memoryview)):
        with memoryview(data) as view:
            return view.nbytes
    return None


def _bytes_copy(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    """A caller's bytes-like body as bytes of its own, refused past `limit` before the
    copy: measured once, from the buffer the copy is made from."""
    with memoryview(data) as view:
        if view.nbytes > limit:
            raise reject("body_too_large", size=view.nbytes, limit=limit)
        if not view.c_contiguous:  # msgspec reads only contiguous buffers
            raise reject("not_json", detail="memoryview: underlying buffer is not C-contiguous")
        return view.tobytes()


_CONTAINERS = (Mapping, list, tuple)


def _containers_in(value: Any) -> list[Any]:
    """The containers among a list's items, or a mapping's values, and strings' lengths."""
    items = value.values() if isinstance(value, Mapping) else value
    if not any(issubclass(kind, _CONTAINERS) for kind in set(map(type, items))):
        return []
    return [item for item in items if isinstance(item, _CONTAINERS)]


def _mapping_at_most(body: Mapping[str, Any], limit: int) -> bool:
    """False when `body` as JSON would be longer than `limit` bytes, counted before encoding.

    A lower bound of the encoded size (two bytes a value, plus each key) is
    computed once for each container, however often JSON would repeat it (a
    list held twice counts twice, but is walked once); a cycle counts as
    endless. The work is that of walking the body's own objects, not their
    JSON, and a list holding no containers is counted without a Python loop.
    """
    sizes: dict[int, int] = {}  # by id(): the lower bound of each container done
    pending: set[int] = set()  # containers being walked: met again, a cycle
    stack: list[tuple[Any, list[Any] | None]] = [(body, None)]
    while stack:
        value, children = stack.pop()
        key = id(value)
        if children is None:  # first visit: walk the containers inside first
            if key in sizes:
                continue
            if key in pending:
                return False
            pending.add(key)
            children = _containers_in(value)
            stack.append((value, children))
            stack.extend((child, None) for child in children)
            continue
        pending.discard(key)
        size = 2 * len(value) + 2
        if isinstance(value, Mapping):
            size += sum(len(k) + 1 if isinstance(k, str) else 1 for k in value)
        sizes[key] = min(limit + 1, size + sum(sizes.get(id(c), 0) for c in children))
    return sizes[id(body)] <= limit


def as_json(body: object, limit: int) -> bytes | Raw:
    """The body as JSON bytes (bytes or an envelope's Raw, never the caller's object),
    refused as too large before any work on it."""
    if type(body) is bytes or type(body) is Raw:  # the usual bodies
        if len(body) > limit:
            raise reject("body_too_large", size=len(body), limit=limit)
        return body
    if isinstance(body, (bytes, bytearray, memoryview)):
        return _bytes_copy(body, limit)
    if isinstance(body, str):
        if str.__len__(body) > limit:  # each character is at least one byte
            raise reject("body_too_large", size=str.__len__(body), limit=limit)
        data = _encode_text(body)
    elif isinstance(body, Mapping):
        if not _mapping_at_most(body, limit):
            raise reject("body_too_large", size=f"over {limit}", limit=limit)
        data = _encode_mapping(body)
    else:
        raise reject("not_object", got=type(body).__name__)
    if len(data) > limit:
        raise reject("body_too_large", size=len(data), limit=limit)
    return data


def _encode_text(body: str) -> bytes:
    try:
        return str.encode(body, "utf-8")
    except UnicodeError as error:
        raise reject("not_json", detail=str(error)) from None


def _encode_mapping(body: Mapping[str, Any]) -> bytes:
    """A mapping as JSON, refusing what JSON cannot carry (non-str keys, NaN, lone surrogates)."""
    try:
        return json.dumps(body, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as error:  # UnicodeError is a ValueError
        raise reject("not_json", detail=str(error)) from None
