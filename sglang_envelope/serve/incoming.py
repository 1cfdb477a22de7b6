"""A client's HTTP request, read as SGLang's server reads it: its type, its body bounded.

SGLang's ``/generate`` is a FastAPI route, which parses a body as JSON when it
comes as ``application/json`` or ``application/*+json``; a body of any other
type (``text/plain``, a form) or of none (FastAPI 0.132 and later, which SGLang
installs) reaches pydantic as bytes, which answers 400 in its shape
(`json_content_type`). The body is then read within the library's bound
(`DEFAULT_MAX_BODY_BYTES`, 16 MiB): a ``Content-Length`` over it is refused
before a byte is read, and a body without one (chunked) is refused as soon as
it passes it, read no further (`read_client_body`). Both refusals are
`RequestRejected`: ``not_object`` in pydantic's shape, ``body_too_large`` with 413
(`error_response`).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Mapping

from sglang_envelope.errors.exceptions import EnvelopeError
from sglang_envelope.request.limits import DEFAULT_MAX_BODY_BYTES
from sglang_envelope.request.rules import reject

__all__ = ["json_content_type", "read_client_body"]

#: The most digits of a ``Content-Length`` read: a longer number is over any bound, and
#: its first 20 digits say so (`int` refuses more than 4,300).
_MAX_LENGTH_DIGITS = 20


def json_content_type(value: str | None) -> bool:
    """Whether FastAPI parses a body sent with ``Content-Type: value`` as JSON:
    ``application/json`` or ``application/*+json``, parameters aside (as Python's
    `email.message.Message` reads the header for FastAPI); no type (None or empty)
    is not, as FastAPI 0.132 and later read it."""
    if not value:
        return False
    kind = value.split(";", 1)[0].strip().lower()
    if kind.count("/") != 1:
        return False
    main, sub = kind.split("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


def _declared(headers: Mapping[str, str]) -> tuple[str | None, int | None]:
    """The request's ``Content-Type`` and ``Content-Length`` (each its first value; a
    length that is not a number: None, left to the HTTP server, which refuses it)."""
    content_type: str | None = None
    length: int | None = None
    for name, value in headers.items():
        lower = name.lower()
        if lower == "content-type" and content_type is None:
            content_type = value
        elif lower == "content-length" and length is None:
            digits = value.strip()
            if digits.isdigit() and digits.isascii():
                length = int(digits[:_MAX_LENGTH_DIGITS])
    return content_type, length


async def read_client_body(
    headers: Mapping[str, str],
    chunks: AsyncIterable[bytes],
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> bytes:
    """The body of a client's ``POST /generate``: `chunks` (its bytes as the server
    reads them), read whole, given `headers` (the request's, any mapping).

    Raises `RequestRejected` before reading a byte: ``not_object`` for a
    ``Content-Type`` FastAPI does not parse as JSON (`json_content_type`),
    ``body_too_large`` for a ``Content-Length`` over `max_body_bytes`; and
    ``body_too_large`` once the bytes read pass it, reading no further. Raises
    `EnvelopeError` for `max_body_bytes` of the wrong type, and for a chunk that is
    not bytes.
    """
    if type(max_body_bytes) is not int or max_body_bytes < 0:
        raise EnvelopeError(
            f"max_body_bytes must be an int >= 0, got {type(max_body_bytes).__name__}"
        )
    content_type, length = _declared(headers)
    if not json_content_type(content_type):
        sent = "with no Content-Type"
        if content_type:
            sent = f"as Content-Type: {content_type}"
        raise reject("not_object", got=f"a body sent {sent}")
    if length is not None and length > max_body_bytes:
        raise reject("body_too_large", size=length, limit=max_body_bytes)
    body = bytearray()
    async for chunk in chunks:
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise EnvelopeError(f"chunks must be bytes, got {type(chunk).__name__}")
        body += chunk
        if len(body) > max_body_bytes:
            over = f"over {max_body_bytes}"
            raise reject("body_too_large", size=over, limit=max_body_bytes)
    return bytes(body)
