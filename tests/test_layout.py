"""The package's layout: no import cycles, folders that import only downward, and sizes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sglang_envelope"

#: Which folders each folder may import from (besides itself). "" is the top level: the
#: package itself and its namespaces (`rollout.py`, `stream.py`, ...), the public faces over
#: the folders; a namespace imports no other namespace, nor the package.
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
    "": {"errors", "releases", "request", "response", "cancel", "serve"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p) for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path) -> set[str]:
    """Every library module `path` imports, wherever the import sits (TYPE_CHECKING too).

    `from sglang_envelope import rollout` imports the module `sglang_envelope.rollout`;
    `from sglang_envelope import Service` imports the package itself.
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[0] == "sglang_envelope"}


GRAPH = {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def folder_of(name: str) -> str:
    """The folder a module is in; "" for the package itself and its top-level modules."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else ""


#: The namespaces: the package's top-level modules but its entry point.
NAMESPACES = sorted(
    name
    for name in GRAPH
    if name.count(".") == 1 and folder_of(name) == "" and name != "sglang_envelope.__main__"
)


def test_the_graph_is_read() -> None:
    assert "sglang_envelope.request.engine" in GRAPH
    assert "sglang_envelope.request.types" in GRAPH["sglang_envelope.request.engine"]
    assert {"sglang_envelope.rollout", "sglang_envelope.errors.exceptions"} <= GRAPH[
        "sglang_envelope"
    ]
    assert "sglang_envelope" in GRAPH["sglang_envelope.cli.main"]
    assert {"sglang_envelope.rollout", "sglang_envelope.stream"} <= set(NAMESPACES)


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


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if n.count(".") == 2) + NAMESPACES)
def test_folders_import_only_downward(name: str) -> None:
    folder = folder_of(name)
    for target in GRAPH[name]:
        other = folder_of(target)
        same = other == folder != ""
        assert same or other in ALLOWED[folder], f"{name} imports {target}"


@pytest.mark.parametrize("name", NAMESPACES)
def test_a_namespace_is_a_thin_public_face(name: str) -> None:
    """A docstring, imports from the folders, and `__all__`: exactly the names it imports."""
    path = PACKAGE / f"{name.split('.')[1]}.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert ast.get_docstring(tree)
    imported: list[str] = []
    listed: list[str] = []
    for node in tree.body[1:]:
        if isinstance(node, ast.ImportFrom):
            imported += [alias.asname or alias.name for alias in node.names]
        else:
            assert isinstance(node, ast.Assign), f"{name}: {ast.dump(node)[:60]}"
            assert [ast.unparse(t) for t in node.targets] == ["__all__"]
            listed = ast.literal_eval(node.value)
    assert sorted(imported) == sorted(listed), name


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


def test_modules_stay_under_600_lines_and_functions_under_60() -> None:
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
