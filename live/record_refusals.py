"""Record how a running SGLang server answers a body that breaks each rule of the contract.

    python live/record_refusals.py --url http://127.0.0.1:30000 [--out FILE]

The server must run with default flags (no --skip-tokenizer-init, no
--incremental-streaming-output) on the tiny model of `live/make_model.py`
(320 ids, context 1024). For every case in `CASES` and each client mode the
case has, the script POSTs the body (``Content-Type: application/json``) and
writes one JSON line (to `tests/fixtures/live_refusals.jsonl` unless `--out`):
the rule code the library refuses it with, the body sent, and SGLang's answer:
its status, content type and body bytes (as text),
and which of SGLang's layers gave it (`layer`):

- ``pydantic``: FastAPI's parse of `GenerateReqInput`, ``{"object": "error", ...}``;
- ``gate``: the API contract gate (`generate_contract_error`), ``{"error": "<text>"}``;
- ``engine``: a ValueError of the tokenizer manager, ``{"error": {"message": ...}}``
  for a unary client, one SSE error frame and ``[DONE]`` for a streaming one;
- ``unhandled``: an exception SGLang does not catch (Starlette's plain-text 500);
- ``dropped``: the server drops the connection mid-stream (an exception in
  its stream generator that is not a ValueError);
- ``accepts``: SGLang serves the body (the library refuses it on purpose); the
  answer's body is not kept (it holds generated text and timings).

Bodies SGLang would crash on (a token id outside the vocabulary, a negative
one) are never sent. `tests/test_error_answers.py` replays the lines against
`error_response`; `live/test_refusals.py` asks the running server again.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "live_refusals.jsonl"
IDS = [1, 2, 3]
ONE = {"max_new_tokens": 1}
#: Appended to the bytes of an answer whose connection the server dropped mid-body.
BROKEN = b"<connection dropped>"


class Case(NamedTuple):
    """One body that breaks rule `code`; `decode`: bounds passed to decode_client_request."""

    name: str
    code: str
    body: dict[str, Any] | bytes
    modes: tuple[bool | None, ...] = (False, True)
    decode: dict[str, int] | None = None


def _sampling(**params: Any) -> dict[str, Any]:
    return {"input_ids": IDS, "sampling_params": {**ONE, **params}}


CASES: tuple[Case, ...] = (
    Case("not_json", "not_json", b'{"input_ids": [1, 2', (None,)),
    Case("not_object", "not_object", b"[1, 2, 3]", (None,)),
    Case("not_token_input", "not_token_input", {**_sampling(), "text": "Hello"}),
    Case("orchestrator_field", "orchestrator_field", {**_sampling(), "routed_dp_rank": 0}),
    Case("unknown_field", "unknown_field", {**_sampling(), "foo": 1}),
    Case("unknown_nested_field", "unknown_nested_field", _sampling(watermark={"foo": 1})),
    Case("unknown_sampling_param", "unknown_sampling_param", _sampling(max_tokens=5)),
    Case("missing_input_ids", "missing_input_ids", {"sampling_params": ONE}),
    Case("wrong_type_null_input_ids", "wrong_type", {"input_ids": None}),
    Case("wrong_type_rid", "wrong_type", {**_sampling(), "rid": 5}),
    Case("wrong_type_return_logprob", "wrong_type", {**_sampling(), "return_logprob": "x"}),
    Case("wrong_type_sampling_params", "wrong_type", {"input_ids": IDS, "sampling_params": 5}),
    Case("wrong_type_input_ids_text", "wrong_type", {"input_ids": "abc"}),
    Case("wrong_type_input_ids_float", "wrong_type", {"input_ids": [1.5]}),
    Case("wrong_type_stream_text", "wrong_type", {"input_ids": IDS, "stream": "x"}, (None,)),
    # pydantic reads "yes" as true; the gate refuses it (the library: pydantic's shape)
    Case("wrong_type_stream_coerced", "wrong_type", {"input_ids": IDS, "stream": "yes"}, (None,)),
    Case("wrong_type_watermark", "wrong_type", {**_sampling(), "watermark": 5}),
    Case("wrong_type_null_bool", "wrong_type",
         {**_sampling(), "return_flat_raw_top_logprobs": None}),
    Case("wrong_type_priority_coerced", "wrong_type", {**_sampling(), "priority": "3"}),
    Case("wrong_type_logit_bias", "wrong_type", _sampling(logit_bias=5)),
    Case("wrong_type_logit_bias_value", "wrong_type", _sampling(logit_bias={"1": "x"})),
    Case("wrong_type_max_new_tokens", "wrong_type", _sampling(max_new_tokens="a")),
    Case("wrong_type_logprob_start_len", "wrong_type", {**_sampling(), "logprob_start_len": "x"}),
    Case("invalid_value_max_thinking_tokens", "invalid_value",
         {**_sampling(), "max_thinking_tokens": -1}),
    Case("invalid_value_enum", "invalid_value", {**_sampling(), "sampling_logprobs_mode": "foo"}),
    Case("invalid_value_infinite", "invalid_value", b'{"input_ids":[1,2,3],"priority":1e400}',
         (None,)),
    Case("invalid_value_infinite_sampling", "invalid_value",
         b'{"input_ids":[1,2,3],"sampling_params":{"temperature":1e400}}', (None,)),
    Case("batched_input", "batched_input", {"input_ids": [[1, 2], [3]], "sampling_params": ONE}),
    Case("too_many_input_ids", "too_many_input_ids", {"input_ids": [5] * 1025},
         decode={"max_input_ids": 1024}),
    Case("json_too_deep", "json_too_deep", _sampling(custom_params={"k": [[[0]]]}),
         decode={"max_json_depth": 2}),
    Case("json_too_many_items", "json_too_many_items",
         _sampling(custom_params={"k": [0, 1, 2, 3, 4]}), decode={"max_json_items": 4}),
    Case("flat_with_multi_item", "flat_with_multi_item",
         {**_sampling(), "multi_item_delimiter_indices": [1], "return_logprob": True,
          "top_logprobs_num": 2, "return_flat_raw_top_logprobs": True}),
    Case("output_flat_with_stream", "output_flat_with_stream",
         {**_sampling(), "return_logprob": True, "top_logprobs_num": 2,
          "return_flat_raw_output_top_logprobs": True}, (True,)),
    Case("b64_without_flat", "b64_without_flat",
         {**_sampling(), "return_logprob": True, "top_logprobs_num": 2,
          "return_flat_raw_top_logprobs_b64": True}),
    Case("empty_input_ids", "empty_input_ids", {"input_ids": [], "sampling_params": ONE}),
    Case("session_id_with_session_params", "session_id_with_session_params",
         {**_sampling(), "session_id": "s1", "session_params": {"id": "s1"}}),
    Case("priority_out_of_range", "priority_out_of_range", {**_sampling(), "priority": 2**63}),
    Case("sampling_logprobs_mode_without_mask", "sampling_logprobs_mode_without_mask",
         {**_sampling(), "sampling_logprobs_mode": "selected"}),
    Case("watermark_in_both_places", "watermark_in_both_places",
         {**_sampling(watermark={"enabled": True}), "watermark": {"enabled": True}}),
    Case("watermark_enabled_not_bool", "watermark_enabled_not_bool",
         {**_sampling(), "watermark": {"enabled": "x"}}),
    Case("watermark_key_not_hex", "watermark_key_not_hex",
         {**_sampling(), "watermark": {"enabled": True, "key": "k"}}),
    Case("watermark_sets_nothing", "watermark_sets_nothing", {**_sampling(), "watermark": {}}),
    Case("watermark_unknown_key", "watermark_unknown_key",
         {**_sampling(), "watermark": {"foo": 1}}),
    Case("watermark_key_not_text", "watermark_key_not_text",
         {**_sampling(), "watermark": {"enabled": True, "key": 5}}),
    Case("watermark_key_length", "watermark_key_length",
         {**_sampling(), "watermark": {"enabled": True, "key": "a" * 17}}),
    Case("watermark_context_window", "watermark_context_window",
         {**_sampling(), "watermark": {"enabled": True, "context_window": 0}}),
    Case("watermark_key_when_disabled", "watermark_key_when_disabled",
         {**_sampling(), "watermark": {"enabled": False, "key": "ab"}}),
    Case("sampling_watermark_key_when_disabled", "sampling_watermark_key_when_disabled",
         _sampling(watermark={"enabled": False, "key": "ab"})),
    Case("wrong_type_sampling_watermark_object", "wrong_type", _sampling(watermark=5)),
    Case("wrong_type_sampling_watermark_key", "wrong_type",
         _sampling(watermark={"enabled": True, "key": 5})),
    Case("wrong_type_sampling_watermark", "wrong_type", _sampling(watermark={"enabled": "x"})),
    Case("sampling_watermark_key_not_hex", "sampling_watermark_key_not_hex",
         _sampling(watermark={"enabled": True, "key": "k1"})),
    Case("sampling_watermark_key_length", "sampling_watermark_key_length",
         _sampling(watermark={"enabled": True, "key": "a" * 17})),
    Case("sampling_watermark_context_window", "sampling_watermark_context_window",
         _sampling(watermark={"enabled": True, "context_window": 0})),
    Case("sampling_watermark_sets_nothing", "sampling_watermark_sets_nothing",
         _sampling(watermark={})),
    Case("unsupported_sampling_param", "unsupported_sampling_param",
         _sampling(choice=["yes", "no"])),
    Case("too_many_stop_strings", "too_many_stop_strings",
         _sampling(stop=[f"s{i}" for i in range(33)])),
    Case("too_many_stop_regexes", "too_many_stop_regexes",
         _sampling(stop_regex=[f"r{i}" for i in range(33)])),
    Case("stop_regex_too_long", "stop_regex_too_long", _sampling(stop_regex="a" * 257)),
    Case("beam_width_below_one", "beam_width_below_one", _sampling(beam_width=0)),
    Case("temperature_out_of_range", "temperature_out_of_range", _sampling(temperature=-1.0)),
    Case("top_p_out_of_range", "top_p_out_of_range", _sampling(top_p=0)),
    Case("min_p_out_of_range", "min_p_out_of_range", _sampling(min_p=2)),
    Case("top_k_out_of_range", "top_k_out_of_range", _sampling(top_k=0)),
    Case("frequency_penalty_out_of_range", "frequency_penalty_out_of_range",
         _sampling(frequency_penalty=3)),
    Case("presence_penalty_out_of_range", "presence_penalty_out_of_range",
         _sampling(presence_penalty=-3)),
    Case("repetition_penalty_out_of_range", "repetition_penalty_out_of_range",
         _sampling(repetition_penalty=0)),
    Case("min_new_tokens_negative", "min_new_tokens_negative", _sampling(min_new_tokens=-1)),
    Case("max_new_tokens_negative", "max_new_tokens_negative", _sampling(max_new_tokens=-1)),
    Case("min_new_tokens_over_max", "min_new_tokens_over_max", _sampling(min_new_tokens=5)),
    Case("logit_bias_key_not_integer", "logit_bias_key_not_integer",
         _sampling(logit_bias={"a": 1.0})),
    Case("sampling_seed_out_of_range", "sampling_seed_out_of_range",
         _sampling(sampling_seed=2**63)),
    Case("several_grammars", "several_grammars", _sampling(regex="a", ebnf='root ::= "a"')),
)  # fmt: skip


#: Rules the library words its own way, not as SGLang does, and why (docs/errors.md).
OWN_WORDS: dict[str, str] = {
    "not_json": "pydantic's report names a file and line of SGLang's http_server.py",
    "not_object": "pydantic's report names a file and line of SGLang's http_server.py",
    "wrong_type": "pydantic's report or serde's text; the library names the field instead",
    "invalid_value": "pydantic's report or serde's text; the library names the field instead",
    "unknown_nested_field": "the gate lists the expected keys; the library names the path",
    "missing_input_ids": "SGLang's text is about text and embeddings, which the library refuses",
    "too_many_input_ids": "the library's own bound, not SGLang's context length",
}
#: Bodies answered by another layer than SGLang's, and why (docs/errors.md).
OTHER_LAYER: dict[str, str] = {
    "wrong_type_null_input_ids": "SGLang reads a null input_ids as absent (its engine refuses)",
    "wrong_type_stream_coerced": "pydantic reads 'yes' as true; SGLang's gate refuses it",
    "wrong_type_priority_coerced": "pydantic reads '3' as 3; SGLang's gate refuses it",
    "invalid_value_infinite_sampling": "FastAPI's JSON decode refuses 1e400 wherever it is",
}


def request_bytes(case: Case, stream: bool | None) -> bytes:
    """The body sent for `case` in one mode: ``"stream"`` set to the mode unless it is None."""
    if isinstance(case.body, bytes):
        return case.body
    body = dict(case.body)
    if stream is not None:
        body["stream"] = stream
    return json.dumps(body, separators=(",", ":")).encode()


def layer_of(status: int, content_type: str, body: bytes) -> str:
    """Which of SGLang's layers wrote this answer, read from its shape."""
    if body.endswith(BROKEN):
        return "dropped"  # an exception in the stream's generator: no frame, no [DONE]
    if content_type.startswith("text/event-stream"):
        first = json.loads(body.split(b"\n\n", 1)[0].removeprefix(b"data: "))
        return "engine" if "error" in first else "accepts"
    try:
        answer = json.loads(body)
    except ValueError:
        return "unhandled"  # an exception no handler caught: Starlette's text/plain 500
    if status == 200:
        return "accepts"
    if isinstance(answer, dict) and answer.get("object") == "error":
        return "pydantic"
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        return "gate"
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        return "engine"
    return "unknown"


def post(url: str, body: bytes) -> tuple[int, str, bytes]:
    """POST `body` to `url`/generate: the status, content type and body bytes of the answer."""
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(f"{url}/generate", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            status, content_type = answer.status, answer.headers["Content-Type"]
            try:
                return status, content_type, answer.read()
            except http.client.IncompleteRead as cut:  # the server dropped the connection
                return status, content_type, cut.partial + BROKEN
    except urllib.error.HTTPError as failed:
        return failed.code, failed.headers["Content-Type"], failed.read()


def record(url: str, case: Case, stream: bool | None) -> dict[str, Any]:
    """One fixture line: `case` sent in mode `stream`, and SGLang's answer."""
    sent = request_bytes(case, stream)
    status, content_type, body = post(url, sent)
    layer = layer_of(status, content_type, body)
    return {
        "case": case.name,
        "code": case.code,
        "decode": case.decode or {},
        "stream": stream,
        "request": sent.decode(),
        "layer": layer,
        "status": status,
        "content_type": content_type,
        "body": None if layer == "accepts" else body.decode(),
    }


# --- SGLang's answers, rewritten with another message (for the tests that replay them) ---


def sglang_json(value: Any) -> bytes:
    """`value` as SGLang's ORJSONResponse writes it: compact, UTF-8, keys in order."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def engine_answer(stream: bool | None, message: str) -> tuple[int, str, bytes]:
    """SGLang's answer to a ValueError `message` in its tokenizer manager, in the client's mode.

    ``stream_results`` for a streaming client, ``_create_error_response`` for a unary one.
    """
    if stream:
        error = {"message": message, "type": "invalid_request_error", "code": 400}
        frame = b"data: " + sglang_json({"error": {**error, "retryable": False}}) + b"\n\n"
        return 200, "text/event-stream; charset=utf-8", frame + b"data: [DONE]\n\n"
    return 400, "application/json", sglang_json({"error": {"message": message}})


def message_of(line: dict[str, Any]) -> str:
    """The message of a recorded refusal, wherever its layer puts it."""
    body = line["body"]
    if line["layer"] == "engine":
        first = body.split("\n\n", 1)[0].removeprefix("data: ") if line["stream"] else body
        return str(json.loads(first)["error"]["message"])
    answer = json.loads(body)
    return str(answer["error"] if line["layer"] == "gate" else answer["message"])


def answer_with(line: dict[str, Any], message: str) -> tuple[int, str, bytes]:
    """The answer `line` records, as SGLang would write it with `message` for its own.

    For a body SGLang serves or fails on without an answer of its layers
    (``accepts``, ``unhandled``, ``dropped``): the engine's answer in that mode.
    """
    layer, status, content_type = line["layer"], line["status"], line["content_type"]
    if layer == "engine":
        return engine_answer(line["stream"], message)
    if layer == "gate":
        return status, content_type, sglang_json({"error": message})
    if layer == "pydantic":
        return status, content_type, sglang_json({**json.loads(line["body"]), "message": message})
    return engine_answer(line["stream"], message)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="a running default-flags server")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    url = args.url.rstrip("/")
    lines = [record(url, case, stream) for case in CASES for stream in case.modes]
    health = urllib.request.urlopen(f"{url}/health", timeout=10).status
    if health != 200:
        print(f"the server's /health answered {health} after the run", file=sys.stderr)
        return 1
    args.out.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    for line in lines:
        print(f"{line['case']:40} {line['stream']!s:5} {line['layer']:8} {line['status']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
