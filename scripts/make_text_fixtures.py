"""Write tests/fixtures/text_conformance.jsonl: every release's verdict on text bodies.

The bodies a target with input="text" reads: `text` alone, with `input_ids`, with
neither, a batch of texts, an empty text, null and set media fields, `input_embeds`.
Each release's verdicts come from `oracle_release_verdicts.py` (its docstring says
what each stage is: over HTTP, FastAPI's parse, the contract gate where the release
wires one, `normalize_batch_and_arguments` and the tokenizer manager's checks, with a
byte-level stand-in tokenizer), run once per release with the oracle's interpreter.
The file starts with one `{"meta": ...}` line; every other line is one body and its
verdict on each release over HTTP:

    {"id": "t01", "body": {...}, "targets": {"0.5.21": V, "0.5.22": V, "0.5.23": V}}

Run from the repository root:

    /tmp/dev/bin/python scripts/make_text_fixtures.py [--oracle-python PATH]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from oracle_run import run_in_release

ROOT = Path(__file__).resolve().parent.parent
RUNNER = Path(__file__).resolve().parent / "oracle_release_verdicts.py"
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "text_conformance.jsonl"
RELEASES = ("0.5.21", "0.5.22", "0.5.23")
GREEDY = {"temperature": 0, "max_new_tokens": 4}

#: The corpus: bodies a text target decides on, accepted and refused.
BODIES: list[dict[str, Any]] = [
    {"text": "hello", "sampling_params": GREEDY},
    {"text": "hello", "input_ids": None, "sampling_params": GREEDY},
    {"text": "hello", "input_ids": [5, 6, 7]},
    {"text": "hello", "input_ids": []},
    {"sampling_params": GREEDY},
    {"text": None, "input_ids": None},
    {"text": ""},
    {"text": ["a", "b"]},
    {"text": 5},
    {"text": "hello", "image_data": None, "video_data": None, "audio_data": None},
    {"text": "hello", "modalities": None},
    {"text": "hello", "stream": True, "return_logprob": True, "logprob_start_len": 0},
    {"input_ids": [5, 6, 7], "image_data": None},
    {"input_ids": []},
    {"text": "hello", "input_embeds": [[0.5, 0.25]]},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--oracle-python", default="/tmp/sglang-oracle/bin/python")
    parser.add_argument("--releases-dir", default="/tmp/sglang-oracle/releases")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args()
    cases = "".join(json.dumps({"transport": "http", "body": b}) + "\n" for b in BODIES)
    verdicts: dict[str, list[dict[str, Any]]] = {}
    for release in RELEASES:
        out = run_in_release(
            args.oracle_python, Path(args.releases_dir), release, [str(RUNNER)], stdin=cases
        )
        verdicts[release] = [json.loads(line) for line in out.splitlines() if line.strip()]
    lines = [json.dumps({"meta": {"releases": RELEASES, "runner": RUNNER.name}})]
    for i, body in enumerate(BODIES):
        targets = {release: verdicts[release][i] for release in RELEASES}
        lines.append(json.dumps({"id": f"t{i + 1:02d}", "body": body, "targets": targets}))
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
