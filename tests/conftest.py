"""Hypothesis profiles: `default` for CI, `fuzz` for long runs.

Select one with the environment variable SGLANG_ENVELOPE_HYPOTHESIS_PROFILE;
SGLANG_ENVELOPE_FUZZ_EXAMPLES sets the fuzz profile's examples a test
(scripts/fuzz.py sets both).
"""

import os

import pytest
from hypothesis import HealthCheck, settings

# 50 examples a property in the default run (a test that needs more says so); the long
# fuzz run (scripts/fuzz.py) gives its tests tens of thousands each.
settings.register_profile("default", max_examples=50, deadline=None)
settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("SGLANG_ENVELOPE_FUZZ_EXAMPLES", "20000")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("SGLANG_ENVELOPE_HYPOTHESIS_PROFILE", "default"))


def pytest_configure(config: pytest.Config) -> None:
    # The library's own code, tests and docs take no name from the place it moved from.
    config.addinivalue_line(
        "filterwarnings", "error:importing .* from sglang_envelope is deprecated:DeprecationWarning"
    )
