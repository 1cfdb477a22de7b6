"""SGLang run in-process (``sgl.Engine``) through the library answers what its HTTP server answers.

docs/in-process.md's `in_process_worker.py`, run as it stands on the page, serves each
body with an ``sgl.Engine`` in its own process, as a worker that runs SGLang in-process
does (the engine's output objects read by `aggregate_frames_async`,
`relay_frames_async` and `parse_unary`), on a default (cumulative) and an
``incremental_streaming_output`` engine; each answer must equal the HTTP server's own
answer to the same body at temperature 0, key order included (volatile values aside).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from live.flow import assert_same, client, direct
from live.servers import LiveServer, live_dir, sglang_environment
from sglang_envelope import aggregate_sse, parse_unary
from sglang_envelope.stream import aggregate_frames

ROOT = Path(__file__).resolve().parent.parent
GREEDY = {"max_new_tokens": 6, "temperature": 0}
LOGPROBS = {"return_logprob": True, "top_logprobs_num": 2}
#: Two SGLang processes at temperature 0: the same tokens, logprobs equal to about 1e-7.
TOLERANCE = 1e-5
#: name -> a client body (streamed when it says so)
BODIES: dict[str, dict[str, Any]] = {
    "unary": {"input_ids": [5, 6, 7], "sampling_params": GREEDY},
    "stream": {"input_ids": [5, 6, 7], "stream": True, "sampling_params": GREEDY},
    "output_flat": {"input_ids": [5, 6, 7], **LOGPROBS,
                    "return_flat_raw_output_top_logprobs": True, "sampling_params": GREEDY},
    "output_flat_b64": {"input_ids": [5, 6, 7], **LOGPROBS,
                        "return_flat_raw_output_top_logprobs": True,
                        "return_flat_raw_top_logprobs_b64": True, "sampling_params": GREEDY},
    "prompt_flat": {"input_ids": [5, 6, 7, 8], **LOGPROBS, "logprob_start_len": 0,
                    "return_flat_raw_top_logprobs": True,
                    "return_flat_raw_top_logprobs_b64": True, "sampling_params": GREEDY},
    "logprobs_from_1": {"input_ids": [5, 6, 7, 8], **LOGPROBS, "logprob_start_len": 1,
                        "sampling_params": GREEDY},
    "stream_logprobs": {"input_ids": [5, 6, 7, 8], **LOGPROBS, "logprob_start_len": 1,
                        "stream": True, "sampling_params": GREEDY},
    "n_2": {"input_ids": [9, 10, 11], "sampling_params": {**GREEDY, "n": 2}},
    "batch_2": {"input_ids": [[5, 6, 7], [12, 13]], "sampling_params": GREEDY},
}  # fmt: skip
OUT_OF_VOCAB = {"input_ids": [1, 999], "sampling_params": GREEDY}
ABORTED = {
    "abort_unary_after_s": 0.5,
    "body": {"input_ids": [5, 6, 7], **LOGPROBS, "return_flat_raw_output_top_logprobs": True,
             "sampling_params": {"max_new_tokens": 900, "ignore_eos": True}},
}  # fmt: skip


def worker_file() -> Path:
    """docs/in-process.md's `in_process_worker.py`, written out as it stands on the page."""
    page = (ROOT / "docs" / "in-process.md").read_text(encoding="utf-8")
    pattern = r"^```python\n(# in_process_worker\.py\n.*?)^```"
    (code,) = re.findall(pattern, page, re.S | re.M)
    path = Path(tempfile.mkdtemp(prefix="in-process-")) / "in_process_worker.py"
    path.write_text(code, encoding="utf-8")
    return path


#: The bodies also served through `Service` over the engine (`EngineTransport`).
THROUGH_SERVICE = ("unary", "stream", "output_flat", "stream_logprobs", "n_2", "batch_2")


def run_in_process(incremental: bool) -> list[dict[str, Any]]:
    """Each case's answer from the page's worker (the deployment line first)."""
    served = [{"service": BODIES[name]} for name in THROUGH_SERVICE]
    cases = [*BODIES.values(), OUT_OF_VOCAB, ABORTED, *served]
    env = sglang_environment([ROOT])
    python = str(live_dir() / "venv" / "bin" / "python")
    command = [python, str(worker_file()), str(live_dir() / "tiny-gpt2")]
    with subprocess.Popen(
        command + (["--incremental"] if incremental else []),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    ) as worker:
        try:
            stdout, stderr = worker.communicate(
                "".join(json.dumps(case) + "\n" for case in cases), timeout=600
            )
        finally:  # the engine's own processes too (its detokenizer outlived the worker)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGKILL)
    assert worker.returncode == 0, stderr[-3000:]
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert lines[0] == {"deployment": {"vocab_size": 320}}  # Deployment.from_engine
    return lines[1:]


@pytest.fixture(scope="module", params=[False, True], ids=["default", "incremental"])
def in_process(request: pytest.FixtureRequest) -> dict[str, Any]:
    answers = run_in_process(bool(request.param))
    names = [*BODIES, "out_of_vocab", "aborted", *(f"service_{n}" for n in THROUGH_SERVICE)]
    return dict(zip(names, answers, strict=True))


async def _sglang(url: str, body: dict[str, Any]) -> Any:
    async with client() as http:
        answer = await direct(http, url, json.dumps({**body, "stream": False}).encode())
    assert answer.status == 200, answer.body[:300]
    return json.loads(answer.body)


@pytest.mark.parametrize("name", list(BODIES))
def test_the_in_process_answer_is_sglang_s_own(
    in_process: dict[str, Any], server: LiveServer, name: str
) -> None:
    body = BODIES[name]
    want = asyncio.run(_sglang(server.url, body))
    got = in_process[name]
    if "frames" in got:  # a streaming client: cumulative frames, SGLang's default
        frames = got["frames"]
        counts = [frame["meta_info"]["completion_tokens"] for frame in frames]
        assert counts == sorted(counts) and len(frames) > 1
        # Each frame holds its own counts' entries, kept until the stream ended: the
        # engine's growing lists are not the frames' (the ids, the output logprobs).
        for frame in frames:
            meta = frame["meta_info"]
            assert len(frame["output_ids"]) == meta["completion_tokens"]
            for key in ("output_token_logprobs", "output_top_logprobs"):
                if key in meta:
                    assert len(meta[key]) == meta["output_token_logprobs_length"], key
        assert_same(dict(aggregate_frames(frames, incremental=False)), want, tolerance=TOLERANCE)
    elif "answers" in got:  # many sequences, one engine request a sequence
        assert len(got["answers"]) == len(want) == 2
        for mine, theirs in zip(got["answers"], want, strict=True):
            assert_same(mine, theirs, tolerance=TOLERANCE)
    else:
        assert_same(dict(parse_unary(got["answer"])), want, tolerance=TOLERANCE)


def test_an_id_outside_the_vocabulary_is_refused_in_process(in_process: dict[str, Any]) -> None:
    refused = in_process["out_of_vocab"]["refused"]
    assert refused["code"] == "token_out_of_vocab" and "999" in refused["message"]
    assert in_process["aborted"]  # the engine served the next case


def test_a_unary_output_flat_request_is_aborted_without_waiting(
    in_process: dict[str, Any],
) -> None:
    abort = in_process["aborted"]["abort"]
    assert abort["sent_before_answer"] and not abort["waited_for_first_token"]
    assert abort["finish_reason"]["type"] == "abort"
    assert abort["completion_tokens"] < 900  # the engine stopped generating


@pytest.mark.parametrize("name", THROUGH_SERVICE)
def test_the_serving_loop_over_the_engine_answers_as_sglang_does(
    in_process: dict[str, Any], server: LiveServer, name: str
) -> None:
    body = BODIES[name]
    want = asyncio.run(_sglang(server.url, body))
    got = in_process[f"service_{name}"]["service"]
    assert got["status"] == 200, got["body"][:300]
    data = got["body"].encode()
    answers: list[Any]
    if name in ("n_2", "batch_2"):  # unary: SGLang's array of two answers
        answers, wanted = list(parse_unary(data, choices=2)), want
    elif body.get("stream"):
        answers, wanted = [aggregate_sse([data])], [want]
    else:
        answers, wanted = [parse_unary(data)], [want]
    for mine, theirs in zip(answers, wanted, strict=True):
        assert_same(dict(mine), theirs, tolerance=TOLERANCE)
