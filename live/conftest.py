"""The live suite's servers, as session fixtures started only when a test needs them.

`server`, `incremental_server` and `skip_tokenizer_server` are aggregated SGLang
servers (default flags, `--incremental-streaming-output`, `--skip-tokenizer-init`),
`release_server` one running SGLang 0.5.22's code, `overrides_server` one reading
SGLang's override headers, `pd_pair` a prefill/decode pair; `moe_server` and `moe_pair`
an aggregated server and a prefill/decode pair of the Mixture-of-Experts model, with
`--enable-return-routed-experts`.
`LIVE_DEFAULT_URL`, `LIVE_INCREMENTAL_URL`, `LIVE_SKIP_TOKENIZER_URL` and
`LIVE_0_5_22_URL` and `LIVE_MOE_URL` name running servers to use instead of starting one,
and `LIVE_PD` and `LIVE_MOE_PD` a running pair ("PREFILL_URL DECODE_URL BOOTSTRAP_PORT").

The tests run grouped by the servers they need, and a server the suite started is
stopped as soon as no later test needs it (at the latest at the session's end), so
that at most three run at once and two start at once. A server that is dead after a
test fails that test, with its log's tail, and is started again for the next one.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from typing import Any

import pytest

pytest.register_assert_rewrite("live.flow")

from live.pd import PdPair, start_pd_pair  # noqa: E402 -- after the rewrite is registered
from live.servers import (  # noqa: E402
    MOE_FLAGS,
    MOE_MODEL,
    LiveServer,
    ServerFailed,
    attach,
    start_server,
)

#: fixture name -> (server kind, the environment variable naming a running one)
FIXTURES: dict[str, tuple[str, str | None]] = {
    "server": ("default", "LIVE_DEFAULT_URL"),
    "incremental_server": ("incremental", "LIVE_INCREMENTAL_URL"),
    "skip_tokenizer_server": ("skip_tokenizer", "LIVE_SKIP_TOKENIZER_URL"),
    "release_server": ("sglang_0_5_22", "LIVE_0_5_22_URL"),
    "overrides_server": ("overrides", "LIVE_OVERRIDES_URL"),
    "pd_pair": ("pd", None),
    "moe_server": ("moe", "LIVE_MOE_URL"),
    "moe_pair": ("moe_pd", None),
}
#: The order the groups of tests run in (a test runs with the latest of its kinds).
#: How the Mixture-of-Experts pair is started.
MOE_PAIR: dict[str, Any] = {"model": MOE_MODEL, "flags": MOE_FLAGS}
KIND_ORDER = (
    "default", "incremental", "skip_tokenizer", "sglang_0_5_22", "overrides", "pd", "moe",
    "moe_pd",
)  # fmt: skip
#: The parametrized fixture a test uses to run on each aggregated server.
ANY_SERVER = "any_server"

Live = LiveServer | PdPair


class Pool:
    """The servers of one session, started on demand, each stopped when no test needs it.

    A server's handle stays the same for the whole session: stopped, it is started again
    on the same ports when a test needs it.
    """

    def __init__(self) -> None:
        self.handles: dict[str, Live] = {}
        self.last_use: dict[str, int] = {}
        self.failed: dict[str, str] = {}

    def get(self, kind: str) -> Live:
        """The running server of `kind`, started (or started again) if need be."""
        if kind in self.failed:  # fail every test that needs it, not only the first
            pytest.fail(self.failed[kind], pytrace=False)
        try:
            live = self.handles.get(kind)
            if live is None:
                live = self.handles[kind] = self._start(kind)
            elif live.owned and not live.running:
                live.relaunch()
        except ServerFailed as error:
            self.failed[kind] = f"cannot start the {kind} server: {error}"
            pytest.fail(self.failed[kind], pytrace=False)
        return live

    @staticmethod
    def _start(kind: str) -> Live:
        if kind in ("pd", "moe_pd"):
            urls = os.environ.get("LIVE_PD" if kind == "pd" else "LIVE_MOE_PD", "").split()
            if not urls:
                return start_pd_pair() if kind == "pd" else start_pd_pair(**MOE_PAIR)
            prefill, decode, port = urls  # "PREFILL_URL DECODE_URL BOOTSTRAP_PORT"
            return PdPair(
                attach("prefill", prefill), attach("decode", decode), "127.0.0.1", int(port)
            )
        variable = next(v for k, v in FIXTURES.values() if k == kind)
        url = os.environ.get(variable or "")
        return attach(kind, url) if url else start_server(kind)

    def in_use(self, kind: str) -> Live | None:
        """The server of `kind` if it should be serving now (not stopped by the pool)."""
        live = self.handles.get(kind)
        return live if live is not None and live.in_use else None

    def release_after(self, index: int) -> None:
        """Stop the servers no test after the `index`-th needs."""
        for kind, live in self.handles.items():
            if self.last_use.get(kind, -1) <= index:
                live.stop()

    def stop_all(self) -> None:
        for live in self.handles.values():
            live.stop()


_POOL = Pool()


def kinds_of(item: pytest.Item) -> tuple[str, ...]:
    """The server kinds a test needs, from its fixtures and its `any_server` parameter."""
    names = getattr(item, "fixturenames", ())
    kinds = [FIXTURES[name][0] for name in names if name in FIXTURES]
    callspec = getattr(item, "callspec", None)
    if callspec is not None and ANY_SERVER in callspec.params:
        kinds.append(FIXTURES[callspec.params[ANY_SERVER]][0])
    return tuple(sorted(set(kinds), key=KIND_ORDER.index))


@pytest.hookimpl(trylast=True)  # after pytest's own grouping by session parameters
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Group the tests by the last server kind they need; note each kind's last user."""

    def group(item: pytest.Item) -> int:
        kinds = kinds_of(item)
        return KIND_ORDER.index(kinds[-1]) + 1 if kinds else 0

    items.sort(key=group)  # stable: a file's order is kept within a group
    for index, item in enumerate(items):
        for kind in kinds_of(item):
            _POOL.last_use[kind] = index


def _deaths(item: pytest.Item) -> str:
    """What died of the servers a test used (stopped, to be started again), or ""."""
    dead = [
        live
        for kind in kinds_of(item)
        if (live := _POOL.in_use(kind)) is not None and not live.alive()
    ]
    message = "\n".join(live.describe_death() for live in dead)
    for live in dead:
        live.stop()  # the next test that needs it starts it again
    return message


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    """Fail the test whose servers are dead after it ran (failed or not)."""
    try:
        result = yield
    except BaseException:
        if message := _deaths(item):
            pytest.fail(message, pytrace=False)  # chained to the test's own failure
        raise
    if message := _deaths(item):
        pytest.fail(message, pytrace=False)
    return result


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    items = item.session.items
    _POOL.release_after(items.index(item) if nextitem is not None else len(items))


def pytest_sessionfinish(session: pytest.Session) -> None:
    _POOL.stop_all()


@pytest.fixture(scope="session")
def server() -> LiveServer:
    """The default aggregated server (cumulative streams)."""
    live = _POOL.get("default")
    assert isinstance(live, LiveServer)
    return live


@pytest.fixture(scope="session")
def incremental_server() -> LiveServer:
    """An aggregated server started with `--incremental-streaming-output`."""
    live = _POOL.get("incremental")
    assert isinstance(live, LiveServer)
    return live


@pytest.fixture(scope="session")
def skip_tokenizer_server() -> LiveServer:
    """An aggregated server started with `--skip-tokenizer-init` (no `text` in answers)."""
    live = _POOL.get("skip_tokenizer")
    assert isinstance(live, LiveServer)
    return live


@pytest.fixture(scope="session")
def release_server() -> LiveServer:
    """An aggregated server running SGLang 0.5.22's code (on 0.5.23's dependencies)."""
    live = _POOL.get("sglang_0_5_22")
    assert isinstance(live, LiveServer)
    return live


@pytest.fixture(scope="session")
def overrides_server() -> LiveServer:
    """An aggregated server run with SGLANG_ENABLE_REQUEST_HEADER_OVERRIDES=1."""
    live = _POOL.get("overrides")
    assert isinstance(live, LiveServer)
    return live


@pytest.fixture(scope="session")
def pd_pair() -> PdPair:
    """A prefill/decode pair (Mooncake over TCP)."""
    live = _POOL.get("pd")
    assert isinstance(live, PdPair)
    return live


@pytest.fixture(scope="session")
def moe_server() -> LiveServer:
    """An aggregated server of the Mixture-of-Experts model, returning routed experts."""
    live = _POOL.get("moe")
    assert isinstance(live, LiveServer)
    return live


@pytest.fixture(scope="session")
def moe_pair() -> PdPair:
    """A prefill/decode pair of the Mixture-of-Experts model, returning routed experts."""
    live = _POOL.get("moe_pd")
    assert isinstance(live, PdPair)
    return live


@pytest.fixture(autouse=True)
def _servers_running(request: pytest.FixtureRequest) -> None:
    """Start again, before a test, a server of the session that was stopped after another."""
    for kind in kinds_of(request.node):
        _POOL.get(kind)


@pytest.fixture(scope="session", params=["server", "incremental_server", "skip_tokenizer_server"])
def any_server(request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    """Each aggregated server in turn."""
    live = request.getfixturevalue(request.param)
    assert isinstance(live, LiveServer)
    yield live
