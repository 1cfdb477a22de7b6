"""The deployment a worker serves: what SGLang checks after dispatch, known before it.

SGLang refuses some requests only once they reach its tokenizer manager or its
scheduler, because the answer depends on the server: the model's vocabulary,
its context length, its flags. One id outside the vocabulary does worse: it
stops every SGLang process. A worker describes its deployment once, at start,
from SGLang's own answers (`Deployment.from_server_info`), and
`build_engine_request` makes these checks before dispatch, in SGLang's order
and words (`DEPLOYMENT_RULES`).

A field left None is not known: its checks are left to SGLang. `vocab_size`
has no default: a worker states its vocabulary, or opts out in plain sight
with ``vocab_size=None``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple, cast

import msgspec
from msgspec import UNSET

from sglang_envelope.errors.exceptions import EnvelopeError, show_value
from sglang_envelope.request.body import int_chunks
from sglang_envelope.request.checks import logprobs_past_prompt, routed_start_past_prompt
from sglang_envelope.request.fields import (
    REQUEST_DEFAULTS,
    SAMPLING_DEFAULTS,
    SamplingParams,
)
from sglang_envelope.request.rules import RULES_BY_CODE, refusal

__all__ = [
    "DEPLOYMENT_RULES",
    "Deployment",
    "DeploymentRule",
    "check_engine_body",
    "check_routed_experts_shape",
]

HiddenStates = Literal["off", "last", "full"]
#: A JSON object as the caller holds it: its bytes, its text, or decoded.
JsonObject = bytes | bytearray | memoryview | str | Mapping[str, Any]


def _optional(kind: type, low: int | None = None) -> Callable[[str, Any], None]:
    """The check of a field that is a `kind` (at least `low`), or None: not known."""

    def check(name: str, value: Any) -> None:
        if value is None or (
            type(value) is kind and (low is None or low <= cast(int, value))
        ):
            return
        bound = "" if low is None else f" >= {low}"
        raise EnvelopeError(
            f"deployment.{name} must be {kind.__name__}{bound} or None, "
            f"got {show_value(value)}"
        )

    return check


#: Each field's check, in field order; a field is None when it is not known.
_FIELD_CHECKS: dict[str, Callable[[str, Any], None]] = {
    "vocab_size": _optional(int, 1),
    "context_length": _optional(int, 1),
    "max_req_input_len": _optional(int, 0),
    "num_reserved_tokens": _optional(int, 0),
    "allow_auto_truncate": _optional(bool),
    "dp_size": _optional(int, 1),
    "skip_tokenizer_init": _optional(bool),
    "enable_custom_logit_processor": _optional(bool),
    "enable_strict_thinking": _optional(bool),
    "incremental_streaming_output": _optional(bool),
    "enable_return_routed_experts": _optional(bool),
}


class Deployment(msgspec.Struct, frozen=True, kw_only=True):
    """The SGLang server a worker sends its engine requests to. Checked when made.

    - `vocab_size`: the model's vocabulary (required; None opts out of every id check).
    - `context_length`, `max_req_input_len`, `num_reserved_tokens`,
      `allow_auto_truncate`: SGLang's prompt-length checks, on `input_ids` only: a
      text prompt (`Target(input="text")`) is left to SGLang, which checks it once
      tokenized.
    - `dp_size`: data-parallel ranks, for `routed_dp_rank`.
    - `skip_tokenizer_init`, `enable_custom_logit_processor`, `enable_strict_thinking`,
      `hidden_states`: server flags that refuse some requests.
    - `incremental_streaming_output`: the stream mode of the server's SSE frames,
      for the readers (`aggregate_sse(..., incremental=...)`).
    - `enable_return_routed_experts`: the server's ``--enable-return-routed-experts``;
      without it SGLang answers ``return_routed_experts`` with no routed experts at all.
    - `routed_experts_shape`: ``(num_hidden_layers, num_experts_per_tok)`` of a
      Mixture-of-Experts model, the shape of one position's routed experts (None: not
      known, or not such a model), for `merge_prefill` and `decode_routed_experts`.
    """

    vocab_size: int | None
    context_length: int | None = None
    max_req_input_len: int | None = None
    num_reserved_tokens: int | None = None
    allow_auto_truncate: bool | None = None
    dp_size: int | None = None
    skip_tokenizer_init: bool | None = None
    enable_custom_logit_processor: bool | None = None
    enable_strict_thinking: bool | None = None
    #: The largest hidden-states mode the server returns (``off``, ``last``, ``full``).
    hidden_states: HiddenStates | None = None
    incremental_streaming_output: bool | None = None
    enable_return_routed_experts: bool | None = None
    routed_experts_shape: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        for name, check in _FIELD_CHECKS.items():
            check(name, getattr(self, name))
        check_routed_experts_shape(
            "deployment.routed_experts_shape", self.routed_experts_shape
        )
        if self.hidden_states not in (None, "off", "last", "full"):
            raise EnvelopeError(
                "deployment.hidden_states must be 'off', 'last', 'full' or None, got "
                f"{show_value(self.hidden_states)}"
            )

    @classmethod
    def from_server_info(
        cls,
        server_info: JsonObject,
        *,
        model_config: JsonObject | None = None,
        vocab_size: int | None = None,
    ) -> Deployment:
        """The deployment SGLang describes: the body of its ``GET /get_server_info``
        (or ``/server_info``), and the model's ``config.json`` (which SGLang does not
        serve) or its vocabulary stated as `vocab_size`. Each is JSON bytes, text or
        a mapping already decoded; a stated `vocab_size` wins over the config's.

        Raises `EnvelopeError` naming the key when either is not what SGLang writes,
        and when neither gives the vocabulary.
        """
        info = _json_object(server_info, "server_info")
        config = (
            {} if model_config is None else _json_object(model_config, "model_config")
        )
        vocab = _model_value(config, "vocab_size") if vocab_size is None else vocab_size
        if vocab is None:
            raise EnvelopeError(
                "model_config has no vocab_size (nor text_config.vocab_size)"
                if model_config is not None
                else "the vocabulary is not known: pass model_config (the model's "
                "config.json) or vocab_size"
            )
        layers = _model_value(config, "num_hidden_layers")
        top_k = _model_value(config, "num_experts_per_tok")
        return cls(
            vocab_size=vocab,
            context_length=info.get("context_length"),
            max_req_input_len=info.get("max_req_input_len"),
            num_reserved_tokens=_reserved_tokens(info),
            allow_auto_truncate=info.get("allow_auto_truncate"),
            dp_size=info.get("dp_size"),
            skip_tokenizer_init=info.get("skip_tokenizer_init"),
            enable_custom_logit_processor=info.get("enable_custom_logit_processor"),
            enable_strict_thinking=info.get("enable_strict_thinking"),
            hidden_states=_hidden_states(info),
            incremental_streaming_output=info.get("incremental_streaming_output"),
            enable_return_routed_experts=info.get("enable_return_routed_experts"),
            routed_experts_shape=None
            if layers is None or top_k is None
            else (layers, top_k),
        )

    @classmethod
    def from_engine(cls, engine: Any) -> Deployment:
        """The deployment of an SGLang engine run in-process: an ``sgl.Engine`` or its
        ``tokenizer_manager``, read (duck-typed) from what its ``get_server_info``
        reads: the server arguments (``resolved_dict()``), the model config, and the
        lengths the tokenizer manager holds. Safe inside a running event loop, where
        ``get_server_info`` is not.

        Raises `EnvelopeError` naming the attribute the engine lacks.
        """
        manager = getattr(engine, "tokenizer_manager", engine)
        args = _attribute(manager, "server_args")
        model = _attribute(manager, "model_config")
        resolved = getattr(args, "resolved_dict", None)  # SGLang 0.5.21-0.5.23's
        if not callable(resolved):
            raise EnvelopeError(
                "engine: server_args must be SGLang's ServerArgs (with resolved_dict()), "
                f"got {type(args).__name__}"
            )
        info = dict(resolved())
        info["context_length"] = _attribute(manager, "context_len")
        info["max_req_input_len"] = getattr(manager, "max_req_input_len", None)
        text_config = getattr(model, "hf_text_config", None)
        config = {
            key: getattr(text_config, key, None)
            for key in ("num_hidden_layers", "num_experts_per_tok")
        }
        config["vocab_size"] = _attribute(model, "vocab_size")
        return cls.from_server_info(info, model_config=config)


def _attribute(owner: object, name: str) -> Any:
    """`owner.name`, or `EnvelopeError` saying the engine lacks it."""
    try:
        return getattr(owner, name)
    except AttributeError:
        raise EnvelopeError(
            f"engine: {type(owner).__name__} has no {name}: expected an sgl.Engine or "
            "its tokenizer_manager"
        ) from None


def _json_object(data: JsonObject, name: str) -> dict[str, Any]:
    """`data` as a dict: a mapping as it is (copied), JSON bytes or text decoded."""
    if isinstance(data, Mapping):
        return dict(data)
    if not isinstance(data, (bytes, bytearray, memoryview, str)):
        raise EnvelopeError(
            f"{name} must be JSON bytes, text or a mapping, got {type(data).__name__}"
        )
    try:
        value = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError) as error:  # RecursionError: too deep
        raise EnvelopeError(f"{name} is not valid JSON: {error}") from None
    if type(value) is not dict:
        raise EnvelopeError(f"{name} must be a JSON object, got {type(value).__name__}")
    return value


def check_routed_experts_shape(name: str, shape: object) -> None:
    """`EnvelopeError` naming `name` unless `shape` is None or a tuple
    ``(num_hidden_layers, num_experts_per_tok)`` of integers >= 1."""
    if shape is not None and not (
        type(shape) is tuple
        and len(shape) == 2
        and all(type(n) is int and n >= 1 for n in shape)
    ):
        raise EnvelopeError(
            f"{name} must be a tuple (num_hidden_layers, num_experts_per_tok) of "
            f"integers >= 1, or None, got {show_value(shape)}"
        )


def _model_value(config: dict[str, Any], key: str) -> Any:
    """A key of the model's config, or of its `text_config` (a multimodal model's)."""
    value = config.get(key)
    text_config = config.get("text_config")
    if value is None and isinstance(text_config, dict):
        value = text_config.get(key)
    return value


def _reserved_tokens(info: dict[str, Any]) -> int | None:
    """SGLang's `compute_num_reserved_tokens`: 0 without speculative decoding; with it,
    a count this library does not derive, so the length checks are left to SGLang."""
    return 0 if info.get("speculative_algorithm") in (None, "", "null") else None


def _hidden_states(info: dict[str, Any]) -> HiddenStates | None:
    """SGLang's `get_server_return_hidden_states_mode`."""
    mode = info.get("return_hidden_states_mode")
    enabled = info.get("enable_return_hidden_states")
    if mode == "last":
        return "last"
    if mode == "full" or enabled is True:
        return "full"
    return "off" if mode is None and enabled is False else None


class DeploymentRule(NamedTuple):
    """One of SGLang's checks after dispatch, made by `build_engine_request` before it."""

    code: str
    field: str
    #: SGLang's words (the library's own where SGLang has none), `{…}` filled in.
    message: str
    #: (deployment, engine body) -> the message's facts when the body breaks the rule.
    check: Callable[[Deployment, Any], dict[str, object] | None]
    #: The engine body's fields (``sampling_params.KEY`` for a key of its sampling
    #: parameters) of which one must differ from its default for the rule to be broken
    #: (none: any body may break it). While all hold their defaults, as in most
    #: requests, the check is skipped (`check_engine_body`).
    when: tuple[str, ...] = ()


def _sampling(body: Any, name: str) -> Any:
    params = body.sampling_params
    value = UNSET if params is None or params is UNSET else getattr(params, name)
    return None if value is UNSET else value


def _json(raw: Any) -> Any:
    return None if raw is None or raw is UNSET else msgspec.json.decode(raw)


def _input_id_outside(d: Deployment, body: Any) -> dict[str, object] | None:
    ids = body.input_ids
    if d.vocab_size is None or not ids or max(ids) < d.vocab_size:
        return None
    index = next(i for i, token in enumerate(ids) if token >= d.vocab_size)
    return {"index": index, "id": ids[index], "vocab_size": d.vocab_size}


def _thinking_without_strict(d: Deployment, body: Any) -> dict[str, object] | None:
    asked = body.max_thinking_tokens is not None
    return {} if asked and d.enable_strict_thinking is False else None


def _rank_outside(d: Deployment, body: Any) -> dict[str, object] | None:
    rank = body.routed_dp_rank
    ranks = d.dp_size
    if rank is None or ranks is None or (ranks <= 1 and rank == 0) or 0 <= rank < ranks:
        return None
    return {"rank": rank, "dp_size": ranks}


def _prompt_tokens(d: Deployment, body: Any) -> int | None:
    if d.context_length is None or d.num_reserved_tokens is None:
        return None  # not known: SGLang checks
    if d.allow_auto_truncate is not False:
        # SGLang truncates what is too long, or it is not known whether it does.
        return None
    if body.input_ids is None:
        return None  # a text prompt: SGLang counts its tokens once it has tokenized it
    return len(body.input_ids) + d.num_reserved_tokens


def _input_too_long(d: Deployment, body: Any) -> dict[str, object] | None:
    tokens = _prompt_tokens(d, body)
    if tokens is None or tokens < (d.context_length or 0):
        return None
    return {"tokens": tokens, "context_length": d.context_length}


def _total_too_long(d: Deployment, body: Any) -> dict[str, object] | None:
    tokens = _prompt_tokens(d, body)
    new = None if tokens is None else _sampling(body, "max_new_tokens")
    if tokens is None or new is None or new + tokens <= (d.context_length or 0):
        return None
    return {
        "total": new + tokens,
        "tokens": tokens,
        "new": new,
        "context_length": d.context_length,
    }


_ints = msgspec.json.Decoder(list[int])


def _id_outside(raw: Any, size: int | None) -> dict[str, object] | None:
    """The first id of `raw` (an array of integers, checked when the request was decoded)
    outside the vocabulary, read a chunk at a time (`int_chunks`): the array is never
    held as Python objects whole."""
    if size is None or raw is UNSET or raw is None:
        return None
    data = bytes(raw)
    if data[:1] != b"[":  # null: SGLang's own check answers
        return None
    for ints in int_chunks(data, 0, len(data), _ints):
        if ints and (min(ints) < 0 or max(ints) >= size):
            token = next(i for i in ints if not 0 <= i < size)
            return {"id": token, "vocab_size": size}
    return None


def _logprob_id_outside(d: Deployment, body: Any) -> dict[str, object] | None:
    return _id_outside(body.token_ids_logprob, d.vocab_size)


def _stop_id_outside(d: Deployment, body: Any) -> dict[str, object] | None:
    params = body.sampling_params
    raw = UNSET if params is None or params is UNSET else params.stop_token_ids
    return _id_outside(raw, d.vocab_size)


def _top_logprobs_over_vocab(d: Deployment, body: Any) -> dict[str, object] | None:
    count, size = body.top_logprobs_num, d.vocab_size
    if body.return_logprob is not True or size is None or count is None or count <= size:
        return None
    return {"count": count, "vocab_size": size}


def _hidden_states_capped(d: Deployment, body: Any) -> dict[str, object] | None:
    return {} if body.return_hidden_states is True and d.hidden_states == "last" else None


def _hidden_states_off(d: Deployment, body: Any) -> dict[str, object] | None:
    return {} if body.return_hidden_states is True and d.hidden_states == "off" else None


def _processor_off(d: Deployment, body: Any) -> dict[str, object] | None:
    asked = bool(body.custom_logit_processor)
    return {} if asked and d.enable_custom_logit_processor is False else None


def _needs_tokenizer(name: str) -> Callable[[Deployment, Any], dict[str, object] | None]:
    def check(d: Deployment, body: Any) -> dict[str, object] | None:
        if d.skip_tokenizer_init is not True:
            return None
        value = _json(_sampling(body, name))
        stops = [value] if isinstance(value, str) else list(value or ())
        return {"stops": repr(stops)} if stops else None

    return check


def _min_new_needs_tokenizer(d: Deployment, body: Any) -> dict[str, object] | None:
    if d.skip_tokenizer_init is not True:
        return None
    low = _sampling(body, "min_new_tokens") or 0
    return {"min_new_tokens": low} if low > 0 else None


def _bias_id_outside(d: Deployment, body: Any) -> dict[str, object] | None:
    if d.vocab_size is None:
        return None
    bias = _json(_sampling(body, "logit_bias"))
    if not isinstance(bias, dict):  # its size was bounded when the request was decoded
        return None
    for key in bias:  # keys are integers: `logit_bias_key_not_integer` held at decode
        if not 0 <= int(key) < d.vocab_size:
            return {"key": key, "largest": d.vocab_size - 1}
    return None


def _input_over_scheduler_limit(d: Deployment, body: Any) -> dict[str, object] | None:
    limit = d.max_req_input_len
    ids = body.input_ids  # None for a text prompt: SGLang checks it once tokenized
    size = 0 if ids is None else len(ids)
    if limit is None or d.allow_auto_truncate is not False or size < limit:
        return None
    return {"tokens": size, "limit": limit}


def _routed_experts_off(d: Deployment, body: Any) -> dict[str, object] | None:
    asked = body.return_routed_experts
    return {} if asked and d.enable_return_routed_experts is False else None


_HIDDEN_CAPPED = (
    "The requested return_hidden_states mode exceeds the server maximum `last`. "
    "Please launch with `--return-hidden-states-mode full` to allow "
    "return_hidden_states=True."
)
_HIDDEN_OFF = (
    "The server is not configured to return hidden states. Please set "
    "`--return-hidden-states-mode last`, `--return-hidden-states-mode full`, "
    "or the legacy `--enable-return-hidden-states` flag."
)
_NO_TOKENIZER = "is unavailable when skip_tokenizer_init=True"

#: SGLang's checks after dispatch, in the order it makes them: the tokenizer manager's
#: `generate_request` and `_validate_one_request`, `SamplingParams.normalize` and
#: `.verify`, then the scheduler's. The first is the library's own: SGLang makes none,
#: and one id outside the vocabulary stops every SGLang process.
DEPLOYMENT_RULES: tuple[DeploymentRule, ...] = (
    DeploymentRule("token_out_of_vocab", "input_ids[{index}]",
        "input_ids[{index}] is {id}, outside the model's vocabulary [0, {vocab_size})",
        _input_id_outside),
    DeploymentRule("thinking_needs_strict_thinking", "max_thinking_tokens",
        "max_thinking_tokens requires the server to be launched with "
        "--enable-strict-thinking",
        _thinking_without_strict, when=("max_thinking_tokens",)),
    DeploymentRule("routed_dp_rank_out_of_range", "routed_dp_rank",
        "routed_dp_rank={rank} out of range [0, {dp_size})", _rank_outside,
        when=("routed_dp_rank",)),
    DeploymentRule("text_needs_tokenizer", "text",
        "The engine initialized with skip_tokenizer_init=True cannot accept text "
        "prompts. Please provide input_ids or re-initialize the engine with "
        "skip_tokenizer_init=False.",
        lambda d, body: {} if d.skip_tokenizer_init is True and body.input_ids is None
        and body.text is not None else None, when=("text",)),
    DeploymentRule("input_too_long", "input_ids",
        "The input ({tokens} tokens) is longer than the model's context length "
        "({context_length} tokens).", _input_too_long),
    DeploymentRule("total_tokens_too_many", "sampling_params.max_new_tokens",
        "Requested token count exceeds the model's maximum context length of "
        "{context_length} tokens. You requested a total of {total} tokens: "
        "{tokens} tokens from the input messages and {new} tokens for the completion. "
        "Please reduce the number of tokens in the input messages or the completion "
        "to fit within the limit.",
        _total_too_long),
    DeploymentRule("token_ids_logprob_out_of_vocab", "token_ids_logprob",
        "token_ids_logprob contains out-of-vocabulary token id {id}; valid range is "
        "[0, {vocab_size}).", _logprob_id_outside, when=("token_ids_logprob",)),
    DeploymentRule("hidden_states_over_server_mode", "return_hidden_states",
        _HIDDEN_CAPPED, _hidden_states_capped, when=("return_hidden_states",)),
    DeploymentRule("hidden_states_not_enabled", "return_hidden_states", _HIDDEN_OFF,
        _hidden_states_off, when=("return_hidden_states",)),
    DeploymentRule("custom_logit_processor_not_enabled", "custom_logit_processor",
        "The server is not configured to enable custom logit processor. Please set "
        "`--enable-custom-logit-processor` to enable this feature.", _processor_off,
        when=("custom_logit_processor",)),
    DeploymentRule("stop_needs_tokenizer", "sampling_params.stop",
        "stop={stops} " + _NO_TOKENIZER + " (requires tokenizer to decode tokens to text "
        "for matching).", _needs_tokenizer("stop"), when=("sampling_params.stop",)),
    DeploymentRule("stop_regex_needs_tokenizer", "sampling_params.stop_regex",
        "stop_regex={stops} " + _NO_TOKENIZER + " (requires tokenizer to decode "
        "tokens to text for matching).", _needs_tokenizer("stop_regex"),
        when=("sampling_params.stop_regex",)),
    DeploymentRule("min_new_tokens_needs_tokenizer", "sampling_params.min_new_tokens",
        "min_new_tokens={min_new_tokens} " + _NO_TOKENIZER + " (requires tokenizer for "
        "eos_token_id).", _min_new_needs_tokenizer,
        when=("sampling_params.min_new_tokens",)),
    DeploymentRule("logit_bias_out_of_vocab", "sampling_params.logit_bias",
        "logit_bias must has keys in [0, {largest}], got {key}.", _bias_id_outside,
        when=("sampling_params.logit_bias",)),
    DeploymentRule("input_over_max_req_input_len", "input_ids",
        "Input length ({tokens} tokens) exceeds the maximum allowed length "
        "({limit} tokens). Use a shorter input or enable --allow-auto-truncate.",
        _input_over_scheduler_limit),
    DeploymentRule("logprob_start_len_past_prompt", "logprob_start_len",
        RULES_BY_CODE["logprob_start_len_past_prompt"].message,
        lambda d, body: logprobs_past_prompt(body), when=("logprob_start_len",)),
    DeploymentRule("routed_experts_start_len_past_prompt", "routed_experts_start_len",
        RULES_BY_CODE["routed_experts_start_len_past_prompt"].message,
        lambda d, body: routed_start_past_prompt(body),
        when=("return_routed_experts",)),
    # The library's own: SGLang answers without routed experts, as if none were asked for.
    DeploymentRule("routed_experts_not_enabled", "return_routed_experts",
        "return_routed_experts needs a server launched with "
        "--enable-return-routed-experts: "
        "this one answers without routed_experts", _routed_experts_off,
        when=("return_routed_experts",)),
    # The library's own: SGLang indexes a row of the vocabulary with each stop id of each
    # request of a batch in which one asks for min_new_tokens (its MinNewTokensPenalizer),
    # and an id past it stops every SGLang process (0.5.23, seen on a live server).
    DeploymentRule("stop_token_ids_out_of_vocab", "sampling_params.stop_token_ids",
        "sampling_params.stop_token_ids holds {id}, outside the model's vocabulary "
        "[0, {vocab_size}): SGLang indexes the vocabulary with it once this request or "
        "another running beside it asks for min_new_tokens, which stops every SGLang "
        "process", _stop_id_outside, when=("sampling_params.stop_token_ids",)),
    # The library's own: SGLang takes the top-k of each logprob row over the vocabulary,
    # and a k past it stops every SGLang process (0.5.23, seen on a live server).
    DeploymentRule("top_logprobs_num_over_vocab", "top_logprobs_num",
        "top_logprobs_num is {count}, more than the model's vocabulary ({vocab_size} "
        "tokens): SGLang's top-k over the vocabulary then stops every SGLang process",
        _top_logprobs_over_vocab, when=("top_logprobs_num",)),
)  # fmt: skip


def _pairs(rules: tuple[DeploymentRule, ...]) -> tuple[tuple[Any, DeploymentRule], ...]:
    """Each rule's check and the rule, in order, as plain pairs: looped over on every
    engine request (unpacking each `DeploymentRule`, a named tuple, costs more than its
    check)."""
    return tuple((rule.check, rule) for rule in rules)


_ALL_CHECKS = _pairs(DEPLOYMENT_RULES)
#: The rules any body may break, in order: all a body with every guard at its default
#: (`DeploymentRule.when`) can break.
_UNGUARDED_CHECKS = _pairs(tuple(rule for rule in DEPLOYMENT_RULES if not rule.when))
_SAMPLING = "sampling_params."
_GUARDS = sorted({name for rule in DEPLOYMENT_RULES for name in rule.when})
_TOP_GUARDS = tuple(name for name in _GUARDS if not name.startswith(_SAMPLING))
_SAMPLING_GUARDS = tuple(
    name.removeprefix(_SAMPLING) for name in _GUARDS if name.startswith(_SAMPLING)
)
#: The guards' defaults: the client's fields' own, and None for the serving system's.
_TOP_DEFAULTS = tuple(REQUEST_DEFAULTS.get(name) for name in _TOP_GUARDS)
_SAMPLING_DEFAULTS = tuple(SAMPLING_DEFAULTS[name] for name in _SAMPLING_GUARDS)
_top_values = operator.attrgetter(*_TOP_GUARDS)
_sampling_values = operator.attrgetter(*_SAMPLING_GUARDS)


def check_engine_body(deployment: Deployment, body: Any) -> None:
    """Raise SGLang's first refusal of `body` (an `EngineBody`) on `deployment` as a
    `RequestRejected`, before dispatch; return when SGLang would accept it."""
    params = body.sampling_params  # without it, no rule on its keys can be broken
    guarded = _top_values(body) != _TOP_DEFAULTS or (  # compared by identity, then ==
        type(params) is SamplingParams and _sampling_values(params) != _SAMPLING_DEFAULTS
    )
    for check, rule in _ALL_CHECKS if guarded else _UNGUARDED_CHECKS:
        facts = check(deployment, body)
        if facts is not None:
            raise refusal(rule, facts)
