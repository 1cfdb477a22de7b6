"""Check `Target.installed()` against the real SGLang of every release in the oracle.

For each release, runs this file again with the oracle's interpreter, that
release's code and this working tree on PYTHONPATH, and `--inside`: there,
`Target.installed()` reads the installed SGLang, and its field lists must be
exactly the generated tables of the same release. Prints one line a release;
exits non-zero on any difference. Run from the repository root:

    /tmp/dev/bin/python scripts/check_installed_target.py [--oracle-python PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from oracle_run import run_in_release

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ORACLE_PYTHON = "/tmp/sglang-oracle/bin/python"
DEFAULT_RELEASES_DIR = "/tmp/sglang-oracle/releases"


def inside() -> None:
    """Runs in the oracle: compare `Target.installed()` with the release's tables."""
    import warnings

    warnings.simplefilter("ignore")
    sys.path.insert(0, str(ROOT))
    from sglang_envelope.releases.target import Target

    target = Target.installed()
    fields = target.installed_fields
    assert fields is not None
    tables = Target(sglang=target.sglang).tables
    report = {
        "installed": fields.version,
        "release": target.sglang,
        "generate_req_input_fields": fields.generate_req_input_fields
        == tables.generate_req_input_fields,
        "sampling_params_fields": fields.sampling_params_fields == tables.sampling_params_fields,
    }
    print(json.dumps(report))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--oracle-python", default=os.environ.get("SGLANG_ORACLE_PYTHON", DEFAULT_ORACLE_PYTHON)
    )
    parser.add_argument(
        "--releases-dir",
        type=Path,
        default=Path(os.environ.get("SGLANG_ORACLE_RELEASES", DEFAULT_RELEASES_DIR)),
    )
    args = parser.parse_args(argv)
    if args.inside:
        inside()
        return
    sys.path.insert(0, str(ROOT))
    from sglang_envelope.releases.target import KNOWN_RELEASES

    failed = False
    for release in KNOWN_RELEASES:
        stdout = run_in_release(
            args.oracle_python, args.releases_dir, release, [__file__, "--inside"]
        )
        report = json.loads(stdout.splitlines()[-1])
        ok = report["release"] == release and report["generate_req_input_fields"]
        ok = ok and report["sampling_params_fields"]
        failed = failed or not ok
        print(f"{release}: {'ok' if ok else 'DIFFERS'} {report}")
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
