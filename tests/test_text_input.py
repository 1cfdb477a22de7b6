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

from sglang_envelope import (
    Bootstrap,
    ClientRequest,
    Deployment,
    EnvelopeError,
    RequestRejected,
    Role,
    Target,
    build_engine_request,
    continuation_request,
    decode_client_request,
    decode_envelope,
    encode_envelope,
    to_worker_envelope,
)
from sglang_envelope.releases.target import KNOWN_RELEASES

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
        "rid": "r1", "stream": True, "text": "hi",
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
