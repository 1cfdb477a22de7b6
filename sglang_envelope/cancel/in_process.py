"""An abort carried out in-process: SGLang's tokenizer manager, not
``POST /abort_request``, for a worker that runs SGLang in its own process
(``sgl.Engine``, as Dynamo's SGLang worker does).

SGLang's tokenizer manager drops every abort of a request after the first
(``abort_sent``) and an abort of a rid it does not hold: a host's own abort of the
same request (Dynamo's cancellation monitor) and the plan's repeats reach the
scheduler once, never as a storm.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from sglang_envelope.errors.exceptions import EnvelopeError, show_value

__all__ = ["engine_abort"]


class _AbortBody(msgspec.Struct):
    """An abort plan's body (`plan_abort`)."""

    rid: str


_RID = msgspec.json.Decoder(_AbortBody)


def engine_abort(engine: Any) -> Callable[[bytes], Awaitable[int]]:
    """`run_abort`'s `send` for an in-process SGLang engine: an ``sgl.Engine`` or its
    ``tokenizer_manager`` (duck-typed). Each call aborts the plan's rid with
    ``abort_request(rid=...)`` and answers 200, as SGLang's ``/abort_request`` does.
    Raises `EnvelopeError` at once for an engine without ``abort_request``, and from a
    call whose body is not an abort plan's (an abort-all plan's included)."""
    manager = getattr(engine, "tokenizer_manager", engine)
    abort = getattr(manager, "abort_request", None)
    if not callable(abort):
        raise EnvelopeError(
            f"engine: {type(manager).__name__} has no abort_request: expected an "
            "sgl.Engine or its tokenizer_manager"
        )

    async def send(body: bytes) -> int:
        try:  # a plan's body: {"rid": "..."}, checked when made
            rid = _RID.decode(body).rid
        except (msgspec.DecodeError, TypeError) as error:
            raise EnvelopeError(
                'body: expected an abort plan\'s {"rid": ...} (plan_abort), '
                f"got {show_value(body)}: {error}"
            ) from None
        abort(rid=rid)
        return 200

    return send
