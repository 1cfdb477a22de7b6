"""A large body decodes its input_ids a chunk at a time, with the typed decode's verdict."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings

import sglang_envelope.request.body as _body
import sglang_envelope.request.types as _request
from sglang_envelope import (
    RequestRejected,
    decode_client_request,
    decode_envelope,
    encode_envelope,
    to_worker_envelope,
)
from tests.strategies import client_requests, large_body_texts


def _verdict(body: bytes) -> Any:
    try:
        request = decode_client_request(body)
    except RequestRejected as error:
        return ("refused", error.code, error.field, error.message)
    return ("accepted", msgspec.structs.asdict(request), type(request.input_ids))


def _both_ways(monkeypatch: pytest.MonkeyPatch, body: bytes) -> tuple[Any, Any]:
    """The verdict on `body` decoded whole, then as a large body cut in tiny chunks."""
    whole = _verdict(body)
    with monkeypatch.context() as patch:
        patch.setattr(_request, "LARGE_BODY_BYTES", 0)
        patch.setattr(_body, "CHUNK_BYTES", 3)
        chunked = _verdict(body)
    return whole, chunked


@settings(max_examples=100)
@given(large_body_texts())
def test_a_large_body_gets_the_typed_decodes_verdict(body: bytes) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        whole, chunked = _both_ways(monkeypatch, body)
    assert chunked == whole


@given(client_requests())
def test_a_large_valid_body_decodes_to_the_same_request(fields: dict[str, Any]) -> None:
    body = msgspec.json.encode(fields)
    with pytest.MonkeyPatch.context() as monkeypatch:
        whole, chunked = _both_ways(monkeypatch, body)
    assert whole[0] == "accepted"
    assert chunked == whole


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (b'{"input_ids":[1,2,]}', "not_json"),
        (b'{"input_ids":[,1]}', "not_json"),
        (b'{"input_ids":[1,[2]]}', "wrong_type"),
        (b'{"input_ids":"x","input_ids":[1]}', "wrong_type"),
        (b'{"input_ids":[1],"input\\u005fids":[-1]}', "token_id_out_of_range"),
        (b'{"input\\u005fids":[-1],"input_ids":[1]}', "token_id_out_of_range"),
        (b'{"input_ids":[]}', "empty_input_ids"),
    ],
)
def test_a_large_body_the_chunks_cannot_vouch_for_is_refused_as_before(
    monkeypatch: pytest.MonkeyPatch, text: bytes, code: str
) -> None:
    whole, chunked = _both_ways(monkeypatch, text)
    assert chunked == whole
    assert whole[1] == code


def test_a_million_ids_are_read_in_chunks_into_one_tuple() -> None:
    ids = list(range(1_000_000))
    body = msgspec.json.encode({"input_ids": ids, "rid": "big"})
    assert len(body) > _body.LARGE_BODY_BYTES
    request = decode_client_request(body)
    assert type(request.input_ids) is tuple
    assert request.input_ids == tuple(ids)
    assert request.rid == "big"


def test_the_chunked_path_is_the_one_taken_for_a_large_valid_body() -> None:
    body = msgspec.json.encode({"input_ids": list(range(300_000)), "stream": True})
    chunked = _body.decode_large(body)  # the typed values, before any rule
    assert chunked is not None
    decoded = decode_client_request(body)
    assert tuple(chunked.values()) == msgspec.structs.astuple(decoded)[: len(chunked)]


@pytest.mark.parametrize("kind", [bytearray, memoryview, "envelope"])
def test_any_bytes_like_large_body_takes_the_chunked_path(
    monkeypatch: pytest.MonkeyPatch, kind: Any
) -> None:
    """A worker's envelope hands its request on as msgspec.Raw, not bytes: read in chunks too."""
    ids = list(range(300_000))
    body = msgspec.json.encode({"input_ids": ids, "stream": False})
    taken: list[bytes] = []
    decode_large = _body.decode_large

    def spy(data: bytes) -> Any:
        taken.append(data)
        return decode_large(data)

    monkeypatch.setattr(_request, "_decode_large", spy)
    if kind == "envelope":
        wire = encode_envelope(to_worker_envelope(decode_client_request(body), rid="r"))
        taken.clear()
        request = decode_envelope(wire).request
    else:
        request = decode_client_request(kind(body))
    assert taken == [body]
    assert request.input_ids == tuple(ids)
    assert request.stream is False
