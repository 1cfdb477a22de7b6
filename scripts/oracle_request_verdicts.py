"""SGLang 0.5.23's verdicts on request bodies; runs INSIDE the oracle environment.

Not part of the library and never imported by it: `make_request_fixtures.py`
runs this file with the oracle's interpreter (built by
scripts/oracle/setup.sh). Each input line is one JSON object, a
request body (the keyword arguments of `GenerateReqInput`); each output line
holds three verdicts on it:

    {"normalize": V, "gate": V, "sampling": V | null}

- `normalize`: `GenerateReqInput(**body).normalize_batch_and_arguments()`, as
  the oracle's `verdict.py` runs it: `{"ok": true, "stream": ..., "is_single": ...}`
  or `{"ok": false, "error": <exception type>, "message": ...}`. Exceptions other
  than TypeError and ValueError are reported too (verdict.py would stop on them).
- `gate`: the HTTP contract gate, `GenerateRequest.from_json_value(body)` from
  `sglang/api/v1/api_types.py`, loaded by file path (it needs only msgspec):
  `{"ok": true}` or `{"ok": false, "error": "JsonContractError", "message": ...}`.
- `sampling`: what the tokenizer manager does later with the sampling params,
  `SamplingParams(**sampling_params).verify(vocab_size)`; null when
  `sampling_params` is neither absent, null nor an object.

    /tmp/sglang-oracle/bin/python scripts/oracle_request_verdicts.py < bodies.jsonl

With `--rebootstrap`, each input line instead holds the keyword arguments of a
decode-side `Req` (`managers/schedule_batch.py`): `rid`, `input_ids`,
`bootstrap_host`, `bootstrap_port`, `bootstrap_room`, `routed_dp_rank` (the
decode rank) and `disagg_prefill_dp_rank`; each output line is the prefill
`/generate` payload SGLang itself builds for it (`Req.build_rebootstrap_payload()`),
which shows how SGLang routes a prefill request to its data-parallel rank.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

#: Passed to `SamplingParams.verify`; it bounds only `logit_bias` keys.
VOCAB_SIZE = 2**32

Verdict = dict[str, Any]


def _load_gate() -> ModuleType:
    spec = importlib.util.find_spec("sglang")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("sglang is not installed in this interpreter")
    path = Path(next(iter(spec.submodule_search_locations))) / "api" / "v1" / "api_types.py"
    gate_spec = importlib.util.spec_from_file_location("sglang_api_v1_api_types", path)
    if gate_spec is None or gate_spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(gate_spec)
    sys.modules[gate_spec.name] = module
    gate_spec.loader.exec_module(module)
    return module


def _failure(error: BaseException) -> Verdict:
    return {"ok": False, "error": type(error).__name__, "message": str(error)}


def normalize_verdict(request_class: Any, body: dict[str, Any]) -> Verdict:
    try:
        request = request_class(**body)
        request.normalize_batch_and_arguments()
    except Exception as error:
        return _failure(error)
    return {"ok": True, "stream": request.stream, "is_single": request.is_single}


def gate_verdict(gate: ModuleType, body: dict[str, Any]) -> Verdict:
    try:
        gate.GenerateRequest.from_json_value(body)
    except Exception as error:
        return _failure(error)
    return {"ok": True}


def sampling_verdict(params_class: Any, body: dict[str, Any]) -> Verdict | None:
    params = body.get("sampling_params")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return None
    try:
        params_class(**params).verify(VOCAB_SIZE)
    except Exception as error:
        return _failure(error)
    return {"ok": True}


def rebootstrap_payload(arguments: dict[str, Any]) -> Verdict:
    """SGLang's own prefill payload for a decode-side request (its PD rebootstrap)."""
    from array import array

    schedule_batch = importlib.import_module("sglang.srt.managers.schedule_batch")
    params_class = importlib.import_module("sglang.srt.sampling.sampling_params").SamplingParams
    request = schedule_batch.Req(
        rid=arguments["rid"],
        origin_input_text="",
        origin_input_ids=array("i", arguments["input_ids"]),
        sampling_params=params_class(max_new_tokens=8),
        bootstrap_host=arguments["bootstrap_host"],
        bootstrap_port=arguments["bootstrap_port"],
        bootstrap_room=arguments["bootstrap_room"],
        routed_dp_rank=arguments["routed_dp_rank"],
        disagg_prefill_dp_rank=arguments["disagg_prefill_dp_rank"],
    )
    payload: Verdict = request.build_rebootstrap_payload()
    return payload


def main() -> None:
    warnings.simplefilter("ignore")
    if sys.argv[1:] == ["--rebootstrap"]:
        for line in sys.stdin:
            if line.strip():
                print(json.dumps(rebootstrap_payload(json.loads(line))), flush=True)
        return
    gate = _load_gate()
    request_class = importlib.import_module("sglang.srt.managers.io_struct").GenerateReqInput
    params_module = importlib.import_module("sglang.srt.sampling.sampling_params")
    params_class = params_module.SamplingParams
    for line in sys.stdin:
        if not line.strip():
            continue
        # A fresh copy for each check: SGLang may change the objects it is given.
        verdicts = {
            "normalize": normalize_verdict(request_class, json.loads(line)),
            "gate": gate_verdict(gate, json.loads(line)),
            "sampling": sampling_verdict(params_class, json.loads(line)),
        }
        print(json.dumps(verdicts), flush=True)


if __name__ == "__main__":
    main()
