"""Python source the library writes and runs, registered so that tracebacks show it.

`contract.py` compiles each target's rule table into one function, with each
rule's shortcut (`rules.Holds`, data) spelled by `shortcut_test`. Its source
is put in `linecache` under a filename of its own, so a traceback through it,
`inspect.getsource` and debuggers show the generated lines instead of nothing.
The filename names what the source is and a digest of it: the same source
always has the same name, and no counter is kept.
"""

from __future__ import annotations

import hashlib
import linecache
from collections.abc import Callable
from typing import Any

from sglang_envelope.request.rules import Holds

__all__ = ["define", "shortcut_test"]


def define(
    source: str, namespace: dict[str, Any], name: str, label: str
) -> Callable[..., Any]:
    """Run `source` in `namespace` and return the function it defines as `name`.

    The source is compiled under the filename `<sglang_envelope LABEL DIGEST>`,
    whose lines `linecache` holds (with no modification time, so
    `linecache.checkcache` keeps them).
    """
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]
    filename = f"<sglang_envelope {label} {digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)  # the library's own source
    function: Callable[..., Any] = namespace[name]
    return function


def shortcut_test(holds: Holds, var: str) -> str:
    """`holds` as a Python test of the struct named `var`: names and numbers only."""
    read = [f"{var}.{name}" for name in holds.fields]
    if holds.kind == "false":
        return f"not {read[0]}"
    if holds.kind == "any_true":
        return " or ".join(read)
    if holds.kind == "nonempty":
        return f"{read[0]} != ()"
    # Finite: their repr is Python.
    low = float(holds.low)
    high = float(holds.high)
    if holds.kind == "at_least":
        return f"{read[0]} is None or {read[0]} >= {low!r}"
    below = "<" if holds.open_low else "<="
    return f"{read[0]} is None or {low!r} {below} {read[0]} <= {high!r}"
