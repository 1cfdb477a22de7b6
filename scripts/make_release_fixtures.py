"""Write tests/fixtures/release_conformance.jsonl: every target's own verdict on a corpus.

A target is an SGLang release (0.5.21, 0.5.22, 0.5.23) and a transport
("http": the `/generate` route; "engine": in-process). The corpus is a fixed,
varied list of request bodies, accepted and refused: fields a release lacks,
output-flat, `ebnf_full_assistant`, `choice`, `priority` out of range,
`watermark` in both places and malformed, `sampling_logprobs_mode` without
`return_sampling_mask`, every `SamplingParams.verify()` failure, too many stop
strings, a long stop regex, unknown top-level and sampling keys, wrong types.

Each release's verdicts come from `oracle_release_verdicts.py`, run once per
release with the oracle's interpreter and that release's code first on
PYTHONPATH (its docstring says what each stage is and which deployment the
verdicts assume). The file starts with one `{"meta": ...}` line; every other
line is one body and its verdict on each target:

    {"id": "r0001", "kind": "...", "body": {...},
     "targets": {"0.5.21/http": V, "0.5.21/engine": V, ...}}

Run from the repository root:

    /tmp/dev/bin/python scripts/make_release_fixtures.py [--oracle-python PATH]
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oracle_run import run_in_release

ROOT = Path(__file__).resolve().parent.parent
RUNNER = Path(__file__).resolve().parent / "oracle_release_verdicts.py"
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "release_conformance.jsonl"
DEFAULT_ORACLE_PYTHON = "/tmp/sglang-oracle/bin/python"
DEFAULT_RELEASES_DIR = "/tmp/sglang-oracle/releases"
RELEASES = ("0.5.21", "0.5.22", "0.5.23")
TRANSPORTS = ("http", "engine")

Body = dict[str, Any]
IDS = [1, 2, 3]
LOGPROBS: Body = {"return_logprob": True, "top_logprobs_num": 2}

#: One valid value for every sampling key any release or gate knows.
SAMPLING_VALUES: Body = {
    "max_new_tokens": 8,
    "stop": ["</s>", "\n\n"],
    "stop_token_ids": [2],
    "stop_regex": "a+b",
    "temperature": 0.7,
    "top_p": 0.9,
    "top_k": 40,
    "min_p": 0.05,
    "frequency_penalty": 0.5,
    "presence_penalty": -0.5,
    "repetition_penalty": 1.1,
    "min_new_tokens": 1,
    "n": 1,
    "beam_width": 1,
    "json_schema": '{"type": "object"}',
    "regex": "[a-z]+",
    "ebnf": 'root ::= "a"',
    "structural_tag": '{"type": "structural_tag"}',
    "ignore_eos": True,
    "skip_special_tokens": False,
    "spaces_between_special_tokens": False,
    "no_stop_trim": True,
    "stream_interval": 2,
    "logit_bias": {"5": 1.5},
    "sampling_seed": 7,
    "custom_params": {"k": 1},
    "watermark": {"enabled": True},
    "ebnf_full_assistant": True,
    "choice": ["yes", "no"],
}

#: Sampling params each breaking one of SGLang's checks (or one type).
SAMPLING_FAILURES: tuple[Body, ...] = (
    {"beam_width": 0},
    {"temperature": -1},
    {"temperature": -0.5},
    {"top_p": 0},
    {"top_p": 1.5},
    {"min_p": 2},
    {"min_p": -0.1},
    {"top_k": 0},
    {"top_k": -2},
    {"top_k": -1},
    {"frequency_penalty": 3},
    {"presence_penalty": -2.5},
    {"repetition_penalty": 0},
    {"repetition_penalty": 2.5},
    {"min_new_tokens": -1},
    {"max_new_tokens": -1},
    {"min_new_tokens": 5, "max_new_tokens": 2},
    {"max_new_tokens": 0},
    {"logit_bias": {"4294967296": 1.0}},
    {"logit_bias": {"-1": 1.0}},
    {"logit_bias": {"x": 1.0}},
    {"sampling_seed": 2**63},
    {"sampling_seed": -(2**63) - 1},
    {"sampling_seed": 2**63 - 1},
    {"sampling_seed": 1.5},
    {"custom_params": {"__sglang_reasoning_end_token_ids": []}},
    {"custom_params": {"__sglang_reasoning_end_token_ids": [1, 2]}},
    {"json_schema": '{"type": "object"}', "regex": "a"},
    {"regex": "a", "ebnf": 'root ::= "a"', "structural_tag": "{}"},
    {"stop": ["s"] * 32},
    {"stop": ["s"] * 33},
    {"stop_regex": ["r"] * 33},
    {"stop_regex": "a" * 256},
    {"stop_regex": "a" * 257},
    {"stop_regex": "é" * 129},
    {"temperature": 0},
    {"temperature": "hot"},
    {"max_new_tokens": "8"},
    {"stop": 5},
    {"n": 2},
    {"n": None},
    {"temperature": None, "top_p": None, "top_k": None},
    {"zz_unknown_key": 1},
    {"watermark": "on"},
    {"watermark": {"bogus": 1}},
    {"watermark": {"enabled": "yes"}},
    {"watermark": {"key": "zz"}},
    {"watermark": {"key": "0x1234"}},
    {"watermark": {"key": "1" * 17}},
    {"watermark": {"context_window": 0}},
    {"watermark": {"context_window": 4}},
    {"watermark": {"enabled": False, "key": "0x1234", "context_window": 4}},
)

#: Top-level additions to a token-input body.
TOP_LEVEL: tuple[Body, ...] = (
    {},
    {"rid": "r-1"},
    {"stream": True},
    {"stream": False, **LOGPROBS},
    {"return_flat_raw_top_logprobs": True, **LOGPROBS},
    {"return_flat_raw_output_top_logprobs": True, **LOGPROBS},
    {"return_flat_raw_output_top_logprobs": True, "stream": True, **LOGPROBS},
    {"return_flat_raw_top_logprobs_b64": True},
    {"return_flat_raw_top_logprobs": True, "return_flat_raw_top_logprobs_b64": True, **LOGPROBS},
    {"mm_processor_kwargs": {"max_pixels": 1024}},
    {"watermark": {"enabled": True}},
    {"watermark": {"enabled": False}},
    {"watermark": {"enabled": True}, "sampling_params": {"watermark": {"enabled": True}}},
    {"watermark": {"enabled": True}, "sampling_params": {"watermark": None}},
    {"watermark": "on"},
    {"priority": 5},
    {"priority": -(2**63)},
    {"priority": 2**63 - 1},
    {"priority": 2**63},
    {"priority": -(2**63) - 1},
    {"priority": "high"},
    {"sampling_logprobs_mode": "support"},
    {"sampling_logprobs_mode": "support", "return_sampling_mask": True},
    {"sampling_logprobs_mode": "selected", "return_sampling_mask": False},
    {"return_sampling_mask": True},
    {"sampling_logprobs_mode": "bogus", "return_sampling_mask": True},
    {"token_indices_to_pool": [0, 2]},
    {"session_id": "s-1"},
    {"session_id": "s-1", "session_params": {"id": "s-1"}},
    {"extra_key": "tenant-a", "cache_salt": "salt", "custom_labels": {"team": "a"}},
    {"custom_labels": {"team": 1}},
    {"lora_path": None, "no_logs": True, "return_entropy": True},
    {"zz_unknown_field": 1},
    {"return_logprob": "yes"},
    {"stream": "yes"},
    {"sampling_params": None},
    {"sampling_params": {}},
    {"input_ids": []},
    {"input_ids": "abc"},
    {"input_ids": [1, -1]},
    {"input_ids": [[1, 2], [3]]},
    {"input_ids": [[1, 2], [3]], "sampling_params": {"temperature": -1}},
    {"sampling_params": {"n": 2, "top_p": 0}},
    {"sampling_params": {"n": 2, "stop": ["s"] * 33}, "priority": 2**63},
    {"session_id": 5},
    {"extra_key": 5},
)


def corpus() -> list[tuple[str, Body]]:
    """Every (kind, body), in a fixed order, without repeats."""
    bodies: list[tuple[str, Body]] = []
    for extra in TOP_LEVEL:
        bodies.append(("top-level", {"input_ids": IDS, **extra}))
    for key, value in SAMPLING_VALUES.items():
        bodies.append(("sampling-key", {"input_ids": IDS, "sampling_params": {key: value}}))
    for params in SAMPLING_FAILURES:
        bodies.append(("sampling-check", {"input_ids": IDS, "sampling_params": params}))
    everything = {k: v for k, v in SAMPLING_VALUES.items() if k not in ("regex", "ebnf")}
    bodies.append(("sampling-all", {"input_ids": IDS, "sampling_params": everything}))
    unique: list[tuple[str, Body]] = []
    seen: set[str] = set()
    for kind, body in bodies:
        key = json.dumps(body, sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append((kind, body))
    return unique


def release_verdicts(
    oracle_python: str, releases_dir: Path, version: str, lines: list[str]
) -> list[Any]:
    """One verdict per line, from the release's own code run by the oracle."""
    stdin = "".join(line + "\n" for line in lines)
    stdout = run_in_release(oracle_python, releases_dir, version, [str(RUNNER)], stdin=stdin)
    verdicts = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    if len(verdicts) != len(lines):
        raise SystemExit(f"{RUNNER.name} answered {len(verdicts)} of {len(lines)} lines")
    return verdicts


def build_cases(oracle_python: str, releases_dir: Path) -> tuple[Body, list[Body]]:
    bodies = corpus()
    cases: list[Body] = [
        {"id": f"r{index:04d}", "kind": kind, "body": body, "targets": {}}
        for index, (kind, body) in enumerate(bodies, start=1)
    ]
    for version in RELEASES:
        lines = [
            json.dumps({"transport": transport, "body": body})
            for _, body in bodies
            for transport in TRANSPORTS
        ]
        verdicts = iter(release_verdicts(oracle_python, releases_dir, version, lines))
        for case in cases:
            for transport in TRANSPORTS:
                case["targets"][f"{version}/{transport}"] = next(verdicts)
    meta: Body = {
        "generator": "scripts/make_release_fixtures.py",
        "oracle_runner": "scripts/oracle_release_verdicts.py",
        "releases": list(RELEASES),
        "transports": list(TRANSPORTS),
        "cases": len(cases),
        "deployment": {
            "vocab_size": 2**32,
            "tokenizer": "byte-level stand-in",
            "server": "SGLang's default ServerArgs",
        },
    }
    return meta, cases


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--oracle-python",
        default=os.environ.get("SGLANG_ORACLE_PYTHON", DEFAULT_ORACLE_PYTHON),
    )
    parser.add_argument(
        "--releases-dir",
        type=Path,
        default=Path(os.environ.get("SGLANG_ORACLE_RELEASES", DEFAULT_RELEASES_DIR)),
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    meta, cases = build_cases(args.oracle_python, args.releases_dir)
    with args.out.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"meta": meta}, sort_keys=True) + "\n")
        for case in cases:
            out.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"wrote {len(cases)} cases x {len(RELEASES) * len(TRANSPORTS)} targets to {args.out}")


if __name__ == "__main__":
    main()
