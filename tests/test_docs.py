"""Every ```python block of README.md and docs/*.md runs as written.

The blocks of one file run in order in one namespace, as a reader would type
them into one session, and as plain Python: no top-level ``await`` (a page's
asyncio code runs under ``asyncio.run``, as a reader's script would).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)

#: Pages whose examples are known not to run yet, with the reason.
NOT_YET: dict[str, str] = {}
#: Blocks that are whole files (their first line names the file: ``# name.py``) importing
#: SGLang or Dynamo, run where those are installed: the live suite's test that runs each.
LIVE_FILES: dict[str, str] = {
    "dynamo_worker.py": "live/test_dynamo.py",
    "dynamo_pd_worker.py": "live/test_dynamo_pd.py",
    "in_process_worker.py": "live/test_in_process.py",
}
FILE_LINE = re.compile(r"# ([a-z_]+\.py)\n")


def file_name(code: str) -> str | None:
    """The file a block is (its first line ``# name.py``), or None for a plain block."""
    match = FILE_LINE.match(code)
    return None if match is None else match[1]


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """Each ```python block of `path`: the line it starts on, and its code."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, match.start(1)) + 1, match[1]) for match in BLOCK.finditer(text)]


def run_blocks(path: Path) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"docs:{path.name}"}
    for line, code in python_blocks(path):
        # Line numbers in tracebacks are the page's own.
        source = "\n" * (line - 1) + code
        compiled = compile(source, str(path), "exec")
        if file_name(code) not in LIVE_FILES:  # those files run in the live suite
            exec(compiled, namespace)
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


def test_a_top_level_await_fails(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```python\nimport asyncio\n\nawait asyncio.sleep(0)\n```\n", encoding="utf-8")
    with pytest.raises(SyntaxError, match="outside"):
        run_blocks(page)


def test_a_failing_block_fails_with_the_page_s_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```python\nx = 1\nundefined_name\n```\n", encoding="utf-8")
    with pytest.raises(NameError) as raised:
        run_blocks(page)
    assert raised.traceback[-1].lineno + 1 == 5  # pytest's line numbers count from 0


def test_every_file_block_is_run_by_the_live_suite() -> None:
    files = {file_name(code) for path in DOCS for _, code in python_blocks(path)}
    assert set(LIVE_FILES) <= files
    for name, test in LIVE_FILES.items():
        assert name in (ROOT / test).read_text(encoding="utf-8")
