"""Each command's branches, run in-process: what it prints and the code it exits with."""

from __future__ import annotations

import io
import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

import pytest

from sglang_envelope.cli.demo import DEMO_SSE_TRANSCRIPT, SEED_REQUEST, demo_unary_body
from sglang_envelope.cli.main import EXIT_BROKEN_PIPE, main
from sglang_envelope.stream import SSE_DONE, encode_sse
from tests.test_cli import BOOTSTRAP, run, write

NORMALIZE = ("normalize", "--vocab-size", "151936", "--role")


def error_of(code: int, out: Any) -> dict[str, Any]:
    """The error object of a failed run that printed exactly `{"error": {...}}`."""
    assert code in (1, 2)
    assert list(out) == ["error"]
    error: dict[str, Any] = out["error"]
    return error


# --- demo ---------------------------------------------------------------------


def test_demo_prints_each_section_in_order() -> None:
    code, out, err = run("demo")
    assert (code, err) == (0, "")
    headings = [line for line in out.splitlines() if line.startswith("== ")]
    assert [heading[3:5] for heading in headings] == [
        "1.",
        "2.",
        "3.",
        "4.",
        "5.",
        "6.",
        "7.",
        "8.",
    ]
    assert "== 2. The worker envelope (rid 'req-7'): stream stays false" in out
    # The table of the decoded Base64 fields: three positions, two rows each.
    table = out.split("logprob\n")[1].split("\n\n")[0].splitlines()
    assert [line.split() for line in table] == [
        ["0", "791", "-0.2500"],
        ["0", "578", "-1.7500"],
        ["1", "3363", "-0.5000"],
        ["1", "4320", "-1.2500"],
        ["2", "13", "-0.1250"],
        ["2", "11", "-2.5000"],
    ]
    assert (
        "  rejected: code output_flat_with_stream, field return_flat_raw_output_top_logprobs" in out
    )


# --- normalize ----------------------------------------------------------------


def test_normalize_routes_to_the_dp_rank() -> None:
    code, out, _ = run(*NORMALIZE, "aggregated", "--dp-rank", "3", "--rid", "r", stdin=SEED_REQUEST)
    assert code == 0
    assert out["body"]["routed_dp_rank"] == 3
    assert out["body"]["rid"] == "r"


def test_normalize_with_no_vocabulary_checks_no_id() -> None:
    body = b'{"input_ids": [999999999], "rid": "x"}'
    argv = ("normalize", "--role", "aggregated", "-")
    code, out, _ = run(*argv, "--vocab-size", "none", stdin=body)
    assert (code, out["body"]["input_ids"]) == (0, [999999999])
    code, out, _ = run(*argv, "--vocab-size", "1000", stdin=body)
    assert error_of(code, out)["code"] == "token_out_of_vocab"
    assert out["error"]["message"] == (
        "input_ids[0] is 999999999, outside the model's vocabulary [0, 1000)"
    )


@pytest.mark.parametrize("size", ["0", "-3", "many"])
def test_a_vocab_size_is_a_positive_integer_or_none(size: str) -> None:
    code, out, err = run("normalize", "--role", "aggregated", "--vocab-size", size)
    assert error_of(code, out)["type"] == "usage"
    assert f"expected a positive integer or none, got {size!r}" in out["error"]["message"]
    assert err.startswith("usage: sglang-envelope normalize")


@pytest.mark.parametrize(
    "options", [BOOTSTRAP[:2], ["--prefill-dp-rank", "1"]], ids=["bootstrap", "prefill-dp-rank"]
)
def test_an_aggregated_request_takes_no_bootstrap(options: list[str]) -> None:
    code, out, err = run(*NORMALIZE, "aggregated", *options, stdin=SEED_REQUEST)
    assert error_of(code, out) == {
        "type": "invalid_argument",
        "message": "role 'aggregated' takes no --bootstrap-* or --prefill-dp-rank options",
    }
    assert err == f"sglang-envelope: error: {out['error']['message']}\n"


@pytest.mark.parametrize(
    ("role", "options", "message"),
    [
        (
            "decode",
            [*BOOTSTRAP[:2], "--bootstrap-port", "70000", *BOOTSTRAP[4:]],
            "--bootstrap-port must be an integer in [1, 65535], got 70000",
        ),
        ("aggregated", ["--dp-rank", "-1"], "--dp-rank must be an integer in [0, 2147483647]"),
        ("aggregated", ["--max-token-id", "-1"], "--max-token-id must be an integer >= 0, got"),
        ("aggregated", ["--rid", ""], "--rid must be a non-empty UTF-8 string, got ''"),
    ],
)
def test_a_bad_option_is_named_as_the_option(role: str, options: list[str], message: str) -> None:
    code, out, _ = run(*NORMALIZE, role, *options, stdin=SEED_REQUEST)
    assert error_of(code, out)["type"] == "invalid_argument"
    assert out["error"]["message"].startswith(message)


def test_an_option_copied_into_the_json_must_be_utf8() -> None:
    code, out, _ = run(*NORMALIZE, "aggregated", "--rid", "r\udcff", stdin=SEED_REQUEST)
    assert error_of(code, out)["type"] == "usage"
    assert "not valid UTF-8: 'r\\udcff'" in out["error"]["message"]


# --- aggregate ----------------------------------------------------------------


@pytest.mark.parametrize("limit", ["0", "-5"])
def test_aggregate_needs_a_positive_max_bytes(limit: str) -> None:
    code, out, _ = run("aggregate", "--max-bytes", limit, stdin=DEMO_SSE_TRANSCRIPT)
    assert error_of(code, out) == {
        "type": "invalid_argument",
        "message": f"--max-bytes: expected a positive integer, got {limit}",
    }


def test_aggregate_reads_a_unary_body_to_its_bound() -> None:
    body = demo_unary_body()
    code, out, _ = run("aggregate", stdin=body)
    assert (code, out) == (0, json.loads(body))
    code, out, _ = run("aggregate", "--max-bytes", str(len(body) - 1), stdin=b" " + body)
    error = error_of(code, out)
    assert (error["type"], error["bound"]) == ("limit_exceeded", "max_bytes")
    assert error["limit"] == len(body) - 1


def test_aggregate_reads_a_long_stream_in_chunks() -> None:
    stop = {"type": "stop", "matched": 2}
    frames = [
        {
            "text": "ab" * 500,
            "output_ids": [i],
            "meta_info": {"completion_tokens": i + 1, "finish_reason": stop if i == 199 else None},
        }
        for i in range(200)
    ]
    stream = b"".join(encode_sse(frame) for frame in frames) + SSE_DONE
    assert len(stream) > 2 * 64 * 1024
    code, out, _ = run("aggregate", "--incremental", stdin=stream)
    assert code == 0
    assert out["text"] == "ab" * 500 * 200
    assert out["output_ids"] == list(range(200))


def test_an_engine_error_exits_1_with_its_status() -> None:
    code, out, err = run(
        "aggregate", stdin=b'data: {"error": {"message": "busy", "code": 429}}\n\n'
    )
    assert code == 1
    assert error_of(code, out) == {"type": "engine_error", "code": 429, "message": "busy"}
    assert err == "sglang-envelope: error: busy\n"


# --- flat ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{", "the input is not valid JSON: "),
        (b"[1, 2]", "the input must be a JSON object: a response or its meta_info"),
        (b'{"meta_info": [1]}', "meta_info must be a JSON object"),
        (b'{"meta_info": {"id": "r"}}', "meta_info has no output_top_logprobs_* flat fields"),
    ],
)
def test_flat_refuses_what_is_not_a_response(data: bytes, message: str) -> None:
    code, out, _ = run("flat", stdin=data)
    assert error_of(code, out)["type"] == "response_error"
    assert out["error"]["message"].startswith(message)


def test_flat_of_the_input_side_needs_its_fields() -> None:
    code, out, _ = run("flat", "--side", "input", stdin=demo_unary_body())
    assert error_of(code, out)["message"] == "meta_info has no input_top_logprobs_* flat fields"


@pytest.mark.parametrize("count", ["x", "-1", "1.5"])
def test_flat_max_positions_is_a_count(count: str) -> None:
    code, out, _ = run("flat", "--max-positions", count, stdin=demo_unary_body())
    assert error_of(code, out)["type"] == "usage"
    assert f"expected an integer >= 0, got {count!r}" in out["error"]["message"]


# --- input, output and the entry points ---------------------------------------


class _FailingReader(io.RawIOBase):
    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        raise OSError(5, "Input/output error")


@pytest.mark.parametrize("command", [["aggregate"], ["flat"], [*NORMALIZE, "aggregated"]])
def test_an_input_that_fails_to_read_is_unreadable(
    command: list[str], monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(_FailingReader())))
    assert main(command) == 2
    out, err = capsysbinary.readouterr()
    assert json.loads(out) == {
        "error": {"type": "unreadable_input", "message": "cannot read stdin: Input/output error"}
    }
    assert err == b"sglang-envelope: error: cannot read stdin: Input/output error\n"


def test_a_directory_is_unreadable(tmp_path: Path) -> None:
    code, out, _ = run("flat", str(tmp_path))
    assert error_of(code, out)["type"] == "unreadable_input"
    assert out["error"]["message"].startswith(f"cannot read {str(tmp_path)!r}: ")


def test_a_file_is_read_and_left_closed(tmp_path: Path) -> None:
    path = write(tmp_path, "response.json", demo_unary_body())
    code, out, _ = run("flat", path, "--max-positions", "2")
    assert error_of(code, out)["type"] == "limit_exceeded"
    assert out["error"]["limit"] == 2


class _ClosedPipe(io.TextIOWrapper):
    """A stdout whose reader has gone: every write raises BrokenPipeError."""

    def __init__(self, fd: int) -> None:
        super().__init__(io.BytesIO())
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    @property
    def buffer(self) -> Any:
        pipe = self

        class _Buffer:
            def write(self, data: bytes) -> int:
                return pipe.write("")

        return _Buffer()


@pytest.mark.parametrize("command", [["demo"], ["aggregate", "-"]])
def test_a_closed_stdout_points_stdout_at_devnull(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open(tmp_path / "stdout", "w+b") as spare:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(DEMO_SSE_TRANSCRIPT)))
        monkeypatch.setattr(sys, "stdout", _ClosedPipe(spare.fileno()))
        assert main(command) == EXIT_BROKEN_PIPE
        # The stdout descriptor now writes to the null device: a write is dropped.
        os.write(spare.fileno(), b"dropped")
        assert (tmp_path / "stdout").read_bytes() == b""


def test_python_dash_m_runs_main(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["sglang_envelope", "--version"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module("sglang_envelope", run_name="__main__")
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("sglang-envelope ")
