"""Every ```python block of README.md and docs/*.md runs as written.

The blocks of one file run in order in one namespace, as a reader would type
them into one session. A block may use top-level ``await`` (the docs show
asyncio code that way): it is compiled with ``PyCF_ALLOW_TOP_LEVEL_AWAIT`` and
run on one event loop per file.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)

#: Pages whose examples are known not to run yet, with the reason.
NOT_YET: dict[str, str] = {}


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """Each ```python block of `path`: the line it starts on, and its code."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, match.start(1)) + 1, match[1]) for match in BLOCK.finditer(text)]


def run_blocks(path: Path) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"docs:{path.name}"}
    loop = asyncio.new_event_loop()
    try:
        for line, code in python_blocks(path):
            # Line numbers in tracebacks are the page's own.
            source = "\n" * (line - 1) + code
            compiled = compile(source, str(path), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(compiled, namespace)
            if inspect.iscoroutine(result):
                loop.run_until_complete(result)
    finally:
        loop.close()
    return namespace


def _param(path: Path) -> Any:
    name = path.relative_to(ROOT).as_posix()
    marks = []
    if name in NOT_YET:
        marks.append(pytest.mark.xfail(reason=NOT_YET[name], strict=False))
    return pytest.param(path, id=name, marks=marks)


@pytest.mark.parametrize("path", [_param(path) for path in DOCS])
def test_every_python_block_runs(path: Path) -> None:
    run_blocks(path)


def test_the_pages_with_python_blocks_are_found() -> None:
    """The collector sees the blocks (a broken pattern would make every page pass)."""
    found = {path.relative_to(ROOT).as_posix() for path in DOCS if python_blocks(path)}
    assert {"README.md", "docs/cancellation.md", "docs/flat-logprobs.md"} <= found


def test_top_level_await_runs_on_one_loop_per_page(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nimport asyncio\nevent = asyncio.Event()\nseen = []\n```\n"
        "text\n"
        "```python\nasyncio.get_running_loop().call_soon(event.set)\n"
        "await event.wait()\nseen.append(1)\n```\n",
        encoding="utf-8",
    )
    assert run_blocks(page)["seen"] == [1]


def test_a_failing_block_fails_with_the_page_s_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```python\nx = 1\nundefined_name\n```\n", encoding="utf-8")
    with pytest.raises(NameError) as raised:
        run_blocks(page)
    assert raised.traceback[-1].lineno + 1 == 5  # pytest's line numbers count from 0
