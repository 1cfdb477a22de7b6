"""Record a stream in which SGLang's lists run ahead of their counts, as a golden fixture.

    python live/record_running_ahead.py --url http://127.0.0.1:30000 \
        [--tries 300] [--out tests/fixtures/running_ahead.jsonl]

A cumulative server puts the request's growing lists into a middle frame, not
copies, and writes the frame when it gets to it: with ``n = 4`` and logprobs, a
few streams in a hundred have a frame whose ``output_ids`` and
``output_token_logprobs`` hold more entries than its ``completion_tokens`` and
``output_token_logprobs_length`` count. The body is streamed until one such
stream comes (at most `--tries` times); the line holds the body, that stream's
bytes and SGLang's unary answer to the same body, as text
(`tests/test_stream_mode.py` reads it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import httpx

BODY: dict[str, Any] = {
    "input_ids": [5, 6, 7, 9, 10, 11, 12, 13],
    "sampling_params": {"temperature": 0, "max_new_tokens": 10, "n": 4},
    "return_logprob": True,
    "top_logprobs_num": 2,
}


def runs_ahead(stream: bytes) -> bool:
    """Whether a middle frame of `stream` holds more ids or logprobs than it counts."""
    for event in stream.split(b"\n\n"):
        if not event.startswith(b"data: {"):
            continue
        frame = json.loads(event[len(b"data: ") :])
        meta = frame["meta_info"]
        if meta["finish_reason"] is None and (
            len(frame["output_ids"]) > meta["completion_tokens"]
            or len(meta["output_token_logprobs"]) > meta["output_token_logprobs_length"]
        ):
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a default-flags SGLang server")
    parser.add_argument("--tries", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/running_ahead.jsonl"))
    args = parser.parse_args()
    with httpx.Client(base_url=args.url, timeout=120) as client:
        for tried in range(1, args.tries + 1):
            streamed = client.post("/generate", json={**BODY, "stream": True})
            assert streamed.status_code == 200, streamed.text
            if runs_ahead(streamed.content):
                print(f"try {tried}: a stream ran ahead of its counts")
                break
        else:
            raise SystemExit(f"no stream ran ahead of its counts in {args.tries} tries")
        unary = client.post("/generate", json={**BODY, "stream": False})
        assert unary.status_code == 200, unary.text
    line = {"body": BODY, "stream": streamed.text, "unary": unary.text}
    args.out.write_text(json.dumps(line, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{args.out}: written")


if __name__ == "__main__":
    main()
