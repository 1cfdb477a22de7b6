"""docs/api.md lists every public name in its namespace, with the code's own signatures.

Each namespace's names are the first column of its marked tables
(`<!-- names:MODULE[:PART]:start -->`). An entry is a code span: `Name`,
`Name(params)` or `Name.method(params)` (optionally after `await`), or
`NAME = value`. Written parameters are compared with `inspect.signature`:
names, kinds and order, and each default (`=...` says only that there is
one); a trailing `, ...` lists the first parameters only. A written value is
compared with the name's own.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

import sglang_envelope
from tests.test_api import PUBLIC_MODULES
from tests.test_contract_doc import marked_rows

API = Path(__file__).resolve().parent.parent / "docs" / "api.md"
MARKER = re.compile(r"<!-- (names:([\w.]+)(?::\w+)?):start -->")
SPAN = re.compile(r"`([^`]+)`")
FENCED = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
ENTRY = re.compile(
    r"(?:await )?(?P<head>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)"
    r"(?:\((?P<params>.*)\)| = (?P<value>.+))?",
    re.DOTALL,
)


def listed() -> dict[str, list[str]]:
    """Each namespace's entries, in order: the code spans of its tables' first column."""
    found: dict[str, list[str]] = {}
    for marker, module in MARKER.findall(API.read_text(encoding="utf-8")):
        for row in marked_rows(API, marker):
            found.setdefault(module, []).extend(SPAN.findall(row[0]))
    return found


def public_names() -> dict[str, Any]:
    """Every public name, from its one namespace, and `msgspec`: what a default may name."""
    names: dict[str, Any] = {"msgspec": msgspec}
    for module in map(importlib.import_module, PUBLIC_MODULES):
        names.update({name: getattr(module, name) for name in module.__all__})
    return names


def resolve(module: str, head: str) -> tuple[Any, Any]:
    """The object `head` names in `module`, and the class it was found on (None for a name)."""
    obj: Any = importlib.import_module(module)
    owner = None
    for part in head.split("."):
        owner, obj = obj, getattr(obj, part)
    return obj, owner if inspect.isclass(owner) else None


Written = tuple[str, inspect._ParameterKind, ast.expr | None]


def written_parameters(params: str) -> tuple[list[Written], bool]:
    """The parameters a signature spells, and whether it lists only the first ones."""
    partial = params == "..." or params.endswith(", ...")
    params = "" if params == "..." else params.removesuffix(", ...")
    function = ast.parse(f"def f({params}): pass").body[0]
    assert isinstance(function, ast.FunctionDef)
    arguments = function.args
    kind = inspect.Parameter
    positional: list[tuple[ast.arg, inspect._ParameterKind]]
    positional = [(a, kind.POSITIONAL_ONLY) for a in arguments.posonlyargs]
    positional += [(a, kind.POSITIONAL_OR_KEYWORD) for a in arguments.args]
    defaults = [None] * (len(positional) - len(arguments.defaults)) + arguments.defaults
    out: list[Written] = [(a.arg, k, d) for (a, k), d in zip(positional, defaults, strict=True)]
    if arguments.vararg:
        out.append((arguments.vararg.arg, kind.VAR_POSITIONAL, None))
    out += [
        (a.arg, kind.KEYWORD_ONLY, d)
        for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
    ]
    if arguments.kwarg:
        out.append((arguments.kwarg.arg, kind.VAR_KEYWORD, None))
    return out, partial


def _default(value: Any) -> Any:
    """A parameter's default as a value: a msgspec field's default factory, called."""
    factory = getattr(value, "factory", None)
    return factory() if type(value).__name__ == "Factory" and callable(factory) else value


def mismatches(module: str, entry: str) -> list[str]:
    """How `entry`, written in `module`'s list, differs from the code (empty: it does not)."""
    match = ENTRY.fullmatch(entry)
    if match is None:
        return [f"{entry!r} is not an entry"]
    obj, owner = resolve(module, match["head"])
    names = public_names()
    if match["value"] is not None:
        value = eval(match["value"], names)
        return [] if value == obj else [f"{match['head']} is {obj!r}, not {value!r}"]
    if match["params"] is None:
        return []
    real = list(inspect.signature(obj).parameters.values())
    attribute = match["head"].rsplit(".", 1)[-1]
    static = inspect.getattr_static(owner, attribute) if owner is not None else None
    if inspect.isfunction(static):  # a method read off its class: `self` is not written
        real = real[1:]
    written, partial = written_parameters(match["params"])
    if partial:
        real = real[: len(written)]
    shape = [(p.name, p.kind) for p in real]
    if [(name, kind) for name, kind, _ in written] != shape:
        return [f"{match['head']}: written {match['params']!r}, the code has {shape}"]
    problems = []
    for (name, _, node), parameter in zip(written, real, strict=True):
        has_default = parameter.default is not inspect.Parameter.empty
        if (node is not None) != has_default:
            problems.append(f"{match['head']}: {name}'s default is written wrong")
        elif node is not None and not (isinstance(node, ast.Constant) and node.value is ...):
            value = eval(compile(ast.Expression(node), "api.md", "eval"), names)
            if value != _default(parameter.default):
                problems.append(f"{match['head']}: {name}={parameter.default!r} in the code")
    return problems


def test_every_public_module_has_its_list() -> None:
    assert set(listed()) == set(PUBLIC_MODULES)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_the_list_is_the_namespace_s_all(module: str) -> None:
    entries = listed()[module]
    named = set()
    for entry in entries:
        match = ENTRY.fullmatch(entry)
        assert match is not None, f"{entry!r} in {module}'s list is not an entry"
        named.add(match["head"].split(".")[0])
    public = set(importlib.import_module(module).__all__)
    assert {"missing": public - named, "not public": named - public} == {
        "missing": set(),
        "not public": set(),
    }


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_function_has_its_signature_written(module: str) -> None:
    namespace = importlib.import_module(module)
    functions = {name for name in namespace.__all__ if inspect.isfunction(getattr(namespace, name))}
    written = {
        match["head"]
        for entry in listed()[module]
        if (match := ENTRY.fullmatch(entry)) and match["params"] is not None
    }
    assert functions - written == set()


@pytest.mark.parametrize(
    ("module", "entry"),
    [(module, entry) for module, entries in listed().items() for entry in entries],
)
def test_a_written_signature_or_value_is_the_code_s(module: str, entry: str) -> None:
    assert mismatches(module, entry) == []


def test_start_here_names_five_top_level_names_with_their_signatures() -> None:
    rows = marked_rows(API, "start-here")
    entries = [SPAN.findall(row[0]) for row in rows]
    assert [len(spans) for spans in entries] == [1] * 5
    for (entry,) in entries:
        match = ENTRY.fullmatch(entry)
        assert match is not None and match["head"] in sglang_envelope.__all__, entry
        assert mismatches("sglang_envelope", entry) == []


def test_every_dotted_name_resolves() -> None:
    prose = FENCED.sub("", API.read_text(encoding="utf-8"))
    spans = {span for line in prose.splitlines() for span in SPAN.findall(line)}
    dotted = {span for span in spans if re.fullmatch(r"sglang_envelope(\.\w+)+", span)}
    assert "sglang_envelope.types.RejectionCode" in dotted  # the pattern finds them
    for span in sorted(dotted):
        parts = span.split(".")
        # The longest importable module, then attributes.
        for cut in range(len(parts), 0, -1):
            try:
                obj: Any = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for part in parts[cut:]:
                assert hasattr(obj, part), f"api.md names {span}, which does not exist"
                obj = getattr(obj, part)
            break


@pytest.mark.parametrize(
    ("entry", "wrong"),
    [
        ("plan_abort(engine_request, *, first_token_seen, policy=AbortPolicy())", "the code has"),
        ("plan_abort(engine_request, first_token_seen, policy=AbortPolicy(), rid=None)", "has"),
        ("plan_abort(engine_request, *, first_token_seen, policy=None, rid=None)", "policy="),
        ("plan_abort(engine_request, *, first_token_seen=False, policy=..., rid=None)", "default"),
        ("Service.generate(body, *, disconnected=None, routing=None)", "the code has"),
        ("SSE_DONE = b'data: [DONE]'", "not"),
    ],
)
def test_a_wrong_signature_or_value_is_found(entry: str, wrong: str) -> None:
    module = "sglang_envelope.stream" if entry.startswith("SSE") else "sglang_envelope"
    problems = mismatches(module, entry)
    assert len(problems) == 1 and wrong in problems[0]


def test_right_signatures_pass() -> None:
    assert mismatches("sglang_envelope", "Service.generate(body, *, disconnected=None, ...)") == []
    assert mismatches("sglang_envelope.rollout", "read_loads(body, *, max_bytes=1048576)") == []
    assert (
        mismatches(
            "sglang_envelope",
            "Deployment.from_server_info(server_info, *, model_config=None, vocab_size=None)",
        )
        == []
    )
