"""SGLang's refusals after dispatch, made before it: each deployment rule, on the live server.

For every rule a body that breaks it is refused by `build_engine_request` with
the message SGLang itself answers to the same body, and the body one step
inside the bound is accepted by both. Bodies that would stop the server (an id
outside the vocabulary) are never sent: the test checks it is still alive.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import msgspec
import pytest

from sglang_envelope import (
    Deployment,
    RequestRejected,
    Role,
    Routing,
    build_engine_request,
    decode_client_request,
    to_worker_envelope,
)


def _engine_body(body: dict[str, Any], deployment: Deployment, **kwargs: Any) -> bytes:
    request = decode_client_request(msgspec.json.encode(body))
    # A rid of its own each time: 2 s after a stream's answer SGLang aborts any request still
    # under that stream's rid (TokenizerManager.create_abort_task), which answers "Aborted".
    envelope = to_worker_envelope(request, rid=f"deployment-check-{uuid.uuid4().hex}")
    engine = build_engine_request(
        envelope, input_ids=request.input_ids, role=Role.AGGREGATED, deployment=deployment,
        **kwargs,
    )  # fmt: skip
    return engine.to_json()


def _refusal(body: dict[str, Any], deployment: Deployment, **kwargs: Any) -> RequestRejected:
    with pytest.raises(RequestRejected) as caught:
        _engine_body(body, deployment, **kwargs)
    return caught.value


def _sglang_message(url: str, body: bytes) -> str | None:
    """SGLang's refusal of `body` (an error body, or an error frame in its stream), or None
    when it answers it."""
    answer = httpx.post(f"{url}/generate", content=body, timeout=120,
                        headers={"Content-Type": "application/json"})  # fmt: skip
    if answer.headers["content-type"].startswith("text/event-stream"):
        for line in answer.text.splitlines():
            frame = msgspec.json.decode(line[6:]) if line.startswith("data: {") else {}
            if "error" in frame:  # the tokenizer manager's refusal
                return str(frame["error"]["message"])
            finish = frame.get("meta_info", {}).get("finish_reason") or {}
            if finish.get("type") == "abort":  # the scheduler's
                return str(finish["message"])
        assert answer.status_code == 200
        return None
    if answer.status_code == 200:
        return None
    error = answer.json()["error"]
    return error if isinstance(error, str) else str(error["message"])


def _ids(count: int) -> list[int]:
    return [3 + i % 300 for i in range(count)]


SMALL = {"max_new_tokens": 2, "temperature": 0}
#: (rule, a body that breaks it, the same body one step inside, routing of both)
CASES: list[tuple[str, dict[str, Any], dict[str, Any], Routing | None]] = [
    ("thinking_needs_strict_thinking",
     {"input_ids": [5, 6], "max_thinking_tokens": 4, "sampling_params": SMALL},
     {"input_ids": [5, 6], "sampling_params": SMALL}, None),
    ("input_too_long", {"input_ids": _ids(1024), "sampling_params": SMALL},
     {"input_ids": _ids(1017), "sampling_params": SMALL}, None),
    ("total_tokens_too_many",
     {"input_ids": _ids(1000), "sampling_params": {"max_new_tokens": 25, "temperature": 0}},
     {"input_ids": _ids(1000), "sampling_params": {"max_new_tokens": 2, "temperature": 0}},
     None),
    ("input_over_max_req_input_len", {"input_ids": _ids(1018), "sampling_params": SMALL},
     {"input_ids": _ids(1017), "sampling_params": SMALL}, None),
    ("token_ids_logprob_out_of_vocab",
     {"input_ids": [5, 6], "return_logprob": True, "token_ids_logprob": [7, 320],
      "sampling_params": SMALL},
     {"input_ids": [5, 6], "return_logprob": True, "token_ids_logprob": [7, 319],
      "sampling_params": SMALL}, None),
    ("hidden_states_not_enabled",
     {"input_ids": [5, 6], "return_hidden_states": True, "sampling_params": SMALL},
     {"input_ids": [5, 6], "return_hidden_states": False, "sampling_params": SMALL}, None),
    ("custom_logit_processor_not_enabled",
     {"input_ids": [5, 6], "custom_logit_processor": "{}", "sampling_params": SMALL},
     {"input_ids": [5, 6], "custom_logit_processor": "", "sampling_params": SMALL}, None),
    ("logit_bias_out_of_vocab",
     {"input_ids": [5, 6], "sampling_params": {**SMALL, "logit_bias": {"320": 1.0}}},
     {"input_ids": [5, 6], "sampling_params": {**SMALL, "logit_bias": {"319": 1.0}}}, None),
    ("logprob_start_len_past_prompt",
     {"input_ids": [5, 6, 7], "return_logprob": True, "logprob_start_len": 4,
      "sampling_params": SMALL},
     {"input_ids": [5, 6, 7], "return_logprob": True, "logprob_start_len": 3,
      "sampling_params": SMALL}, None),
    ("routed_dp_rank_out_of_range", {"input_ids": [5, 6], "sampling_params": SMALL},
     {"input_ids": [5, 6], "sampling_params": SMALL}, Routing(dp_rank=1)),
]  # fmt: skip


@pytest.mark.parametrize(("code", "broken", "inside", "routing"), CASES, ids=[c[0] for c in CASES])
def test_refused_before_dispatch_in_sglang_words(
    server: Any, code: str, broken: dict[str, Any], inside: dict[str, Any], routing: Any
) -> None:
    deployment = Deployment.from_server_info(server.server_info, model_config=server.model_config)
    refusal = _refusal(broken, deployment, routing=routing)
    assert refusal.code == code
    # SGLang's answer to the same body, streamed as the engine request is, and unary.
    rank = {} if routing is None else {"routed_dp_rank": routing.dp_rank}
    for stream in (True, False):
        sent = msgspec.json.encode({**broken, **rank, "stream": stream})
        assert _sglang_message(server.url, sent) == refusal.message
    if routing is None:
        assert _sglang_message(server.url, _engine_body(inside, deployment)) is None
    assert server.alive()


def test_stop_conditions_need_a_tokenizer(skip_tokenizer_server: Any) -> None:
    live = skip_tokenizer_server
    deployment = Deployment.from_server_info(live.server_info, model_config=live.model_config)
    assert deployment.skip_tokenizer_init is True
    for key, value, code in (
        ("stop", ["ab", "c"], "stop_needs_tokenizer"),
        ("stop_regex", "a+", "stop_regex_needs_tokenizer"),
        ("min_new_tokens", 1, "min_new_tokens_needs_tokenizer"),
    ):
        body = {"input_ids": [5, 6], "sampling_params": {**SMALL, key: value}}
        refusal = _refusal(body, deployment)
        assert refusal.code == code
        for stream in (True, False):
            sent = msgspec.json.encode({**body, "stream": stream})
            assert _sglang_message(live.url, sent) == refusal.message
    assert live.alive()


@pytest.mark.parametrize("ids", [[1, 320], [319, 4000], [2**31]])
def test_ids_outside_the_vocabulary_are_refused_and_the_server_lives(
    server: Any, ids: list[int]
) -> None:
    deployment = Deployment.from_server_info(server.server_info, model_config=server.model_config)
    refusal = _refusal({"input_ids": ids, "sampling_params": SMALL}, deployment)
    assert refusal.code == "token_out_of_vocab"
    assert refusal.field == f"input_ids[{next(i for i, t in enumerate(ids) if t >= 320)}]"
    inside = _engine_body({"input_ids": [1, 319], "sampling_params": SMALL}, deployment)
    assert _sglang_message(server.url, inside) is None
    assert server.alive()


def test_top_logprobs_past_the_vocabulary_are_refused_and_the_server_lives(server: Any) -> None:
    """SGLang's top-k over the vocabulary stops every process for a k past it (never sent)."""
    deployment = Deployment.from_server_info(server.server_info, model_config=server.model_config)
    body = {"input_ids": [5, 6], "return_logprob": True, "sampling_params": SMALL}
    assert _refusal({**body, "top_logprobs_num": 321}, deployment).code == (
        "top_logprobs_num_over_vocab"
    )
    inside = _engine_body({**body, "top_logprobs_num": 320, "logprob_start_len": 0}, deployment)
    assert _sglang_message(server.url, inside) is None
    assert server.alive()


def test_stop_token_ids_outside_the_vocabulary_are_refused_and_the_server_lives(
    server: Any,
) -> None:
    """Alone SGLang answers such a request, but beside one asking for min_new_tokens its
    MinNewTokensPenalizer indexes the vocabulary with the id and every process stops
    (never sent): refused. An id inside is answered, with min_new_tokens too."""
    deployment = Deployment.from_server_info(server.server_info, model_config=server.model_config)
    sampling: dict[str, Any] = {"max_new_tokens": 6, "min_new_tokens": 2, "temperature": 0}
    body: dict[str, Any] = {"input_ids": [5, 6, 7], "sampling_params": sampling}
    outside = {**body, "sampling_params": {**sampling, "stop_token_ids": [999]}}
    assert _refusal(outside, deployment).code == "stop_token_ids_out_of_vocab"
    inside = {**body, "sampling_params": {**sampling, "stop_token_ids": [319]}}
    assert _sglang_message(server.url, _engine_body(inside, deployment)) is None
    assert server.alive()
