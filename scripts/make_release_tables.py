"""Write SGLang's request contract per release, read from each release's own code.

For each release in RELEASES, runs `oracle_release_contract.py` with the
oracle's interpreter and that release's code first on PYTHONPATH (one
subprocess a release), and writes three files from the answers:

- tests/fixtures/release_tables.json: the snapshot, every release's contract
  as the oracle read it;
- sglang_envelope/releases/tables.py: the same data as a private module,
  marked generated (`render_module(snapshot)`);
- docs/releases.md: which release has what, and each release's tables
  (`render_doc(snapshot)`).

`--from-snapshot` skips the oracle and renders the module and the doc from the
stored snapshot; tests/test_release_tables.py checks that both files are
exactly what the renderers make of it. Run from the repository root:

    /tmp/dev/bin/python scripts/make_release_tables.py [--oracle-python PATH] [--from-snapshot]

The oracle's interpreter defaults to SGLANG_ORACLE_PYTHON, else
/tmp/sglang-oracle/bin/python; release code is looked up in
SGLANG_ORACLE_RELEASES (default /tmp/sglang-oracle/releases), and the newest
release is the one installed in the oracle itself.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from oracle_run import run_in_release

ROOT = Path(__file__).resolve().parent.parent
RUNNER = Path(__file__).resolve().parent / "oracle_release_contract.py"
SNAPSHOT = ROOT / "tests" / "fixtures" / "release_tables.json"
MODULE = ROOT / "sglang_envelope" / "releases" / "tables.py"
DOC = ROOT / "docs" / "releases.md"
DEFAULT_ORACLE_PYTHON = "/tmp/sglang-oracle/bin/python"
DEFAULT_RELEASES_DIR = "/tmp/sglang-oracle/releases"

#: The releases whose contract is generated, oldest first.
RELEASES = ("0.5.21", "0.5.22", "0.5.23")
WIDTH = 99  # the longest line the module may have (ruff's limit is 100)

Snapshot = dict[str, Any]


def read_release(oracle_python: str, releases_dir: Path, version: str) -> dict[str, Any]:
    """One release's contract, from its own code run by the oracle."""
    stdout = run_in_release(oracle_python, releases_dir, version, [str(RUNNER)])
    contract: dict[str, Any] = json.loads(stdout)
    if contract["sglang"] != version:
        raise SystemExit(f"asked for SGLang {version}, the oracle ran {contract['sglang']}")
    return contract


def build_snapshot(oracle_python: str, releases_dir: Path) -> Snapshot:
    return {
        "generator": "scripts/make_release_tables.py",
        "oracle_runner": "scripts/oracle_release_contract.py",
        "releases": {v: read_release(oracle_python, releases_dir, v) for v in RELEASES},
    }


# --- the module -------------------------------------------------------------------------


def _string(text: str, indent: int) -> list[str]:
    """A string literal, split into implicitly joined pieces that fit the width."""
    whole = json.dumps(text)
    if indent + len(whole) + 1 <= WIDTH:
        return [whole]
    room = WIDTH - indent - 4
    pieces: list[str] = []
    rest = text
    while rest:
        cut = len(rest)
        while len(json.dumps(rest[:cut])) > room:
            cut = rest.rfind(" ", 0, cut - 1) + 1 or cut - 1
        pieces.append(json.dumps(rest[:cut]))
        rest = rest[cut:]
    return ["(", *("    " + piece for piece in pieces), ")"]


def _literal(value: Any, indent: int) -> list[str]:
    """`value` as Python source lines (the first without indent), lists as tuples."""
    pad = " " * (indent + 4)
    if isinstance(value, dict):
        if not value:
            return ["{}"]
        lines = ["{"]
        for key, item in value.items():
            rendered = _literal(item, indent + 4)
            lines.append(f"{pad}{json.dumps(key)}: {rendered[0]}")
            lines.extend(rendered[1:])
            lines[-1] += ","
        return [*lines, " " * indent + "}"]
    if isinstance(value, list):
        if not value:
            return ["()"]
        if all(isinstance(item, (str, int)) and not isinstance(item, bool) for item in value):
            lines = ["("]
            row = pad
            for item in value:
                text = f"{json.dumps(item)},"
                if len(row) + len(text) + 1 > WIDTH and row.strip():
                    lines.append(row.rstrip())
                    row = pad
                row += text + " "
            lines.append(row.rstrip())
            return [*lines, " " * indent + ")"]
        lines = ["("]
        for item in value:
            rendered = _literal(item, indent + 4)
            lines.append(pad + rendered[0])
            lines.extend(rendered[1:])
            lines[-1] += ","
        return [*lines, " " * indent + ")"]
    if isinstance(value, str):
        pieces = _string(value, indent + 40)
        if len(pieces) == 1:
            return pieces
        return [pieces[0], *(pad + piece.strip() for piece in pieces[1:-1]), " " * indent + ")"]
    if value is None or isinstance(value, (bool, int)):
        return [repr(value)]
    raise TypeError(f"cannot render {type(value).__name__}")


MODULE_HEAD = '''"""SGLang's request contract per release, read from each release's own code.

GENERATED by scripts/make_release_tables.py (which runs
scripts/oracle_release_contract.py inside the SGLang oracle, once per release)
from tests/fixtures/release_tables.json. Do not edit: regenerate it. A test
holds this module to that snapshot, and the snapshot to the committed fixtures.

`TABLES[release]` holds, for one SGLang release:

- `generate_req_input_fields`: `GenerateReqInput`'s fields, in its order;
- `sampling_params_fields`: `SamplingParams`' arguments, in its order, and
  `sampling_params_internal_fields`, the fields it fills in itself;
- `gate`: the HTTP contract gate wired into `/generate` (None: no gate): the
  top-level fields it type-checks (`fields`; it ignores other keys when
  `unknown_field` is "ignored"), the `sampling_params` keys it accepts, and its
  message for any other key (`unknown_sampling_key`, `{expected}` being the
  accepted keys listed as `` `a`, `b` ``);
- `init_checks`, `normalize_checks`, `verify_checks`: the checks of
  `SamplingParams(**sampling_params)`, `.normalize(tokenizer)` and
  `.verify(vocab_size)`, in SGLang's order: the exception, its message as a
  `str.format` template, the condition as SGLang writes it, the fields it
  reads, the deployment inputs it needs (`needs`: `vocab_size`, `tokenizer`;
  empty when the request alone decides), and the function it is in (`via`);
- `tokenizer_manager_checks`: the tokenizer manager's checks that depend on the
  request alone, in its order, and `priority_range` (inclusive; None: any int);
- `limits`: SGLang's named limits that the checks' conditions use;
- `features`: what comes and goes between releases, each read from the code.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RELEASES", "TABLES"]

'''


def _release_name(version: str) -> str:
    return "_SGLANG_" + version.replace(".", "_")


def render_module(snapshot: Snapshot) -> str:
    """The source of sglang_envelope/releases/tables.py for `snapshot`.

    The oldest release is written in full; every later one as the release
    before it plus the entries that differ, so a reader sees what each release
    changed and nothing is written twice.
    """
    releases: dict[str, dict[str, Any]] = snapshot["releases"]
    names = ", ".join(json.dumps(v) for v in releases)
    parts: list[str] = []
    previous: str | None = None
    for version, table in releases.items():
        if previous is None:
            changed, base = table, ""
            comment = f"# SGLang {version}, in full.\n"
        else:
            before = releases[previous]
            changed = {k: v for k, v in table.items() if k not in before or before[k] != v}
            base = f"\n    **{_release_name(previous)},"
            comment = f"# SGLang {version}: {previous}'s tables, but for these entries.\n"
        missing = [k for k in releases[previous] if k not in table] if previous else []
        if missing:
            raise ValueError(f"{version} lacks {missing}, which {previous} has")
        body = _literal(changed, 0)
        opening = body[0] + base
        parts.append(
            comment
            + f"{_release_name(version)}: dict[str, Any] = {opening}\n"
            + "".join(line + "\n" for line in body[1:])
            + "\n"
        )
        previous = version
    by_version = "".join(f"    {json.dumps(v)}: {_release_name(v)},\n" for v in releases)
    return (
        MODULE_HEAD
        + "#: The SGLang releases with tables, oldest first.\n"
        + f"RELEASES: tuple[str, ...] = ({names})\n\n"
        + "# fmt: off\n"
        + "".join(parts)
        + "# fmt: on\n\n"
        + f"TABLES: dict[str, dict[str, Any]] = {{\n{by_version}}}\n"
    )


# --- the doc ----------------------------------------------------------------------------


def _has(flag: bool) -> str:
    return "yes" if flag else "—"


def _row(label: str, cells: Sequence[str]) -> str:
    return f"| {label} | " + " | ".join(cells) + " |"


def _gate(table: dict[str, Any]) -> dict[str, Any]:
    return table["gate"] or {"fields": [], "sampling_keys": [], "watermark_keys": []}


def render_doc(snapshot: Snapshot) -> str:
    """The text of docs/releases.md for `snapshot`."""
    tables: dict[str, dict[str, Any]] = snapshot["releases"]
    versions = list(tables)
    head = ["| | " + " | ".join(f"SGLang {v}" for v in versions) + " |"]
    head.append("|---|" + "---|" * len(versions))
    rows = list(head)

    def count(label: str, key: str) -> None:
        rows.append(_row(label, [str(len(tables[v][key])) for v in versions]))

    def presence(label: str, get: Callable[[dict[str, Any]], list[str]], gated: bool) -> None:
        """A row for each name some releases have and others lack."""
        among = [v for v in versions if tables[v]["gate"] or not gated]
        union = list(dict.fromkeys(name for v in among for name in get(tables[v])))
        for name in union:
            if all(name in get(tables[v]) for v in among):
                continue
            cells = [_has(name in get(tables[v])) if v in among else "no gate" for v in versions]
            rows.append(_row(f"{label} `{name}`", cells))

    for feature, label in FEATURE_NAMES.items():
        cells = []
        for v in versions:
            value = tables[v]["features"][feature]
            cells.append(_names(value) if isinstance(value, list) else _has(value))
        rows.append(_row(label, cells))
    count("`GenerateReqInput` fields", "generate_req_input_fields")
    presence("field", lambda t: t["generate_req_input_fields"], gated=False)
    count("`SamplingParams` arguments", "sampling_params_fields")
    presence("sampling argument", lambda t: t["sampling_params_fields"], gated=False)
    rows.append(
        _row(
            "gate: top-level fields type-checked",
            [str(len(_gate(tables[v])["fields"])) for v in versions],
        )
    )
    presence("gate types", lambda t: _gate(t)["fields"], gated=True)
    presence("gate accepts sampling key", lambda t: _gate(t)["sampling_keys"], gated=True)
    refused, passed = [], []
    for v in versions:
        gate, engine = tables[v]["gate"], tables[v]["sampling_params_fields"]
        keys = [] if gate is None else gate["sampling_keys"]
        refused.append(_names([k for k in engine if gate is not None and k not in keys]))
        passed.append(_names([k for k in keys if k not in engine]))
    rows.append(_row("sampling keys the engine takes, the gate refuses", refused))
    rows.append(_row("sampling keys the gate passes, the engine refuses", passed))
    ranges = []
    for v in versions:
        bounds = tables[v]["priority_range"]
        ranges.append("any int" if bounds is None else f"[{bounds[0]}, {bounds[1]}]")
    rows.append(_row("`priority` range (tokenizer manager)", ranges))
    for step in ("init_checks", "normalize_checks", "verify_checks", "tokenizer_manager_checks"):
        union = list(dict.fromkeys(c["message"] for v in versions for c in tables[v][step]))
        same = all([c["message"] for c in tables[v][step]] == union for v in versions)
        if same:
            rows.append(_row(f"{STEP_NAMES[step]} checks", [f"same {len(union)}"] * len(versions)))
            continue
        for message in union:
            have = [any(c["message"] == message for c in tables[v][step]) for v in versions]
            rows.append(_row(f"{STEP_NAMES[step]}: {message}", [_has(h) for h in have]))
    lines = [
        "# SGLang releases",
        "",
        "<!-- GENERATED by scripts/make_release_tables.py from "
        "tests/fixtures/release_tables.json; do not edit. -->",
        "",
        "What each SGLang release's own code says about a native `/generate`",
        "request, read by `scripts/oracle_release_contract.py` in the SGLang oracle.",
        "The library holds the same data in `sglang_envelope/releases/tables.py`.",
        "",
        "## Which release has what",
        "",
        *rows,
        "",
    ]
    for v in versions:
        lines += _release_section(v, tables[v])
    return "\n".join(lines).rstrip("\n") + "\n"


FEATURE_NAMES = {
    "output_flat": "output-flat (`return_flat_raw_output_top_logprobs`)",
    "flat_fields_builders": "tokenizer manager's flat-field builders",
    "watermark_top_level": "`watermark` at the top level",
    "watermark_in_sampling_params": "`watermark` in `sampling_params`",
    "mm_processor_kwargs": "`mm_processor_kwargs`",
    "gate": "HTTP contract gate wired into `/generate`",
    "priority_range_checked": "`priority` range checked",
}

STEP_NAMES = {
    "init_checks": "`SamplingParams(**sampling_params)`",
    "normalize_checks": "`SamplingParams.normalize()`",
    "verify_checks": "`SamplingParams.verify()`",
    "tokenizer_manager_checks": "tokenizer manager",
}


def _names(names: Sequence[str]) -> str:
    return ", ".join(f"`{name}`" for name in names) if names else "—"


def _release_section(version: str, table: dict[str, Any]) -> list[str]:
    gate = table["gate"]
    lines = [
        f"## SGLang {version}",
        "",
        f"- `GenerateReqInput` fields ({len(table['generate_req_input_fields'])}): "
        + _names(table["generate_req_input_fields"]),
        f"- `SamplingParams` arguments ({len(table['sampling_params_fields'])}): "
        + _names(table["sampling_params_fields"])
        + "; internal, filled in by SGLang: "
        + _names(table["sampling_params_internal_fields"]),
    ]
    if gate is None:
        lines.append("- HTTP contract gate: none wired into `/generate`")
    else:
        lines += [
            f"- HTTP contract gate: type-checks {len(gate['fields'])} top-level fields "
            f"({_names(gate['fields'])}); other top-level keys are {gate['unknown_field']}; "
            f"accepts `sampling_params` keys {_names(gate['sampling_keys'])}; "
            f"refuses any other with: {gate['unknown_sampling_key']}",
        ]
    lines += ["", "| step | message | fields | needs |", "|---|---|---|---|"]
    for step in ("init_checks", "normalize_checks", "verify_checks", "tokenizer_manager_checks"):
        for check in table[step]:
            message = check["message"].replace("|", "\\|")
            lines.append(
                f"| {STEP_NAMES[step]} | {message} | {_names(check['fields'])} | "
                f"{', '.join(check['needs']) or 'the request'} |"
            )
    return [*lines, ""]


def write_outputs(snapshot: Snapshot) -> None:
    MODULE.write_text(render_module(snapshot), encoding="utf-8")
    DOC.write_text(render_doc(snapshot), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--oracle-python",
        default=os.environ.get("SGLANG_ORACLE_PYTHON", DEFAULT_ORACLE_PYTHON),
        help="the oracle environment's interpreter",
    )
    parser.add_argument(
        "--releases-dir",
        type=Path,
        default=Path(os.environ.get("SGLANG_ORACLE_RELEASES", DEFAULT_RELEASES_DIR)),
    )
    parser.add_argument(
        "--from-snapshot", action="store_true", help="render from the stored snapshot only"
    )
    args = parser.parse_args(argv)
    if args.from_snapshot:
        snapshot = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    else:
        snapshot = build_snapshot(args.oracle_python, args.releases_dir)
        SNAPSHOT.write_text(json.dumps(snapshot, indent=1) + "\n", encoding="utf-8")
    write_outputs(snapshot)
    print(f"wrote {MODULE.relative_to(ROOT)} and {DOC.relative_to(ROOT)} for {', '.join(RELEASES)}")


if __name__ == "__main__":
    main()
