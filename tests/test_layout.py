"""The package's layout: no import cycles, folders that import only downward, and sizes."""

from __future__ import annotations

import ast
import io
import re
import tokenize
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
    "adapters": {"errors", "response", "cancel", "serve"},
    "cli": {"errors", "releases", "request", "response", "cancel", "testing", ""},
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
GENERATED = {"sglang_envelope.releases.tables"}


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


SOURCES = {
    module_name(path): path.read_text(encoding="utf-8") for path in sorted(PACKAGE.rglob("*.py"))
}


#: namedtuple's API, underscored so as not to clash with field names: not private.
NAMEDTUPLE_API = frozenset(("_replace", "_fields", "_asdict", "_make", "_field_defaults"))


def private_reaches(source: str) -> list[tuple[int, str]]:
    """(line, what) of each use of another object's private member in `source`: an
    attribute starting with one underscore read off anything but `self` or `cls`, and
    an underscored name imported from another module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            name = node.attr
            if not name.startswith("_") or name.startswith("__") or name in NAMEDTUPLE_API:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom):
            found.extend(
                (node.lineno, f"from {node.module} import {alias.name}")
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            )
    return found


def test_the_private_reach_count_finds_each_kind() -> None:
    source = (
        "from a import _hidden, shown\n"
        "class C:\n"
        "    def f(self, other):\n"
        "        return self._own, other._theirs, other.__dict__, other._replace()\n"
    )
    assert private_reaches(source) == [
        (1, "from a import _hidden"),
        (4, "other._theirs"),
    ]


def test_other_objects_private_members_are_reached_at_most_five_times() -> None:
    reaches = [
        f"{name}:{line}: {what}"
        for name, source in SOURCES.items()
        for line, what in private_reaches(source)
    ]
    assert len(reaches) <= 5, "\n".join(reaches)


#: Calls that make a table of a literal display (`frozenset((...))`).
TABLE_MAKERS = frozenset(("frozenset", "tuple", "set", "dict"))


def is_data_table(statement: ast.stmt) -> bool:
    """An assignment of a literal display (a tuple, list, set or dict) or of one made
    into a frozenset, tuple, set or dict: a table of data, laid out by hand."""
    if not isinstance(statement, (ast.Assign, ast.AnnAssign)):
        return False
    value = statement.value
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in TABLE_MAKERS
        and len(value.args) == 1
        and not value.keywords
    ):
        value = value.args[0]
    return isinstance(value, (ast.Tuple, ast.List, ast.Set, ast.Dict))


def fmt_skips(source: str) -> list[tuple[int, bool]]:
    """(line, on a data table) of each ``# fmt: skip`` in `source`."""
    ending: dict[int, ast.stmt] = {}
    for node in ast.walk(ast.parse(source)):  # outer statements first
        if isinstance(node, ast.stmt) and node.end_lineno is not None:
            ending[node.end_lineno] = node  # the innermost, which the comment is on
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    found = []
    for token in tokens:
        if token.type == tokenize.COMMENT and "fmt: skip" in token.string:
            statement = ending.get(token.start[0])  # None: a comment inside one
            found.append((token.start[0], statement is not None and is_data_table(statement)))
    return found


def test_fmt_skip_is_found_and_judged() -> None:
    source = (
        "RULES = frozenset(\n    ('a',  'b')\n)  # fmt: skip\n"
        "x  =  1  # fmt: skip\n"
        "if x:\n    TABLE = {1: 2}  # fmt: skip\n"
    )
    assert fmt_skips(source) == [(3, True), (4, False), (6, True)]


def test_fmt_skip_only_on_data_tables_and_at_most_five() -> None:
    skips = [
        (f"{name}:{line}", table)
        for name, source in SOURCES.items()
        for line, table in fmt_skips(source)
    ]
    assert [where for where, table in skips if not table] == []
    assert len(skips) <= 5, skips


def test_at_most_one_percent_of_lines_are_over_90_characters() -> None:
    lines = [
        line
        for name, source in SOURCES.items()
        if name not in GENERATED
        for line in source.splitlines()
    ]
    long = [line for line in lines if len(line) > 90]
    assert len(long) <= len(lines) // 100, f"{len(long)} of {len(lines)} lines"
