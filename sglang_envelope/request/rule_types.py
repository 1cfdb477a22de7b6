"""The two types of the rule table: `Rule`, one rule of the contract, and `Holds`, its
shortcut as data. `rules.py` holds the table and re-exports both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, NamedTuple

__all__ = ["Holds", "Rule"]


class Holds(NamedTuple):
    """A rule's shortcut, as data: a test of the checked struct's `fields`.

    - `kind="false"`: the one field is false or None;
    - `kind="any_true"`: any of the fields is true;
    - `kind="nonempty"`: the one field is not the empty tuple;
    - `kind="in_range"`: the one field is None, or a number from `low` (excluded
      when `open_low`) to `high`;
    - `kind="at_least"`: the one field is None, or a number of at least `low`.

    `contract.shortcut_test` spells it in the compiled check.
    """

    kind: Literal["false", "any_true", "nonempty", "in_range", "at_least"]
    fields: tuple[str, ...]
    low: float = 0.0
    high: float = 0.0
    open_low: bool = False


class Rule(NamedTuple):
    """One rule of the contract.

    `check` returns None when the request keeps the rule, else the facts the
    message template is filled with. None as `check` means the typed decode
    enforces the rule. `template`, for one of SGLang's own checks, is its
    message in the release tables: the rule holds on a target whose tables
    carry it, in that release's words.
    """

    code: str
    field: str | None
    message: str
    #: Takes the request, or its `SamplingParams` for a rule on `sampling_params`.
    check: Callable[[Any], dict[str, object] | None] | None = None
    #: Fields the check reads that must differ from their defaults for the rule to
    #: be broken: while all hold their defaults, the check is skipped.
    when: str | tuple[str, ...] | None = None
    template: str | None = None
    #: A test of the checked struct that is true only when the rule holds: while it
    #: is, the check is not called (a shortcut; `check` decides). See `Holds`.
    holds: Holds | None = None
