"""Write tests/fixtures/request_conformance.jsonl: SGLang's verdicts on the request side.

Builds a deterministic, varied corpus of client `/generate` bodies (accepted and
rejected ones) and records, for each body:

- the library's verdict (`decode_client_request`, from this working tree):
  accepted, or the rejection's code, field and message;
- SGLang 0.5.23's verdict on the client body itself: `GenerateReqInput(**body)
  .normalize_batch_and_arguments()`, the HTTP contract gate
  `GenerateRequest.from_json_value(body)`, and (for information) the later
  `SamplingParams(**sampling_params).verify(vocab_size)`;
- for an accepted body, for every role, the engine request the library builds
  (`EngineRequest.to_dict()`), with the case's `Routing` (the accepted cases
  take the 32 combinations of `Routing` fields in turn, none at all among
  them), and SGLang's normalize and gate verdicts on its JSON form
  (`json.loads(EngineRequest.to_json())`).

The meta line also holds `prefill_rank_payloads`: for decode-side requests
with a prefill data-parallel rank, the prefill `/generate` payload SGLang
itself builds (`Req.build_rebootstrap_payload()`), which pins how SGLang
routes a prefill request: `routed_dp_rank` equal to `disagg_prefill_dp_rank`.

SGLang's verdicts come from `oracle_request_verdicts.py`, run with the oracle
environment's interpreter (built by scripts/oracle/setup.sh). Its
normalize verdicts are cross-checked against the oracle's own `verdict.py`.
The file starts with one `{"meta": ...}` line; every other line is one case:

    {"id": "c0001", "kind": "seed", "body": {...},
     "library": {"accepted": true} | {"accepted": false, "code", "field", "message"},
     "sglang": {"normalize": V, "gate": V, "sampling": V | null},
     # accepted bodies only:
     "rid": "...", "bootstrap": {"host", "port", "room", "prefill_dp_rank"},
     "routing": null | {"dp_rank", "trace_header", "lora_path", "priority", "labels"},
     "engine": [{"role": "aggregated", "request": {...}, "sglang": {"normalize": V, "gate": V}},
                ...]}

Run from the repository root:

    /tmp/dev/bin/python scripts/make_request_fixtures.py \
        [--oracle-python PATH] [--oracle-verdict PATH] [--out PATH]

The defaults come from SGLANG_ORACLE_PYTHON and SGLANG_ORACLE_VERDICT_SCRIPT,
else /tmp/sglang-oracle/bin/python and scripts/oracle/verdict.py.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the library from this working tree, not an installed copy

from sglang_envelope import (  # noqa: E402
    Bootstrap,
    Deployment,
    EnvelopeError,
    RequestRejected,
    Role,
    Routing,
    build_engine_request,
    decode_client_request,
    to_worker_envelope,
)

SGLANG_VERSION = "0.5.23"
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "request_conformance.jsonl"
RUNNER = Path(__file__).resolve().parent / "oracle_request_verdicts.py"
DEFAULT_ORACLE_PYTHON = "/tmp/sglang-oracle/bin/python"
DEFAULT_ORACLE_VERDICT = Path(__file__).resolve().parent / "oracle" / "verdict.py"

#: The Bootstraps decode and prefill get; accepted cases take them in turn.
BOOTSTRAPS = (
    Bootstrap(host="10.0.0.7", port=8998, room=1234567890123456789),
    Bootstrap(host="prefill-0.svc.cluster.local", port=30001, room=0, prefill_dp_rank=0),
    Bootstrap(host="prefill-1", port=65535, room=2**63 - 1, prefill_dp_rank=3),
)

Body = dict[str, Any]
Verdict = dict[str, Any]

#: What a router sets, one value a field; `dp_rank` is the case's prefill rank.
ROUTING_VALUES: Body = {
    "dp_rank": None,
    "trace_header": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
    "lora_path": "router-adapter",
    "priority": None,  # cycles through PRIORITIES
    "labels": {"tenant": "t-7", "model_name": "set-by-the-router"},
}
ROUTING_FIELDS = tuple(ROUTING_VALUES)
#: SGLang's whole priority range, and values inside it.
PRIORITIES = (-(2**63), 2**63 - 1, 0, 9)
#: Decode-side requests whose prefill payload SGLang builds: (decode rank, prefill rank).
PREFILL_RANKS = ((0, 0), (1, 3), (5, 2), (0, 2**31 - 1))

LOGPROBS: Body = {"return_logprob": True, "top_logprobs_num": 2}
#: Stream true, false, absent and null.
STREAMS: tuple[Body, ...] = ({"stream": True}, {"stream": False}, {}, {"stream": None})
FLAG_STATES: tuple[bool | None, ...] = (True, False, None)  # None: the key is absent
FLAT_FLAGS = (
    "return_flat_raw_top_logprobs",
    "return_flat_raw_output_top_logprobs",
    "return_flat_raw_top_logprobs_b64",
)

#: Three request shapes the sampling and optional-field variants are crossed with:
#: plain streaming, unary output-flat in Base64, prompt-flat in Base64 (stream absent).
SHAPES: tuple[Body, ...] = (
    {"input_ids": [151643, 872, 13, 2], "stream": True},
    {
        "input_ids": [9707, 11, 1879, 0],
        "stream": False,
        "return_logprob": True,
        "top_logprobs_num": 5,
        "return_flat_raw_output_top_logprobs": True,
        "return_flat_raw_top_logprobs_b64": True,
    },
    {
        "input_ids": [2**32 - 1, 0, 7],
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": 3,
        "return_flat_raw_top_logprobs": True,
        "return_flat_raw_top_logprobs_b64": True,
    },
)

SAMPLING_KNOWN_KEYS: Body = {
    "max_new_tokens": 64,
    "stop": ["</s>", "###"],
    "stop_token_ids": [2, 7],
    "stop_regex": "\\d{3}$",
    "temperature": 0.7,
    "top_p": 0.95,
    "top_k": 40,
    "min_p": 0.05,
    "frequency_penalty": 0.5,
    "presence_penalty": -0.5,
    "repetition_penalty": 1.1,
    "min_new_tokens": 4,
    "n": 1,
    "json_schema": None,
    "regex": None,
    "ebnf": None,
    "structural_tag": None,
    "ignore_eos": True,
    "skip_special_tokens": False,
    "spaces_between_special_tokens": False,
    "no_stop_trim": True,
    "stream_interval": 4,
    "logit_bias": {"42": -100.0, "7": 2.5},
    "sampling_seed": 1234,
    "custom_params": {"tag": "fixture", "weights": [1, 2]},
    "beam_width": 1,
    "watermark": {"enabled": True, "key": "k1", "context_window": 4},
    "choice": ["yes", "no"],
}

#: Sampling params every shape is tried with. "ABSENT" leaves the key out.
SAMPLING_VARIANTS: tuple[Body | str | None, ...] = (
    "ABSENT",
    None,
    {},
    {"max_new_tokens": 16},
    {"max_new_tokens": 0},
    {"max_new_tokens": 1},
    {"min_new_tokens": 4, "max_new_tokens": 16},
    {"min_new_tokens": 16, "max_new_tokens": 16},
    {"min_new_tokens": 3},
    {"min_new_tokens": 128},
    {"min_new_tokens": 0, "max_new_tokens": 0},
    {"max_new_tokens": None, "min_new_tokens": 500},
    {"n": 1},
    {"n": 1, "max_new_tokens": 8, "min_new_tokens": 8},
    {"temperature": 0, "top_k": 1},
    {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05},
    {"frequency_penalty": 0.5, "presence_penalty": -0.5, "repetition_penalty": 1.1},
    {"stop": "\n\n", "stop_token_ids": [2, 7]},
    {"stop": [], "stop_regex": ["a+", "b$"]},
    {"json_schema": '{"type": "object"}'},
    {"regex": "[a-z]+", "max_new_tokens": 32},
    {"ebnf": 'root ::= "yes" | "no"'},
    {"structural_tag": '{"structures": [], "triggers": []}'},
    {"ignore_eos": True, "skip_special_tokens": False, "no_stop_trim": True},
    {"stream_interval": 4, "sampling_seed": 7},
    {"logit_bias": {"42": -100.0, "7": 2}},
    {"custom_params": {"a": 1}},
    {"beam_width": 1, "n": 1},
    {"watermark": {"enabled": True}},
    {"choice": ["yes", "no"]},
    SAMPLING_KNOWN_KEYS,
    {key: None for key in SAMPLING_KNOWN_KEYS if key != "n"},
)

#: Sampling params tried with the first shape only.
SAMPLING_SPECIALS: tuple[Body, ...] = (
    {"n": None},
    {"n": None, "max_new_tokens": 4},
    {"min_new_tokens": None, "max_new_tokens": 4},
    {"max_new_tokens": None},
    {"beam_width": None},
    {"beam_width": 2, "n": 1},
    {"watermark": None, "logit_bias": None, "choice": None, "custom_params": None},
    # each key the engine takes, alone, and the other form of those with two
    *({key: value} for key, value in SAMPLING_KNOWN_KEYS.items() if key not in ("n", "choice")),
    {"stop": "</s>"},
    {"stop_regex": "a+"},
    {"stop": []},
    {"stop_token_ids": []},
    {"logit_bias": {}},
    # custom_params takes any JSON value
    {"custom_params": False},
    {"custom_params": 3},
    {"custom_params": -2.5},
    {"custom_params": "x"},
    {"custom_params": [1, {"a": None}]},
    # every key SGLang's engine takes, null
    {key: None for key in SAMPLING_KNOWN_KEYS if key not in ("n", "choice")},
    {"max_new_tokens": 2**40},
    # Accepted by every check before the tokenizer manager; SamplingParams.verify refuses them.
    {"temperature": -1.0},
    {"top_p": 0},
    {"top_k": 0},
    {"min_new_tokens": -1},
    {"max_new_tokens": -1},
    {"beam_width": 0},
)

#: (field, value) pairs a client may send, crossed with the first two shapes.
OPTIONAL_FIELDS: tuple[tuple[str, Any], ...] = (
    ("priority", 0),
    ("priority", 5),
    ("priority", -3),
    ("priority", None),
    ("lora_path", "adapter-a"),
    ("lora_path", None),
    ("session_params", {"id": "sess-1", "offset": -1, "replace": False}),
    ("session_params", {}),
    ("session_params", None),
    ("session_id", "sess-9"),
    ("session_id", None),
    ("return_routed_experts", True),
    ("return_routed_experts", False),
    ("routed_experts_start_len", 0),
    ("routed_experts_start_len", 2),
    ("return_text_in_logprobs", True),
    ("return_text_in_logprobs", None),
    ("return_hidden_states", True),
    ("return_hidden_states", None),
    ("return_sampling_mask", True),
    ("sampling_logprobs_mode", "selected"),
    ("sampling_logprobs_mode", "support"),
    ("return_indexer_topk", True),
    ("return_entropy", True),
    ("return_prompt_token_ids", True),
    ("custom_logit_processor", '{"callable": "x"}'),
    ("conversation_id", "conv-1"),
    ("require_reasoning", True),
    ("require_reasoning", None),
    ("max_thinking_tokens", 0),
    ("max_thinking_tokens", 256),
    ("extra_key", "team-a"),
    ("extra_key", ""),
    ("cache_salt", "salt-1"),
    ("no_logs", True),
    ("watermark", {"enabled": True, "key": "k"}),
    ("watermark", None),
    ("multi_item_delimiter_indices", [1, 3]),
    ("token_indices_to_pool", [0, 2]),
    ("token_ids_logprob", [5, 6]),
    ("token_ids_logprob", None),
    ("token_indices_to_pool", None),
    ("multi_item_delimiter_indices", None),
    ("token_ids_logprob", []),
    ("logprob_start_len", -1),
    ("logprob_start_len", 0),
    ("top_logprobs_num", 0),
    ("return_logprob", False),
    ("rid", "client-rid-7"),
)

KITCHEN_SINK: Body = {
    "rid": "client-sink",
    "input_ids": [3, 1, 4, 1, 5, 9, 2, 6],
    "sampling_params": {"max_new_tokens": 12, "min_new_tokens": 2, "temperature": 0.3},
    "stream": False,
    "return_logprob": True,
    "logprob_start_len": 1,
    "top_logprobs_num": 4,
    "token_ids_logprob": [3, 4],
    "return_text_in_logprobs": False,
    "return_flat_raw_top_logprobs": True,
    "return_flat_raw_output_top_logprobs": True,
    "return_flat_raw_top_logprobs_b64": True,
    "return_sampling_mask": False,
    "return_hidden_states": False,
    "return_routed_experts": True,
    "routed_experts_start_len": 1,
    "return_indexer_topk": False,
    "return_entropy": True,
    "return_prompt_token_ids": True,
    "session_id": "sess-sink",
    "lora_path": "adapter-b",
    "conversation_id": "conv-sink",
    "require_reasoning": False,
    "max_thinking_tokens": 64,
    "priority": 2,
    "extra_key": "k",
    "cache_salt": "s",
    "no_logs": False,
    "token_indices_to_pool": [7],
}

#: Fields only the serving system sets, each with a value SGLang would take.
ORCHESTRATOR_VALUES: Body = {
    "bootstrap_host": "10.0.0.1",
    "bootstrap_port": 8998,
    "bootstrap_room": 7,
    "bootstrap_pair_key": "pair-1",
    "decode_tp_size": 2,
    "disagg_prefill_dp_rank": 0,
    "kv_hints": {"protocol_version": "1", "message_id": "m-1", "actions": []},
    "routed_dp_rank": 1,
    "data_parallel_rank": 1,
    "routing_key": "rk",
    "need_wait_for_mm_inputs": False,
    "num_items_assigned": {},
    "encoder_urls": [],
    "lora_id": "lora-1",
    "http_worker_ipc": "ipc:///tmp/w",
    "external_trace_header": {"traceparent": "00-0-0-01"},
    "received_time": 1.5,
    "log_metrics": False,
    "return_bytes": False,
    "background": False,
    "custom_labels": {"model_name": "spoofed"},
}

#: Input other than one list of token ids, sent next to input_ids.
NOT_TOKEN_INPUT_VALUES: Body = {
    "text": "Hello",
    "input_embeds": [[0.1, 0.2]],
    "positional_embed_overrides": [[0.1, 0.2]],
    "image_data": "https://example.com/a.png",
    "video_data": "https://example.com/a.mp4",
    "audio_data": "https://example.com/a.wav",
    "mm_hashes": ["ab12"],
    "mm_content_hashes": [None],
    "use_audio_in_video": False,
    "video_config": {},
    "modalities": ["image"],
    "max_dynamic_patch": 4,
    "min_dynamic_patch": 1,
    "image_max_dynamic_patch": 4,
    "video_max_dynamic_patch": 2,
    "images_config": {},
    "mm_processor_kwargs": {},
}

IDS = [1, 2, 3]


def _nested(depth: int) -> Any:
    """A free-form value `depth` lists deep."""
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def _ids(fields: Body) -> Body:
    """`fields` on a body with valid input_ids."""
    return {"input_ids": IDS, **fields}


#: Bodies at the edges of the rules: refused on purpose, breaking one (or two) of
#: SGLang's rules, or just inside them.
EDGE_CASES: tuple[tuple[str, Body], ...] = (
    # input_ids itself
    ("input-ids", {}),
    ("input-ids", {"input_ids": None}),
    ("input-ids", {"input_ids": []}),
    ("input-ids", {"input_ids": [], "stream": False, "sampling_params": {"max_new_tokens": 4}}),
    ("input-ids", {"input_ids": [[1, 2], [3]]}),
    ("input-ids", {"input_ids": [[1, 2]]}),
    ("input-ids", {"input_ids": "1 2"}),
    ("input-ids", {"input_ids": [1.5, 2]}),
    ("input-ids", {"input_ids": [-1, 2]}),
    ("input-ids", {"input_ids": [2**32]}),
    ("input-ids", {"input_ids": ["1"]}),
    ("input-ids", {"input_ids": [True]}),
    ("input-ids", {"text": "Hello"}),
    # unknown keys
    ("unknown-key", _ids({"foo": 1})),
    ("unknown-key", _ids({"sampling_param": {"max_new_tokens": 4}})),
    ("unknown-key", _ids({"streaming": True})),
    ("unknown-key", _ids({"max_tokens": 16})),
    ("unknown-key", _ids({"model": "m"})),
    # wrong JSON types
    ("wrong-type", _ids({"stream": "true"})),
    ("wrong-type", _ids({"stream": 1})),
    ("wrong-type", _ids({"priority": "high"})),
    ("wrong-type", _ids({"priority": 1.5})),
    ("wrong-type", _ids({"custom_labels": {"a": 1}})),
    ("wrong-type", _ids({"custom_labels": ["a"]})),
    ("wrong-type", _ids({"lora_path": ["a"]})),
    ("wrong-type", _ids({"return_logprob": "yes"})),
    ("wrong-type", _ids({"top_logprobs_num": "2"})),
    ("wrong-type", _ids({"return_flat_raw_top_logprobs": None})),
    ("wrong-type", _ids({"return_flat_raw_output_top_logprobs": 1})),
    ("wrong-type", _ids({"return_flat_raw_top_logprobs_b64": "true"})),
    ("wrong-type", _ids({"return_routed_experts": None})),
    ("wrong-type", _ids({"routed_experts_start_len": None})),
    ("wrong-type", _ids({"routed_experts_start_len": "0"})),
    ("wrong-type", _ids({"return_prompt_token_ids": None})),
    ("wrong-type", _ids({"session_id": 5})),
    ("wrong-type", _ids({"session_params": "sess"})),
    ("wrong-type", _ids({"session_params": []})),
    ("wrong-type", _ids({"rid": 5})),
    ("wrong-type", _ids({"rid": ["a"]})),
    ("wrong-type", _ids({"max_thinking_tokens": -1})),
    ("wrong-type", _ids({"sampling_logprobs_mode": "all"})),
    ("wrong-type", _ids({"conversation_id": 5})),
    ("wrong-type", _ids({"no_logs": None})),
    ("wrong-type", _ids({"extra_key": ["a"]})),
    ("wrong-type", _ids({"cache_salt": 5})),
    ("wrong-type", _ids({"multi_item_delimiter_indices": "1"})),
    ("wrong-type", _ids({"token_ids_logprob": [[1]]})),
    ("wrong-type", _ids({"sampling_params": []})),
    ("wrong-type", _ids({"sampling_params": "greedy"})),
    ("wrong-type", _ids({"sampling_params": {"max_new_tokens": "5"}})),
    ("wrong-type", _ids({"sampling_params": {"temperature": "hot"}})),
    ("wrong-type", _ids({"sampling_params": {"stop": 5}})),
    ("wrong-type", _ids({"sampling_params": {"n": 1.0}})),
    ("wrong-type", _ids({"sampling_params": {"n": True}})),
    ("wrong-type", _ids({"sampling_params": {"logit_bias": {"1": "x"}}})),
    ("wrong-type", _ids({"sampling_params": {"watermark": {"enabled": 1}}})),
    ("wrong-type", _ids({"sampling_params": {"watermark": {"foo": 1}}})),
    ("wrong-type", _ids({"sampling_params": {"choice": "a"}})),
    # free-form JSON at and past the default depth bound (32)
    ("free-form", _ids({"sampling_params": {"custom_params": _nested(31)}})),
    ("free-form", _ids({"sampling_params": {"custom_params": _nested(32)}})),
    ("free-form", _ids({"session_params": {"id": "s", "x": _nested(31)}})),
    ("free-form", _ids({"watermark": {"k": _nested(32)}})),
    ("free-form", _ids({"sampling_params": {"custom_params": [1e308, -(2**63), "\u00e9"]}})),
    # sampling keys sent at the top level
    ("unknown-key", _ids({"max_new_tokens": 16})),
    ("unknown-key", _ids({"temperature": 0.5})),
    # unknown sampling keys
    ("unknown-sampling-key", _ids({"sampling_params": {"max_tokens": 5}})),
    ("unknown-sampling-key", _ids({"sampling_params": {"best_of": 2}})),
    ("unknown-sampling-key", _ids({"sampling_params": {"seed": 1, "n": 1}})),
    # parallel sampling
    ("parallel-sampling", _ids({"sampling_params": {"n": 2}})),
    ("parallel-sampling", _ids({"sampling_params": {"n": 0}})),
    ("parallel-sampling", _ids({"sampling_params": {"n": -1}})),
    ("parallel-sampling", _ids({"sampling_params": {"n": 2, "beam_width": 2}})),
    ("parallel-sampling", _ids({"stream": False, "sampling_params": {"n": 4}})),
    ("parallel-sampling", _ids({"stream": True, "rid": "p", "sampling_params": {"n": 3}})),
    ("parallel-sampling", _ids({"sampling_params": {"n": 3, "beam_width": 2}})),
    ("parallel-sampling", _ids({"sampling_params": {"n": 2, "beam_width": 4}})),
    ("parallel-sampling", _ids({"sampling_params": {"n": 2, "beam_width": 1}})),
    # min_new_tokens over max_new_tokens
    ("min-over-max", _ids({"sampling_params": {"min_new_tokens": 10, "max_new_tokens": 5}})),
    ("min-over-max", _ids({"sampling_params": {"min_new_tokens": 200}})),
    ("min-over-max", _ids({"sampling_params": {"min_new_tokens": 1, "max_new_tokens": 0}})),
    # sessions
    ("session", _ids({"session_id": "s1", "session_params": {"id": "s1"}})),
    ("session", _ids({"session_id": "", "session_params": {}})),
    ("session", _ids({"session_id": "s1", "session_params": None})),
    ("session", _ids({"session_id": None, "session_params": {"id": "s1"}})),
    ("session", {"input_ids": [], "session_params": {"id": "s1"}}),
    ("session", {"input_ids": [], "session_params": {"id": "s1", "offset": 3}, "stream": True}),
    ("session", {"input_ids": [], "session_params": {"id": ""}}),
    ("session", {"input_ids": [], "session_params": {}}),
    ("session", {"input_ids": [], "session_id": "s1"}),
    # multi-item scoring with the flat flags
    ("multi-item", _ids({"multi_item_delimiter_indices": [1]})),
    ("multi-item", _ids({"multi_item_delimiter_indices": []})),
    (
        "multi-item",
        _ids({"multi_item_delimiter_indices": None, "return_flat_raw_top_logprobs": True}),
    ),
    (
        "multi-item",
        _ids({"multi_item_delimiter_indices": [1], "return_flat_raw_top_logprobs": True}),
    ),
    (
        "multi-item",
        _ids(
            {
                "multi_item_delimiter_indices": [],
                "return_flat_raw_top_logprobs": True,
                "return_flat_raw_top_logprobs_b64": True,
            }
        ),
    ),
    (
        "multi-item",
        _ids(
            {
                "multi_item_delimiter_indices": [1],
                "stream": False,
                "return_flat_raw_output_top_logprobs": True,
            }
        ),
    ),
    (
        "multi-item",
        _ids(
            {
                "multi_item_delimiter_indices": [1],
                "stream": False,
                "return_flat_raw_output_top_logprobs": True,
                "return_flat_raw_top_logprobs_b64": True,
            }
        ),
    ),
    (
        "multi-item",
        _ids(
            {
                "multi_item_delimiter_indices": [1],
                "stream": True,
                "return_flat_raw_top_logprobs_b64": True,
            }
        ),
    ),
    # two rules broken at once: which one is reported
    (
        "two-rules",
        _ids(
            {
                "stream": True,
                "return_flat_raw_top_logprobs": True,
                "return_flat_raw_output_top_logprobs": True,
                "multi_item_delimiter_indices": [1],
            }
        ),
    ),
    (
        "two-rules",
        _ids(
            {
                "return_flat_raw_top_logprobs": True,
                "multi_item_delimiter_indices": [1],
                "session_id": "s",
                "session_params": {},
            }
        ),
    ),
    ("two-rules", {"input_ids": [], "stream": True, "return_flat_raw_output_top_logprobs": True}),
    ("two-rules", {"input_ids": [], "return_flat_raw_top_logprobs_b64": True}),
    (
        "two-rules",
        {
            "input_ids": [],
            "return_flat_raw_top_logprobs": True,
            "multi_item_delimiter_indices": [0],
        },
    ),
    ("two-rules", {"input_ids": [], "session_id": "s", "session_params": {"id": "s"}}),
    (
        "two-rules",
        _ids({"return_flat_raw_top_logprobs_b64": True, "session_id": "s", "session_params": {}}),
    ),
    (
        "two-rules",
        _ids(
            {
                "stream": True,
                "return_flat_raw_output_top_logprobs": True,
                "session_id": "s",
                "session_params": {},
            }
        ),
    ),
    (
        "two-rules",
        _ids(
            {
                "stream": True,
                "return_flat_raw_output_top_logprobs": True,
                "sampling_params": {"n": 2},
            }
        ),
    ),
    (
        "two-rules",
        _ids(
            {
                "return_flat_raw_top_logprobs_b64": True,
                "sampling_params": {"min_new_tokens": 9, "max_new_tokens": 1},
            }
        ),
    ),
    ("two-rules", _ids({"session_id": "s", "session_params": {}, "sampling_params": {"n": 3}})),
    ("two-rules", _ids({"stream": True, "foo": 1, "return_flat_raw_output_top_logprobs": True})),
    (
        "two-rules",
        _ids({"stream": True, "bootstrap_room": 1, "return_flat_raw_output_top_logprobs": True}),
    ),
    ("two-rules", _ids({"text": "hi", "return_flat_raw_top_logprobs_b64": True})),
    ("two-rules", {"input_ids": [[1], [2]], "return_flat_raw_top_logprobs_b64": True}),
)


def _flag_combinations() -> Iterator[Body]:
    for states in itertools.product(FLAG_STATES, repeat=len(FLAT_FLAGS)):
        yield {
            flag: state for flag, state in zip(FLAT_FLAGS, states, strict=True) if state is not None
        }


def corpus() -> list[tuple[str, Body]]:
    """Every (kind, body), in a fixed order, without repeats."""
    bodies: list[tuple[str, Body]] = [
        (
            "seed",
            {
                "input_ids": [1, 2],
                "stream": False,
                "return_logprob": True,
                "top_logprobs_num": 2,
                "return_flat_raw_output_top_logprobs": True,
            },
        )
    ]
    for stream in STREAMS:
        for flags in _flag_combinations():
            bodies.append(("flat-matrix", {"input_ids": [1, 2, 3], **stream, **LOGPROBS, **flags}))
    for sampling in SAMPLING_VARIANTS:
        for shape in SHAPES:
            extra = {} if sampling == "ABSENT" else {"sampling_params": sampling}
            bodies.append(("sampling", {**shape, **extra}))
    for special in SAMPLING_SPECIALS:
        bodies.append(("sampling", {**SHAPES[0], "sampling_params": special}))
    for rid in ("client-rid-1", "", None, "a" * 200, "ключ-ü"):
        for shape in SHAPES:
            bodies.append(("rid", {"rid": rid, **shape}))
    for key, value in OPTIONAL_FIELDS:
        for shape in SHAPES[:2]:
            bodies.append(("optional", {**shape, key: value}))
    bodies.append(("optional", KITCHEN_SINK))
    bodies.append(("optional", {**KITCHEN_SINK, "return_flat_raw_top_logprobs": False}))
    for key, value in ORCHESTRATOR_VALUES.items():
        bodies.append(("orchestrator-field", {"input_ids": IDS, key: value}))
    for key, value in NOT_TOKEN_INPUT_VALUES.items():
        bodies.append(("not-token-input", {"input_ids": IDS, key: value}))
    for key in (
        "text",
        "image_data",
        "video_data",
        "audio_data",
        "positional_embed_overrides",
        "bootstrap_host",
        "routed_dp_rank",
    ):  # read as absent, as SGLang reads them
        bodies.append(("null-as-absent", {"input_ids": IDS, key: None}))  # fmt: skip
    bodies.extend(EDGE_CASES)
    seen: set[str] = set()
    unique: list[tuple[str, Body]] = []
    for kind, body in bodies:
        key = json.dumps(body, sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append((kind, body))
    return unique


def library_verdict(body: Body) -> tuple[Verdict, Any]:
    """The library's verdict on a client body, and the ClientRequest when accepted."""
    try:
        request = decode_client_request(json.dumps(body).encode())
    except RequestRejected as error:
        verdict = {"code": error.code, "field": error.field, "message": error.message}
        return {"accepted": False, **verdict}, None
    return {"accepted": True}, request


def _bootstrap_dict(bootstrap: Bootstrap) -> Body:
    return {
        "host": bootstrap.host,
        "port": bootstrap.port,
        "room": bootstrap.room,
        "prefill_dp_rank": bootstrap.prefill_dp_rank,
    }


def routing_for(index: int, bootstrap: Bootstrap) -> Body | None:
    """The `Routing` fields of the accepted case `index`: combination `index % 32`."""
    mask = index % 2 ** len(ROUTING_FIELDS)
    if not mask:
        return None
    fields: Body = {}
    for bit, name in enumerate(ROUTING_FIELDS):
        if mask >> bit & 1:
            fields[name] = ROUTING_VALUES[name]
    if "dp_rank" in fields:
        fields["dp_rank"] = bootstrap.prefill_dp_rank
    if "priority" in fields:
        fields["priority"] = PRIORITIES[index % len(PRIORITIES)]
    return fields


def engine_requests(
    request: Any, rid: str, bootstrap: Bootstrap, routing: Body | None = None
) -> list[Body]:
    """The engine request for each role (its `to_dict()`), or the error building it."""
    envelope = to_worker_envelope(request, rid=rid)
    entries: list[Body] = []
    for role in Role:
        try:
            engine = build_engine_request(
                envelope,
                deployment=Deployment(vocab_size=None, incremental_streaming_output=True),
                input_ids=request.input_ids,
                role=role,
                bootstrap=None if role is Role.AGGREGATED else bootstrap,
                routing=None if routing is None else Routing(**routing),
            )
        except RequestRejected as error:  # a prefill/decode leg of n > 1 samples
            refused = {"code": error.code, "field": error.field, "message": error.message}
            entries.append({"role": role.value, "refused": refused})
            continue
        except EnvelopeError as error:
            entries.append({"role": role.value, "error": str(error)})
            continue
        as_dict = engine.to_dict()
        if json.loads(engine.to_json()) != as_dict:
            raise SystemExit(f"to_json() and to_dict() differ for {rid} as {role.value}")
        entries.append({"role": role.value, "request": as_dict})
    return entries


def run_oracle(oracle_python: str, script: Path, lines: Sequence[str]) -> list[Any]:
    """One JSON verdict per line, from `script` run by the oracle's interpreter."""
    done = subprocess.run(
        [oracle_python, str(script)],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{script.name} failed ({done.returncode}):\n{done.stderr}")
    verdicts = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    if len(verdicts) != len(lines):
        raise SystemExit(f"{script.name} answered {len(verdicts)} of {len(lines)} lines")
    return verdicts


def cross_check(oracle_python: str, verdict_script: Path, lines: list[str], ours: list[Any]) -> int:
    """Check our normalize verdicts against the oracle's own verdict.py; the lines it compared.

    verdict.py catches only TypeError and ValueError, so lines our runner saw
    raise anything else are left out.
    """
    comparable = [
        (line, verdict["normalize"])
        for line, verdict in zip(lines, ours, strict=True)
        if verdict["normalize"]["ok"]
        or verdict["normalize"]["error"] in ("TypeError", "ValueError")
    ]
    theirs = run_oracle(oracle_python, verdict_script, [line for line, _ in comparable])
    for (line, mine), official in zip(comparable, theirs, strict=True):
        if mine != official:
            raise SystemExit(f"verdict.py disagrees on {line}: {official} != {mine}")
    return len(comparable)


def prefill_rank_payloads(oracle_python: str) -> list[Body]:
    """SGLang's own prefill payloads for decode-side requests with a prefill rank."""
    requests = [
        {
            "rid": f"rank-{prefill}",
            "input_ids": [1, 2, 3],
            "bootstrap_host": "10.0.0.7",
            "bootstrap_port": 8998,
            "bootstrap_room": 42,
            "routed_dp_rank": decode,
            "disagg_prefill_dp_rank": prefill,
        }
        for decode, prefill in PREFILL_RANKS
    ]
    done = subprocess.run(
        [oracle_python, str(RUNNER), "--rebootstrap"],
        input="".join(json.dumps(request) + "\n" for request in requests),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{RUNNER.name} --rebootstrap failed:\n{done.stderr}")
    payloads = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return [
        {"decode_request": request, "sglang_prefill_payload": payload}
        for request, payload in zip(requests, payloads, strict=True)
    ]


def build_cases(oracle_python: str, verdict_script: Path) -> tuple[Body, list[Body]]:
    """The meta line and every case, SGLang's verdicts filled in."""
    cases: list[Body] = []
    lines: list[str] = []  # every body SGLang is asked about
    slots: list[tuple[Body, str | None]] = []  # where each answer goes
    accepted = 0
    for index, (kind, body) in enumerate(corpus(), start=1):
        case: Body = {"id": f"c{index:04d}", "kind": kind, "body": body}
        case["library"], request = library_verdict(body)
        case["sglang"] = None  # filled in below, once SGLang has answered
        lines.append(json.dumps(body))
        slots.append((case, None))
        if request is not None:
            bootstrap = BOOTSTRAPS[accepted % len(BOOTSTRAPS)]
            if accepted >> ROUTING_FIELDS.index("dp_rank") & 1:  # a routed rank: a prefill rank
                bootstrap = BOOTSTRAPS[1 + accepted % 2]
            routing = routing_for(accepted, bootstrap)
            accepted += 1
            case["rid"] = f"conformance-{index:04d}"
            case["bootstrap"] = _bootstrap_dict(bootstrap)
            case["routing"] = routing
            case["engine"] = engine_requests(request, case["rid"], bootstrap, routing)
            for entry in case["engine"]:
                if "request" in entry:
                    lines.append(json.dumps(entry["request"]))
                    slots.append((entry, "engine"))
        cases.append(case)
    verdicts = run_oracle(oracle_python, RUNNER, lines)
    compared = cross_check(oracle_python, verdict_script, lines, verdicts)
    for (target, slot), verdict in zip(slots, verdicts, strict=True):
        if slot == "engine":
            target["sglang"] = {"normalize": verdict["normalize"], "gate": verdict["gate"]}
        else:
            target["sglang"] = verdict
    engine = sum(1 for case in cases for entry in case.get("engine", ()) if "request" in entry)
    meta: Body = {
        "prefill_rank_payloads": prefill_rank_payloads(oracle_python),
        "sglang_version": SGLANG_VERSION,
        "generator": "scripts/make_request_fixtures.py",
        "oracle_runner": "scripts/oracle_request_verdicts.py",
        "cases": len(cases),
        "accepted": accepted,
        "engine_requests": engine,
        "normalize_cross_checked_with_verdict_py": compared,
    }
    return meta, cases


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--oracle-python",
        default=os.environ.get("SGLANG_ORACLE_PYTHON", DEFAULT_ORACLE_PYTHON),
        help="the oracle environment's interpreter",
    )
    parser.add_argument(
        "--oracle-verdict",
        type=Path,
        default=Path(os.environ.get("SGLANG_ORACLE_VERDICT_SCRIPT", DEFAULT_ORACLE_VERDICT)),
        help="the oracle's verdict.py, to cross-check the normalize verdicts",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    meta, cases = build_cases(args.oracle_python, args.oracle_verdict)
    with args.out.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"meta": meta}, sort_keys=True) + "\n")
        for case in cases:
            out.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"wrote {len(cases)} cases ({meta['engine_requests']} engine requests) to {args.out}")


if __name__ == "__main__":
    main()
