"""Hostile input to every entry point raises `EnvelopeError`, never a crash.

The module files test each entry point's own rules; this one holds the
cross-cutting matrix (entry point x kind of hostile input), the Hypothesis
tests the module files lack, the in-process command-line fuzz, and the
regression tests of the crashes the hardening audit found.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sglang_envelope import (
    EnvelopeError,
    RequestRejected,
    StreamAggregator,
    aggregate_frames,
    aggregate_sse,
    build_engine_request,
    decode_client_request,
    decode_envelope,
    to_worker_envelope,
)
from sglang_envelope._cli import main
from sglang_envelope._demo import SEED_REQUEST, demo_unary_body


def run_cli(
    argv: list[str], capsys: pytest.CaptureFixture[bytes], *, exits: bool = False
) -> tuple[int, dict[str, Any]]:
    """Run the command line in-process; check it printed one JSON object and no traceback.

    Returns the exit code and the object. `exits`: argparse ends the run with SystemExit.
    """
    if exits:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        code = exit_info.value.code
    else:
        code = main(argv)
    out, err = capsys.readouterr()
    assert b"Traceback" not in err
    assert code in (0, 1, 2)
    assert out.endswith(b"\n")
    assert out.count(b"\n") == 1
    document = msgspec.json.decode(out)
    assert type(document) is dict
    if code:
        assert list(document) == ["error"]
        assert document["error"]["type"]
        assert document["error"]["message"]
    return code, document


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


def test_cli_reads_a_unary_body_under_any_max_bytes(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    # Was OverflowError (10**30) or MemoryError (2**40): one read of max-bytes + 1 bytes.
    path = tmp_path / "body.json"
    path.write_bytes(demo_unary_body())
    for limit in (2**40, 2**62, 10**30):
        code, out = run_cli(["aggregate", str(path), "--max-bytes", str(limit)], capsysbinary)
        assert code == 0
        assert out == msgspec.json.decode(demo_unary_body())
    code, out = run_cli(["aggregate", str(path), "--max-bytes", "10"], capsysbinary)
    assert (code, out["error"]["type"]) == (2, "limit_exceeded")


@pytest.mark.parametrize(
    "argv",
    [
        ["normalize", "--role", "aggregated", "--rid", "\udcff"],
        [
            "normalize",
            "--role",
            "decode",
            "--bootstrap-host",
            "h\udcff",
            "--bootstrap-port",
            "1",
            "--bootstrap-room",
            "1",
        ],
        ["demo", "\udcff"],
    ],
    ids=["rid", "bootstrap-host", "unrecognized"],
)
def test_cli_argv_that_is_not_utf8_is_a_usage_error(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    # Bytes in argv that are not UTF-8 reach Python as lone surrogates; they
    # escaped as UnicodeEncodeError when written into the JSON output.
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(SEED_REQUEST)))
    code, out = run_cli(argv, capsysbinary, exits=True)
    assert (code, out["error"]["type"]) == (2, "usage")
    assert "\\udcff" in out["error"]["message"]


@pytest.mark.parametrize(
    "index", [10**5000, [[10**5000]], [[[[[[[1]]]]]]]], ids=["int", "nested-int", "deep"]
)
def test_values_too_long_to_print_are_shown_in_bounds(index: Any) -> None:
    # Was ValueError from repr(): ints over 4300 digits have no str().
    frames = [{"index": 1, "meta_info": {}}, {"index": index, "meta_info": {}}]
    with pytest.raises(EnvelopeError, match=r"its index .* differs from the first frame.s 1"):
        aggregate_frames(frames)
    for bad in (-(10**5000), [-(10**5000)]):
        with pytest.raises(EnvelopeError, match="max_bytes: expected a positive integer"):
            aggregate_sse([], max_bytes=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("input_ids", ["\udcff", ["\ud800"], [1, "\udcff"]])
def test_input_ids_holding_text_with_lone_surrogates(input_ids: Any) -> None:
    # Was UnicodeEncodeError from msgspec.convert.
    envelope = to_worker_envelope(decode_client_request({"input_ids": [1]}), rid="r")
    with pytest.raises(EnvelopeError, match=r"input_ids: .*surrogates not allowed"):
        build_engine_request(envelope, input_ids=input_ids, role="aggregated")


def test_a_count_too_long_to_print_is_shown_by_its_size() -> None:
    # Was ValueError: str() of an int over 4300 digits, in the mismatch message.
    frame = {"output_ids": [1], "meta_info": {"finish_reason": {}, "completion_tokens": 10**5000}}
    with pytest.raises(EnvelopeError, match="completion_tokens is an int of 16610 bits but"):
        aggregate_frames([frame])
