"""`sglang-envelope aggregate`: the stream mode read from the frames, or forced."""

from __future__ import annotations

from typing import Any

import pytest

from sglang_envelope.stream import SSE_DONE, encode_sse
from tests import test_cli

STOP = {"type": "stop", "matched": 2}


def run(*argv: str, stdin: bytes) -> tuple[int, Any, str]:
    """The command's exit code, its stdout as JSON and its stderr (in-process)."""
    code, out, err = test_cli.run("aggregate", *argv, stdin=stdin)
    return code, out or None, err


def frame(text: str, ids: list[int], tokens: int, *, last: bool = False) -> dict[str, Any]:
    meta = {"finish_reason": STOP if last else None, "completion_tokens": tokens}
    return {"text": text, "output_ids": ids, "meta_info": meta}


def stream(*frames: dict[str, Any]) -> bytes:
    return b"".join(encode_sse(one) for one in frames) + SSE_DONE


THE = frame("The", [464], 1)
CUMULATIVE = stream(THE, frame("The answer", [464, 3280], 2, last=True))
INCREMENTAL = stream(THE, frame(" answer", [3280], 2, last=True))


@pytest.mark.parametrize("transcript", [CUMULATIVE, INCREMENTAL], ids=["cumulative", "incremental"])
def test_either_mode_without_a_flag(transcript: bytes) -> None:
    code, out, _ = run("-", stdin=transcript)
    assert code == 0
    assert (out["text"], out["output_ids"]) == ("The answer", [464, 3280])


def test_a_flag_forces_the_mode() -> None:
    assert run("--cumulative", stdin=CUMULATIVE)[1]["text"] == "The answer"
    assert run("--incremental", stdin=INCREMENTAL)[1]["text"] == "The answer"
    code, out, _ = run("--incremental", stdin=CUMULATIVE)
    assert code == 2
    assert "completion_tokens is 2 but output_ids has 3 entries" in out["error"]["message"]


def test_the_flags_exclude_each_other() -> None:
    code, _, err = run("--incremental", "--cumulative", "-", stdin=CUMULATIVE)
    assert code == 2
    assert "not allowed with argument" in err


def test_a_stream_of_neither_mode_names_both_readings() -> None:
    code, out, _ = run("-", stdin=stream(THE, frame("", [2, 3], 4, last=True)))
    assert code == 2
    assert out["error"]["type"] == "response_error"
    assert "read incrementally" in out["error"]["message"]
    assert "read cumulatively" in out["error"]["message"]


@pytest.mark.parametrize("blank", [0, 1, 64 * 1024, 200_000])
def test_a_unary_body_is_told_by_its_first_byte_past_any_whitespace(blank: int) -> None:
    """docs/cli.md: the input is a unary body when its first non-whitespace byte is '{',
    however much whitespace (within the bound) comes before it."""
    body = b'{"text":"x","output_ids":[7],"meta_info":{"id":"r","finish_reason":' + (
        b'{"type":"length","length":1}}}'
    )
    code, out, _ = run("-", stdin=b" \n" * (blank // 2) + body)
    assert code == 0 and out["output_ids"] == [7]
    code, out, _ = run("--max-bytes", str(blank + 10), "-", stdin=b" " * blank + body)
    assert code == 2 and out["error"]["type"] == "limit_exceeded"
