"""Record a Mixture-of-Experts server's and a prefill/decode pair's answers to the same bodies.

    python live/record_moe_pair.py --url AGGREGATED --prefill-url PREFILL --decode-url DECODE \
        --bootstrap-port PORT [--out tests/fixtures/moe_pair_answers.jsonl]

All three servers serve the live suite's MoE model with ``--enable-return-routed-experts``
(`live/servers.py`, kind ``moe``; `live/pd.py`). One JSON line per body: the body and the
three unary answers (the aggregated server's, the prefill leg's, the decode leg's). The unit
tests hold `merge_prefill` of the two legs to the aggregated answer, routed experts and
prompt logprobs included (`tests/test_routed_experts.py`).
"""

from __future__ import annotations

import argparse
import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

GREEDY = {"max_new_tokens": 4, "temperature": 0}
#: name -> a client body: routed experts alone, from a start, and with every prompt logprob.
BODIES: dict[str, dict[str, Any]] = {
    "routed": {"input_ids": [5, 6, 7, 8, 9], "return_routed_experts": True,
               "sampling_params": GREEDY},
    "routed_from_3": {"input_ids": [5, 6, 7, 8, 9], "return_routed_experts": True,
                      "routed_experts_start_len": 3, "sampling_params": GREEDY},
    "routed_logprobs": {"input_ids": [21, 22, 23, 24, 25, 26], "return_routed_experts": True,
                        "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 2,
                        "token_ids_logprob": [5, 6], "sampling_params": GREEDY},
}  # fmt: skip


def post(url: str, body: dict[str, Any]) -> Any:
    answer = httpx.post(f"{url}/generate", json=body, timeout=120)
    answer.raise_for_status()
    return answer.json()


def record(url: str, prefill_url: str, decode_url: str, port: int) -> list[dict[str, Any]]:
    lines = []
    for name, body in BODIES.items():
        room = random.getrandbits(63)
        leg = {**body, "bootstrap_host": "127.0.0.1", "bootstrap_port": port,
               "bootstrap_room": room}  # fmt: skip
        with ThreadPoolExecutor(2) as pool:
            prefill = pool.submit(post, prefill_url, leg)
            decode = pool.submit(post, decode_url, leg)
            legs = prefill.result(), decode.result()
        aggregated = post(url, body)
        lines.append({"name": name, "body": body, "aggregated": aggregated,
                      "prefill": legs[0], "decode": legs[1]})  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--url", "--prefill-url", "--decode-url"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--bootstrap-port", type=int, required=True)
    parser.add_argument("--out", default="tests/fixtures/moe_pair_answers.jsonl")
    args = parser.parse_args()
    lines = record(args.url, args.prefill_url, args.decode_url, args.bootstrap_port)
    text = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
    Path(args.out).write_text(text, encoding="utf-8")
    print(f"wrote {len(lines)} lines to {args.out}")


if __name__ == "__main__":
    main()
