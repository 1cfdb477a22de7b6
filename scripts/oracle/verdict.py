"""SGLang 0.5.23's own verdict on engine requests; runs INSIDE the oracle (`setup.sh`).

    /tmp/sglang-oracle/bin/python scripts/oracle/verdict.py < requests.jsonl > verdicts.jsonl

Each input line is one JSON object: the keyword arguments of
sglang.srt.managers.io_struct.GenerateReqInput (what a worker passes to
tokenizer_manager.generate_request, or POSTs to /generate). Each output line
says what SGLang's normalize_batch_and_arguments() made of it:

    {"ok": true, "stream": false, "is_single": true}
    {"ok": false, "error": "ValueError", "message": "..."}

A key that GenerateReqInput does not have is reported as error "TypeError".
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

warnings.simplefilter("ignore")

from sglang.srt.managers.io_struct import (  # noqa: E402
    GenerateReqInput,
)


def verdict(kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        request = GenerateReqInput(**kwargs)
        request.normalize_batch_and_arguments()
    except (TypeError, ValueError) as error:
        return {"ok": False, "error": type(error).__name__, "message": str(error)}
    return {"ok": True, "stream": request.stream, "is_single": request.is_single}


for line in sys.stdin:
    if line.strip():
        print(json.dumps(verdict(json.loads(line))), flush=True)
