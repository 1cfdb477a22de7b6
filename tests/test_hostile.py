"""Hostile input to every entry point raises `EnvelopeError`, never a crash.

The module files test each entry point's own rules; this one holds the
cross-cutting matrix (entry point x kind of hostile input), the Hypothesis
tests the module files lack, the in-process command-line fuzz, and the
regression tests of the crashes the hardening audit found.
"""

from __future__ import annotations

from typing import Any

import pytest

from sglang_envelope import (
    EnvelopeError,
    RequestRejected,
    StreamAggregator,
    aggregate_frames,
    aggregate_sse,
    decode_client_request,
    decode_envelope,
)

# --- regressions: crashes the audit found ---


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        ('{"rid": "\ud800", "request": {"input_ids": [1]}}', "surrogates not allowed"),
        ('{"rid": "r", "request": {"input_ids": [1], "rid": "\udcff"}}', "surrogates not allowed"),
        (None, "expected bytes or str, got NoneType"),
        ({"rid": "r", "request": {"input_ids": [1]}}, "expected bytes or str, got dict"),
    ],
    ids=["surrogate-rid", "surrogate-in-request", "none", "dict"],
)
def test_decode_envelope_refuses_text_and_types_json_cannot_be(data: object, detail: str) -> None:
    # Was UnicodeEncodeError (text with lone surrogates) or TypeError.
    with pytest.raises(RequestRejected) as caught:
        decode_envelope(data)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_envelope"
    assert detail in caught.value.message


def test_decode_envelope_bounds_text_in_utf8_bytes() -> None:
    wire = '{"rid": "r", "request": {"input_ids": [1], "rid": "ééé"}}'
    assert decode_envelope(wire, max_body_bytes=len(wire.encode())).rid == "r"
    with pytest.raises(RequestRejected) as caught:
        decode_envelope(wire, max_body_bytes=len(wire))  # characters, not bytes
    assert caught.value.code == "body_too_large"


def test_a_memoryview_msgspec_cannot_read_is_rejected() -> None:
    # Was BufferError: msgspec reads only contiguous buffers.
    body = memoryview(b'{"input_ids": [1]}' * 2)[::2]
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(body)  # type: ignore[arg-type]
    assert (caught.value.code, caught.value.message) == (
        "not_json",
        "request body is not valid JSON: memoryview: underlying buffer is not C-contiguous",
    )
    with pytest.raises(RequestRejected) as caught:
        decode_envelope(body)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_envelope"


#: A stream of two incremental frames: "ab" as a whole, "b" as its last frame alone.
_TWO_FRAMES = (
    b'data: {"text": "a", "meta_info": {"finish_reason": null}}\n\n'
    b'data: {"text": "b", "meta_info": {"finish_reason": {"type": "stop"}}}\n\n'
)


@pytest.mark.parametrize(
    ("incremental", "text"), [("yes", "ab"), (1, "ab"), (None, "b"), (0, "b"), ("", "b")]
)
def test_any_incremental_flag_reads_as_a_bool(incremental: Any, text: str) -> None:
    # aggregate_sse looked its typed views up by the flag itself: KeyError for "yes".
    assert aggregate_sse([_TWO_FRAMES], incremental=incremental)["text"] == text
    assert StreamAggregator(incremental=incremental).incremental is bool(incremental)


@pytest.mark.parametrize("frames", [None, 7, 1.5])
def test_frames_and_chunks_that_are_not_iterable(frames: Any) -> None:
    # Was TypeError from the for loop.
    with pytest.raises(EnvelopeError, match="aggregate_frames frames: expected an iterable"):
        aggregate_frames(frames)
    with pytest.raises(EnvelopeError, match="aggregate_sse chunks: expected an iterable"):
        aggregate_sse(frames)
