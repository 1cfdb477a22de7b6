"""SGLang 0.5.23's own flat top-logprob response fields; runs INSIDE the oracle (`setup.sh`).

    /tmp/sglang-oracle/bin/python scripts/oracle/flat_fields.py < rows.jsonl > fields.jsonl

Each input line is one JSON object:

    {"side": "output", "val": [null, [-0.1, -2.3], ...], "idx": [null, [5, 9], ...],
     "top_logprobs_num": 2, "b64": false}

"val"/"idx" are the nested per-position rows (null for a position without
top logprobs). Each output line is the meta_info fields that SGLang's
tokenizer manager adds for them (the same function the server calls), or
{"error": "ValueError", "message": ...} where SGLang would fall back to the
nested format.
"""

from __future__ import annotations

import json
import sys
import warnings

warnings.simplefilter("ignore")

from sglang.srt.managers.tokenizer_manager import (  # noqa: E402
    _build_flat_top_logprobs_fields,
)

for line in sys.stdin:
    if not line.strip():
        continue
    case = json.loads(line)
    try:
        fields = _build_flat_top_logprobs_fields(
            case["side"],
            case["val"],
            case["idx"],
            case["top_logprobs_num"],
            return_b64=case.get("b64", False),
        )
    except ValueError as error:
        fields = {"error": "ValueError", "message": str(error)}
    print(json.dumps(fields), flush=True)
