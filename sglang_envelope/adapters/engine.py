"""`EngineTransport`: the serving loop over an SGLang engine run in this process.

`Service` speaks to SGLang through a `Transport`; this one runs each engine request
on an in-process ``sgl.Engine`` (or its ``tokenizer_manager``) and answers as
SGLang's HTTP server would have: a streaming request's outputs as SSE frames
(``data: {...}``, then ``data: [DONE]``), a refusal in the stream as SGLang's error
frame; a unary request's answer as one JSON body, 200, or SGLang's ``{"error":
{"message"}}`` with 400 for the `ValueError` its tokenizer manager raises. So
`Service` runs in-process with every guarantee it gives over HTTP: the client's
stream mode, refusals before dispatch, many sequences, prefill/decode pairs (a
transport for each engine), aborts (``tokenizer_manager.abort_request``), timeouts.

SGLang stays out of the library's imports: the engine is duck-typed, and the
caller gives SGLang's request class (``GenerateReqInput``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import msgspec

from sglang_envelope.cancel.in_process import engine_abort
from sglang_envelope.errors.answers import EVENT_STREAM, JSON, error_event
from sglang_envelope.errors.exceptions import EngineError, EnvelopeError
from sglang_envelope.response.sse import SSE_DONE, encode_sse
from sglang_envelope.serve.transport import EngineReply, overridden

__all__ = ["EngineTransport"]

#: The content types SGLang's HTTP server sends (`error_response`'s).
_JSON = {"content-type": JSON}
_SSE = {"content-type": EVENT_STREAM}
_decode = msgspec.json.decode


class EngineTransport:
    """An in-process SGLang engine as `Service` reaches it (a `Transport`).

    `engine` is an ``sgl.Engine`` or its ``tokenizer_manager``; `request_type` is
    SGLang's ``GenerateReqInput`` (``sglang.srt.managers.io_struct``), built from
    each engine request's keyword arguments. Raises `EnvelopeError` at once for an
    engine without ``generate_request`` and ``abort_request``.
    """

    __slots__ = ("_abort", "_manager", "_request_type")

    def __init__(self, engine: Any, *, request_type: Callable[..., Any]) -> None:
        manager = getattr(engine, "tokenizer_manager", engine)
        if not callable(getattr(manager, "generate_request", None)):
            raise EnvelopeError(
                f"engine: {type(manager).__name__} has no generate_request: expected an "
                "sgl.Engine or its tokenizer_manager"
            )
        if not callable(request_type):
            raise EnvelopeError("request_type must be SGLang's GenerateReqInput class")
        self._abort = engine_abort(manager)  # an abort plan's send, in-process
        self._manager = manager
        self._request_type = request_type

    async def generate(self, body: bytes, headers: Mapping[str, str]) -> EngineReply:
        """Run the engine request `body` (its JSON), with the fields that any
        ``x-override-*`` of `headers` sets, as SGLang's HTTP server sets them
        (`header_overrides`): a stream's frames as they come, a unary answer once it
        is whole, as that server sends them."""
        kwargs = overridden(_decode(body), headers)
        outputs = self._manager.generate_request(self._request_type(**kwargs), None)
        if kwargs.get("stream"):
            return EngineReply(200, _frames(outputs), outputs.aclose, _SSE)
        try:
            answer = [output async for output in outputs][-1]  # a unary request's one
        except ValueError as refused:  # SGLang's own refusal: its unary error body
            error = {"error": {"message": str(refused)}}
            return EngineReply(400, _one(msgspec.json.encode(error)), _nothing, _JSON)
        return EngineReply(200, _one(msgspec.json.encode(answer)), _nothing, _JSON)

    async def abort(self, body: bytes) -> int:
        """Abort the rid of `body` (``{"rid": "..."}``, as `plan_abort` writes it) with
        ``tokenizer_manager.abort_request``; 200, as SGLang's ``/abort_request``."""
        return await self._abort(body)


async def _frames(outputs: AsyncIterator[Any]) -> AsyncIterator[bytes]:
    """The engine's outputs as SGLang's HTTP server streams them."""
    try:
        async for output in outputs:
            yield encode_sse(output)
    except ValueError as refused:  # SGLang's stream_results: the error frame, then [DONE]
        yield error_event(EngineError(str(refused), 400))
    yield SSE_DONE


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def _nothing() -> None:
    """A unary answer, read whole: nothing to release."""
