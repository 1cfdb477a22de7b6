"""Hypothesis strategies shared by every test module.

Each section belongs to one part of the library; draw from here rather than
defining strategies inside a test module.
"""

from __future__ import annotations

import json
from typing import Any, cast

from hypothesis import strategies as st

from sglang_envelope import (
    AbortPolicy,
    Bootstrap,
    ClientRequest,
    Deployment,
    EngineRequest,
    Role,
    SamplingParams,
    build_engine_request,
    decode_client_request,
    to_worker_envelope,
)
from sglang_envelope.rollout import WeightVersionSpan

# --- request side ---

#: The deployment of tests about the request contract: no vocabulary stated (ids up to
#: 2^32 are the typed decode's to refuse) and no server flag known; a server that streams
#: incrementally, so that a unary client's engine request streams (as the recorded
#: fixtures have it, `scripts/make_request_fixtures.py`).
DEPLOYMENT = Deployment(vocab_size=None, incremental_streaming_output=True)

token_ids = st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=64)
request_ids = st.text(
    st.characters(min_codepoint=33, max_codepoint=0x2FFF, categories=("L", "N", "P", "S")),
    min_size=1,
    max_size=24,
)
roles = st.sampled_from(list(Role))
bootstraps = st.builds(
    Bootstrap,
    host=st.sampled_from(["10.0.0.7", "prefill-0.svc", "::1"]),
    port=st.integers(1, 65535),
    room=st.integers(0, 2**63 - 1),
    prefill_dp_rank=st.none() | st.integers(0, 63),
)

_finite = st.floats(allow_nan=False, allow_infinity=False, width=32)


@st.composite
def sampling_params(draw: st.DrawFn) -> dict[str, Any]:
    """A `sampling_params` object SGLang accepts, with n of 1 and min <= max."""
    params: dict[str, Any] = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "temperature": st.none() | st.floats(0, 2),
                "top_p": st.floats(0.01, 1),
                "top_k": st.just(-1) | st.integers(1, 100),
                "stop": st.text(max_size=4) | st.lists(st.text(max_size=4), max_size=2),
                "stop_token_ids": st.lists(st.integers(0, 2**31), max_size=3),
                "ignore_eos": st.booleans(),
                "skip_special_tokens": st.booleans(),
                "logit_bias": st.dictionaries(
                    st.from_regex(r"[0-9]{1,5}", fullmatch=True),
                    st.floats(-1e30, 1e30),  # a larger bias overflows SGLang's logits
                    max_size=2,
                ),
                "sampling_seed": st.integers(0, 2**31),
                "custom_params": st.none()
                | st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
                "n": st.just(1),
                "max_new_tokens": st.none() | st.integers(0, 4096),
            },
        )
    )
    if draw(st.booleans()):
        high: int | None = params.get("max_new_tokens", 128)
        params["min_new_tokens"] = draw(st.integers(0, 4096 if high is None else high))
    return params


@st.composite
def client_requests(draw: st.DrawFn) -> dict[str, Any]:
    """A token-input `/generate` body that every rule accepts."""
    body = draw(
        st.fixed_dictionaries(
            {"input_ids": token_ids},
            optional={
                "rid": request_ids,
                "sampling_params": sampling_params(),
                "return_logprob": st.booleans(),
                "logprob_start_len": st.integers(-1, 64),
                "top_logprobs_num": st.integers(0, 20),
                "token_ids_logprob": st.lists(st.integers(0, 1000), max_size=3),
                "return_flat_raw_top_logprobs": st.booleans(),
                "return_flat_raw_output_top_logprobs": st.booleans(),
                "return_text_in_logprobs": st.booleans(),
                "return_routed_experts": st.booleans(),
                "routed_experts_start_len": st.integers(0, 8),
                "return_hidden_states": st.booleans(),
                "priority": st.none() | st.integers(-10, 10),
                "lora_path": st.none() | st.text(min_size=1, max_size=8),
                "extra_key": st.text(min_size=1, max_size=8),
                "session_params": st.fixed_dictionaries({"id": st.text(min_size=1, max_size=8)}),
            },
        )
    )
    if "logprob_start_len" in body:  # SGLang refuses a start past the prompt
        ids = cast(list[int], body["input_ids"])
        body["logprob_start_len"] = min(cast(int, body["logprob_start_len"]), len(ids))
    if "routed_experts_start_len" in body:  # and a routed-experts start past it
        ids = cast(list[int], body["input_ids"])
        body["routed_experts_start_len"] = min(
            cast(int, body["routed_experts_start_len"]), len(ids)
        )
    flat_flags = ("return_flat_raw_top_logprobs", "return_flat_raw_output_top_logprobs")
    if any(body.get(flag) for flag in flat_flags) and draw(st.booleans()):
        body["return_flat_raw_top_logprobs_b64"] = True
    if body.get("return_flat_raw_output_top_logprobs"):
        stream = draw(st.sampled_from([False, None, "absent"]))
    else:
        stream = draw(st.sampled_from([True, False, None, "absent"]))
    if stream != "absent":
        body["stream"] = stream
    return body


ORCHESTRATOR_VALUES: dict[str, Any] = {
    "bootstrap_host": "10.9.9.9",
    "bootstrap_port": 1,
    "bootstrap_room": 7,
    "bootstrap_pair_key": "k",
    "decode_tp_size": 8,
    "routed_dp_rank": 3,
    "data_parallel_rank": 3,
    "disagg_prefill_dp_rank": 2,
    "external_trace_header": {"traceparent": "x"},
    "received_time": 1.5,
    "http_worker_ipc": "ipc:///tmp/x",
    "kv_hints": {"protocol_version": "1"},
    "routing_key": "tenant-a",
    "custom_labels": {"model_name": "spoofed"},
}


@st.composite
def rejected_requests(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """An otherwise valid body broken in one way, and the code of the rule it breaks."""
    body = draw(client_requests())
    code = draw(
        st.sampled_from(
            [
                "output_flat_with_stream",
                "b64_without_flat",
                "n_null",
                "min_new_tokens_over_max",
                "orchestrator_field",
                "not_token_input",
                "batched_input",
                "empty_input_ids",
                "missing_input_ids",
                "token_id_out_of_range",
                "unknown_field",
                "wrong_type",
                "session_id_with_session_params",
            ]
        )
    )
    sampling = dict(body.get("sampling_params") or {})
    if code == "output_flat_with_stream":
        body.update(stream=True, return_flat_raw_output_top_logprobs=True)
    elif code == "b64_without_flat":
        body.update(return_flat_raw_top_logprobs_b64=True)
        body.pop("return_flat_raw_top_logprobs", None)
        body.pop("return_flat_raw_output_top_logprobs", None)
    elif code == "n_null":
        sampling["n"] = None
        body["sampling_params"] = sampling
    elif code == "min_new_tokens_over_max":
        high = draw(st.integers(0, 1000))
        sampling.update(max_new_tokens=high, min_new_tokens=high + draw(st.integers(1, 10)))
        body["sampling_params"] = sampling
    elif code == "orchestrator_field":
        key = draw(st.sampled_from(sorted(ORCHESTRATOR_VALUES)))
        body[key] = ORCHESTRATOR_VALUES[key]
    elif code == "not_token_input":
        key, value = draw(
            st.sampled_from(
                [("text", "hello"), ("input_embeds", [[0.5]]), ("image_data", "http://x/y.png")]
            )
        )
        body[key] = value
    elif code == "batched_input":
        body["input_ids"] = [body["input_ids"], body["input_ids"]]
    elif code == "empty_input_ids":
        body["input_ids"] = []
    elif code == "missing_input_ids":
        del body["input_ids"]
    elif code == "token_id_out_of_range":
        body["input_ids"] = [*body["input_ids"], draw(st.sampled_from([-1, 2**32, 2**40]))]
    elif code == "unknown_field":
        body[draw(st.sampled_from(["retrun_logprob", "streaming", "max_tokens", "prompt"]))] = 1
    elif code == "wrong_type":
        key = draw(st.sampled_from(["stream", "top_logprobs_num", "return_logprob", "rid"]))
        body[key] = [1] if key == "rid" else "yes"
    elif code == "session_id_with_session_params":
        body.update(session_id="s-1", session_params={"id": "s-1"})
    return body, code


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
"""Any JSON value, integers beyond 64 bits included."""

HOSTILE_BODIES: tuple[bytes, ...] = (
    b"",
    b"\xef\xbb\xbf{}",
    b"\xff\xfe\x00",
    b"[" * 100_000,
    b"{" * 100_000,
    b'{"input_ids": [' + b"[" * 100_000,
    b'{"input_ids": [1], "priority": 1' + b"0" * 40 + b"}",
    b'{"input_ids": [1], "sampling_params": {"temperature": NaN}}',
    b'{"input_ids": [1], "sampling_params": {"temperature": Infinity}}',
    b'{"input_ids": [1], "sampling_params": {"temperature": 1e999}}',
    b'{"input_ids": [1], "stream": true, "stream": false}',
    b'{"input_ids": [1], "rid": "\\ud800"}',
    b'{"input_ids": "' + b"7" * 10_000 + b'"}',
    b'{"input_ids": [1], "sampling_params": {"n": 1' + b"0" * 30 + b"}}",
    b'{"input_ids": [1, 2',
)
"""Bodies no entry point may crash on."""

# --- SSE and aggregation ---
# This section's own imports, kept here so the file's header stays shared.
import itertools  # noqa: E402

import msgspec  # noqa: E402

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
"""Any JSON value msgspec round-trips exactly."""

_token_ids = st.integers(0, 2**31)
_logprob_entries = st.tuples(
    st.none() | st.floats(-40, 0, allow_nan=False), _token_ids, st.none() | st.text(max_size=3)
).map(list)
_top_rows = st.none() | st.lists(_logprob_entries, max_size=3)
_finish_reasons = st.one_of(
    st.fixed_dictionaries({"type": st.just("length"), "length": st.integers(0, 4096)}),
    st.fixed_dictionaries(
        {"type": st.just("stop"), "matched": st.none() | _token_ids | st.text(max_size=3)}
    ),
    st.fixed_dictionaries(
        {"type": st.just("abort"), "message": st.text(max_size=8)},
        optional={"status_code": st.none() | st.integers(100, 399)},
    ),
)
_META_RESERVED = frozenset(
    {
        "finish_reason",
        "completion_tokens",
        "output_token_logprobs",
        "output_token_logprobs_length",
        "output_top_logprobs",
        "output_token_ids_logprobs",
        "output_token_sampling_mask",
        "output_token_sampling_mask_length",
        "output_token_sampling_logprobs",
        "beam_results",
    }
)
_TOP_RESERVED = frozenset({"text", "output_ids", "meta_info", "error", "object", "index"})
_meta_extras = st.dictionaries(
    st.text(max_size=8).filter(lambda key: key not in _META_RESERVED), json_values, max_size=3
)
_top_extras = st.dictionaries(
    st.text(max_size=8).filter(lambda key: key not in _TOP_RESERVED), json_values, max_size=2
)


@st.composite
def final_responses(draw: st.DrawFn) -> dict[str, Any]:
    """A final /generate response that passes every check: its counts match its arrays.

    Optional keys come and go as SGLang's request options make them; unknown
    keys, top-level and in meta_info, hold any JSON.
    """
    count = draw(st.integers(0, 8))
    meta: dict[str, Any] = {"id": draw(st.text(max_size=8)), "finish_reason": draw(_finish_reasons)}
    meta.update(draw(_meta_extras))
    if draw(st.booleans()):
        meta["completion_tokens"] = count
    if draw(st.booleans()):
        meta["output_token_logprobs"] = draw(
            st.lists(_logprob_entries, min_size=count, max_size=count)
        )
        if draw(st.booleans()):
            meta["output_token_logprobs_length"] = count
    for key in ("output_top_logprobs", "output_token_ids_logprobs"):
        if draw(st.booleans()):
            meta[key] = draw(st.lists(_top_rows, max_size=count))
    if draw(st.booleans()):
        mask = draw(st.lists(st.lists(st.integers(0, 1), max_size=3), max_size=count))
        meta["output_token_sampling_mask"] = mask
        meta["output_token_sampling_mask_length"] = len(mask)
        meta["output_token_sampling_logprobs"] = draw(st.lists(st.floats(-9, 0), max_size=count))
    response: dict[str, Any] = draw(_top_extras)
    if draw(st.booleans()):  # absent when the server skips the tokenizer
        response["text"] = draw(st.text(max_size=12))
    response["output_ids"] = draw(st.lists(_token_ids, min_size=count, max_size=count))
    response["meta_info"] = meta
    return response


def _cut(draw: st.DrawFn, value: Any, parts: int) -> list[Any]:
    """`value` (a string or list) cut into `parts` consecutive pieces, some empty."""
    cuts = sorted(
        draw(st.lists(st.integers(0, len(value)), min_size=parts - 1, max_size=parts - 1))
    )
    bounds = [0, *cuts, len(value)]
    return [value[start:end] for start, end in itertools.pairwise(bounds)]


_DELTA_PATHS = (
    ("text",),
    ("output_ids",),
    ("meta_info", "output_token_logprobs"),
    ("meta_info", "output_top_logprobs"),
    ("meta_info", "output_token_ids_logprobs"),
    ("meta_info", "output_token_sampling_mask"),
    ("meta_info", "output_token_sampling_logprobs"),
)


@st.composite
def _noise(draw: st.DrawFn, response: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Top-level and meta_info keys an intermediate frame may hold and the
    terminal frame overrides: other values for the response's keys, or keys it
    does not have."""
    top = {
        key: draw(json_values)
        for key in response
        if key not in _TOP_RESERVED
        if draw(st.booleans())
    }
    top.update(draw(_top_extras))
    meta = {
        key: draw(json_values)
        for key in response["meta_info"]
        if key not in _META_RESERVED and draw(st.booleans())
    }
    meta.update(draw(_meta_extras))
    return top, meta


@st.composite
def incremental_splits(draw: st.DrawFn, response: dict[str, Any]) -> list[dict[str, Any]]:
    """Frames of an incremental stream whose aggregate is `response`.

    Each delta field is cut into pieces (some empty, some frames without the
    key); intermediate frames carry noise in the other fields; the last frame
    is `response` with its own piece of each delta field.
    """
    parts = draw(st.integers(1, 5))
    frames: list[dict[str, Any]] = []
    for _ in range(parts - 1):
        top, meta = draw(_noise(response))
        frames.append({**top, "meta_info": {**meta, "finish_reason": None}})
    frames.append({**response, "meta_info": dict(response["meta_info"])})
    for path in _DELTA_PATHS:
        owner = response if len(path) == 1 else response["meta_info"]
        if path[-1] not in owner:
            continue
        pieces = _cut(draw, owner[path[-1]], parts)
        carriers = [bool(piece) or draw(st.booleans()) for piece in pieces]
        carriers[draw(st.integers(0, parts - 1))] = True  # at least one frame has the key
        for frame, piece, carried in zip(frames, pieces, carriers, strict=True):
            target = frame if len(path) == 1 else frame["meta_info"]
            if carried:
                target[path[-1]] = piece
            else:
                target.pop(path[-1], None)
    return frames


@st.composite
def cumulative_splits(draw: st.DrawFn, response: dict[str, Any]) -> list[dict[str, Any]]:
    """Frames of a cumulative stream ending in `response`: growing prefixes of it."""
    parts = draw(st.integers(1, 5))
    frames = []
    for _ in range(parts - 1):
        top, meta = draw(_noise(response))
        frame: dict[str, Any] = {**top, "meta_info": {**meta, "finish_reason": None}}
        for path in _DELTA_PATHS:
            owner = response if len(path) == 1 else response["meta_info"]
            if path[-1] in owner:
                value = owner[path[-1]]
                target = frame if len(path) == 1 else frame["meta_info"]
                target[path[-1]] = value[: draw(st.integers(0, len(value)))]
        frames.append(frame)
    frames.append(response)
    return frames


@st.composite
def sse_transcripts(draw: st.DrawFn, frames: list[dict[str, Any]], done: bool = True) -> bytes:
    """`frames` as an SSE stream in any form the WHATWG rules read the same.

    SGLang's own shape, or with other line ends, a BOM, comments, ``id`` /
    ``event`` / ``retry`` / unknown fields, ``data:`` without its space, the
    JSON spread over several ``data`` lines, and extra blank lines.
    """
    newline = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    out = [b"\xef\xbb\xbf"] if draw(st.booleans()) else []
    events = [msgspec.json.encode(frame) for frame in frames] + ([b"[DONE]"] if done else [])
    for payload in events:
        style = draw(st.sampled_from(["sglang", "sglang", "no_space", "multiline", "decorated"]))
        if style == "multiline" and payload != b"[DONE]":
            lines = [
                b"data: " + line for line in msgspec.json.format(payload, indent=1).split(b"\n")
            ]
        elif style == "no_space":
            lines = [b"data:" + payload]
        else:
            lines = [b"data: " + payload]
        if style == "decorated":
            extras = [
                b": keep-alive",
                b"id: 7",
                b"event: message",
                b"retry: 1000",
                b"x-unknown: 1",
                b"id",
            ]
            for extra in draw(st.lists(st.sampled_from(extras), max_size=3)):
                lines.insert(draw(st.integers(0, len(lines))), extra)
            out.append(newline * draw(st.integers(0, 2)))
        out.append(newline.join(lines) + newline * 2)
    return b"".join(out)


@st.composite
def chunkings(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """`data` cut into consecutive chunks at any points, empty chunks included."""
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    bounds = [0, *cuts, len(data)]
    return [data[start:end] for start, end in itertools.pairwise(bounds)]


hostile_json_documents = st.sampled_from(
    [
        b"",
        b"\xef\xbb\xbf{}",
        b"[" * 100_000,
        b"{" * 100_000,
        b'{"a":' * 50_000,
        b"[" * 100_000 + b"]" * 100_000,
        b"123456789012345678901234567890",
        b'{"meta_info": {"completion_tokens": 1' + b"0" * 40 + b"}}",
        b"NaN",
        b"[Infinity]",
        b'{"meta_info": {"e2e_latency": NaN}}',
        b"1e999",
        b'{"meta_info": {}, "meta_info": []}',
        b'{"meta_info": []}',
        b'{"meta_info": null}',
        b'{"meta_info": {"finish_reason": 3}}',
        b'{"meta_info": {"finish_reason": "stop"}}',
        b'{"meta_info": {"finish_reason": {"type": "abort", "status_code": "503"}}}',
        b'{"meta_info": {"finish_reason": {"type": "abort", "status_code": 503, "message": 7}}}',
        b'{"output_ids": "abc", "meta_info": {"finish_reason": null}}',
        b'{"text": 7, "meta_info": {"finish_reason": {"type": "stop"}}}',
        b'{"meta_info": {"finish_reason": {}, "completion_tokens": "1"}, "output_ids": []}',
        b'{"meta_info": {"finish_reason": {}, "output_token_logprobs_length": 1}}',
        b'{"error": 5}',
        b'{"error": {"message": 5}}',
        b'{"error": {"message": "m", "code": "x"}}',
        b'{"object": "error"}',
        b'"\xff\xfe"',
        b'{"\xed\xa0\x80": 1}',
        b"[]",
        b"[{}]",
        b'{"a": 1}',
    ]
)
"""JSON bodies and frames every response entry point must reject cleanly (or accept)."""


@st.composite
def retyped(draw: st.DrawFn, value: Any) -> Any:
    """`value` with one nested value, or `value` itself, replaced by any JSON value."""
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        return {**value, key: draw(retyped(value[key]))}
    if isinstance(value, list) and value and draw(st.booleans()):
        at = draw(st.integers(0, len(value) - 1))
        return [*value[:at], draw(retyped(value[at])), *value[at + 1 :]]
    return draw(json_values)


# --- flat top logprobs ---
# This section's own imports, kept here so the file's header stays shared.
import base64  # noqa: E402
import struct  # noqa: E402

flat_sides = st.sampled_from(["input", "output"])
"""A side of the flat top-logprob fields."""

flat_token_ids = st.integers(-(2**31), 2**31 - 1)
"""Token ids that fit SGLang's int32 Base64 form."""

float32_logprobs = st.floats(width=32, allow_nan=False)
"""Logprobs exactly representable as float32, infinities included (NaN has no exact round trip)."""

json_logprobs = st.floats(allow_nan=False) | st.integers(-(2**60), 2**60)
"""Logprobs that survive SGLang's JSON-list form exactly (any float but NaN, or an int)."""


@st.composite
def flat_nested_rows(
    draw: st.DrawFn, *, b64: bool = False
) -> tuple[list[list[list[Any]] | None], int]:
    """Nested top-logprob rows SGLang can flatten, and a `top_logprobs_num`.

    A null prefix of None or empty rows, then rows of k `[logprob, token_id,
    text]` entries. With `b64`, logprobs are float32-exact, so they round-trip.
    """
    k = draw(st.integers(1, 6))
    prefix: list[list[list[Any]] | None] = draw(st.lists(st.sampled_from([None, []]), max_size=4))
    entry = st.tuples(
        float32_logprobs if b64 else json_logprobs,
        flat_token_ids,
        st.none() | st.text(max_size=3),
    ).map(list)
    body = draw(st.lists(st.lists(entry, min_size=k, max_size=k), max_size=6))
    return prefix + body, draw(st.integers(0, 8))


@st.composite
def flat_fields(draw: st.DrawFn) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """Valid flat fields in a `meta_info`, built without the library.

    Returns `(meta_info, side, parts)` where parts holds `b64`, `null_prefix`,
    `rows`, `k`, `values` (float32-exact) and `token_ids`.
    """
    side = draw(flat_sides)
    b64 = draw(st.booleans())
    rows, k = draw(st.integers(0, 6)), draw(st.integers(0, 5))
    null_prefix = draw(st.integers(0, 5))
    values = draw(st.lists(float32_logprobs, min_size=rows * k, max_size=rows * k))
    token_ids = draw(st.lists(flat_token_ids, min_size=rows * k, max_size=rows * k))
    key = f"{side}_top_logprobs_"
    meta_info: dict[str, Any] = {"id": "req-1", "finish_reason": None}
    if b64:
        n = rows * k
        val_bytes, idx_bytes = struct.pack(f"<{n}f", *values), struct.pack(f"<{n}i", *token_ids)
        meta_info[key + "val_flat_b64"] = base64.b64encode(val_bytes).decode()
        meta_info[key + "idx_flat_b64"] = base64.b64encode(idx_bytes).decode()
        meta_info[key + "val_flat_b64_dtype"] = "float32"
        meta_info[key + "idx_flat_b64_dtype"] = "int32"
    else:
        meta_info[key + "val_flat"] = values
        meta_info[key + "idx_flat"] = token_ids
    meta_info[key + "shape"] = [rows, k]
    meta_info[key + "null_prefix"] = null_prefix
    parts = {"b64": b64, "null_prefix": null_prefix, "rows": rows, "k": k}
    return meta_info, side, {**parts, "values": values, "token_ids": token_ids}


flat_junk = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([2**63, 2**64, -1, 10**400, float("nan"), float("inf"), "", "AAAA"])
    | st.floats()
    | st.text(max_size=8)
    | st.lists(st.none() | st.booleans() | st.integers() | st.floats(), max_size=4)
    | st.dictionaries(st.text(max_size=4), st.integers(), max_size=2)
)
"""Values of the wrong type or range for any flat field."""


def _b64_mutations(text: str) -> st.SearchStrategy[str]:
    """Base64 text made invalid or the wrong length."""
    return st.sampled_from(
        [
            text[:-1],
            text + "A",
            text + "AAAA",
            text[:-4],
            "!" + text[1:],
            "é" + text[1:],
            "=" + text[1:],
            text.replace("=", "A"),
            text[: len(text) // 2] + "=" + text[len(text) // 2 + 1 :],
            " " + text[1:],
        ]
    )


@st.composite
def hostile_flat_meta_infos(draw: st.DrawFn) -> tuple[Any, str]:
    """Something in place of a `meta_info`, mostly valid flat fields with damage done.

    Returns `(meta_info, side)`.
    """
    meta_info, side, _ = draw(flat_fields())
    if draw(st.integers(0, 9)) == 0:
        return draw(flat_junk), side
    keys = sorted(key for key in meta_info if key.startswith(side))
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(keys))
        value = meta_info.get(key)
        damage = draw(st.integers(0, 5))
        if damage == 0:
            meta_info.pop(key, None)
        elif damage == 1:
            meta_info[key] = draw(flat_junk)
        elif damage == 2 and isinstance(value, str) and value:
            meta_info[key] = draw(_b64_mutations(value))
        elif damage == 3 and isinstance(value, list) and value:
            index = draw(st.integers(0, len(value) - 1))
            meta_info[key] = [*value[:index], draw(flat_junk), *value[index + 1 :]]
        elif damage == 4:
            big = st.integers(0, 3) | st.sampled_from([2**24, 2**31, 2**62, 10**5000])
            meta_info[side + "_top_logprobs_shape"] = [draw(big), draw(big)]
            meta_info[side + "_top_logprobs_null_prefix"] = draw(big | st.integers(-3, -1))
        else:  # both forms at once, or a stray dtype marker
            stray = draw(st.sampled_from(["val_flat", "idx_flat_b64", "val_flat_b64_dtype"]))
            meta_info[f"{side}_top_logprobs_{stray}"] = draw(flat_junk)
    return meta_info, side


hostile_flat_nested = st.lists(
    flat_junk | st.lists(flat_junk | st.lists(flat_junk, max_size=4), max_size=4), max_size=5
)
"""Rows of anything, for the encoder: junk rows, junk entries, junk logprobs and ids."""


# --- cancellation ---

#: A number of seconds an `AbortPolicy` accepts (zero included, ints too).
abort_seconds = st.floats(0, 60, allow_nan=False, allow_infinity=False) | st.integers(0, 60)


def abort_policies() -> st.SearchStrategy[AbortPolicy]:
    """Any valid `AbortPolicy`, short deadlines (which trim the schedule) included."""
    return st.builds(
        AbortPolicy,
        retry_delays_s=st.lists(abort_seconds, max_size=8).map(tuple),
        first_token_wait_s=abort_seconds,
        deadline_s=abort_seconds,
    )


@st.composite
def engine_requests_to_abort(
    draw: st.DrawFn, *, role: Role | None = None, stream: bool | None = None
) -> EngineRequest:
    """An engine request built by the library for `role` (any when None).

    `stream` pins the engine's stream mode: the client's, but for the prefill role,
    which always streams; False needs a unary role (aggregated or decode).
    """
    if role is None:
        unary_roles = [Role.AGGREGATED, Role.DECODE]
        role = draw(st.sampled_from(unary_roles if stream is False else list(Role)))
    streams = draw(st.booleans()) if stream is None else stream
    output_flat = not streams and draw(st.booleans())
    body = {
        "stream": streams,
        "input_ids": draw(token_ids),
        "return_logprob": True,
        "top_logprobs_num": 1,
        "return_flat_raw_output_top_logprobs": output_flat,
    }
    envelope = to_worker_envelope(decode_client_request(body), rid=draw(request_ids))
    bootstrap = None if role is Role.AGGREGATED else draw(bootstraps)
    return build_engine_request(
        envelope,
        deployment=DEPLOYMENT,
        input_ids=envelope.request.input_ids,
        role=role,
        bootstrap=bootstrap,
    )


@st.composite
def weight_version_spans(draw: st.DrawFn) -> tuple[WeightVersionSpan, ...]:
    """`AbortReq.weight_versions`: spans of output tokens, each with its weight version."""
    spans = []
    for _ in range(draw(st.integers(0, 4))):
        start = draw(st.integers(0, 2**20))
        end = start + draw(st.integers(0, 2**20))
        spans.append(WeightVersionSpan(version=draw(st.text(max_size=8)), start=start, end=end))
    return tuple(spans)


@st.composite
def loads_answers(draw: st.DrawFn) -> tuple[bytes, int, int, int]:
    """A ``GET /v1/loads`` answer in SGLang's shape, with its running, waiting and rank count."""
    loads: list[dict[str, Any]] = []
    for rank in range(draw(st.integers(0, 6))):
        load = draw(
            st.fixed_dictionaries(
                {
                    "num_running_reqs": st.integers(0, 3) | st.integers(0, 2**40),
                    "num_waiting_reqs": st.integers(0, 3),
                },
                optional={"token_usage": _finite, "queues": st.just({"waiting": 0})},
            )
        )
        loads.append({"timestamp": 1.5, "dp_rank": rank, **load})
    body = {"timestamp": "2026-12-02T16:00:00+00:00", "version": "0.5.23", "loads": loads}
    running = sum(load["num_running_reqs"] for load in loads)
    waiting = sum(load["num_waiting_reqs"] for load in loads)
    return json.dumps(body).encode(), running, waiting, len(loads)


@st.composite
def continuable(draw: st.DrawFn) -> tuple[ClientRequest, dict[str, Any]]:
    """A request and an aborted or length-stopped answer to it with tokens left to make."""
    made = draw(st.lists(st.integers(0, 2**32 - 1), max_size=16))
    params: dict[str, Any] = {"max_new_tokens": len(made) + draw(st.integers(1, 64))}
    if draw(st.booleans()):
        params["min_new_tokens"] = draw(st.integers(0, params["max_new_tokens"]))
    params.update(draw(st.fixed_dictionaries({}, optional={"temperature": st.floats(0, 2)})))
    body: dict[str, Any] = {"input_ids": draw(token_ids), "sampling_params": params}
    body.update(
        draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "return_logprob": st.booleans(),
                    "top_logprobs_num": st.integers(0, 5),
                    "stream": st.booleans(),
                    "rid": request_ids,
                },
            )
        )
    )
    finish = draw(
        st.sampled_from(
            [
                {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None},
                {"type": "length", "length": len(made)},
            ]
        )
    )
    meta = {"finish_reason": finish, "completion_tokens": len(made)}
    return decode_client_request(body), {"text": "", "output_ids": made, "meta_info": meta}


# --- hostile input ---
# This section's own imports, kept here so the file's header stays shared.
import math  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import NamedTuple  # noqa: E402

from sglang_envelope.cli.demo import DEMO_SSE_TRANSCRIPT, SEED_REQUEST, demo_unary_body  # noqa: E402
from sglang_envelope.stream import SSE_DONE  # noqa: E402

HOSTILE_KINDS: tuple[str, ...] = (
    "random_bytes",
    "invalid_utf8",
    "bom",
    "deep_nesting",
    "big_int",
    "nan_infinity",
    "duplicate_keys",
    "wrong_type",
    "huge_array",
    "unterminated",
)
"""The kinds of hostile input every entry point must survive."""

DEEP = 100_000
"""Brackets in a deeply nested value: far beyond any decoder's recursion limit."""

HUGE = 1_000_001
"""Items in a huge array: one more than `DEFAULT_MAX_INPUT_IDS`."""

ABSENT: Any = object()
"""The `Hostile.value` of JSON text no decoder turns into a Python value."""


def nested_lists(depth: int) -> list[Any]:
    """`[[[...]]]`, `depth` lists deep, built without recursion."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def nested_objects(depth: int) -> dict[str, Any]:
    """`{"a": {"a": ...}}`, `depth` objects deep, built without recursion."""
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


class Hostile(NamedTuple):
    """One hostile JSON value: its text, and the nearest Python value a caller could pass."""

    text: bytes
    value: Any


HOSTILE_VALUES: dict[str, tuple[Hostile, ...]] = {
    "random_bytes": (
        Hostile(b"\x00\x9c\xff\x01", b"\x00\x9c\xff\x01"),  # bytes where JSON has no bytes
        Hostile(b"\x80\xfe\xfa\x1b", bytearray(b"\x80\xfe\xfa\x1b")),
    ),
    "invalid_utf8": (
        Hostile(b'"\xff\xfe"', "\udcff\udcfe"),  # as decoded with surrogateescape
        Hostile(b'"\xed\xa0\x80"', "\ud800"),  # an encoded surrogate
        Hostile(b'"\xc3"', "\udcc3"),  # a cut sequence
        Hostile(b'"\\ud800"', "\ud800"),  # an escaped lone surrogate
        Hostile(b'{"\xff": 1}', {"\udcff": 1}),
    ),
    "bom": (
        Hostile(b'"\xef\xbb\xbf"', "\ufeff"),
        Hostile(b'"\xef\xbb\xbfstop"', "\ufeffstop"),
        Hostile(b'{"\xef\xbb\xbftype": "stop"}', {"\ufefftype": "stop"}),
        Hostile(b"\xef\xbb\xbf1", ABSENT),  # a BOM before a value
    ),
    "deep_nesting": (
        Hostile(b"[" * DEEP + b"]" * DEEP, nested_lists(DEEP)),
        Hostile(b'{"a":' * DEEP + b"{}" + b"}" * DEEP, nested_objects(DEEP)),
        Hostile(b"[" * DEEP, ABSENT),
    ),
    "big_int": (
        Hostile(b"18446744073709551616", 2**64),
        Hostile(b"9223372036854775808", 2**63),
        Hostile(b"-1" + b"0" * 30, -(10**30)),
        Hostile(b"1" * 5_000, (10**5_000 - 1) // 9),  # beyond str()'s 4300 digits
    ),
    "nan_infinity": (
        Hostile(b"NaN", math.nan),
        Hostile(b"Infinity", math.inf),
        Hostile(b"-Infinity", -math.inf),
        Hostile(b"1e999", math.inf),
        Hostile(b"[-1e999]", [-math.inf]),
    ),
    "duplicate_keys": (
        Hostile(b'{"a": 1, "a": [2]}', {"a": [2]}),
        Hostile(
            b'{"type": "stop", "finish_reason": {}, "type": [], "finish_reason": null}',
            {"type": [], "finish_reason": None},
        ),
    ),
    "wrong_type": (
        Hostile(b"null", None),
        Hostile(b"true", True),
        Hostile(b"-1", -1),
        Hostile(b"1.5", 1.5),
        Hostile(b'"x"', "x"),
        Hostile(b'""', ""),
        Hostile(b"[]", []),
        Hostile(b"{}", {}),
        Hostile(b'[null, "x", {}]', [None, "x", {}]),
    ),
    "huge_array": (Hostile(b"[" + b"1," * (HUGE - 1) + b"1]", [1] * HUGE),),
    "unterminated": (
        Hostile(b'"abc', ABSENT),
        Hostile(b"[1, 2", ABSENT),
        Hostile(b'{"a": ', ABSENT),
        Hostile(b"tru", ABSENT),
    ),
}
"""Hostile JSON values by kind, each as text and (where one exists) as a Python value."""

_B64_VALUES = base64.b64encode(struct.pack("<2f", -0.5, -1.5)).decode()
_B64_TOKEN_IDS = base64.b64encode(struct.pack("<2i", 7, 9)).decode()
_REQUEST: dict[str, Any] = {
    "input_ids": [1, 2],
    "rid": "r",
    "return_logprob": True,
    "top_logprobs_num": 1,
    "sampling_params": {"temperature": 0.5, "stop": ["x"], "custom_params": {"a": 1}},
}

HOSTILE_BASES: dict[str, tuple[dict[str, Any], tuple[tuple[str | int, ...], ...]]] = {
    "request": (
        _REQUEST,
        (
            (),
            ("input_ids",),
            ("input_ids", 1),
            ("rid",),
            ("top_logprobs_num",),
            ("sampling_params",),
            ("sampling_params", "temperature"),
            ("sampling_params", "stop", 0),
            ("sampling_params", "custom_params", "a"),
        ),
    ),
    "envelope": (
        {"rid": "r", "request": _REQUEST},
        ((), ("request", "input_ids"), ("rid",), ("request",), ("request", "sampling_params")),
    ),
    "response": (
        {
            "text": "ab",
            "output_ids": [1, 2],
            "meta_info": {
                "id": "x",
                "finish_reason": {"type": "length", "length": 2},
                "completion_tokens": 2,
                "output_token_logprobs": [[-0.5, 1, None], [-0.25, 2, None]],
                "input_token_logprobs": [[None, 7, None], [-1.0, 8, None]],
            },
        },
        (
            (),
            ("output_ids",),
            ("output_ids", 0),
            ("text",),
            ("index",),
            ("error",),
            ("meta_info",),
            ("meta_info", "finish_reason"),
            ("meta_info", "finish_reason", "type"),
            ("meta_info", "completion_tokens"),
            ("meta_info", "output_token_logprobs", 0),
            ("meta_info", "input_token_logprobs"),
        ),
    ),
    "flat": (
        {
            "output_top_logprobs_val_flat": [-0.5, -1.5],
            "output_top_logprobs_idx_flat": [7, 9],
            "output_top_logprobs_shape": [1, 2],
            "output_top_logprobs_null_prefix": 1,
        },
        (
            (),
            ("output_top_logprobs_val_flat",),
            ("output_top_logprobs_val_flat", 0),
            ("output_top_logprobs_idx_flat", 1),
            ("output_top_logprobs_shape",),
            ("output_top_logprobs_shape", 0),
            ("output_top_logprobs_null_prefix",),
        ),
    ),
    "flat_b64": (
        {
            "output_top_logprobs_val_flat_b64": _B64_VALUES,
            "output_top_logprobs_idx_flat_b64": _B64_TOKEN_IDS,
            "output_top_logprobs_val_flat_b64_dtype": "float32",
            "output_top_logprobs_idx_flat_b64_dtype": "int32",
            "output_top_logprobs_shape": [1, 2],
            "output_top_logprobs_null_prefix": 0,
        },
        (
            ("output_top_logprobs_idx_flat_b64",),
            ("output_top_logprobs_val_flat_b64",),
            ("output_top_logprobs_val_flat_b64_dtype",),
            ("output_top_logprobs_shape", 1),
            ("output_top_logprobs_null_prefix",),
        ),
    ),
}
"""Valid documents of each shape an entry point reads, and the paths a hostile
value is put at (the first two first: a huge array goes only there)."""

_HOLE = "\x00hole\x00"


def placed(value: Any, path: tuple[str | int, ...], new: Any) -> Any:
    """`value` with `new` at `path` (a key that is not there is added); only the path is copied."""
    if not path:
        return new
    copy: Any = list(value) if isinstance(value, list) else dict(value)
    copy[path[0]] = placed(value[path[0]], path[1:], new) if len(path) > 1 else new
    return copy


def _paths(shape: str, kind: str) -> tuple[tuple[str | int, ...], ...]:
    paths = HOSTILE_BASES[shape][1]
    return paths[:2] if kind == "huge_array" else paths


def hostile_documents(shape: str, kind: str) -> list[bytes]:
    """JSON documents of `shape` made hostile in the way `kind` names.

    Each hostile value of the kind at each path of the shape, and for some
    kinds the whole document: a BOM before it, a key given twice, cut short.
    """
    base = HOSTILE_BASES[shape][0]
    encoded = msgspec.json.encode(base)
    documents = [
        msgspec.json.encode(placed(base, path, _HOLE)).replace(b'"\\u0000hole\\u0000"', h.text)
        for path in _paths(shape, kind)
        for h in HOSTILE_VALUES[kind]
    ]
    if kind == "random_bytes":
        documents += [bytes(range(256)), b"\xfe\xff" * 64, b"\x00" * 16, b"\x1b[31m"]
    elif kind == "bom":
        documents += [b"\xef\xbb\xbf" + encoded, b"\xef\xbb\xbf" * 2 + encoded]
    elif kind == "duplicate_keys":
        for key in list(base)[:3]:
            twice = f'"{key}": [[]]'.encode()
            documents += [b"{" + twice + b", " + encoded[1:], encoded[:-1] + b", " + twice + b"}"]
    elif kind == "unterminated":
        documents += [encoded[:cut] for cut in (1, len(encoded) // 2, len(encoded) - 1)]
    return documents


def hostile_objects(shape: str, kind: str) -> list[Any]:
    """The Python counterparts of `hostile_documents`: what a caller could pass instead.

    Empty for a kind with no Python form (JSON cut short).
    """
    base = HOSTILE_BASES[shape][0]
    objects = [
        placed(base, path, h.value)
        for path in _paths(shape, kind)
        for h in HOSTILE_VALUES[kind]
        if h.value is not ABSENT
    ]
    if kind == "duplicate_keys":  # what a decoder makes of a key given twice: the last value
        objects += [msgspec.json.decode(doc) for doc in hostile_documents(shape, kind)]
    elif kind == "bom":
        objects += [{"\ufeff" + key: value for key, value in base.items()}]
    return objects


def sse_event(data: bytes) -> bytes:
    """`data` as one SSE event, its line ends turned into spaces so it stays one event."""
    return b"data: " + data.replace(b"\r", b" ").replace(b"\n", b" ") + b"\n\n"


def hostile_streams(kind: str) -> list[bytes]:
    """SSE streams whose frames are `hostile_documents("response", kind)`, as the
    only frame, after an intermediate frame, and before the terminal one; plus,
    for some kinds, the stream as a whole: a BOM before it, an event or line cut short.
    """
    base = HOSTILE_BASES["response"][0]
    terminal = sse_event(msgspec.json.encode(base))
    intermediate = sse_event(
        msgspec.json.encode({"text": "", "meta_info": {"finish_reason": None}})
    )
    streams = []
    for document in hostile_documents("response", kind):
        event = sse_event(document)
        streams += [event + SSE_DONE, intermediate + event, event + terminal + SSE_DONE]
    if kind == "random_bytes":
        streams += [bytes(range(256)), b"data: \xff\xfe\n\n", b"\r" * 1000, b"data:" * 1000]
    elif kind == "bom":
        streams += [b"\xef\xbb\xbf" + terminal, b"\xef\xbb\xbf" * 2 + terminal]
    elif kind == "unterminated":
        streams += [
            terminal[:-1],
            terminal[:-2],
            intermediate + b"data: {",
            intermediate + b"data",
            terminal + b"data: " + b"[" * DEEP,
        ]
    return streams


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """`data` with one to four edits: bytes inserted, removed, replaced, repeated or cut off."""
    out = bytearray(data)
    insertions = st.sampled_from(
        [b"\xff", b"\xef\xbb\xbf", b"\x00", b"\n", b"\r", b"\n\n", b"{", b"[", b'"', b",", b"-"]
        + [h.text for kind in HOSTILE_KINDS if kind != "huge_array" for h in HOSTILE_VALUES[kind]]
    )
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(out)))
        end = draw(st.integers(at, min(len(out), at + 8)))
        edit = draw(st.sampled_from(["insert", "remove", "replace", "repeat", "cut"]))
        if edit == "insert":
            out[at:at] = draw(insertions)
        elif edit == "remove":
            del out[at:end]
        elif edit == "replace":
            out[at:end] = draw(st.binary(min_size=1, max_size=4))
        elif edit == "repeat":
            out[at:at] = out[at:end] * draw(st.integers(1, 3))
        else:
            del out[at:]
    return bytes(out)


_HOSTILE_PYTHON = [
    h.value
    for kind in HOSTILE_KINDS
    if kind != "huge_array"
    for h in HOSTILE_VALUES[kind]
    if h.value is not ABSENT
]


def _hostile_python(index: int) -> Any:
    # Drawn by index: Hypothesis reprs the choices of sampled_from, and a
    # 100,000-deep list (or an int over 4300 digits) has no repr.
    return _HOSTILE_PYTHON[index]


hostile_values = st.recursive(
    st.integers(0, len(_HOSTILE_PYTHON) - 1).map(_hostile_python)
    | json_scalars
    | st.floats()
    | st.integers(-(2**70), 2**70)
    | st.binary(max_size=6)
    | st.text(st.characters(categories=["Cs", "Cf", "Co"]), max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
"""Python values no JSON decoder gives, or gives only from hostile text: NaN,
infinities, lone surrogates, bytes, integers beyond 64 bits, 100,000-deep nesting."""


@st.composite
def hostile_placed(draw: st.DrawFn, value: Any) -> Any:
    """`value` with one nested value, a new key, or `value` itself, replaced by a hostile value."""
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)) | st.text(max_size=6))
        return {**value, key: draw(hostile_placed(value.get(key)))}
    if isinstance(value, list) and value and draw(st.booleans()):
        at = draw(st.integers(0, len(value) - 1))
        return [*value[:at], draw(hostile_placed(value[at])), *value[at + 1 :]]
    return draw(hostile_values)


SGLANG_ANSWERS: tuple[dict[str, Any], ...] = tuple(
    msgspec.json.decode(line)
    for line in (Path(__file__).parent / "fixtures" / "sse_responses.jsonl")
    .read_bytes()
    .splitlines()
)
"""SGLang 0.5.23's own /generate answers: `body` (SSE or JSON text), `kind` ("sse" or
"unary"), `incremental` and `expected` (see `scripts/make_sse_fixtures.py`)."""


def hostile_cli_inputs() -> st.SearchStrategy[bytes]:
    """Bytes for the command line: random, hostile documents, and damaged valid inputs."""
    flat = msgspec.json.encode(HOSTILE_BASES["flat"][0])
    documents = [
        document
        for kind in HOSTILE_KINDS
        if kind not in ("huge_array", "deep_nesting")
        for shape in ("request", "response", "flat")
        for document in hostile_documents(shape, kind)
    ]
    return st.one_of(
        st.binary(max_size=200),
        st.sampled_from(documents),
        st.sampled_from(
            [SEED_REQUEST, DEMO_SSE_TRANSCRIPT, demo_unary_body(), flat]
            + [answer["body"].encode() for answer in SGLANG_ANSWERS]
        ).flatmap(mutated),
    )


# --- final answers, errors and carrying out aborts ---

#: Any JSON, or a final response with one value retyped: what a worker may get back.
near_final_responses = json_values | final_responses().flatmap(retyped)

#: Short seconds for `run_abort` under Hypothesis: real sleeps, a few milliseconds each.
run_abort_delays = st.lists(st.sampled_from([0.0, 0.001, 0.002]), max_size=4).map(tuple)

#: Statuses `POST /abort_request` may answer: SGLang's 200, and others a proxy may give.
abort_statuses = st.sampled_from([200, 204, 404, 503])

#: Hand-built exception fields: any text, lone surrogates included, and any status.
error_texts = st.text()
error_statuses = st.none() | st.integers() | st.text()


# --- targets: SGLang releases and transports ---------------------------------------------


def target_values() -> st.SearchStrategy[object]:
    """Values for a `Target` field: the allowed strings, near misses and other types."""
    return st.one_of(
        st.sampled_from(["0.5.21", "0.5.22", "0.5.23", "http", "engine", "reject", "pass"]),
        st.sampled_from(["0.5.20", "0.5.24", "0.5.23 ", "HTTP", "grpc", "", "allow"]),
        st.text(max_size=12),
        st.integers(),
        st.floats(allow_nan=True),
        st.none(),
        st.lists(st.text(max_size=3), max_size=3),
        st.binary(max_size=5),
    )


# --- stream modes and verdicts ---

_PIECE_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=3)


@st.composite
def sglang_generations(draw: st.DrawFn) -> dict[str, Any]:
    """One generation as SGLang answers it, in the three forms its /generate gives.

    `unary` is the non-streaming response; `cumulative` and `incremental` the
    frames of the same generation streamed in each mode, cut at random frame
    boundaries. As in ``tokenizer_manager._handle_batch_output``: every frame's
    ``completion_tokens`` and ``output_token_logprobs_length`` count all output
    tokens sent so far, in both modes; an incremental frame holds the new part
    of ``text``, ``output_ids`` and the ``_INCREMENTAL_STREAMING_META_INFO_KEYS``
    lists, a cumulative one all of it; only the terminal frame has a finish
    reason and ``e2e_latency``. The scheduler sends the first token at once
    and an intermediate frame only with new tokens (``output_streamer.accept``),
    so every frame but the terminal one carries at least one token.
    """
    count = draw(st.integers(0, 8))
    ids = draw(st.lists(_token_ids, min_size=count, max_size=count))
    texts = (
        draw(st.lists(_PIECE_TEXT, min_size=count, max_size=count)) if draw(st.booleans()) else None
    )
    token_logprobs = top_logprobs = None
    if draw(st.booleans()):
        token_logprobs = [[draw(st.floats(-40, 0)), token, None] for token in ids]
        if draw(st.booleans()):
            top_logprobs = [draw(_top_rows) for _ in ids]
    ends = sorted(set(draw(st.lists(st.integers(1, count), max_size=4)))) if count else []
    if not ends or ends[-1] != count or draw(st.booleans()):
        ends.append(count)  # the terminal frame, with or without tokens of its own
    finish = draw(_finish_reasons.filter(lambda reason: reason["type"] != "abort"))
    base = {"id": "rid-1", "prompt_tokens": draw(st.integers(0, 99)), "cached_tokens": 0}

    def frame(start: int, end: int, *, last: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {**base, "finish_reason": finish if last else None}
        meta["completion_tokens"] = end
        if last:
            meta["e2e_latency"] = 0.5
        if token_logprobs is not None:
            meta["output_token_logprobs"] = token_logprobs[start:end]
            meta["output_token_logprobs_length"] = end
        if top_logprobs is not None:
            meta["output_top_logprobs"] = top_logprobs[start:end]
        out: dict[str, Any] = {} if texts is None else {"text": "".join(texts[start:end])}
        out["output_ids"] = ids[start:end]
        out["meta_info"] = meta
        return out

    starts = [0, *ends[:-1]]
    last = len(ends) - 1
    return {
        "unary": frame(0, count, last=True),
        "cumulative": [frame(0, end, last=i == last) for i, end in enumerate(ends)],
        "incremental": [
            frame(start, end, last=i == last)
            for i, (start, end) in enumerate(zip(starts, ends, strict=True))
        ],
    }


SKIPPED_VALUES: tuple[bytes, ...] = (
    b'"\xff"',
    b'"\xed\xa0\x80"',
    b'"caf\xc3\xa9"',
    b"1e400",
    b"-1E+400",
    b"1e-400",
    b"1" * 5000,
    b"9" * 400,
    b"1" * 400 + b".0",
    b"1" * 290 + b"e99",
    b"0." + b"1" * 300,
    b"1.5e308",
    b"[" * 3000 + b"]" * 3000,
    b'"\\ud800"',
    b'"\\u00e9"',
    b"nul",
)
"""JSON values (some of them invalid) that a typed view skips without checking them all."""


@st.composite
def stream_events(draw: st.DrawFn) -> list[bytes]:
    """Raw SSE events, good and bad, in any order: the faults that must be raised in order."""
    good = [
        b'{"output_ids": [1], "meta_info": {"finish_reason": null, "completion_tokens": 1}}',
        b'{"output_ids": [2], "meta_info": {"finish_reason": null, "completion_tokens": 2}}',
        b'{"output_ids": [3], "meta_info": {"finish_reason": {"type": "stop"}, '
        b'"completion_tokens": 3}}',
    ]
    kinds = [
        *good,
        b'{"error": {"message": "boom", "type": "x", "code": 503, "retryable": false}}',
        b"[DONE]",
        b"{nope",
        b"[1]",
        b'{"meta_info": {"finish_reason": null, "x": 1e400}}',
        b"x" * 300,  # over the bound the tests set
        b'{"meta_info": {"finish_reason": null, "x": "\xff"}}',
    ]
    events = draw(st.lists(st.sampled_from(kinds), max_size=8))
    if draw(st.booleans()):
        events = good[:2] + events
    return [b"data: " + event + b"\n\n" for event in events]


# --- request side: structs built by hand ---
# This section's own names; the module's header imports serve it.

hostile_python_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),  # NaN and the infinities included
    st.text(max_size=8),  # lone surrogates included
    st.binary(max_size=4),
    st.lists(st.integers(-5, 2**33), max_size=3),
    st.tuples(st.integers(0, 9)),
    st.dictionaries(st.text(max_size=3), st.integers() | st.text(max_size=3), max_size=2),
    st.builds(object),
    st.just([[[[[[]]]]]]),
)
"""Python values a caller may put in a struct by hand, JSON's and others."""


@st.composite
def hand_built_fields(draw: st.DrawFn) -> dict[str, Any]:
    """Keyword arguments for `ClientRequest(...)`: a valid body, maybe with one field (or
    one sampling parameter) holding any value."""
    fields = draw(client_requests())
    names = sorted(set(ClientRequest.__struct_fields__) - {"input_ids"})
    where = draw(st.sampled_from(["none", "field", "sampling", "input_ids"]))
    value = draw(hostile_python_values)
    if where == "field":
        fields[draw(st.sampled_from(names))] = value
    elif where == "sampling":
        key = draw(st.sampled_from(sorted(SamplingParams.__struct_fields__)))
        fields["sampling_params"] = {**(fields.get("sampling_params") or {}), key: value}
    elif where == "input_ids":
        fields["input_ids"] = [*fields["input_ids"], value]
    return fields


# --- relay ---


@st.composite
def relay_generations(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One generation as SGLang streams it: its cumulative frames and its incremental ones.

    Built as ``TokenizerManager._handle_batch_output`` builds frames: every
    step adds at least one token; ``completion_tokens`` and the ``*_length``
    counts are the totals so far; the incremental frames cut each delta field
    at the output offset, as ``_slice_streaming_output_meta_info`` does.
    """
    steps = draw(st.integers(1, 6))
    with_text, logprobs, masks = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    extras = draw(_meta_extras)
    ids: list[int] = []
    text = ""
    lists: dict[str, list[Any]] = {
        key: []
        for key, wanted in (
            ("output_token_logprobs", logprobs),
            ("output_top_logprobs", logprobs),
            ("output_token_sampling_mask", masks),
        )
        if wanted
    }
    cumulative: list[dict[str, Any]] = []
    for step in range(steps):
        new = draw(st.lists(_token_ids, min_size=1, max_size=3))
        ids += new
        text += draw(st.text(max_size=4))
        for key, values in lists.items():
            entry = {
                "output_token_logprobs": _logprob_entries,
                "output_top_logprobs": _top_rows,
                "output_token_sampling_mask": st.lists(st.integers(0, 1), max_size=2),
            }[key]
            values += draw(st.lists(entry, min_size=len(new), max_size=len(new)))
        last = step == steps - 1
        meta: dict[str, Any] = {
            "id": "rid-0",
            "finish_reason": draw(_finish_reasons.filter(lambda r: r["type"] != "abort"))
            if last
            else None,
            "prompt_tokens": 3,
            **extras,
        }
        for key, values in lists.items():
            meta[key] = list(values)
            if key != "output_top_logprobs":
                meta[f"{key}_length"] = len(values)
        meta["completion_tokens"] = len(ids)
        frame: dict[str, Any] = {"text": text} if with_text else {}
        frame.update(output_ids=list(ids), meta_info=meta)
        cumulative.append(frame)
    incremental: list[dict[str, Any]] = []
    offset, text_offset = 0, 0
    for full in cumulative:
        meta = dict(full["meta_info"])
        for key in lists:
            meta[key] = meta[key][offset:]
        frame = {**full, "output_ids": full["output_ids"][offset:], "meta_info": meta}
        if with_text:
            frame["text"] = full["text"][text_offset:]
            text_offset = len(full["text"])
        offset = len(full["output_ids"])
        incremental.append(frame)
    return cumulative, incremental


# --- rule shortcuts (`Rule.holds`) ----------------------------------------------

#: Values a typed decode may leave in a number field, the awkward ones included.
rule_numbers = st.one_of(
    st.none(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 0.0, -0.0, 1.0, 2.0, -2.0, 1e-7, 1.7976931348623157e308]),
)
rule_flags = st.none() | st.booleans()


# --- large request bodies (input_ids decoded a chunk at a time) -------------------

#: How `input_ids` may be written: well-formed, or broken in a way a chunk may hide.
_ID_ITEMS = st.one_of(
    st.integers(0, 2**32 - 1).map(str),
    st.sampled_from(["-1", "4294967296", "1.0", '"7"', "[1]", "null", "", " 5 ", "1e3", "01"]),
)


@st.composite
def large_body_texts(draw: st.DrawFn) -> bytes:
    """A request body whose `input_ids` text is written item by item, sometimes broken
    (a bad item, a missing one, a trailing comma, a second `input_ids`, an escaped key)."""
    items = draw(st.lists(_ID_ITEMS | st.integers(0, 300).map(str), max_size=40))
    if draw(st.booleans()):
        items = [str(i) for i in range(draw(st.integers(0, 40)))]
    array = "[" + draw(st.sampled_from([",", ", ", " ,"])).join(items) + "]"
    if draw(st.booleans()):
        array = array[:-1] + ",]"
    members = [f'"input_ids":{array}']
    extra = draw(
        st.lists(
            st.sampled_from(
                [
                    '"input_ids":[1,2]',
                    '"input\\u005fids":[3]',
                    '"input_ids":"x"',
                    '"rid":"r-1"',
                    '"rid":"input_ids"',
                    '"stream":true',
                    '"sampling_params":{"temperature":0.5}',
                    '"sampling_params":{"top_p":0}',
                    '"return_flat_raw_output_top_logprobs":true',
                    '"unknown":1',
                    '"text":"hi"',
                ]
            ),
            max_size=3,
        )
    )
    members += extra
    order = draw(st.permutations(members))
    return ("{" + ",".join(order) + "}").encode()


@st.composite
def interleaved(draw: st.DrawFn, streams: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The frames of several sequences as SGLang streams a batch or n > 1: each frame with
    ``"index": k`` as its last key, the sequences interleaved in any order, each in its own."""
    order = draw(st.permutations([k for k, frames in enumerate(streams) for _ in frames]))
    taken = [0] * len(streams)
    out = []
    for k in order:
        out.append({**streams[k][taken[k]], "index": k})
        taken[k] += 1
    return out
