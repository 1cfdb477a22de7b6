"""scripts/fuzz.py: the long run names real Hypothesis tests and counts their examples right."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz", ROOT / "scripts" / "fuzz.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FUZZ = _script()


def test_every_test_of_the_long_run_is_a_hypothesis_test() -> None:
    assert len(set(FUZZ.FUZZ_TESTS)) == len(FUZZ.FUZZ_TESTS)
    for file, name in FUZZ.FUZZ_TESTS:
        test = getattr(importlib.import_module(f"tests.{file.removesuffix('.py')}"), name)
        assert hasattr(test, "hypothesis"), f"{file}::{name} is not a Hypothesis test"


def test_counts_add_up_the_phases_of_each_test() -> None:
    output = """
tests/test_a.py::test_one:

  - during reuse phase (0.01 seconds):
    - 3 passing, 0 failing, and 0 invalid test cases
  - during generate phase (9.5 seconds):
    - 29,997 passing, 1 failing, and 12 invalid test cases

tests/test_b.py::test_two:

  - during generate phase (1.0 seconds):
    - 500 passing, 0 failing, and 0 invalid test cases
"""
    assert FUZZ.counts(output) == {
        "tests/test_a.py::test_one": (30_000, 1),
        "tests/test_b.py::test_two": (500, 0),
    }
