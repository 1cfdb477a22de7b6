"""The generated per-release tables: exactly what the generator makes of its snapshot,
and in agreement with every target's own verdicts in tests/fixtures/release_conformance.jsonl."""

from __future__ import annotations

import importlib.util
import json
import re
import string
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sglang_envelope.releases.tables import RELEASES, TABLES
from sglang_envelope.releases.target import Target

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SNAPSHOT = json.loads((FIXTURES / "release_tables.json").read_text(encoding="utf-8"))
LINES = [
    json.loads(line)
    for line in (FIXTURES / "release_conformance.jsonl").read_text(encoding="utf-8").splitlines()
]
META, CASES = LINES[0]["meta"], LINES[1:]
TARGETS = [(r, t) for r in RELEASES for t in ("http", "engine")]


def _generator() -> ModuleType:
    """The generator as `python scripts/make_release_tables.py` runs it: scripts/ on the path."""
    if str(ROOT / "scripts") not in sys.path:
        sys.path.append(str(ROOT / "scripts"))
    path = ROOT / "scripts" / "make_release_tables.py"
    spec = importlib.util.spec_from_file_location("make_release_tables", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()


# --- the module and the doc are what the generator makes of the snapshot -----------------


def test_the_module_is_exactly_what_the_generator_renders_from_the_snapshot() -> None:
    source = (ROOT / "sglang_envelope" / "releases" / "tables.py").read_text(encoding="utf-8")
    assert source == GENERATOR.render_module(SNAPSHOT)


def test_the_module_holds_the_snapshots_data() -> None:
    assert json.loads(json.dumps(TABLES)) == SNAPSHOT["releases"]
    assert list(RELEASES) == list(SNAPSHOT["releases"]) == list(GENERATOR.RELEASES)


def test_docs_releases_is_exactly_what_the_generator_renders_from_the_snapshot() -> None:
    doc = (ROOT / "docs" / "releases.md").read_text(encoding="utf-8")
    assert doc == GENERATOR.render_doc(SNAPSHOT)


def test_the_fixture_covers_every_release_and_transport() -> None:
    assert META["releases"] == list(RELEASES)
    assert META["cases"] == len(CASES)
    for case in CASES:
        assert sorted(case["targets"]) == sorted(f"{r}/{t}" for r, t in TARGETS)


# --- the tables agree with every target's verdicts ---------------------------------------


def _template_pattern(template: str) -> re.Pattern[str]:
    """A regex matching the texts `template.format(...)` can produce."""
    parts = []
    for literal, field, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if field is not None:
            parts.append(".*?")
    return re.compile("".join(parts) + r"\Z", re.DOTALL)


def _matches(message: str, checks: list[dict[str, Any]]) -> bool:
    return any(_template_pattern(check["message"]).match(message) for check in checks)


def _verdicts(transport: str | None = None) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [
        (release, case["body"], case["targets"][f"{release}/{t}"])
        for case in CASES
        for release, t in TARGETS
        if transport in (None, t)
    ]


def test_every_accepted_top_level_key_is_in_the_releases_table_or_was_dropped() -> None:
    for release, body, verdict in _verdicts():
        if not verdict["ok"]:
            continue
        fields = TABLES[release]["generate_req_input_fields"]
        assert verdict["dropped"] == [key for key in body if key not in fields]


def test_in_process_a_key_outside_the_table_is_refused_by_generate_req_input() -> None:
    for release, body, verdict in _verdicts("engine"):
        unknown = [key for key in body if key not in TABLES[release]["generate_req_input_fields"]]
        refused_here = not verdict["ok"] and verdict["stage"] == "GenerateReqInput"
        assert refused_here == bool(unknown), (release, body)
        if unknown:
            assert verdict["error"] == "TypeError"
            assert f"unexpected keyword argument '{unknown[0]}'" in verdict["message"]


def test_every_accepted_sampling_key_is_in_the_releases_tables() -> None:
    for release, body, verdict in _verdicts():
        params = body.get("sampling_params") or {}
        if not verdict["ok"]:
            continue
        table = TABLES[release]
        assert set(params) <= set(table["sampling_params_fields"])


def test_the_gate_refuses_exactly_the_sampling_keys_its_table_lacks_in_its_words() -> None:
    for release, body, verdict in _verdicts("http"):
        gate = Target(sglang=release).gate
        if gate is None:
            assert verdict["ok"] or verdict["stage"] != "gate"
            continue
        params = body.get("sampling_params")
        unknown = [k for k in params or {} if k not in gate.sampling_keys]
        if unknown and isinstance(body.get("input_ids"), list):
            listed = ", ".join(f"`{key}`" for key in gate.sampling_keys)
            assert verdict["stage"] == "gate", (release, body)
            assert verdict["message"] == gate.unknown_sampling_key.format(
                key=unknown[0], expected=listed
            )


def test_no_gate_runs_in_process() -> None:
    for _, _, verdict in _verdicts("engine"):
        assert verdict["ok"] or verdict["stage"] not in ("gate", "fastapi")


def test_over_http_an_unknown_top_level_key_is_dropped_on_every_release() -> None:
    """FastAPI's parse drops it, and no release's gate refuses it."""
    for release, body, verdict in _verdicts("http"):
        if "zz_unknown_field" in body:
            assert verdict == {"ok": True, "dropped": ["zz_unknown_field"]}, release
            gate = TABLES[release]["gate"]
            assert gate is None or gate["unknown_field"] == "ignored"


@pytest.mark.parametrize(
    ("stage", "step"),
    [("SamplingParams.verify", "verify_checks"), ("SamplingParams.normalize", "normalize_checks")],
)
def test_every_sampling_value_error_is_one_of_the_releases_checks(stage: str, step: str) -> None:
    seen = 0
    for release, _, verdict in _verdicts():
        if verdict["ok"] or verdict["stage"] != stage or verdict["error"] != "ValueError":
            continue
        seen += 1
        if verdict["message"].startswith(IMPLICIT_FAILURES):
            continue
        assert _matches(verdict["message"], TABLES[release][step]), verdict["message"]
    assert seen > 0


#: Failures of Python's own conversions inside the checks, not of a `raise`:
#: verify() reads `logit_bias` keys with int(), so a key like "x" fails there.
IMPLICIT_FAILURES = ("invalid literal for int() with base 10",)


def test_the_watermark_object_checks_are_the_releases_init_checks() -> None:
    seen = 0
    for release, _, verdict in _verdicts():
        if verdict["ok"] or verdict["stage"] != "SamplingParams(**sampling_params)":
            continue
        if verdict["error"] == "ValueError":
            seen += 1
            assert _matches(verdict["message"], TABLES[release]["init_checks"])
    assert seen > 0


def test_every_verify_check_that_needs_only_the_request_is_exercised() -> None:
    for release in RELEASES:
        messages = [
            case["targets"][f"{release}/engine"].get("message", "")
            for case in CASES
            if case["targets"][f"{release}/engine"].get("stage") == "SamplingParams.verify"
        ]
        for check in TABLES[release]["verify_checks"]:
            pattern = _template_pattern(check["message"])
            assert any(pattern.match(m) for m in messages), check["message"]


def test_the_priority_range_is_the_tokenizer_managers() -> None:
    for release, body, verdict in _verdicts("engine"):
        priority = body.get("priority")
        if type(priority) is not int:
            continue
        bounds = TABLES[release]["priority_range"]
        inside = bounds is None or bounds[0] <= priority <= bounds[1]
        refused_here = verdict.get("stage") == "_set_default_priority"
        assert refused_here == (not inside), (release, priority)
        if not inside:
            assert verdict["stage"] == "_set_default_priority"
            assert _matches(verdict["message"], TABLES[release]["tokenizer_manager_checks"])


def test_tokenizer_manager_request_checks_are_in_its_table() -> None:
    tm_stages = ("_set_default_priority", "_validate_one_request", "_create_tokenized_object")
    seen = set()
    for release, _, verdict in _verdicts():
        if verdict["ok"] or verdict["stage"] not in tm_stages or verdict["error"] != "ValueError":
            continue
        checks = TABLES[release]["tokenizer_manager_checks"]
        if _matches(verdict["message"], checks):
            seen.add(verdict["message"])
        else:
            # The rest need the deployment: `_validate_watermark_request` resolves a
            # request's watermark against the server's settings (off by default).
            assert verdict["stage"] == "_create_tokenized_object"
            assert "watermark" in verdict["message"], verdict["message"]
    assert any("sampling_logprobs_mode" in m for m in seen)
    assert any("not both" in m for m in seen)
    assert any("priority" in m for m in seen)


def test_the_hand_written_0_5_23_tables_agree_with_the_generated_ones() -> None:
    """While the rule code keeps its own 0.5.23 lists, they must be SGLang 0.5.23's."""
    rules = pytest.importorskip("sglang_envelope.request.rules")
    table = TABLES["0.5.23"]
    hand_fields = getattr(rules, "GENERATE_REQ_INPUT_FIELDS", None)
    hand_keys = getattr(rules, "SAMPLING_PARAMS_FIELDS", None)
    if hand_fields is None or hand_keys is None:
        pytest.skip("the rule code no longer keeps its own 0.5.23 lists")
    assert list(hand_fields) == list(table["generate_req_input_fields"])
    assert list(hand_keys) == list(table["gate"]["sampling_keys"])
