"""A client's body as JSON bytes, its size bounded before any work on it.

A body may be bytes, any bytes-like object, text or a parsed mapping; its size
is read once, from its buffer (never from a `__len__` of the caller's), and
what is decoded is bytes of the library's own, or an envelope's `msgspec.Raw`.
"""

from __future__ import annotations

from collections.abc import Mapping

from msgspec import Raw

from sglang_envelope.request.mapping_body import mapping_json
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
            raise reject(
                "not_json", detail="memoryview: underlying buffer is not C-contiguous"
            )
        return view.tobytes()


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
        data = mapping_json(body, limit)
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
