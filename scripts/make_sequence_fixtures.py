"""Write tests/fixtures/sequence_conformance.jsonl: SGLang's verdicts on many sequences.

For a corpus of bodies with a batch of prompts, `sampling_params.n`, or both,
records the library's verdict (`decode_sequences`, from this working tree:
its prompts, n, count, rids and a text batch's texts, or the refusal; a body
with `text` is decoded for `Target(input="text")`) and, for each release
(0.5.21, 0.5.22, 0.5.23), SGLang's own (`oracle_sequence_verdicts.py`, run with
the oracle's interpreter and that release's code): the contract gate,
`normalize_batch_and_arguments()` and the tokenizer manager's split into
prompts. `tests/test_sequence_conformance.py` replays them. Run from the
repository root:

    /tmp/dev/bin/python scripts/make_sequence_fixtures.py [--oracle-python PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oracle_run import run_in_release

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the library from this working tree, not an installed copy

from sglang_envelope import RequestRejected, Target, decode_sequences  # noqa: E402

RUNNER = Path(__file__).resolve().parent / "oracle_sequence_verdicts.py"
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "sequence_conformance.jsonl"
RELEASES = ("0.5.21", "0.5.22", "0.5.23")
Body = dict[str, Any]

BATCH = [[1, 2, 3], [4, 5]]
TEXTS = ["Hello", "world"]
TEXT = Target(input="text")
CORPUS: tuple[Body, ...] = (
    {"input_ids": [1, 2]},
    {"input_ids": [1, 2], "rid": "a", "sampling_params": {"n": 3}},
    {"input_ids": [1, 2], "sampling_params": {"n": 2}, "stream": True},
    {"input_ids": [1, 2], "sampling_params": {"n": 0}},
    {"input_ids": [1, 2], "sampling_params": {"n": -3}},
    {"input_ids": [1, 2], "sampling_params": {"n": None}},
    {"input_ids": [1, 2], "sampling_params": {"n": 2, "beam_width": 2}},
    {"input_ids": [1, 2], "sampling_params": {"n": 2, "beam_width": 1}},
    {"input_ids": BATCH},
    {"input_ids": BATCH, "rid": "b"},
    {"input_ids": BATCH, "rid": ["x", "y"]},
    {"input_ids": BATCH, "rid": ["x"]},
    {"input_ids": BATCH, "rid": ["x", "y", "z"]},
    {"input_ids": BATCH, "rid": ["x", "x"]},
    {"input_ids": BATCH, "rid": "b", "sampling_params": {"n": 2}},
    {"input_ids": BATCH, "rid": ["x", "y"], "sampling_params": {"n": 3}, "stream": True},
    {"input_ids": BATCH, "sampling_params": {"n": 0}},
    {"input_ids": BATCH, "sampling_params": {"n": 2, "beam_width": 2}},
    {"input_ids": BATCH, "sampling_params": {"n": None}},
    {"input_ids": [[1]]},
    {"input_ids": [[1], []]},
    {"input_ids": [[1], 2]},
    {"input_ids": [1, [2]]},
    {"input_ids": [[1], [2]], "return_logprob": True, "top_logprobs_num": 2},
    {"input_ids": [[1], [2]], "sampling_params": [{"n": 1}, {"n": 1}]},
    {"input_ids": [[1], [2]], "return_logprob": [True, False]},
    {"input_ids": [[1], [2]], "token_ids_logprob": [[1], [2]]},
    {"input_ids": [[1], [2]], "token_ids_logprob": [1]},
    {"input_ids": [[1], [2]], "stream": True, "return_flat_raw_output_top_logprobs": True},
    {"input_ids": [[1], [2]], "session_id": "s", "session_params": {"id": "s"}},
    {"input_ids": [[1], [2]], "multi_item_delimiter_indices": [1, 2]},
    # Text batches, decoded for Target(input="text") (a body with `text`: `target_of`).
    {"text": TEXTS},
    {"text": TEXTS, "rid": "t"},
    {"text": TEXTS, "rid": ["x", "y"]},
    {"text": TEXTS, "rid": ["x"]},
    {"text": TEXTS, "rid": ["x", "x"]},
    {"text": TEXTS, "rid": "t", "sampling_params": {"n": 2}},
    {"text": TEXTS, "rid": ["x", "y"], "sampling_params": {"n": 3}, "stream": True},
    {"text": TEXTS, "sampling_params": {"n": 0}},
    {"text": TEXTS, "sampling_params": {"n": 2, "beam_width": 2}},
    {"text": "Hello", "rid": "a", "sampling_params": {"n": 2}},
    {"text": ["one"]},
    {"text": []},
    {"text": ["Hello", 1]},
    {"text": ["Hello", None]},
    {"text": [["Hello"], ["world"]]},
    {"text": TEXTS, "input_ids": [1, 2]},
    {"text": TEXTS, "input_ids": [[1], [2]]},
    {"text": "Hello", "input_ids": [[1], [2]]},
    {"text": TEXTS, "input_ids": None},
    {"text": TEXTS, "sampling_params": [{"n": 1}, {"n": 1}]},
    {"text": TEXTS, "return_logprob": True, "top_logprobs_num": 2},
    {"text": TEXTS, "image_data": "https://example.com/a.png"},
    {"text": TEXTS, "image_data": []},
    {"text": TEXTS, "image_data": ["https://example.com/a.png", "https://example.com/b.png"]},
    {"text": TEXTS, "video_data": ["https://example.com/a.mp4"]},
    {"text": TEXTS, "audio_data": "https://example.com/a.wav"},
    {"text": TEXTS, "modalities": ["image", "image"]},
    {"text": TEXTS, "mm_hashes": ["h1", "h2"]},
    {"text": TEXTS, "video_config": {"fps": 1}},
    {"text": TEXTS, "max_dynamic_patch": 4},
    {"text": TEXTS, "use_audio_in_video": True},
    {"text": TEXTS, "use_audio_in_video": False},
)


def target_of(body: Body) -> Target:
    """The target a body is decoded for: text input when it has `text`, else the default."""
    return TEXT if "text" in body else Target()


def library_verdict(body: Body) -> Body:
    try:
        sequences = decode_sequences(json.dumps(body).encode(), target=target_of(body))
    except RequestRejected as error:
        return {"accepted": False, "code": error.code, "field": error.field,
                "message": error.message}  # fmt: skip
    verdict = {
        "accepted": True,
        "prompts": len(sequences.requests),
        "n": sequences.n,
        "count": sequences.count,
        "array": sequences.array,
        "rids": [request.rid for request in sequences.requests],
    }
    if "text" in body:
        verdict["texts"] = [request.text for request in sequences.requests]
    return verdict


def _drop_random_rids(body: Body, verdict: Body) -> None:
    """SGLang's random rids (uuid4 hex), where the body gives none or n > 1 regenerates
    them, as "<uuid4>": the fixture stays the same from one run to the next."""
    normalize, split = verdict["normalize"], verdict["split"]
    random = "rid" not in body or (normalize.get("parallel_sample_num") or 1) > 1
    if normalize.get("ok") and "rid" not in body:
        rid = normalize["rid"]
        normalize["rid"] = ["<uuid4>"] * len(rid) if isinstance(rid, list) else "<uuid4>"
    if split and split.get("ok") and random and "rid" not in body:
        split["rids"] = ["<uuid4>"] * len(split["rids"])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--oracle-python",
        default=os.environ.get("SGLANG_ORACLE_PYTHON", "/tmp/sglang-oracle/bin/python"),
    )
    parser.add_argument("--releases-dir", type=Path, default=Path("/tmp/sglang-oracle/releases"))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    lines = "".join(json.dumps(body) + "\n" for body in CORPUS)
    verdicts: dict[str, list[Body]] = {}
    for release in RELEASES:
        out = run_in_release(
            args.oracle_python, args.releases_dir, release, [str(RUNNER)], stdin=lines
        )
        verdicts[release] = [json.loads(line) for line in out.splitlines() if line.strip()]
        assert len(verdicts[release]) == len(CORPUS), release
    with args.out.open("w", encoding="utf-8") as out_file:
        meta = {"generator": "scripts/make_sequence_fixtures.py", "releases": list(RELEASES),
                "cases": len(CORPUS)}  # fmt: skip
        out_file.write(json.dumps({"meta": meta}) + "\n")
        for index, body in enumerate(CORPUS):
            for release in RELEASES:  # SGLang's own rids are random uuids: kept out
                _drop_random_rids(body, verdicts[release][index])
            case = {
                "id": f"s{index + 1:03d}",
                "body": body,
                "library": library_verdict(body),
                "sglang": {release: verdicts[release][index] for release in RELEASES},
            }
            out_file.write(json.dumps(case) + "\n")
    print(f"wrote {len(CORPUS)} cases to {args.out}")


if __name__ == "__main__":
    main()
