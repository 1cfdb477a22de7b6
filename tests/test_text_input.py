"""`Target(input="text")`: a text prompt and the media fields, under SGLang's rules.

The verdicts of every release on text bodies are SGLang's own, recorded by
`scripts/make_text_fixtures.py` in `fixtures/text_conformance.jsonl`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_envelope import (
    Bootstrap,
    ClientRequest,
    Deployment,
    EnvelopeError,
    RequestRejected,
    Role,
    Target,
    build_engine_request,
    decode_client_request,
    decode_envelope,
    decode_sequences,
    encode_envelope,
    to_worker_envelope,
)
from sglang_envelope.releases.target import KNOWN_RELEASES
from sglang_envelope.rollout import continuation_request

FIXTURE = Path(__file__).parent / "fixtures" / "text_conformance.jsonl"
CASES = [c for c in map(json.loads, FIXTURE.read_text().splitlines()) if "meta" not in c]
#: Bodies SGLang serves that the library refuses on purpose, and the rule it refuses them by.
ON_PURPOSE = {
    '{"text": ["a", "b"]}': "batched_input",  # a batch: one request a body
    '{"text": "hello", "input_embeds": [[0.5, 0.25]]}': "not_token_input",
}
TEXT = Target(input="text")
BOOTSTRAP = Bootstrap(host="10.0.0.1", port=8998, room=7)
DEPLOYMENT = Deployment(
    vocab_size=320, context_length=8, max_req_input_len=8, num_reserved_tokens=0,
    allow_auto_truncate=False,
)  # fmt: skip


def _verdict(body: dict[str, Any], target: Target) -> RequestRejected | None:
    try:
        decode_client_request(json.dumps(body).encode(), target=target)
    except RequestRejected as rejected:
        return rejected
    return None


@pytest.mark.parametrize("release", KNOWN_RELEASES)
@pytest.mark.parametrize("case", CASES, ids=lambda case: case["id"])
def test_a_text_target_decides_as_sglang_does(case: dict[str, Any], release: str) -> None:
    sglang = case["targets"][release]
    got = _verdict(case["body"], Target(sglang=release, input="text"))
    purpose = ON_PURPOSE.get(json.dumps(case["body"]))
    if purpose is not None:
        assert sglang["ok"] and got is not None and got.code == purpose
    elif sglang["ok"]:
        assert got is None
    else:
        assert got is not None
        if sglang["stage"] == "normalize_batch_and_arguments":
            assert got.message == sglang["message"]


def test_the_token_default_refuses_text_and_media_as_before() -> None:
    for key, value in (("text", "hi"), ("image_data", "x.png"), ("modalities", ["image"])):
        rejected = _verdict({"input_ids": [1], key: value}, Target())
        assert rejected is not None and (rejected.code, rejected.field) == ("not_token_input", key)
    missing = _verdict({"sampling_params": {}}, Target())
    assert missing is not None and missing.code == "missing_input_ids"
    batched = _verdict({"input_ids": [[1, 2]]}, Target())
    assert batched is not None and batched.message == (
        "input_ids must be one flat list of token ids: decode_client_request takes one "
        "prompt, not a batch: decode a batch with decode_sequences"
    )
    assert decode_client_request(b'{"input_ids": [1], "image_data": null}').image_data is (
        msgspec.UNSET
    )


def test_input_is_a_target_field_checked_like_the_others() -> None:
    assert Target().input == "tokens"
    with pytest.raises(EnvelopeError, match=r"^Target\.input must be one of 'tokens', 'text'"):
        Target(input="embeds")
    assert Target(input="text") != Target()


def test_a_text_request_keeps_its_text_and_media_and_crosses_the_wire() -> None:
    body = b'{"text": "hi", "image_data": [{"url": "a.png"}], "video_data": null}'
    request = decode_client_request(body, target=TEXT)
    assert (request.text, request.input_ids) == ("hi", None)
    assert bytes(request.image_data) == b'[{"url": "a.png"}]'  # type: ignore[arg-type]
    envelope = to_worker_envelope(request, rid="r1")
    again = decode_envelope(encode_envelope(envelope), target=TEXT)
    assert again.request == request
    engine = build_engine_request(again, input_ids=None, role="aggregated", deployment=DEPLOYMENT)
    assert json.loads(engine.to_json()) == {
        "rid": "r1", "stream": False, "text": "hi",
        "image_data": [{"url": "a.png"}], "video_data": None,
    }  # fmt: skip


def test_a_media_field_is_bounded_as_free_form_json() -> None:
    deep = b'{"text": "hi", "image_data": ' + b"[" * 40 + b"]" * 40 + b"}"
    rejected = _verdict(json.loads(deep), TEXT)
    assert rejected is not None and (rejected.code, rejected.field) == (
        "json_too_deep",
        "image_data",
    )


def test_a_made_text_request_is_checked_for_its_target() -> None:
    assert ClientRequest(text="hi", target=TEXT).text == "hi"
    with pytest.raises(RequestRejected) as caught:
        ClientRequest(target=TEXT)
    assert caught.value.code == "no_input"
    with pytest.raises(RequestRejected) as caught:
        ClientRequest(input_ids=(1,), text="hi")
    assert caught.value.code == "not_token_input"


@pytest.mark.parametrize("role", [Role.PREFILL, Role.DECODE])
def test_both_legs_carry_the_text_with_the_bootstrap(role: Role) -> None:
    request = decode_client_request(
        b'{"text": "hi", "sampling_params": {"max_new_tokens": 5}}', target=TEXT
    )
    envelope = to_worker_envelope(request, rid="r1")
    engine = build_engine_request(
        envelope, input_ids=None, role=role, deployment=DEPLOYMENT, bootstrap=BOOTSTRAP
    )
    sent = json.loads(engine.to_json())
    assert sent["text"] == "hi" and "input_ids" not in sent
    assert (sent["bootstrap_host"], sent["bootstrap_port"], sent["bootstrap_room"]) == (
        "10.0.0.1",
        8998,
        7,
    )
    assert sent["sampling_params"]["max_new_tokens"] == (1 if role is Role.PREFILL else 5)


def test_the_deployment_leaves_a_text_prompts_length_to_sglang() -> None:
    long = "x" * 100  # past the context length as bytes: SGLang counts its tokens
    request = decode_client_request(json.dumps({"text": long}).encode(), target=TEXT)
    envelope = to_worker_envelope(request, rid="r1")
    build_engine_request(envelope, input_ids=None, role="aggregated", deployment=DEPLOYMENT)
    with pytest.raises(RequestRejected) as caught:  # ids given with it are checked
        build_engine_request(envelope, input_ids=[1] * 9, role="aggregated", deployment=DEPLOYMENT)
    assert caught.value.code == "input_too_long"


def test_a_server_without_a_tokenizer_refuses_text_before_dispatch() -> None:
    request = decode_client_request(b'{"text": "hi"}', target=TEXT)
    envelope = to_worker_envelope(request, rid="r1")
    no_tokenizer = Deployment(vocab_size=320, skip_tokenizer_init=True)
    with pytest.raises(RequestRejected) as caught:
        build_engine_request(envelope, input_ids=None, role="aggregated", deployment=no_tokenizer)
    assert (caught.value.code, caught.value.field) == ("text_needs_tokenizer", "text")
    assert caught.value.message.startswith(
        "The engine initialized with skip_tokenizer_init=True cannot accept text prompts."
    )
    build_engine_request(envelope, input_ids=[5], role="aggregated", deployment=no_tokenizer)


def test_a_text_request_is_not_continued() -> None:
    request = decode_client_request(b'{"text": "hi"}', target=TEXT)
    answer = {"output_ids": [5], "meta_info": {"finish_reason": {"type": "length"}}}
    with pytest.raises(EnvelopeError, match=r"^text: a request with a text prompt"):
        continuation_request(answer, request)


# --- a batch of text prompts: decode_sequences ------------------------------------

TEXTS = ["Hello", "world"]


def _text_rejected(body: dict[str, Any], **bounds: Any) -> RequestRejected:
    with pytest.raises(RequestRejected) as raised:
        decode_sequences(json.dumps(body), target=TEXT, **bounds)
    return raised.value


def test_a_text_batch_is_one_request_a_prompt_with_sglang_s_rids() -> None:
    body = {"text": TEXTS, "rid": "job", "stream": True, "image_data": "a.png"}
    sequences = decode_sequences(json.dumps(body), target=TEXT)
    assert (sequences.batch, sequences.n, sequences.count) == (True, 1, 2)
    for i, request in enumerate(sequences.requests):  # each is its one-prompt body's request
        one = {"text": TEXTS[i], "rid": f"job_{i}", "stream": True, "image_data": "a.png"}
        assert request == decode_client_request(json.dumps(one), target=TEXT)
        assert (request.text, request.input_ids, request.target) == (TEXTS[i], None, TEXT)


def test_a_text_batch_of_n_samples_fans_out_in_index_order() -> None:
    body = {"text": TEXTS, "rid": ["x", "y"], "sampling_params": {"n": 2}}
    samples = decode_sequences(json.dumps(body), target=TEXT).samples()
    assert [(s.text, s.rid) for s in samples] == [
        ("Hello", "x_0"), ("Hello", "x_1"), ("world", "y_2"), ("world", "y_3")
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({"text": []}, "empty_batch", "text"),
        ({"text": ["a", 1]}, "wrong_type", "text[1]"),
        ({"text": ["a", None]}, "wrong_type", "text[1]"),
        ({"text": [["a"], ["b"]]}, "wrong_type", "text[0]"),
        ({"text": TEXTS, "input_ids": [1, 2]}, "batch_text_and_input_ids", "text"),
        ({"text": "a", "input_ids": [[1], [2]]}, "batch_text_and_input_ids", "text"),
        ({"text": TEXTS, "rid": ["x"]}, "rid_list_length", "rid"),
        ({"text": TEXTS, "sampling_params": [{}, {}]}, "per_item_list", "sampling_params"),
        ({"text": TEXTS, "image_data": ["a.png", "b.png"]}, "per_item_list", "image_data"),
        ({"text": TEXTS, "video_data": ["a.mp4"]}, "per_item_list", "video_data"),
        ({"text": TEXTS, "modalities": ["image"]}, "per_item_list", "modalities"),
        ({"text": TEXTS, "mm_hashes": ["h", "i"]}, "per_item_list", "mm_hashes"),
        ({"text": TEXTS, "video_config": {"fps": 1}}, "not_in_batch", "video_config"),
        ({"text": TEXTS, "use_audio_in_video": True}, "not_in_batch", "use_audio_in_video"),
        ({"text": TEXTS, "sampling_params": {"n": 0}}, "batch_n_below_one", "sampling_params.n"),
    ],
)
def test_a_bad_text_batch_is_refused_naming_the_field(
    body: dict[str, Any], code: str, field: str
) -> None:
    rejected = _text_rejected(body)
    assert (rejected.code, rejected.field) == (code, field)
    assert rejected.message.startswith(field) or code not in ("wrong_type", "empty_batch")


@pytest.mark.parametrize(
    "shared", [{"image_data": []}, {"image_data": None}, {"use_audio_in_video": False}]
)
def test_a_media_field_that_means_no_media_is_shared_by_a_text_batch(
    shared: dict[str, Any],
) -> None:
    sequences = decode_sequences(json.dumps({"text": TEXTS, **shared}), target=TEXT)
    assert [request.text for request in sequences.requests] == TEXTS


def test_a_text_batch_is_bounded_naming_text() -> None:
    assert _text_rejected({"text": TEXTS * 3}, max_prompts=5).field == "text"
    rejected = _text_rejected({"text": TEXTS}, max_batch_bytes=10)
    assert (rejected.code, rejected.field) == ("batch_too_large", "text")
    rejected = _text_rejected({"text": TEXTS, "sampling_params": {"n": 3}}, max_sequences=5)
    assert rejected.code == "too_many_sequences"


def test_a_text_batch_points_decode_client_request_to_decode_sequences() -> None:
    with pytest.raises(RequestRejected) as raised:
        decode_client_request(json.dumps({"text": TEXTS}), target=TEXT)
    assert raised.value.code == "batched_input"
    assert raised.value.message.endswith("decode a batch with decode_sequences")
    with pytest.raises(RequestRejected) as raised:  # the token default: text is refused
        decode_sequences(json.dumps({"text": TEXTS}))
    assert (raised.value.code, raised.value.field) == ("not_token_input", "text")


@given(
    st.lists(st.text(max_size=8), min_size=1, max_size=5),
    st.integers(1, 4),
    st.sampled_from(["string", "list", "absent"]),
)
def test_text_samples_are_unique_in_index_order_each_with_its_prompt_s_text(
    texts: list[str], n: int, rid: str
) -> None:
    body: dict[str, Any] = {"text": texts, "sampling_params": {"n": n}}
    if rid == "string":
        body["rid"] = "r"
    elif rid == "list":
        body["rid"] = [f"p{i}" for i in range(len(texts))]
    sequences = decode_sequences(json.dumps(body), target=TEXT)
    samples = sequences.samples()
    assert len(samples) == sequences.count == len(texts) * n
    rids = [sample.rid for sample in samples]
    if rid == "absent":
        assert rids == [None] * len(samples)
    else:
        assert len(set(rids)) == len(rids)
        if n > 1 or rid == "string":  # sample k's rid ends with _k: index order
            assert [r.rsplit("_", 1)[1] for r in rids if r] == [str(k) for k in range(len(rids))]
    for k, sample in enumerate(samples):
        assert sample.text == texts[k // n]
        assert sample.rid == sequences.requests[k // n].rid or n > 1
