"""Target: an SGLang release and transport, checked when made, with that release's tables."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest
from hypothesis import given

from sglang_envelope.errors.exceptions import EnvelopeError
from sglang_envelope.releases.tables import TABLES
from sglang_envelope.releases.target import (
    KNOWN_RELEASES,
    InstalledFields,
    Target,
    first_release_with,
)
from tests.strategies import target_values


def test_the_default_target_is_sglang_0_5_23_over_http_rejecting_unknown_keys() -> None:
    target = Target()
    assert (target.sglang, target.transport, target.unknown_fields) == ("0.5.23", "http", "reject")
    assert target.installed_fields is None
    assert target.tables.generate_req_input_fields == tuple(
        TABLES["0.5.23"]["generate_req_input_fields"]
    )


@pytest.mark.parametrize("release", KNOWN_RELEASES)
@pytest.mark.parametrize("transport", ["http", "engine"])
def test_every_release_and_transport_makes_a_target_with_that_releases_tables(
    release: str, transport: str
) -> None:
    target = Target(sglang=release, transport=transport)
    assert target.tables.sglang == release
    assert list(target.tables.generate_req_input_fields) == list(
        TABLES[release]["generate_req_input_fields"]
    )
    assert list(target.tables.sampling_params_fields) == list(
        TABLES[release]["sampling_params_fields"]
    )


@pytest.mark.parametrize("release", KNOWN_RELEASES)
def test_the_typed_tables_hold_every_generated_table(release: str) -> None:
    tables = Target(sglang=release).tables
    assert json.loads(msgspec.json.encode(tables)) == json.loads(json.dumps(TABLES[release]))


def test_features_say_which_release_has_what() -> None:
    old, middle, new = (Target(sglang=r).tables.features for r in KNOWN_RELEASES)
    assert (old.output_flat, middle.output_flat, new.output_flat) == (False, True, True)
    assert (old.gate, middle.gate, new.gate) == (False, True, True)
    assert (old.mm_processor_kwargs, new.mm_processor_kwargs) == (False, True)
    assert not old.watermark_top_level and middle.watermark_in_sampling_params


def test_known_releases_are_oldest_first() -> None:
    assert KNOWN_RELEASES == ("0.5.21", "0.5.22", "0.5.23")


def test_the_gate_applies_only_over_http_on_a_release_that_wires_one() -> None:
    assert Target(sglang="0.5.21", transport="http").gate is None
    assert Target(sglang="0.5.23", transport="engine").gate is None
    gate = Target(sglang="0.5.22", transport="http").gate
    assert gate is not None
    assert "choice" not in gate.sampling_keys
    assert "choice" in (Target(sglang="0.5.23").gate or gate).sampling_keys


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"sglang": "0.5.20"}, "sglang"),
        ({"sglang": "0.5.24"}, "sglang"),
        ({"sglang": 0.5}, "sglang"),
        ({"sglang": None}, "sglang"),
        ({"transport": "grpc"}, "transport"),
        ({"transport": "HTTP"}, "transport"),
        ({"unknown_fields": "allow"}, "unknown_fields"),
        ({"unknown_fields": True}, "unknown_fields"),
        ({"installed_fields": {"version": "0.5.23"}}, "installed_fields"),
    ],
)
def test_a_bad_value_is_refused_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(EnvelopeError, match=rf"^Target\.{field} must be"):
        Target(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"version": 23}, "version"),
        ({"generate_req_input_fields": ["rid"]}, "generate_req_input_fields"),
        ({"sampling_params_fields": ("n", 1)}, "sampling_params_fields"),
        ({"sampling_params_fields": "n"}, "sampling_params_fields"),
    ],
)
def test_installed_fields_built_by_hand_are_checked(kwargs: dict[str, object], field: str) -> None:
    good: dict[str, object] = {
        "version": "0.5.23",
        "generate_req_input_fields": ("rid",),
        "sampling_params_fields": ("n",),
    }
    with pytest.raises(EnvelopeError, match=rf"^InstalledFields\.{field} must be"):
        InstalledFields(**{**good, **kwargs})  # type: ignore[arg-type]


def test_the_message_lists_what_is_allowed() -> None:
    with pytest.raises(EnvelopeError) as caught:
        Target(sglang="0.6.0")
    assert str(caught.value) == (
        "Target.sglang must be one of '0.5.21', '0.5.22', '0.5.23', got '0.6.0'"
    )


@given(target_values(), target_values(), target_values())
def test_any_values_make_a_target_or_an_envelope_error(
    sglang: object, transport: object, unknown_fields: object
) -> None:
    try:
        target = Target(
            sglang=sglang,  # type: ignore[arg-type]
            transport=transport,  # type: ignore[arg-type]
            unknown_fields=unknown_fields,  # type: ignore[arg-type]
        )
    except EnvelopeError:
        valid = (
            sglang in KNOWN_RELEASES
            and transport in ("http", "engine")
            and unknown_fields in ("reject", "pass")
        )
        assert not (valid and all(type(v) is str for v in (sglang, transport, unknown_fields)))
        return
    assert target.sglang in KNOWN_RELEASES
    assert target.transport in ("http", "engine")
    assert target.unknown_fields in ("reject", "pass")


def test_a_target_is_frozen_and_hashable() -> None:
    target = Target(sglang="0.5.22", transport="engine")
    with pytest.raises(AttributeError):
        target.sglang = "0.5.21"  # type: ignore[misc]
    assert target == Target(sglang="0.5.22", transport="engine")
    assert len({target, Target(sglang="0.5.22", transport="engine")}) == 1
    assert msgspec.structs.replace(target, sglang="0.5.21").sglang == "0.5.21"


def test_replace_checks_the_new_values_too() -> None:
    with pytest.raises(EnvelopeError, match=r"Target\.transport"):
        msgspec.structs.replace(Target(), transport="grpc")


@pytest.mark.parametrize(
    ("field", "sampling", "first"),
    [
        ("input_ids", False, "0.5.21"),
        ("sampling_logprobs_mode", False, "0.5.21"),
        ("return_flat_raw_output_top_logprobs", False, "0.5.22"),
        ("watermark", False, "0.5.22"),
        ("mm_processor_kwargs", False, "0.5.23"),
        ("no_such_field", False, None),
        ("watermark", True, "0.5.22"),
        ("ebnf_full_assistant", True, "0.5.21"),
        ("choice", True, None),
        ("is_normalized", True, None),
    ],
)
def test_first_release_with_a_field(field: str, sampling: bool, first: str | None) -> None:
    assert first_release_with(field, sampling=sampling) == first


# --- Target.installed(): a fake SGLang built in the test ---------------------------------

IO_STRUCT = """
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class GenerateReqInput:
    rid: Optional[str] = field(default=None, kw_only=True)
    text: Optional[str] = None
    input_ids: Optional[list] = None
    sampling_params: Optional[dict] = None
    brand_new_field: Optional[int] = None
    is_single: bool = field(default=True, init=False)
"""

SAMPLING_PARAMS = """
from typing import Optional

import msgspec


class SamplingParams(msgspec.Struct, kw_only=True, array_like=True):
    max_new_tokens: Optional[int] = 128
    stop: Optional[list] = None
    temperature: float = 1.0
    brand_new_knob: Optional[int] = None
    # --- Internal fields (populated by __post_init__ or normalize(), not API-facing) ---
    stop_strs: Optional[list] = None
    stop_regex_strs: Optional[list] = None
    stop_str_max_len: int = 0
    stop_regex_max_len: int = 0
    is_normalized: bool = False
    ebnf_full_assistant: bool = False
"""


def _fake_sglang(
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    version: str = "0.5.23",
    io_struct: str = IO_STRUCT,
    sampling_params: str = SAMPLING_PARAMS,
) -> None:
    """An importable `sglang` package under `root` with the shapes of the real one."""
    files = {
        "sglang/__init__.py": f"__version__ = {version!r}\n",
        "sglang/srt/__init__.py": "",
        "sglang/srt/managers/__init__.py": "",
        "sglang/srt/managers/io_struct.py": io_struct,
        "sglang/srt/sampling/__init__.py": "",
        "sglang/srt/sampling/sampling_params.py": sampling_params,
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    for name in list(sys.modules):
        if name == "sglang" or name.startswith("sglang."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(root))


def test_installed_reads_the_fields_of_the_sglang_in_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_sglang(tmp_path, monkeypatch)
    target = Target.installed()
    assert (target.sglang, target.transport, target.unknown_fields) == (
        "0.5.23",
        "engine",
        "reject",
    )
    assert target.installed_fields == InstalledFields(
        version="0.5.23",
        generate_req_input_fields=(
            "rid",
            "text",
            "input_ids",
            "sampling_params",
            "brand_new_field",
        ),
        sampling_params_fields=(
            "max_new_tokens",
            "stop",
            "temperature",
            "brand_new_knob",
            "ebnf_full_assistant",
        ),
    )
    tables = target.tables
    assert "brand_new_field" in tables.generate_req_input_fields
    assert "is_normalized" not in tables.sampling_params_fields
    # The rest of the tables stay the release's.
    assert tables.verify_checks == Target(sglang="0.5.23").tables.verify_checks


def test_installed_takes_the_transport_and_policy_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_sglang(tmp_path, monkeypatch)
    target = Target.installed(transport="http", unknown_fields="pass")
    assert (target.transport, target.unknown_fields) == ("http", "pass")
    with pytest.raises(EnvelopeError, match=r"Target\.transport"):
        Target.installed(transport="grpc")


@pytest.mark.parametrize(
    ("version", "release"),
    [
        ("0.5.21", "0.5.21"),
        ("0.5.22.post1", "0.5.22"),
        ("0.5.23rc0", "0.5.23"),
        ("0.5.30", "0.5.23"),
        ("1.0.0", "0.5.23"),
    ],
)
def test_installed_uses_the_newest_release_not_newer_than_the_installed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, release: str
) -> None:
    _fake_sglang(tmp_path, monkeypatch, version=version)
    target = Target.installed()
    assert target.sglang == release
    assert target.installed_fields is not None
    assert target.installed_fields.version == version


@pytest.mark.parametrize("version", ["0.5.20", "0.4.99", "dev", ""])
def test_installed_refuses_a_release_older_than_the_tables_or_no_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    _fake_sglang(tmp_path, monkeypatch, version=version)
    with pytest.raises(EnvelopeError, match="installed SGLang"):
        Target.installed()


def test_installed_without_sglang_is_an_envelope_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sglang", None)  # import sglang raises ImportError
    with pytest.raises(EnvelopeError, match=r"^Target.installed\(\) needs SGLang importable"):
        Target.installed()


def test_installed_refuses_a_sglang_of_another_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_sglang(tmp_path / "a", monkeypatch, io_struct="class GenerateReqInput:\n    pass\n")
    with pytest.raises(EnvelopeError, match="GenerateReqInput is not a dataclass"):
        Target.installed()
    _fake_sglang(tmp_path / "b", monkeypatch, sampling_params="SamplingParams = dict\n")
    with pytest.raises(EnvelopeError, match="SamplingParams is not a msgspec Struct"):
        Target.installed()


def test_a_broken_sglang_import_is_an_envelope_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_sglang(tmp_path, monkeypatch, io_struct="raise RuntimeError('no CUDA here')\n")
    with pytest.raises(EnvelopeError, match="no CUDA here"):
        Target.installed()
