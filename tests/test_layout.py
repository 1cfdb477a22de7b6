"""The package's layout: no import cycles, folders that import only downward, and sizes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sglang_envelope"

#: Which folders each folder may import from (besides itself).
ALLOWED = {
    "errors": set(),
    "releases": {"errors"},
    "request": {"errors", "releases"},
    "response": {"errors", "request"},
    "cancel": {"errors", "releases", "request"},
    "serve": {"errors", "releases", "request", "response", "cancel"},
    "adapters": {"errors", "serve"},
    "cli": {"errors", "releases", "request", "response", "cancel", ""},
    "testing": {"errors", "releases", "request", "response", "cancel"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every library module `path` imports, wherever the import sits (TYPE_CHECKING too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("sglang_envelope.")}


GRAPH = {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_the_graph_is_read() -> None:
    assert "sglang_envelope.request.engine" in GRAPH
    assert "sglang_envelope.request.types" in GRAPH["sglang_envelope.request.engine"]


def test_no_import_cycles() -> None:
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            pytest.fail("import cycle: " + " -> ".join((*path[path.index(name) :], name)))
        if name in done or name not in GRAPH:
            return
        for target in sorted(GRAPH[name]):
            visit(target, (*path, name))
        done.add(name)

    for name in GRAPH:
        visit(name, ())


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if n.count(".") == 2))
def test_folders_import_only_downward(name: str) -> None:
    folder = name.split(".")[1]
    for target in GRAPH[name]:
        parts = target.split(".")
        other = parts[1] if len(parts) > 2 else ""
        assert other == folder or other in ALLOWED[folder], f"{name} imports {target}"


def test_the_package_map_lists_every_module() -> None:
    doc = (PACKAGE.parent / "docs" / "layout.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([a-z_/]+\.py)` \|", doc, re.MULTILINE))
    modules = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    }
    assert listed == modules


#: Generated tables, not hand-written code: the size limits do not apply to them.
GENERATED = {"sglang_envelope.releases.tables", "sglang_envelope.request.generated"}


def test_modules_have_at_most_600_lines_and_functions_at_most_60() -> None:
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if module_name(path) in GENERATED:
            continue
        source = path.read_text(encoding="utf-8")
        if len(source.splitlines()) > 600:
            too_long.append(f"{module_name(path)}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 60:
                    too_long.append(f"{module_name(path)}.{node.name}: {lines} lines")
    assert too_long == []
