"""Write tests/fixtures/relay_streams.jsonl: one generation as SGLang streams it in both modes.

Run with the SGLang oracle environment's interpreter (built by
scripts/oracle/setup.sh); it imports SGLang 0.5.23:

    /tmp/sglang-oracle/bin/python scripts/make_relay_fixtures.py [--out PATH]

Each case is one generation, built as ``TokenizerManager._handle_batch_output``
builds its frames (`make_sse_fixtures.generation`), streamed by SGLang's own
``http_server.serve_generate_request`` twice: as its cumulative frames
(SGLang's default) and as its incremental frames, cut from those by
SGLang's ``_slice_streaming_output_meta_info``. The script checks, with
``TokenizerManager._coalesce_streaming_chunks``, that coalescing the first k
incremental frames gives the k-th cumulative frame, so the two streams are one
generation as SGLang sees it. A relay from one stream to a client of the other
mode must write the other stream.

When several frames reach a slow reader at once, SGLang sends one frame for
them (``_wait_one_response``): the last one in cumulative mode, their
``_coalesce_streaming_chunks`` in incremental mode. ``runs`` holds SGLang's
event for every run of consecutive frames, so a relay that reads several
frames in one chunk can be checked too.

One JSON line per case:

    {"name": ..., "cumulative": <SGLang's cumulative stream, as text>,
     "incremental": <SGLang's incremental stream, as text>,
     "runs": {"cumulative": {"i:j": <event>}, "incremental": {"i:j": <event>}}}

where ``i:j`` covers frames i to j-1 (0-based) and an event is
``data: <json>\\n\\n``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import random
from pathlib import Path
from typing import Any

from make_sse_fixtures import generation, incremental, serve
from sglang.srt.managers.tokenizer_manager import TokenizerManager

SEED = 20261201
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "relay_streams.jsonl"


def stream(frames: list[dict[str, Any]], error: Exception | None = None) -> str:
    return asyncio.run(serve(frames, stream=True, error=error)).decode()


def coalesce(frames: list[dict[str, Any]]) -> dict[str, Any]:
    return TokenizerManager._coalesce_streaming_chunks(None, copy.deepcopy(frames), "rid-0")  # type: ignore[no-any-return]


def case(
    name: str, cumulative: list[dict[str, Any]], error: Exception | None = None
) -> dict[str, Any]:
    deltas = incremental(cumulative)
    for k in range(len(cumulative)):
        assert coalesce(deltas[: k + 1]) == cumulative[k], f"{name}: frame {k} differs"
    runs: dict[str, dict[str, str]] = {"cumulative": {}, "incremental": {}}
    for i in range(len(cumulative)):
        for j in range(i + 1, len(cumulative) + 1):
            # SGLang's event for frames i..j-1 read at once, after frames 0..i-1 were sent.
            runs["cumulative"][f"{i}:{j}"] = stream([cumulative[j - 1]]).removesuffix(
                "data: [DONE]\n\n"
            )
            runs["incremental"][f"{i}:{j}"] = stream([coalesce(deltas[i:j])]).removesuffix(
                "data: [DONE]\n\n"
            )
    return {
        "name": name,
        "cumulative": stream(cumulative, error),
        "incremental": stream(deltas, error),
        "runs": runs,
    }


def cases(rng: random.Random) -> list[dict[str, Any]]:
    length = {"type": "length", "length": 9}
    stop = {"type": "stop", "matched": 2}
    shapes = [
        ("logprobs", dict(logprobs=True, extra=False, text=True, finish=length)),
        ("every_delta_key", dict(logprobs=True, extra=True, text=True, finish=stop)),
        ("plain", dict(logprobs=False, extra=False, text=True, finish=stop)),
        ("skip_tokenizer_init", dict(logprobs=True, extra=False, text=False, finish=length)),
    ]
    out = []
    for name, shape in shapes:
        out.append(case(name, list(generation(rng, rng.randint(3, 7), **shape))))  # type: ignore[arg-type]
    cut = list(generation(rng, 4, logprobs=True, extra=False, text=True, finish=length))
    cut[-1]["meta_info"]["finish_reason"] = None
    error = ValueError("The running request was aborted by a backend error.")
    error.status_code = 503  # type: ignore[attr-defined]
    out.append(case("error_frame", cut[:3], error))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    with args.out.open("w") as out:
        for one in cases(random.Random(SEED)):
            out.write(json.dumps(one, ensure_ascii=False, sort_keys=True) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
