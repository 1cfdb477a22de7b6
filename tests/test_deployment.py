"""Deployment: the server a worker serves, and the refusals SGLang makes only after dispatch.

Each rule of `DEPLOYMENT_RULES` is checked here on both sides of its bound; the
live suite (`live/test_deployment.py`) checks each against a running SGLang.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    Bootstrap,
    Deployment,
    EnvelopeError,
    RequestRejected,
    Role,
    Routing,
    SamplingParams,
    build_engine_request,
    decode_client_request,
    to_worker_envelope,
)
from sglang_envelope.contract import DEPLOYMENT_RULES
from sglang_envelope.request.deployment import check_engine_body
from sglang_envelope.types import EngineBody

FIXTURES = Path(__file__).parent / "fixtures"
SERVER_INFO = (FIXTURES / "live_server_info.json").read_bytes()
MODEL_CONFIG = (FIXTURES / "live_model_config.json").read_bytes()
LIVE = Deployment.from_server_info(SERVER_INFO, model_config=MODEL_CONFIG)
SMALL = {"max_new_tokens": 2}
BOOTSTRAP = Bootstrap("10.0.0.7", 8998, 1)


def _build(body: dict[str, Any], deployment: Deployment = LIVE, **kwargs: Any) -> dict[str, Any]:
    request = decode_client_request(msgspec.json.encode(body))
    kwargs.setdefault("role", Role.AGGREGATED)
    return build_engine_request(
        to_worker_envelope(request, rid="r"),
        input_ids=kwargs.pop("input_ids", request.input_ids),
        deployment=deployment,
        **kwargs,
    ).to_dict()


def _refused(body: dict[str, Any], deployment: Deployment = LIVE, **kwargs: Any) -> RequestRejected:
    with pytest.raises(RequestRejected) as caught:
        _build(body, deployment, **kwargs)
    return caught.value


def test_a_live_server_s_info_describes_it() -> None:
    assert Deployment(
        vocab_size=320, context_length=1024, max_req_input_len=1018, num_reserved_tokens=0,
        allow_auto_truncate=False, dp_size=1, skip_tokenizer_init=False,
        enable_custom_logit_processor=False, enable_strict_thinking=False,
        hidden_states="off", incremental_streaming_output=False,
        enable_return_routed_experts=False,
    ) == LIVE  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"speculative_algorithm": "EAGLE"}, "num_reserved_tokens"),
        ({"return_hidden_states_mode": "last"}, "hidden_states"),
        ({"enable_return_hidden_states": True}, "hidden_states"),
        ({"incremental_streaming_output": True}, "incremental_streaming_output"),
    ],
)
def test_what_the_server_info_says_is_read(changes: dict[str, Any], field: str) -> None:
    info = {**msgspec.json.decode(SERVER_INFO), **changes}
    deployment = Deployment.from_server_info(msgspec.json.encode(info), model_config=MODEL_CONFIG)
    expected: dict[str, Any] = {"num_reserved_tokens": None, "hidden_states": None}
    expected["incremental_streaming_output"] = True
    if changes == {"return_hidden_states_mode": "last"}:
        expected["hidden_states"] = "last"
    if changes == {"enable_return_hidden_states": True}:
        expected["hidden_states"] = "full"
    assert getattr(deployment, field) == expected[field]


@pytest.mark.parametrize(
    ("info", "config", "words"),
    [
        (b"[]", MODEL_CONFIG, "server_info must be a JSON object"),
        (b"{", MODEL_CONFIG, "server_info is not valid JSON"),
        (SERVER_INFO, b"{}", "model_config has no vocab_size"),
        (b'{"context_length": "big"}', MODEL_CONFIG, "deployment.context_length must be int"),
        (b'{"dp_size": 0}', MODEL_CONFIG, "deployment.dp_size must be int >= 1"),
        (SERVER_INFO, b'{"vocab_size": true}', "deployment.vocab_size must be int"),
        (7, MODEL_CONFIG, "server_info must be JSON bytes, text or a mapping"),
        (b"[" * 100_000, MODEL_CONFIG, "server_info is not valid JSON"),
    ],
)
def test_a_server_info_that_is_not_sglang_s_is_refused(info: Any, config: Any, words: str) -> None:
    with pytest.raises(EnvelopeError, match=words):
        Deployment.from_server_info(info, model_config=config)


def test_a_multimodal_model_s_vocabulary_is_its_text_model_s() -> None:
    config = b'{"text_config": {"vocab_size": 1000}}'
    assert Deployment.from_server_info(b"{}", model_config=config).vocab_size == 1000


def test_a_worker_states_its_vocabulary() -> None:
    with pytest.raises(TypeError):
        Deployment()  # type: ignore[call-arg]
    request = decode_client_request(b'{"input_ids": [1]}')
    envelope = to_worker_envelope(request, rid="r")
    for wrong in (None, {"vocab_size": 320}, 320):
        with pytest.raises(EnvelopeError, match="deployment must be a Deployment"):
            build_engine_request(
                envelope,
                input_ids=[1],
                role="aggregated",
                deployment=wrong,  # type: ignore[arg-type]
            )


@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=20))
def test_every_id_outside_the_vocabulary_is_refused_first(ids: list[int]) -> None:
    outside = [i for i, token in enumerate(ids) if token >= 320]
    body = {"input_ids": ids, "sampling_params": SMALL}
    if not outside:
        assert _build(body)["input_ids"] == ids
        return
    refusal = _refused(body)
    assert (refusal.code, refusal.field) == ("token_out_of_vocab", f"input_ids[{outside[0]}]")
    assert refusal.message == (
        f"input_ids[{outside[0]}] is {ids[outside[0]]}, outside the model's vocabulary [0, 320)"
    )
    assert _build(body, Deployment(vocab_size=None))["input_ids"] == ids  # the visible opt-out


def test_the_ids_a_worker_sends_are_checked_not_the_client_s() -> None:
    refusal = _refused({"input_ids": [1]}, input_ids=[1, 400])
    assert refusal.field == "input_ids[1]"


def _ids(count: int) -> list[int]:
    return [5] * count


#: rule -> (a body that breaks it, the body one step inside, build keywords)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    "thinking_needs_strict_thinking": (
        {"input_ids": [5], "max_thinking_tokens": 3}, {"input_ids": [5]}, {}),
    "routed_dp_rank_out_of_range": ({"input_ids": [5]}, {"input_ids": [5]}, {}),
    "input_too_long": ({"input_ids": _ids(1024)}, {"input_ids": _ids(1017)}, {}),
    "total_tokens_too_many": (
        {"input_ids": _ids(1000), "sampling_params": {"max_new_tokens": 25}},
        {"input_ids": _ids(1000), "sampling_params": {"max_new_tokens": 24}}, {}),
    "token_ids_logprob_out_of_vocab": (
        {"input_ids": [5], "token_ids_logprob": [3, 320]},
        {"input_ids": [5], "token_ids_logprob": [3, 319]}, {}),
    "hidden_states_not_enabled": (
        {"input_ids": [5], "return_hidden_states": True},
        {"input_ids": [5], "return_hidden_states": False}, {}),
    "custom_logit_processor_not_enabled": (
        {"input_ids": [5], "custom_logit_processor": "x"},
        {"input_ids": [5], "custom_logit_processor": ""}, {}),
    "logit_bias_out_of_vocab": (
        {"input_ids": [5], "sampling_params": {"logit_bias": {"7": 1, "320": 1}}},
        {"input_ids": [5], "sampling_params": {"logit_bias": {"7": 1, "319": 1}}}, {}),
    "input_over_max_req_input_len": ({"input_ids": _ids(1018)}, {"input_ids": _ids(1017)}, {}),
}  # fmt: skip
MESSAGES = {
    "input_too_long": "The input (1024 tokens) is longer than the model's context length "
    "(1024 tokens).",
    "token_ids_logprob_out_of_vocab": "token_ids_logprob contains out-of-vocabulary token id "
    "320; valid range is [0, 320).",
    "logit_bias_out_of_vocab": "logit_bias must has keys in [0, 319], got 320.",
    "routed_dp_rank_out_of_range": "routed_dp_rank=1 out of range [0, 1)",
}


@pytest.mark.parametrize("code", list(CASES))
def test_each_rule_refuses_past_its_bound_and_accepts_inside_it(code: str) -> None:
    broken, inside, keywords = CASES[code]
    routing = Routing(dp_rank=1) if code == "routed_dp_rank_out_of_range" else None
    refusal = _refused(broken, routing=routing, **keywords)
    assert refusal.code == code
    if code in MESSAGES:
        assert refusal.message == MESSAGES[code]
    inside_routing = Routing(dp_rank=0) if routing else None
    assert _build(inside, routing=inside_routing, **keywords)["input_ids"] == inside["input_ids"]
    # Not known: left to SGLang (the vocabulary's rules need only the vocabulary).
    unknown = Deployment(vocab_size=None)
    assert _build(broken, unknown, routing=routing, **keywords)["input_ids"]


def test_the_rules_run_in_sglang_s_order() -> None:
    """A body that breaks every rule gets SGLang's first refusal, then the next one, ..."""
    codes = [rule.code for rule in DEPLOYMENT_RULES]
    assert codes.index("input_too_long") < codes.index("token_ids_logprob_out_of_vocab")
    assert codes.index("custom_logit_processor_not_enabled") < codes.index(
        "logit_bias_out_of_vocab"
    )
    body = {
        "input_ids": _ids(1100), "return_hidden_states": True, "token_ids_logprob": [999],
        "sampling_params": {"logit_bias": {"999": 1}},
    }  # fmt: skip
    assert _refused(body).code == "input_too_long"
    body["input_ids"] = [5]
    assert _refused(body).code == "token_ids_logprob_out_of_vocab"


def test_a_server_that_truncates_accepts_a_long_prompt() -> None:
    truncating = msgspec.structs.replace(LIVE, allow_auto_truncate=True)
    assert len(_build({"input_ids": _ids(1100)}, truncating)["input_ids"]) == 1100
    not_known = msgspec.structs.replace(LIVE, allow_auto_truncate=None)
    assert len(_build({"input_ids": _ids(1100)}, not_known)["input_ids"]) == 1100


def test_reserved_tokens_count_with_the_prompt() -> None:
    reserving = msgspec.structs.replace(LIVE, num_reserved_tokens=10, max_req_input_len=None)
    assert _refused({"input_ids": _ids(1014)}, reserving).message == (
        "The input (1024 tokens) is longer than the model's context length (1024 tokens)."
    )


def test_a_prefill_leg_is_checked_as_it_is_sent() -> None:
    """Prefill asks for one new token, so only the decode leg passes the context."""
    body = {"input_ids": _ids(1000), "sampling_params": {"max_new_tokens": 100}}
    assert _build(body, role=Role.PREFILL, bootstrap=BOOTSTRAP)["sampling_params"] == {
        "n": 1,
        "max_new_tokens": 1,
    }
    assert _refused(body, role=Role.DECODE, bootstrap=BOOTSTRAP).code == "total_tokens_too_many"


@pytest.mark.parametrize(
    ("key", "value", "code", "message"),
    [
        ("stop", ["ab", "c"], "stop_needs_tokenizer", "stop=['ab', 'c'] is unavailable"),
        ("stop", "ab", "stop_needs_tokenizer", "stop=['ab'] is unavailable"),
        ("stop_regex", "a+", "stop_regex_needs_tokenizer", "stop_regex=['a+'] is unavailable"),
        ("min_new_tokens", 1, "min_new_tokens_needs_tokenizer", "min_new_tokens=1 is unavailable"),
    ],
)
def test_a_server_without_a_tokenizer_refuses_what_needs_one(
    key: str, value: Any, code: str, message: str
) -> None:
    no_tokenizer = msgspec.structs.replace(LIVE, skip_tokenizer_init=True)
    body = {"input_ids": [5], "sampling_params": {key: value}}
    refusal = _refused(body, no_tokenizer)
    assert refusal.code == code and refusal.message.startswith(message)
    assert _build(body)["input_ids"] == [5]


def test_hidden_states_above_the_server_s_mode() -> None:
    capped = msgspec.structs.replace(LIVE, hidden_states="last")
    refusal = _refused({"input_ids": [5], "return_hidden_states": True}, capped)
    assert refusal.code == "hidden_states_over_server_mode"
    full = msgspec.structs.replace(LIVE, hidden_states="full")
    assert _build({"input_ids": [5], "return_hidden_states": True}, full)


@pytest.mark.parametrize(
    ("field", "value"),
    [("vocab_size", 0), ("context_length", -1), ("hidden_states", "all"), ("dp_size", True)],
)
def test_a_deployment_is_checked_when_made(field: str, value: Any) -> None:
    with pytest.raises(EnvelopeError, match=f"deployment.{field}"):
        Deployment(**{"vocab_size": 320, field: value})


@pytest.mark.parametrize("where", [0, 11_000, 29_999])
@pytest.mark.parametrize("bad", [320, -1, 10**30])
def test_token_ids_logprob_is_read_a_chunk_at_a_time(where: int, bad: int) -> None:
    """An array of 30,000 ids (several chunks) with one outside the vocabulary anywhere,
    written with spaces too: the first outside is the one named."""
    ids = [7 + i % 300 for i in range(30_000)]
    ids[where] = bad
    text = b'{"input_ids": [5], "token_ids_logprob": [%s]}' % b" , ".join(b"%d" % i for i in ids)
    request = decode_client_request(text)
    with pytest.raises(RequestRejected) as caught:
        build_engine_request(
            to_worker_envelope(request, rid="r"), input_ids=[5], role="aggregated",
            deployment=LIVE,
        )  # fmt: skip
    assert caught.value.code == "token_ids_logprob_out_of_vocab"
    assert f"token id {bad};" in caught.value.message


# --- the deployment from what a worker holds ---


def test_server_info_and_config_as_text_or_mappings_describe_the_same_server() -> None:
    info, config = SERVER_INFO, MODEL_CONFIG
    decoded = msgspec.json.decode(info), msgspec.json.decode(config)
    every = [
        Deployment.from_server_info(info.decode(), model_config=config.decode()),
        Deployment.from_server_info(decoded[0], model_config=decoded[1]),
        Deployment.from_server_info(bytearray(info), model_config=memoryview(config)),
        Deployment.from_server_info(info, vocab_size=320),
    ]
    assert every == [LIVE] * 4
    assert Deployment.from_server_info(info, model_config=config, vocab_size=99).vocab_size == 99


@pytest.mark.parametrize(
    ("arguments", "words"),
    [({}, "pass model_config .the model's config.json. or vocab_size"),
     ({"model_config": {}}, "model_config has no vocab_size"),
     ({"model_config": 7}, "model_config must be JSON bytes, text or a mapping, got int"),
     ({"model_config": "[1]"}, "model_config must be a JSON object, got list")],
)  # fmt: skip
def test_a_deployment_without_a_vocabulary_says_what_to_pass(
    arguments: dict[str, Any], words: str
) -> None:
    with pytest.raises(EnvelopeError, match=words):
        Deployment.from_server_info(SERVER_INFO, **arguments)


class _Config:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class _Args:
    """Stands in for SGLang's ServerArgs: the live server's resolved arguments."""

    def resolved_dict(self) -> dict[str, Any]:
        info: dict[str, Any] = msgspec.json.decode(SERVER_INFO)
        return {key: value for key, value in info.items() if key != "max_req_input_len"}


def _engine(**model: Any) -> Any:
    manager = _Config(
        server_args=_Args(),
        model_config=_Config(vocab_size=320, hf_text_config=_Config(**model)),
        context_len=1024,
        max_req_input_len=1018,
    )
    return _Config(tokenizer_manager=manager)


def test_an_in_process_engine_describes_itself() -> None:
    assert Deployment.from_engine(_engine()) == LIVE
    assert Deployment.from_engine(_engine().tokenizer_manager) == LIVE  # the manager alone
    moe = Deployment.from_engine(_engine(num_hidden_layers=2, num_experts_per_tok=2))
    assert moe.routed_experts_shape == (2, 2)


@pytest.mark.parametrize(
    ("engine", "words"),
    [(object(), "object has no server_args"),
     (_Config(server_args=7, model_config=None), "server_args must be SGLang's ServerArgs"),
     (_Config(server_args=_Args(), model_config=object(), context_len=9),
      "object has no vocab_size")],
)  # fmt: skip
def test_what_is_not_an_engine_is_named(engine: Any, words: str) -> None:
    with pytest.raises(EnvelopeError, match=words):
        Deployment.from_engine(engine)


def _first_broken(deployment: Deployment, body: EngineBody) -> str | None:
    """Every rule tried in order, none skipped: the code of the first one broken."""
    for rule in DEPLOYMENT_RULES:
        if rule.check(deployment, body) is not None:
            return rule.code
    return None


_RAW = st.sampled_from([b"[3]", b"[3, 400]", b'"ab"', b'{"7": 1}', b'{"500": 1}'])
_GUARDED = st.fixed_dictionaries(
    {},
    optional={
        "max_thinking_tokens": st.integers(0, 3),
        "routed_dp_rank": st.integers(-1, 3),
        "text": st.just("hi"),
        "token_ids_logprob": _RAW.map(msgspec.Raw),
        "return_hidden_states": st.booleans(),
        "custom_logit_processor": st.sampled_from(["", "x"]),
        "return_logprob": st.booleans(),
        "logprob_start_len": st.integers(-1, 40),
        "return_routed_experts": st.booleans(),
        "routed_experts_start_len": st.integers(0, 40),
        "input_ids": st.one_of(st.none(), st.lists(st.integers(0, 330), max_size=30)),
    },
)
_SAMPLING = st.fixed_dictionaries(
    {},
    optional={
        "max_new_tokens": st.integers(0, 1100),
        "stop": _RAW.map(msgspec.Raw),
        "stop_regex": _RAW.map(msgspec.Raw),
        "min_new_tokens": st.integers(0, 2),
        "logit_bias": _RAW.map(msgspec.Raw),
    },
)
_DEPLOYMENTS = st.builds(
    msgspec.structs.replace,
    st.just(LIVE),
    skip_tokenizer_init=st.booleans(),
    enable_strict_thinking=st.booleans(),
    enable_custom_logit_processor=st.booleans(),
    hidden_states=st.sampled_from(["off", "last", "full"]),
    enable_return_routed_experts=st.booleans(),
    dp_size=st.integers(1, 3),
)


@given(_DEPLOYMENTS, _GUARDED, st.one_of(st.none(), _SAMPLING))
def test_skipping_the_guarded_rules_refuses_what_trying_every_rule_refuses(
    deployment: Deployment, fields: dict[str, Any], sampling: dict[str, Any] | None
) -> None:
    """A rule is skipped while every field it names in `when` holds its default: it
    refuses no body then, so the first refusal is the one every rule in order gives."""
    if "input_ids" in fields and fields["input_ids"] is not None:
        fields["input_ids"] = tuple(fields["input_ids"])
    params = None if sampling is None else SamplingParams(**sampling)
    body = EngineBody(sampling_params=params, **fields)
    try:
        check_engine_body(deployment, body)
    except RequestRejected as refusal:
        assert refusal.code == _first_broken(deployment, body)
    else:
        assert _first_broken(deployment, body) is None


_PARAMS = SamplingParams
#: For each rule with guards: the deployment's changes and the only fields a body sets
#: to break it (a guard naming another field would let it through).
BROKEN_BY_GUARDED_FIELDS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "thinking_needs_strict_thinking": ({}, {"max_thinking_tokens": 3}),
    "routed_dp_rank_out_of_range": ({"dp_size": 1}, {"routed_dp_rank": 1}),
    "text_needs_tokenizer": ({"skip_tokenizer_init": True}, {"text": "hi"}),
    "token_ids_logprob_out_of_vocab": ({}, {"token_ids_logprob": msgspec.Raw(b"[400]")}),
    "top_logprobs_num_over_vocab": ({}, {"return_logprob": True, "top_logprobs_num": 400}),
    "stop_token_ids_out_of_vocab": (
        {}, {"sampling_params": _PARAMS(stop_token_ids=msgspec.Raw(b"[5, 320]"))}),
    "hidden_states_over_server_mode": ({"hidden_states": "last"}, {"return_hidden_states": True}),
    "hidden_states_not_enabled": ({"hidden_states": "off"}, {"return_hidden_states": True}),
    "custom_logit_processor_not_enabled": ({}, {"custom_logit_processor": "x"}),
    "stop_needs_tokenizer": (
        {"skip_tokenizer_init": True}, {"sampling_params": _PARAMS(stop=msgspec.Raw(b'"a"'))}),
    "stop_regex_needs_tokenizer": (
        {"skip_tokenizer_init": True},
        {"sampling_params": _PARAMS(stop_regex=msgspec.Raw(b'"a+"'))}),
    "min_new_tokens_needs_tokenizer": (
        {"skip_tokenizer_init": True}, {"sampling_params": _PARAMS(min_new_tokens=1)}),
    "logit_bias_out_of_vocab": (
        {}, {"sampling_params": _PARAMS(logit_bias=msgspec.Raw(b'{"500": 1}'))}),
    "logprob_start_len_past_prompt": (
        {}, {"input_ids": (1, 2), "return_logprob": True, "logprob_start_len": 5}),
    "routed_experts_start_len_past_prompt": (
        {"enable_return_routed_experts": True},
        {"input_ids": (1, 2), "return_routed_experts": True, "routed_experts_start_len": 5}),
    "routed_experts_not_enabled": (
        {"enable_return_routed_experts": False}, {"return_routed_experts": True}),
}  # fmt: skip


@pytest.mark.parametrize("rule", [rule for rule in DEPLOYMENT_RULES if rule.when])
def test_a_rule_s_guards_name_the_fields_that_break_it(rule: Any) -> None:
    changes, fields = BROKEN_BY_GUARDED_FIELDS[rule.code]
    deployment = msgspec.structs.replace(LIVE, **changes)
    with pytest.raises(RequestRejected) as caught:
        check_engine_body(deployment, EngineBody(**fields))
    assert caught.value.code == rule.code


def built_on_live(body: dict[str, Any]) -> Any:
    """`body`'s aggregated engine request on the live suite's deployment."""
    envelope = to_worker_envelope(decode_client_request(msgspec.json.encode(body)), rid="r")
    return build_engine_request(envelope, input_ids=None, role="aggregated", deployment=LIVE)


def test_top_logprobs_past_the_vocabulary_are_refused_they_stop_every_sglang_process() -> None:
    """Seen on a live SGLang 0.5.23 (vocabulary 320): 321 top logprobs a token stop it."""
    assert LIVE.vocab_size == 320
    over = {"input_ids": [5, 6], "return_logprob": True, "top_logprobs_num": 321}
    with pytest.raises(RequestRejected) as caught:
        built_on_live(over)
    assert (caught.value.code, caught.value.field) == (
        "top_logprobs_num_over_vocab",
        "top_logprobs_num",
    )
    built_on_live({**over, "top_logprobs_num": 320})
    built_on_live({**over, "return_logprob": False})


@pytest.mark.parametrize("ids", [[400], [5, -1], [319, 320]])
def test_stop_token_ids_outside_the_vocabulary_are_refused(ids: list[int]) -> None:
    """Seen on a live SGLang 0.5.23: one such request beside another asking for
    min_new_tokens stops every SGLang process (its MinNewTokensPenalizer indexes them)."""
    with pytest.raises(RequestRejected) as caught:
        built_on_live({"input_ids": [5, 6], "sampling_params": {"stop_token_ids": ids}})
    assert caught.value.code == "stop_token_ids_out_of_vocab"
    assert f"holds {next(i for i in ids if not 0 <= i < 320)}," in caught.value.message
    built_on_live({"input_ids": [5, 6], "sampling_params": {"stop_token_ids": [0, 319]}})
