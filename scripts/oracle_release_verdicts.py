"""One SGLang release's verdicts on request bodies, per transport; runs INSIDE the oracle.

Not part of the library and never imported by it: `make_release_fixtures.py`
runs this file once per release with the oracle's interpreter, the release's
folder first on PYTHONPATH. Each input line is `{"transport": "http" |
"engine", "body": {...}}`; each output line is the release's verdict:

    {"ok": true, "dropped": [keys FastAPI left out]}
    {"ok": false, "stage": S, "error": <exception type>, "message": ..., "status": N | null}

The stages, in the order SGLang runs them:

- over HTTP, `fastapi`: FastAPI's parse of the body into `GenerateReqInput`, by
  a route declared as SGLang's `/generate` is (`obj: GenerateReqInput, request:
  Request`), run with Starlette's TestClient (status 422 on failure); then
  `gate`: `generate_contract_error(await request.json())`, when the release's
  `/generate` route calls it (status 400);
- in-process, `GenerateReqInput`: `GenerateReqInput(**body)`;
- then, on both: `normalize_batch_and_arguments`, and the tokenizer manager's
  own `_set_default_priority`, `_validate_one_request` and
  `_create_tokenized_object` (which builds `SamplingParams(**sampling_params)`
  and runs its `normalize(tokenizer)` and `verify(vocab_size)`), called on a
  `TokenizerManager` made without its `__init__`, holding only the attributes
  those methods read, with SGLang's default `ServerArgs` published. A batch
  (or `n` > 1) is checked item by item (`obj[i]`), as `_handle_batch_request` does.

The deployment is fixed: a byte-level stand-in tokenizer (`encode` gives the
UTF-8 bytes), `VOCAB_SIZE`, a context of `CONTEXT_LEN` tokens, default server
flags. Checks the route runs between these steps that need the server
(`max_thinking_tokens` without `--enable-strict-thinking`, `routed_dp_rank`
against the data-parallel size) are not run; the corpus leaves those fields out.

    PYTHONPATH=/tmp/sglang-oracle/releases/0.5.22 \\
        /tmp/sglang-oracle/bin/python scripts/oracle_release_verdicts.py < cases.jsonl
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import json
import re
import sys
import traceback
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The deployment the verdicts assume.
VOCAB_SIZE = 2**32
CONTEXT_LEN = 1 << 40

Verdict = dict[str, Any]
Steps = tuple[tuple[str, Callable[..., Any], tuple[Any, ...]], ...]


class StandInTokenizer:
    """Enough of a tokenizer for `SamplingParams.normalize`: one token per UTF-8 byte."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(text.encode("utf-8"))


class _NoOpStats:
    """Time stats that record nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _failure(stage: str, error: BaseException, status: int | None = None) -> Verdict:
    return {
        "ok": False,
        "stage": stage,
        "error": type(error).__name__,
        "message": str(error),
        "status": status,
    }


def _publish_defaults() -> None:
    runtime = importlib.import_module("sglang.srt.runtime_context")
    server_args = importlib.import_module("sglang.srt.server_args")
    runtime.publish(
        server_args.ServerArgs(model_path="dummy"),
        role="tokenizer",
        ranks=runtime.SpawnRanks(world_rank=0, dp_rank=None),
    )


def _tokenizer_manager(io_struct: Any, params_class: Any) -> Any:
    manager_class = importlib.import_module(
        "sglang.srt.managers.tokenizer_manager"
    ).TokenizerManager
    manager = manager_class.__new__(manager_class)
    model_config = types.SimpleNamespace(
        vocab_size=VOCAB_SIZE,
        hidden_size=8,
        is_matryoshka=False,
        joint_head_config=None,
        pointer_head=None,
        hf_config=types.SimpleNamespace(architectures=["LlamaForCausalLM"]),
    )
    manager.__dict__.update(
        enable_priority_scheduling=False,
        default_priority_value=None,
        context_len=CONTEXT_LEN,
        num_reserved_tokens=0,
        allow_auto_truncate=False,
        validate_total_tokens=True,
        model_config=model_config,
        is_generation=True,
        preferred_sampling_params=None,
        sampling_params_class=params_class,
        tokenizer=StandInTokenizer(),
        tokenized_generate_req_type=io_struct.TokenizedGenerateReqInput,
        fake_bootstrap_room_counter=0,
        # The request states `_create_tokenized_object` reads its time stats from.
        rid_to_state=collections.defaultdict(
            lambda: types.SimpleNamespace(time_stats=_NoOpStats())
        ),
    )
    return manager


def _sampling_stage(error: BaseException) -> str | None:
    """Which step of `SamplingParams` raised `error`, read from its traceback; None: none did."""
    for frame, _ in traceback.walk_tb(error.__traceback__):
        code = frame.f_code
        if code.co_filename.endswith("sampling_params.py"):
            return SAMPLING_STAGES.get(code.co_name, "SamplingParams(**sampling_params)")
    last = traceback.extract_tb(error.__traceback__)[-1]
    if "sampling_params_class(" in (last.line or ""):
        return "SamplingParams(**sampling_params)"  # msgspec's own __init__ refused a key
    return None


SAMPLING_STAGES = {
    "__post_init__": "SamplingParams(**sampling_params)",
    "normalize": "SamplingParams.normalize",
    "verify": "SamplingParams.verify",
}


class Release:
    """The release on PYTHONPATH: its request class, its route and its engine steps."""

    def __init__(self) -> None:
        warnings.simplefilter("ignore")
        self.io_struct = importlib.import_module("sglang.srt.managers.io_struct")
        self.request_class = self.io_struct.GenerateReqInput
        self.fields = {field.name for field in dataclasses.fields(self.request_class)}
        params_class = importlib.import_module("sglang.srt.sampling.sampling_params").SamplingParams
        _publish_defaults()
        self.manager = _tokenizer_manager(self.io_struct, params_class)
        self.gate = self._gate()
        self.client = self._client()
        self.parsed: list[Any] = []

    def _gate(self) -> Any:
        sglang = importlib.import_module("sglang")
        route = Path(next(iter(sglang.__path__))) / "srt" / "entrypoints" / "http_server.py"
        called = r"\bgenerate_contract_error\(await request\.json\(\)\)"
        if not re.search(called, route.read_text(encoding="utf-8")):
            return None
        contract = importlib.import_module("sglang.srt.entrypoints.api_contract")
        return contract.generate_contract_error

    def _client(self) -> Any:
        fastapi = importlib.import_module("fastapi")
        responses = importlib.import_module("fastapi.responses")
        testclient = importlib.import_module("starlette.testclient")
        app = fastapi.FastAPI()
        request_class, gate = self.request_class, self.gate

        async def generate_request(obj: Any, request: Any) -> Any:
            self.parsed.append(obj)
            if gate is not None:
                contract_error = gate(await request.json())
                if contract_error is not None:
                    content = {"error": contract_error}
                    return responses.JSONResponse(status_code=400, content=content)
            return {"admitted": True}

        # Declared as SGLang's route is: `obj: GenerateReqInput, request: Request`.
        generate_request.__annotations__ = {"obj": request_class, "request": fastapi.Request}
        app.api_route("/generate", methods=["POST", "PUT"])(generate_request)
        return testclient.TestClient(app)

    def engine_steps(self, obj: Any) -> Verdict | None:
        """The tokenizer manager's steps on a parsed request; None when all pass."""
        manager = self.manager
        steps: Steps = (
            ("normalize_batch_and_arguments", obj.normalize_batch_and_arguments, ()),
            ("_set_default_priority", manager._set_default_priority, (obj,)),
        )
        for stage, step, args in steps:
            try:
                step(*args)
            except Exception as error:
                return _failure(stage, error)
        # A batch (or n > 1) is checked item by item, as `_handle_batch_request` does.
        items = [obj] if obj.is_single else [obj[i] for i in range(obj.batch_size)]
        for item in items:
            input_ids = list(item.input_ids or [])
            later: Steps = (
                ("_validate_one_request", manager._validate_one_request, (item, input_ids)),
                (
                    "_create_tokenized_object",
                    manager._create_tokenized_object,
                    (item, None, input_ids),
                ),
            )
            for stage, step, args in later:
                try:
                    step(*args)
                except (ValueError, TypeError, OverflowError) as error:
                    return _failure(_sampling_stage(error) or stage, error)
        return None

    def http(self, body: dict[str, Any]) -> Verdict:
        self.parsed.clear()
        response = self.client.post("/generate", json=body)
        if response.status_code == 422:
            detail = response.json()["detail"]
            message = "; ".join(
                f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}" for item in detail
            )
            return {
                "ok": False,
                "stage": "fastapi",
                "error": "RequestValidationError",
                "message": message,
                "status": 422,
            }
        if response.status_code == 400:
            return {
                "ok": False,
                "stage": "gate",
                "error": "JsonContractError",
                "message": response.json()["error"],
                "status": 400,
            }
        if response.status_code != 200 or len(self.parsed) != 1:
            raise SystemExit(f"unexpected answer {response.status_code}: {response.text}")
        verdict = self.engine_steps(self.parsed[0])
        if verdict is not None:
            # The route answers a ValueError with 400; anything else escapes it (500).
            return {**verdict, "status": 400 if verdict["error"] == "ValueError" else 500}
        return {"ok": True, "dropped": [key for key in body if key not in self.fields]}

    def engine(self, body: dict[str, Any]) -> Verdict:
        try:
            obj = self.request_class(**body)
        except Exception as error:
            return _failure("GenerateReqInput", error)
        verdict = self.engine_steps(obj)
        return verdict if verdict is not None else {"ok": True, "dropped": []}


def main() -> None:
    release = Release()
    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        run = release.http if case["transport"] == "http" else release.engine
        print(json.dumps(run(case["body"])), flush=True)


if __name__ == "__main__":
    main()
