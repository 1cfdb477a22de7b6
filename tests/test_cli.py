"""The `sglang-envelope` command line, run on files and stdin.

Most runs are in-process (`run`: `main` with its own stdin, stdout and stderr);
a few go through a subprocess (`run_process`, ~100 ms each), as a user runs it:
`python -m sglang_envelope`, the console script, a closed stdout.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from sglang_envelope.cli.demo import DEMO_SSE_TRANSCRIPT, SEED_REQUEST, demo_unary_body
from sglang_envelope.cli.main import main

BOOTSTRAP = ["--bootstrap-host", "10.0.0.7", "--bootstrap-port", "8998", "--bootstrap-room", "42"]
STREAMING_SEED = SEED_REQUEST.replace(b'"stream": false', b'"stream": true')


def _parsed(out: str) -> Any:
    """Stdout as JSON, or as text when it is not JSON."""
    try:
        return json.loads(out)
    except ValueError:
        return out


def run(*args: str, stdin: bytes = b"") -> tuple[int, Any, str]:
    """Run the CLI in-process; return its exit code, its stdout as JSON (text if not
    JSON), its stderr."""
    out = io.BytesIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    stderr = io.StringIO()
    with (
        mock.patch.object(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin))),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        try:
            code = main(list(args))
        except SystemExit as exit_info:  # argparse: --help, --version, a usage error
            code = exit_info.code if isinstance(exit_info.code, int) else 2
    return code, _parsed(out.getvalue().decode()), stderr.getvalue()


def run_process(*args: str, stdin: bytes = b"") -> tuple[int, Any, str]:
    """`run`, as `python -m sglang_envelope` in a subprocess."""
    done = subprocess.run(
        [sys.executable, "-m", "sglang_envelope", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return done.returncode, _parsed(done.stdout.decode()), done.stderr.decode()


def write(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


# --- demo ---------------------------------------------------------------------


def test_demo_shows_the_whole_job() -> None:
    code, out, err = run_process("demo")
    assert code == 0, err
    assert isinstance(out, str)
    # The envelope and both unary roles keep stream false; prefill streams, one token.
    assert "stream stays false" in out
    assert "aggregated: stream false, Accept: application/json" in out
    assert "decode: stream false, Accept: application/json" in out
    assert "prefill: stream true, Accept: text/event-stream" in out
    prefill_body = json.loads(out.split("prefill: stream true")[1].splitlines()[1])
    assert prefill_body["sampling_params"]["max_new_tokens"] == 1
    assert "return_flat_raw_output_top_logprobs" not in prefill_body
    # The stream:true request is rejected with SGLang's words.
    assert "code output_flat_with_stream" in out
    assert "does not support stream=True." in out
    # The Base64 fields are decoded into a table: position, token id, logprob.
    assert re.search(r"^\s+0\s+791\s+-0\.2500$", out, re.MULTILINE)
    assert re.search(r"^\s+2\s+11\s+-2\.5000$", out, re.MULTILINE)
    # The SSE transcript is aggregated.
    final = json.loads(out.split("final response:")[1].splitlines()[1])
    assert final["text"] == " The answer."
    assert final["output_ids"] == [791, 3363, 13]
    # The rejection as the client gets it, and the stream relayed in cumulative frames.
    answer = "(error_response, stream=True): 200 text/event-stream; charset=utf-8\n"
    assert answer + '    data: {"error":{"message":"return_flat_raw_output_top_logprobs' in out
    assert "    data: [DONE]\n" in out.split(answer)[1]
    section_7 = out.split("7. The same stream relayed")[1].split("\n\n== 8.")[0]
    relayed = section_7.splitlines()[1:]
    texts = [json.loads(line.strip()[len("data: ") :])["text"] for line in relayed[:-1]]
    assert texts == [" The", " The answer", " The answer."]
    assert relayed[-1].strip() == "data: [DONE]"
    # Service answers a request against the fake engine, in this process.
    served = out.split("8. Service, the whole loop")[1]
    assert "vocab_size 320, context_length 1024" in served
    unary = json.loads(served.split("  200 application/json: ")[1].splitlines()[0])
    assert unary["meta_info"]["id"] == "mine" and len(unary["output_ids"]) == 3
    rid = re.search(r"the engine request: rid '([0-9a-f]{32})', the service's own", served)
    assert rid is not None


# --- normalize ----------------------------------------------------------------


def test_normalize_file_for_decode(tmp_path: Path) -> None:
    path = write(tmp_path, "request.json", SEED_REQUEST)
    code, out, _ = run_process(
        "normalize", "--vocab-size", "151936", path, "--role", "decode", "--rid", "r-1", *BOOTSTRAP
    )
    assert code == 0
    assert out == {
        "accept": "application/json",
        "body": {
            "input_ids": [1, 2],
            "rid": "r-1",
            "stream": False,
            "return_logprob": True,
            "top_logprobs_num": 2,
            "return_flat_raw_output_top_logprobs": True,
            "bootstrap_host": "10.0.0.7",
            "bootstrap_port": 8998,
            "bootstrap_room": 42,
        },
    }


def test_normalize_stdin_for_prefill_makes_a_fresh_rid() -> None:
    code, out, _ = run(
        "normalize", "--vocab-size", "151936", "--role", "prefill", *BOOTSTRAP, stdin=SEED_REQUEST
    )
    assert code == 0
    assert out["accept"] == "text/event-stream"
    body = out["body"]
    assert body["stream"] is True
    assert "return_flat_raw_output_top_logprobs" not in body
    assert body["sampling_params"] == {"n": 1, "max_new_tokens": 1}
    assert re.fullmatch(r"[0-9a-f]{32}", body["rid"])


def test_normalize_keeps_the_client_rid() -> None:
    request = b'{"input_ids": [5], "rid": "client-9"}'
    code, out, _ = run(
        "normalize", "--vocab-size", "151936", "-", "--role", "aggregated", stdin=request
    )
    assert code == 0
    assert out["body"]["rid"] == "client-9"


def test_normalize_rejected_request(tmp_path: Path) -> None:
    path = write(tmp_path, "streaming.json", STREAMING_SEED)
    code, out, err = run("normalize", "--vocab-size", "151936", path, "--role", "aggregated")
    assert code == 2
    assert out["error"]["code"] == "output_flat_with_stream"
    assert out["error"]["field"] == "return_flat_raw_output_top_logprobs"
    assert "does not support stream=True." in out["error"]["message"]
    assert "Traceback" not in err


def test_normalize_missing_bootstrap() -> None:
    code, out, err = run(
        "normalize", "--vocab-size", "151936", "--role", "decode", stdin=SEED_REQUEST
    )
    assert code == 2
    assert "--bootstrap-host" in out["error"]["message"]
    assert "decode" in err


def test_unreadable_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.json")
    code, out, err = run("normalize", "--vocab-size", "151936", missing, "--role", "aggregated")
    assert code == 2
    assert out["error"]["type"] == "unreadable_input"
    assert "missing.json" in err
    assert "Traceback" not in err


# --- aggregate ----------------------------------------------------------------


def test_aggregate_sse_file(tmp_path: Path) -> None:
    path = write(tmp_path, "stream.sse", DEMO_SSE_TRANSCRIPT)
    code, out, _ = run("aggregate", path)
    assert code == 0
    assert out == {
        "text": " The answer.",
        "output_ids": [791, 3363, 13],
        "meta_info": {
            "id": "req-8",
            "finish_reason": {"type": "length", "length": 3},
            "prompt_tokens": 2,
            "completion_tokens": 3,
            "cached_tokens": 0,
            "output_token_logprobs": [[-0.25, 791, None], [-0.5, 3363, None], [-0.125, 13, None]],
        },
    }


def test_aggregate_unary_stdin() -> None:
    body = demo_unary_body()
    code, out, _ = run_process("aggregate", stdin=b"\n  " + body)
    assert code == 0
    assert out == json.loads(body)


def test_aggregate_engine_error_frame() -> None:
    stream = (
        b'data: {"error": {"message": "KV transfer failed", "type": "x", "code": 503}}\n\n'
        b"data: [DONE]\n\n"
    )
    code, out, err = run("aggregate", stdin=stream)
    assert code == 1
    assert out["error"]["message"] == "KV transfer failed"
    assert out["error"]["code"] == 503
    assert "Traceback" not in err


def test_aggregate_malformed_stream() -> None:
    code, out, err = run("aggregate", stdin=b'data: {"text": "a", "meta_info"')
    assert code == 2
    assert out["error"]["type"] == "response_error"
    assert "Traceback" not in err


# --- flat ---------------------------------------------------------------------


def test_flat_of_a_response_file(tmp_path: Path) -> None:
    path = write(tmp_path, "response.json", demo_unary_body())
    code, out, _ = run("flat", path)
    assert code == 0
    assert out == {
        "output_top_logprobs": [
            [[-0.25, 791, None], [-1.75, 578, None]],
            [[-0.5, 3363, None], [-1.25, 4320, None]],
            [[-0.125, 13, None], [-2.5, 11, None]],
        ]
    }


def test_flat_of_a_bare_meta_info_on_stdin() -> None:
    meta_info = {
        "input_top_logprobs_val_flat": [-1.5, -2.5],
        "input_top_logprobs_idx_flat": [7, 8],
        "input_top_logprobs_shape": [1, 2],
        "input_top_logprobs_null_prefix": 1,
    }
    code, out, _ = run("flat", "--side", "input", stdin=json.dumps(meta_info).encode())
    assert code == 0
    assert out == {"input_top_logprobs": [None, [[-1.5, 7, None], [-2.5, 8, None]]]}


def test_a_closed_stdout_stops_quietly() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the CLI writes a byte
    try:
        done = subprocess.run(
            [sys.executable, "-m", "sglang_envelope", "demo"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141
    assert b"Traceback" not in done.stderr
    assert b"Exception ignored" not in done.stderr


# --- in-process: help and usage -------------------------------------------------


@pytest.mark.parametrize("command", [[], ["demo"], ["normalize"], ["aggregate"], ["flat"]])
def test_every_command_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    assert help_text.startswith(f"usage: sglang-envelope {' '.join(command)}".rstrip())
    assert "exit codes: 0 ok, " in " ".join(help_text.split())


#: The exit codes each command's --help lists: those it can end with.
HELP_EXITS = {
    "": {0, 1, 2, 141},
    "demo": {0, 2, 141},
    "normalize": {0, 2, 141},
    "aggregate": {0, 1, 2, 141},
    "flat": {0, 2, 141},
}


@pytest.mark.parametrize("command", list(HELP_EXITS))
def test_each_help_lists_the_exit_codes_its_command_uses(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([*command.split(), "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the footer
    footer = text.partition("exit codes: ")[2]
    listed = {int(code) for code in re.findall(r"(?:^|, )(\d+) ", footer)}
    assert listed == HELP_EXITS[command]
    assert "141 stdout was closed before the output was written" in footer


def test_flat_side_is_explained(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["flat", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "output_top_logprobs_*" in text and "input_top_logprobs_*" in text


def test_usage_error_exits_2_with_json(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["normalize", "--role", "sideways"])
    assert exit_info.value.code == 2
    out = json.loads(capsysbinary.readouterr().out)
    assert out["error"]["type"] == "usage"
    assert "sideways" in out["error"]["message"]


def test_console_script_is_installed() -> None:
    script = shutil.which("sglang-envelope", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the package is not installed with its console script")
    done = subprocess.run([script, "--version"], capture_output=True, timeout=60, check=False)
    assert done.returncode == 0
    assert done.stdout.decode().startswith("sglang-envelope ")
