"""Run a script with the SGLang oracle's interpreter and one release's code.

The oracle (`scripts/oracle/setup.sh`) installs SGLang's newest release and
keeps the code of the others in `releases_dir/VERSION`; a release found there
goes first on PYTHONPATH, any other runs as installed. The scripts that read
SGLang's own code per release (`make_release_tables.py`,
`make_release_fixtures.py`, `check_installed_target.py`) share this.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path


def run_in_release(
    oracle_python: str,
    releases_dir: Path,
    version: str,
    argv: Sequence[str],
    *,
    stdin: str | None = None,
) -> str:
    """The standard output of `oracle_python argv...` run on SGLang `version`'s code;
    `SystemExit` with the tail of its standard error when it fails."""
    env = dict(os.environ)
    folder = releases_dir / version
    if folder.is_dir():
        env["PYTHONPATH"] = str(folder)
    else:
        env.pop("PYTHONPATH", None)  # the oracle's own installed release
    done = subprocess.run(
        [oracle_python, *argv], input=stdin, capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{Path(argv[0]).name} failed for {version}:\n{done.stderr[-4000:]}")
    return done.stdout
