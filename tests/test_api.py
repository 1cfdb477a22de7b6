"""The public API's shape: a small top level, namespaces, and the moved names' deprecation."""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest

import sglang_envelope
from tests.test_docs import DOCS, python_blocks

ROOT = Path(__file__).resolve().parent.parent
MOVED = sglang_envelope._MOVED

#: Every public module: the top level, its namespaces, and the two extras.
PUBLIC_MODULES = [
    "sglang_envelope",
    "sglang_envelope.stream",
    "sglang_envelope.pair",
    "sglang_envelope.rollout",
    "sglang_envelope.flat",
    "sglang_envelope.in_process",
    "sglang_envelope.routed",
    "sglang_envelope.overrides",
    "sglang_envelope.contract",
    "sglang_envelope.limits",
    "sglang_envelope.types",
    "sglang_envelope.testing",
    "sglang_envelope.adapters.httpx",
    "sglang_envelope.adapters.aiohttp",
    "sglang_envelope.adapters.engine",
]

#: The top level's `__all__` in 0.2.0: each name is still importable from the top level.
RELEASED = [
    "AbortAllPlan",
    "AbortOutcome",
    "AbortPlan",
    "AbortPolicy",
    "AbortSend",
    "Answer",
    "Bootstrap",
    "CLIENT_GONE",
    "ChoicesAggregator",
    "ClientRequest",
    "ContinuePlan",
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_INPUT_IDS",
    "DEFAULT_MAX_JSON_DEPTH",
    "DEFAULT_MAX_JSON_ITEMS",
    "DEFAULT_MAX_NESTED_POSITIONS",
    "DEFAULT_MAX_PROMPTS",
    "DEFAULT_MAX_SEQUENCES",
    "DEPLOYMENT_RULES",
    "Deployment",
    "DrainOutcome",
    "DrainPlan",
    "DrainPolicy",
    "DrainRound",
    "EngineBody",
    "EngineError",
    "EngineLoad",
    "EngineReply",
    "EngineRequest",
    "EnvelopeError",
    "ErrorAnswer",
    "FlatTopLogprobs",
    "GenerateResponse",
    "KNOWN_RELEASES",
    "LimitExceeded",
    "MetaInfo",
    "OVERRIDE_HEADERS",
    "PausePlan",
    "PrefillServer",
    "RejectionCode",
    "RequestRejected",
    "ResponseError",
    "Role",
    "RoleName",
    "Routing",
    "SSE_DONE",
    "SamplingParams",
    "Sequences",
    "Service",
    "SseDecoder",
    "StreamAggregator",
    "Target",
    "Transport",
    "UpstreamError",
    "Watermark",
    "WeightVersionSpan",
    "WorkerEnvelope",
    "__version__",
    "aggregate_frames",
    "aggregate_sse",
    "aggregate_sse_async",
    "aggregate_sse_bytes",
    "aggregate_sse_bytes_async",
    "aiter_frames",
    "build_engine_request",
    "continuation_request",
    "decode_client_request",
    "decode_envelope",
    "decode_flat_top_logprobs",
    "decode_sequences",
    "encode_envelope",
    "encode_flat_top_logprobs",
    "encode_sse",
    "engine_idle",
    "error_event",
    "error_response",
    "finalize_response",
    "header_overrides",
    "merge_prefill_logprobs",
    "parse_unary",
    "plan_abort",
    "plan_abort_all",
    "plan_continue",
    "plan_drain",
    "plan_pause",
    "read_loads",
    "relay_sse",
    "relay_sse_async",
    "run_abort",
    "run_drain",
    "stream_requested",
    "to_worker_envelope",
]


#: The names the top level gained after 0.2.0.
ADDED = ["read_deployment"]


def test_the_top_level_holds_at_most_40_names() -> None:
    assert len(sglang_envelope.__all__) <= 40
    assert len(set(sglang_envelope.__all__)) == len(sglang_envelope.__all__)


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_name_of_every_all_exists(name: str) -> None:
    module = importlib.import_module(name)
    assert len(set(module.__all__)) == len(module.__all__), name
    assert [item for item in module.__all__ if item not in vars(module)] == []


def test_a_public_name_has_one_home() -> None:
    homes: dict[str, list[str]] = {}
    for name in PUBLIC_MODULES:
        for item in importlib.import_module(name).__all__:
            homes.setdefault(item, []).append(name)
    assert {item: where for item, where in homes.items() if len(where) > 1} == {}


@pytest.mark.parametrize(
    "name",
    [
        "sglang_envelope.adapters.httpx",
        "sglang_envelope.adapters.aiohttp",
        "sglang_envelope.adapters.engine",
    ],
)
def test_an_adapter_lists_every_class_and_function_it_defines(name: str) -> None:
    if name != "sglang_envelope.adapters.engine":  # it imports nothing but the library
        pytest.importorskip(name.rsplit(".", 1)[1])
    module = importlib.import_module(name)
    defined = {
        item
        for item, value in vars(module).items()
        if not item.startswith("_")
        and callable(value)
        and getattr(value, "__module__", None) == name
    }
    assert defined == set(module.__all__)


def test_every_released_name_is_still_importable_from_the_top_level() -> None:
    top = set(sglang_envelope.__all__) | {"__version__"}
    assert set(RELEASED) | set(ADDED) == top | set(MOVED)
    assert top.isdisjoint(MOVED)


@pytest.mark.parametrize("name", sorted(MOVED))
def test_a_moved_name_is_in_its_namespace(name: str) -> None:
    namespace = importlib.import_module(MOVED[name])
    assert name in namespace.__all__
    assert getattr(sglang_envelope, MOVED[name].rsplit(".", 1)[1]) is namespace


def _import(code: str) -> tuple[dict[str, object], list[warnings.WarningMessage]]:
    namespace: dict[str, object] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(code, "<importing code>", "exec"), namespace)
    return namespace, caught


@pytest.mark.parametrize("name", sorted(MOVED))
def test_a_moved_name_from_the_top_level_warns_once_and_is_the_same_object(name: str) -> None:
    found, caught = _import(f"from sglang_envelope import {name}")
    assert [w.category for w in caught] == [DeprecationWarning]
    assert caught[0].filename == "<importing code>"  # the importing line, not the library's
    assert str(caught[0].message) == (
        f"importing {name} from sglang_envelope is deprecated: import it from {MOVED[name]}"
        " (the top-level name goes in the next release)"
    )
    assert found[name] is getattr(importlib.import_module(MOVED[name]), name)


def test_a_moved_name_read_as_an_attribute_warns_too() -> None:
    found, caught = _import("import sglang_envelope\nloads = sglang_envelope.read_loads")
    assert [str(w.message).split(":")[0] for w in caught] == [
        "importing read_loads from sglang_envelope is deprecated"
    ]
    assert found["loads"] is sglang_envelope.rollout.read_loads


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_importing_from_a_namespace_or_the_top_level_does_not_warn(name: str) -> None:
    module = importlib.import_module(name)
    _, caught = _import(f"from {name} import {', '.join(module.__all__)}")
    assert caught == []


def test_an_unknown_name_is_still_an_error() -> None:
    with pytest.raises(AttributeError, match="'sglang_envelope' has no attribute 'nothing'"):
        _ = sglang_envelope.nothing  # type: ignore[attr-defined]
    with pytest.raises(ImportError, match="cannot import name 'nothing'"):
        _import("from sglang_envelope import nothing")


def test_type_checkers_see_each_moved_name_where_it_moved() -> None:
    """The `if TYPE_CHECKING:` imports of `__init__.py` are `_MOVED`, name for name."""
    tree = ast.parse((ROOT / "sglang_envelope" / "__init__.py").read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    seen = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name
    }
    assert seen == MOVED


def _our_python() -> list[tuple[str, str]]:
    """Every piece of Python the project holds: its code, tests, scripts and docs' examples."""
    sources = [
        (path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8"))
        for folder in ("sglang_envelope", "tests", "live", "scripts")
        for path in sorted((ROOT / folder).rglob("*.py"))
    ]
    for page in DOCS:
        sources += [(f"{page.name}:{line}", code) for line, code in python_blocks(page)]
    return sources


def moved_uses(source: str) -> list[str]:
    """The moved names `source` takes from the top level, by import or attribute."""
    used = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "sglang_envelope":
            used += [alias.name for alias in node.names if alias.name in MOVED]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "sglang_envelope"
            and node.attr in MOVED
        ):
            used.append(node.attr)
    return used


def test_our_own_code_takes_no_moved_name_from_the_top_level() -> None:
    sources = _our_python()
    assert any(name.startswith("README.md:") for name, _ in sources)  # the docs' blocks are read
    found = {name: used for name, source in sources if (used := moved_uses(source))}
    assert found == {}


def test_a_moved_name_taken_from_the_top_level_is_found() -> None:
    assert moved_uses("from sglang_envelope import Service, read_loads") == ["read_loads"]
    assert moved_uses("import sglang_envelope\nsglang_envelope.SSE_DONE") == ["SSE_DONE"]
    assert moved_uses("from sglang_envelope.rollout import read_loads") == []
