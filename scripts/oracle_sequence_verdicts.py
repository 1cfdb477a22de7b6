"""SGLang's verdicts on bodies of many sequences; runs INSIDE the oracle environment.

Not part of the library and never imported by it: `make_sequence_fixtures.py`
runs this file with the oracle's interpreter. Each input line is one request
body; each output line holds:

    {"gate": V, "normalize": V, "split": V}

- `gate`: the HTTP contract gate, `GenerateRequest.from_json_value(body)` (null for a
  release without one);
- `normalize`: `GenerateReqInput(**body).normalize_batch_and_arguments()`:
  `{"ok": true, "is_single", "batch_size", "parallel_sample_num", "rid"}` or the error;
- `split`: what the tokenizer manager does next with a body that is not single
  (`_handle_batch_request`): `obj[i]` for each prompt, the rids it reads
  (`{"ok": true, "rids": [...]}`; for a text batch also each prompt's `texts` and the
  body's keys set that no prompt carries, `dropped`), or the error; null for a single
  body.

    /tmp/sglang-oracle/bin/python scripts/oracle_sequence_verdicts.py < bodies.jsonl
"""

from __future__ import annotations

import importlib
import json
import sys
import warnings
from typing import Any

from oracle_request_verdicts import _failure, _load_gate, gate_verdict

Verdict = dict[str, Any]


def normalize_and_split(request_class: Any, body: dict[str, Any]) -> tuple[Verdict, Verdict | None]:
    try:
        request = request_class(**body)
        request.normalize_batch_and_arguments()
    except Exception as error:
        return _failure(error), None
    normalize = {
        "ok": True,
        "is_single": request.is_single,
        "batch_size": request.batch_size,
        "parallel_sample_num": request.parallel_sample_num,
        "rid": request.rid,
    }
    if request.is_single:
        return normalize, None
    try:
        items = [request[i] for i in range(request.batch_size)]
    except Exception as error:
        return normalize, _failure(error)
    split: Verdict = {"ok": True, "rids": [item.rid for item in items]}
    if request.text is not None:
        split["texts"] = [item.text for item in items]
        split["dropped"] = _dropped(body, items)
    return normalize, split


def _dropped(body: dict[str, Any], items: list[Any]) -> list[str]:
    """The body's keys, set (not null or false), that no prompt of the split carries."""
    return sorted(
        key
        for key, value in body.items()
        if value not in (None, False)
        and all(getattr(item, key, None) in (None, False) for item in items)
    )


def main() -> None:
    warnings.simplefilter("ignore")
    try:
        gate = _load_gate()
    except (FileNotFoundError, SystemExit):  # a release without the contract gate
        gate = None
    request_class = importlib.import_module("sglang.srt.managers.io_struct").GenerateReqInput
    for line in sys.stdin:
        if not line.strip():
            continue
        normalize, split = normalize_and_split(request_class, json.loads(line))
        gated = None if gate is None else gate_verdict(gate, json.loads(line))
        verdicts = {"gate": gated, "normalize": normalize}
        print(json.dumps({**verdicts, "split": split}), flush=True)


if __name__ == "__main__":
    main()
