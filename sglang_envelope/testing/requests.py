"""What the fake engine reads of a request: its body, bounded, and the request served.

`check_generate` decodes a ``POST /generate`` body with the library's own
`decode_client_request` and checks it on the fake's `Deployment`, so the fake
refuses what SGLang 0.5.23 refuses, in SGLang's words where the library has
them (the library's checks are recorded against a live server). It serves
what a worker sends that a client may not: the serving system's fields
(``bootstrap_*``, ``routed_dp_rank``, ...), and keys ``GenerateReqInput``
does not know, which SGLang ignores.

`split_many` reads a request for many sequences first, as SGLang's
``GenerateReqInput.normalize_batch_and_arguments`` does: B prompts (``input_ids``
a list of lists, or ``text`` a list; ``text`` tokenized by the fake's `text_ids`)
and ``sampling_params.n`` samples of each. It gives one one-sequence body a
prompt, which `check_generate` checks as any other, and the rid of each
sequence (index ``i * n + j``).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final, NamedTuple

import msgspec

from sglang_envelope.errors.exceptions import EngineError, RequestRejected
from sglang_envelope.request.deployment import Deployment, check_engine_body
from sglang_envelope.request.engine import EngineBody
from sglang_envelope.request.fields import FIELD_OWNERS, ORCHESTRATOR_FIELD, RequestFields
from sglang_envelope.request.rules import GENERATE_REQ_INPUT_FIELDS, reject
from sglang_envelope.request.types import ClientRequest, decode_client_request
from sglang_envelope.testing.answers import text_ids

__all__ = [
    "MAX_SEQUENCES",
    "ClientGone",
    "Receive",
    "Send",
    "Sequences",
    "check_generate",
    "json_content",
    "read_body",
    "split_many",
]

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: The codes of rules the library keeps for clients, but that a worker's engine
#: request may break.
_SERVED_CODES: Final = frozenset(("orchestrator_field", "unknown_field"))
_CLIENT_COUNT: Final = len(RequestFields.__struct_fields__)


class ClientGone(Exception):
    """The client disconnected before its body was read."""


class _Orchestration(msgspec.Struct):
    """The serving system's fields SGLang's checks read, typed as in
    ``GenerateReqInput``."""

    bootstrap_host: str | None = None
    bootstrap_port: int | None = None
    bootstrap_room: int | None = None
    disagg_prefill_dp_rank: int | None = None
    routed_dp_rank: int | None = None


def json_content(headers: list[tuple[bytes, bytes]]) -> bool:
    """True when ``Content-Type`` is JSON (``application/json`` or
    ``application/*+json``), which FastAPI requires before it parses a body."""
    for name, value in headers:
        if name.lower() == b"content-type":
            kind = value.split(b";", 1)[0].strip().lower()
            return kind == b"application/json" or (
                kind.startswith(b"application/") and kind.endswith(b"+json")
            )
    return False


def _declared_size(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length" and value.isdigit() and len(value) < 20:
            return int(value)
    return None


async def read_body(
    receive: Receive, headers: list[tuple[bytes, bytes]], limit: int
) -> bytes | RequestRejected:
    """The request's body, or the rejection of one over `limit` bytes (read no further).
    Raises `ClientGone` when the client disconnects first."""
    declared = _declared_size(headers)
    if declared is not None and declared > limit:
        return reject("body_too_large", size=declared, limit=limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = bytes(message.get("body", b""))
        size += len(chunk)
        if size > limit:
            return reject("body_too_large", size=size, limit=limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _served_part(body: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """The body's client fields, and the serving system's (unknown keys left out)."""
    try:
        mapping = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError) as error:
        raise reject("not_json", detail=str(error)) from None
    if not isinstance(mapping, dict):
        raise reject("not_object", got=type(mapping).__name__)
    known = set(GENERATE_REQ_INPUT_FIELDS)
    client = {
        key: value
        for key, value in mapping.items()
        if key in known and FIELD_OWNERS.get(key) != ORCHESTRATOR_FIELD
    }
    served = {
        k: v for k, v in mapping.items() if FIELD_OWNERS.get(k) == ORCHESTRATOR_FIELD
    }
    return client, served


def check_generate(
    body: bytes, deployment: Deployment, max_body_bytes: int
) -> ClientRequest:
    """The request `body` asks for; raises `RequestRejected` for
    a body SGLang refuses (and for what the library refuses on purpose: JSON past
    the library's bounds). `body` asks for one token-input sequence (`split_many`
    makes such bodies of the others)."""
    served: dict[str, Any] = {}
    try:
        request = decode_client_request(body, max_body_bytes=max_body_bytes)
    except RequestRejected as rejected:
        if rejected.code not in _SERVED_CODES:
            raise
        client, served = _served_part(body)
        request = decode_client_request(client, max_body_bytes=max_body_bytes)
    try:
        routing = msgspec.convert(served, _Orchestration)
    except msgspec.ValidationError as error:
        raise RequestRejected("wrong_type", None, f"wrong type: {error}") from None
    fields = msgspec.structs.astuple(request)[:_CLIENT_COUNT]
    engine_body = msgspec.structs.replace(
        EngineBody(*fields), routed_dp_rank=routing.routed_dp_rank
    )
    check_engine_body(deployment, engine_body)
    return request


#: The most sequences (prompts times ``n``) the fake serves in one request.
MAX_SEQUENCES: Final = 1024
#: Fields a batch may give one value a prompt in SGLang: the fake takes one value for all.
_PER_ITEM: Final = (
    "sampling_params",
    "return_logprob",
    "logprob_start_len",
    "top_logprobs_num",
    "token_ids_logprob",
    "return_hidden_states",
    "lora_path",
    "custom_logit_processor",
    "extra_key",
    "cache_salt",
)
_NULL: Final = msgspec.Raw(b"null")


class _Shape(msgspec.Struct):
    """The keys that say whether a body asks for more than one sequence, undecoded."""

    text: msgspec.Raw = _NULL
    input_ids: msgspec.Raw = _NULL
    sampling_params: msgspec.Raw = _NULL


class _Samples(msgspec.Struct):
    n: Any = 1


_shape = msgspec.json.Decoder(_Shape).decode
_samples = msgspec.json.Decoder(_Samples).decode


class Sequences(NamedTuple):
    """A request for many sequences, split: one one-sequence body a prompt (with
    the client's rid item, for its checks), ``n``, and each sequence's rid, in
    index order."""

    prompts: list[bytes]
    n: int
    rids: list[str]
    #: Whether the answer is an array (a batch, or ``n`` > 1), else one sequence's answer.
    array: bool


def _batch(raw: bytes) -> bool:
    """SGLang's gate: ``[]`` or a list whose first item is a number is one prompt."""
    return raw[:1] == b"[" and raw[1:].lstrip()[:1] not in b"]-0123456789"


def _many_shape(body: bytes) -> bool:
    try:
        shape = _shape(body)
        params = bytes(shape.sampling_params).lstrip()
        n = _samples(params).n if params[:1] == b"{" else 1
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return False  # the one-sequence checks refuse it
    if bytes(shape.text) != b"null" or _batch(bytes(shape.input_ids).lstrip()):
        return True
    return type(n) is int and n > 1


def _prompts(mapping: dict[str, Any], vocab_size: int) -> tuple[list[Any], bool]:
    """Each prompt's ``input_ids``, and whether they came as a batch."""
    ids = mapping.get("input_ids")
    if ids is not None:
        if isinstance(ids, list) and ids and not isinstance(ids[0], (int, float)):
            return ids, True
        return [ids], False
    text = mapping.get("text")
    items, batch = (text, True) if isinstance(text, list) else ([text], False)
    prompts: list[Any] = []
    for at, item in enumerate(items):
        if not isinstance(item, str):
            where = f"text[{at}]" if batch else "text"
            got = type(item).__name__
            raise RequestRejected(
                "wrong_type", where, f"{where} must be a string, got {got}"
            )
        prompts.append(text_ids(item, vocab_size))
    return prompts, batch


def _rids(rid: Any, count: int, n: int) -> tuple[list[Any], list[str]]:
    """The rid each prompt's body carries (for its checks) and each sequence's rid."""
    if isinstance(rid, list):
        if len(rid) != count:
            raise EngineError(
                "The specified rids length mismatch with the batch_size for batch "
                "processing.",
                400,
            )
        counts = Counter(item for item in rid if isinstance(item, str))
        twice = [item for item, seen in counts.items() if seen > 1]
        if twice:
            raise EngineError(
                f"Duplicate request IDs detected within the request: {twice}", 400
            )
        given = rid
    else:
        given = [rid] * count
    if n > 1:  # SGLang gives every sample a new rid (regenerate_rid)
        return given, [uuid.uuid4().hex for _ in range(count * n)]
    if isinstance(rid, str):
        return given, [f"{rid}_{i}" for i in range(count)]
    return given, [item if isinstance(item, str) else uuid.uuid4().hex for item in given]


def _per_item(mapping: dict[str, Any]) -> None:
    for name in _PER_ITEM:
        value = mapping.get(name)
        one = name == "token_ids_logprob" and not any(
            isinstance(v, list) for v in value or ()
        )
        if isinstance(value, list) and not one:
            raise EngineError(
                f"{name} is a list: the fake engine serves one {name} for every "
                "sequence of a batch",
                400,
            )


def _one_body(rest: dict[str, Any], prompt: Any, rid: Any) -> bytes:
    one = {**rest, "input_ids": prompt}
    if rid is not None:
        one["rid"] = rid
    return msgspec.json.encode(one)


def split_many(body: bytes, vocab_size: int) -> Sequences | None:
    """`body` split into one body a prompt,
    or None when it asks for one token-input sequence."""
    if not _many_shape(body):
        return None
    try:
        mapping: dict[str, Any] = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None  # the one-sequence checks refuse it
    params = mapping.get("sampling_params")
    n = params.get("n", 1) if isinstance(params, dict) else 1
    n = n if type(n) is int and n > 1 else 1
    prompts, batch = _prompts(mapping, vocab_size)
    rest = {key: value for key, value in mapping.items() if key not in ("text", "rid")}
    if not batch and n == 1:  # one text prompt
        return Sequences([_one_body(rest, prompts[0], mapping.get("rid"))], 1, [], False)
    _per_item(mapping)
    if len(prompts) * n > MAX_SEQUENCES:
        raise EngineError(
            f"the fake engine serves at most {MAX_SEQUENCES} sequences in one request, "
            f"got {len(prompts)} prompts times n={n}",
            400,
        )
    given, rids = _rids(mapping.get("rid"), len(prompts), n)
    if isinstance(params, dict):
        rest["sampling_params"] = {key: v for key, v in params.items() if key != "n"}
    bodies = [
        _one_body(rest, prompt, rid) for prompt, rid in zip(prompts, given, strict=True)
    ]
    return Sequences(bodies, n, rids, True)
