"""decode_sequences against SGLang's own verdicts on many sequences, per release.

`tests/fixtures/sequence_conformance.jsonl` (made by `scripts/make_sequence_fixtures.py`
with the oracle) holds, for bodies with a batch, an n, or both, each release's
gate, `normalize_batch_and_arguments()` and tokenizer-manager split, and the
library's verdict: the library accepts what SGLang serves, with SGLang's count
of sequences and its rids, and refuses what SGLang refuses, in its words.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sglang_envelope import RequestRejected, Target, decode_sequences

FIXTURE = Path(__file__).parent / "fixtures" / "sequence_conformance.jsonl"
_LINES = FIXTURE.read_text(encoding="utf-8").splitlines()
META: dict[str, Any] = json.loads(_LINES[0])["meta"]
CASES: list[dict[str, Any]] = [json.loads(line) for line in _LINES[1:]]
PAIRS = [(case, release) for case in CASES for release in META["releases"]]

#: Codes whose words are SGLang's own (normalize_batch_and_arguments()).
SGLANG_WORDED = frozenset(
    {"rid_list_length", "duplicate_rids", "output_flat_with_stream",
     "session_id_with_session_params"}
)  # fmt: skip
#: Refusals of bodies SGLang serves (or fails on without an answer), and why.
DELIBERATE = {
    "per_item_list": "one value a prompt: the library asks for one request a prompt",
    "empty_input_ids": "an empty prompt in a batch: SGLang splits it and fails later",
    "batch_n_below_one": "SGLang's tokenizer manager fails on it (IndexError), no answer",
    "wrong_type": "the gate refuses it (its words are the gate's own)",
    "n_null": "normalize fails on it with a TypeError",
    "empty_batch": "a text batch of no prompt asks for no sequence",
    "batch_text_and_input_ids": "SGLang reads the batch from text and indexes input_ids by it",
    "not_in_batch": "SGLang's split leaves the field out of every prompt (checked below)",
}


def _target(body: dict[str, Any]) -> Target:
    """The target a body is decoded for, as `scripts/make_sequence_fixtures.py` decides."""
    return Target(input="text") if "text" in body else Target()


def _sglang_serves(verdict: dict[str, Any]) -> bool:
    gate, normalize, split = verdict["gate"], verdict["normalize"], verdict["split"]
    return (gate is None or gate["ok"]) and normalize["ok"] and (split is None or split["ok"])


def _verdict(body: dict[str, Any]) -> dict[str, Any]:
    """The library's verdict, as `scripts/make_sequence_fixtures.py` records it."""
    try:
        sequences = decode_sequences(json.dumps(body).encode(), target=_target(body))
    except RequestRejected as error:
        return {"accepted": False, "code": error.code, "field": error.field,
                "message": error.message}  # fmt: skip
    verdict = {
        "accepted": True, "prompts": len(sequences.requests), "n": sequences.n,
        "count": sequences.count, "array": sequences.array,
        "rids": [request.rid for request in sequences.requests],
    }  # fmt: skip
    if "text" in body:
        verdict["texts"] = [request.text for request in sequences.requests]
    return verdict


def test_the_fixture_is_today_s_library() -> None:
    assert META["cases"] == len(CASES) >= 25
    for case in CASES:
        assert _verdict(case["body"]) == case["library"], case["id"]


@pytest.mark.parametrize(("case", "release"), PAIRS, ids=[f"{c['id']}-{r}" for c, r in PAIRS])
def test_the_library_and_sglang_agree(case: dict[str, Any], release: str) -> None:
    ours, theirs = case["library"], case["sglang"][release]
    normalize = theirs["normalize"]
    if ours["accepted"]:
        assert _sglang_serves(theirs), case["id"]
        single = normalize["is_single"]
        count = 1 if single else normalize["batch_size"] * normalize["parallel_sample_num"]
        assert (ours["count"], ours["array"]) == (count, not single), case["id"]
        split = theirs["split"]
        # SGLang's rids of a batch of one sample a prompt are the library's (it regenerates
        # the rid of every sample of n > 1)
        if split is not None and "<uuid4>" not in split["rids"] and ours["n"] == 1:
            assert ours["rids"] == split["rids"], case["id"]
        if split is not None and "texts" in split:  # each prompt's text is SGLang's
            assert ours["texts"] == split["texts"], case["id"]
            # what SGLang leaves out of each prompt, the body left unset ([]: no image)
            assert all(not case["body"][key] for key in split["dropped"]), case["id"]
        return
    if ours["code"] == "not_in_batch":  # SGLang would serve the batch without the field
        assert ours["field"] in theirs["split"]["dropped"], case["id"]
    if ours["code"] in SGLANG_WORDED and release != "0.5.23":
        assert not _sglang_serves(theirs), case["id"]  # the words are checked on 0.5.23
    elif ours["code"] in SGLANG_WORDED:
        assert not normalize["ok"] and normalize["message"] == ours["message"], case["id"]
    else:
        assert ours["code"] in DELIBERATE, case["id"]


def test_every_deliberate_refusal_is_shown() -> None:
    codes = {case["library"].get("code") for case in CASES}
    assert set(DELIBERATE) | SGLANG_WORDED <= codes


def test_a_refused_case_names_its_field() -> None:
    for case in CASES:
        if not case["library"]["accepted"]:
            with pytest.raises(RequestRejected) as raised:
                decode_sequences(case["body"], target=_target(case["body"]))
            assert raised.value.field == case["library"]["field"]
