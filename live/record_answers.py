"""Record SGLang's own answers to the same bodies, unary and streamed, as golden fixtures.

    python live/record_answers.py --url http://127.0.0.1:30000 --model-dir MODEL \
        [--incremental-url http://127.0.0.1:30001] [--out tests/fixtures/live_answers.jsonl]

One JSON line per body and server: the body, the server's stream mode, SGLang's
unary answer (its bytes, as text) and the bytes of its answer to the same body
with ``"stream": true``. At temperature 0 both carry the same tokens, so the
unit tests can hold the library's aggregation of the stream to the unary answer,
key order included (`tests/test_live_answers.py`). It also writes the server's
``GET /get_server_info`` body beside them (`live_server_info.json`), which
`tests/test_deployment.py` reads as a worker would, with the model's
``config.json`` (`live_model_config.json`, from ``--model-dir``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import httpx

GREEDY = {"max_new_tokens": 6, "temperature": 0}
#: name -> a client body (without "stream"): every kind of answer the live suite compares.
BODIES: dict[str, dict[str, Any]] = {
    "plain": {"input_ids": [5, 6, 7], "sampling_params": GREEDY},
    "logprobs": {"input_ids": [5, 6, 7, 8], "return_logprob": True, "logprob_start_len": 1,
                 "top_logprobs_num": 2, "sampling_params": GREEDY},
    "prompt_flat": {"input_ids": [5, 6, 7], "return_logprob": True, "logprob_start_len": 0,
                    "top_logprobs_num": 2, "return_flat_raw_top_logprobs": True,
                    "sampling_params": GREEDY},
    "prompt_flat_b64": {"input_ids": [5, 6, 7], "return_logprob": True, "logprob_start_len": 0,
                        "top_logprobs_num": 2, "return_flat_raw_top_logprobs": True,
                        "return_flat_raw_top_logprobs_b64": True, "sampling_params": GREEDY},
    "token_ids_logprob": {"input_ids": [5, 6], "return_logprob": True,
                          "token_ids_logprob": [1, 7], "sampling_params": GREEDY},
    "stop_ids": {"input_ids": [5, 6, 7],
                 "sampling_params": {**GREEDY, "max_new_tokens": 12, "stop_token_ids": [306]}},
    "ignore_eos": {"input_ids": [9], "sampling_params": {**GREEDY, "ignore_eos": True}},
}  # fmt: skip
JSON = {"Content-Type": "application/json"}


def record(url: str, incremental: bool) -> list[dict[str, Any]]:
    lines = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for name, body in BODIES.items():
            unary = client.post("/generate", json={**body, "stream": False}, headers=JSON)
            streamed = client.post("/generate", json={**body, "stream": True}, headers=JSON)
            assert unary.status_code == streamed.status_code == 200, (name, unary.text)
            lines.append({"name": name, "incremental": incremental, "body": body,
                          "unary": unary.text, "stream": streamed.text})  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a default-flags SGLang server")
    parser.add_argument("--incremental-url", help="one with --incremental-streaming-output")
    parser.add_argument("--model-dir", type=Path, required=True, help="the server's model")
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/live_answers.jsonl"))
    args = parser.parse_args()
    lines = record(args.url, False)
    if args.incremental_url:
        lines += record(args.incremental_url, True)
    text = "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines)
    args.out.write_text(text, encoding="utf-8")
    info = httpx.get(f"{args.url}/get_server_info", timeout=30).content
    (args.out.parent / "live_server_info.json").write_bytes(info)
    config = (args.model_dir / "config.json").read_bytes()
    (args.out.parent / "live_model_config.json").write_bytes(config)
    print(f"{args.out}: {len(lines)} answers")


if __name__ == "__main__":
    main()
