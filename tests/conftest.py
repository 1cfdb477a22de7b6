"""Hypothesis profiles: `default` for CI, `fuzz` for long runs; and the apps of
docs/frontend.md, each started once for the session (`app_running`).

Select a profile with the environment variable SGLANG_ENVELOPE_HYPOTHESIS_PROFILE;
SGLANG_ENVELOPE_FUZZ_EXAMPLES sets the fuzz profile's examples a test
(scripts/fuzz.py sets both).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from tests.apps import APPS, running_app, serving

if TYPE_CHECKING:
    from sglang_envelope.testing import FakeEngine

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


@pytest.fixture(scope="session", params=APPS)
def app_running(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, FakeEngine, str]]:
    """Each app of docs/frontend.md in turn, running in front of its fake engine (a token
    every 5 ms), for tests/test_apps.py and tests/test_apps_edges.py: (the app's URL, the
    engine, the engine's URL). A test starts an app of its own only when it stops it or
    its engine, or the app needs other settings."""
    from sglang_envelope.testing import FakeEngine

    engine = FakeEngine(frame_delay=0.005)
    directory = tmp_path_factory.mktemp("apps")
    vocab = engine.vocab_size
    with serving(engine) as url, running_app(request.param, directory, url, vocab) as app_url:
        yield app_url, engine, url
