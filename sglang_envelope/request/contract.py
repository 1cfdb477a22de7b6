"""One compiled contract per `Target`: the rule table made into one function.

`contract_for(target)` picks the rules of `rules.RULES` that hold for the
target (its release's fields and `sampling_params` keys, its gate, the SGLang
checks its release makes, in its words), adds a presence rule for each field
the release lacks, and compiles them with the bounds of the fields held as JSON
bytes into one Python function (`Contract.check`): a rule's check is called only
when a field it reads is set and its shortcut (`rules.Holds`) cannot tell.
Cached per target, as targets are hashable. The source is registered in
`linecache` (`define`), so tracebacks, `inspect.getsource` and debuggers show it.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import linecache
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from msgspec import UNSET

from sglang_envelope.errors.exceptions import RequestRejected
from sglang_envelope.releases.target import (
    KNOWN_RELEASES,
    ReleaseTables,
    Target,
    first_release_with,
)
from sglang_envelope.request.fields import (
    FIELD_OWNERS,
    REQUEST_DEFAULTS,
    SAMPLING_DEFAULTS,
    TEXT_INPUT_FIELDS,
    RequestFields,
)
from sglang_envelope.request.limits import (
    REQUEST_RAW_FIELDS,
    SAMPLING_RAW_FIELDS,
    TEXT_RAW_FIELDS,
    raw_check,
)
from sglang_envelope.request.rules import (
    RULES,
    RULES_BY_CODE,
    TEXT_INPUT_RULES,
    Holds,
    Rule,
    refusal,
    reject,
)

__all__ = ["Contract", "RawCheck", "contract_for", "define", "shortcut_test"]


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


_Check = Callable[[Any], "dict[str, object] | None"]
#: (code, field, message, check, guards, holds): guards are the indices of the guarding
#: fields (none: the check always runs); holds is the rule's `holds`.
_Entry = tuple[str, "str | None", str, _Check, "tuple[int, ...]", "Holds | None"]


class _Checks(NamedTuple):
    """The checked rules of one scope for one target, in order, and their guards."""

    rules: tuple[_Entry, ...]
    guards: tuple[str, ...]  # the fields that guard them, each default a singleton


def _checks(rules: list[Rule], release: str, messages: Mapping[str, str]) -> _Checks:
    """`rules` compiled to run in order, in the words of `release` (`messages`: the
    words of the rules it words otherwise)."""
    guards = sorted({name for rule in rules for name in _names(rule.when)})
    entries = tuple(
        (
            rule.code,
            rule.field,
            messages.get(rule.code, rule.message).replace("{release}", release),
            rule.check,
            tuple(guards.index(name) for name in _names(rule.when)),
            rule.holds,
        )
        for rule in rules
        if rule.check is not None
    )
    return _Checks(entries, tuple(guards))


def _spelled(default: Any) -> str:
    """A guard's default as the compiled function names it: constants and a local read
    faster than module globals, on every request."""
    assert default is None or default is False or default is UNSET
    return "unset" if default is UNSET else repr(default)


def _raw_source(
    raw_checks: tuple[tuple[str, RawCheck], ...],
    var: str,
    tag: str,
    namespace: dict[str, Any],
) -> list[str]:
    """The lines that check one scope's fields held as JSON bytes (each default UNSET),
    at an indent of two levels."""
    lines: list[str] = []
    for k, (name, check) in enumerate(raw_checks):
        namespace[f"raw{tag}{k}"] = check
        assert name.isidentifier()
        lines.append(f"        if {var}.{name} is not unset:")
        lines.append(f"            raw{tag}{k}({var}.{name}, limits)")
    return lines


def _scope_source(
    checks: _Checks,
    defaults: Mapping[str, Any],
    var: str,
    tag: str,
    namespace: dict[str, Any],
) -> list[str]:
    """The lines that run one scope's rules on `var`, at an indent of two levels.

    A rule's check runs only when one of its guards is not
    its default (None, False or UNSET, compared by identity) or it has none, and
    its `holds`, if any, is false. The lines hold only field names, the defaults
    (`None`, `False`, or `unset`, a local bound to UNSET), the rules' `holds` and
    names made here; the checks and entries are bound in `namespace`.
    """
    lines: list[str] = []
    previous: tuple[int, ...] | None = None
    for k, entry in enumerate(checks.rules):
        namespace[f"e{tag}{k}"] = entry
        namespace[f"c{tag}{k}"] = entry[3]
        indices = entry[4]
        tests = []
        for i in indices:
            name = checks.guards[i]
            assert name.isidentifier()
            tests.append(f"{var}.{name} is not {_spelled(defaults[name])}")
        if indices != previous:  # rules with the same guards share one test
            lines.append(f"        if {' or '.join(tests) or 'True'}:")
            previous = indices
        holds = entry[5]
        indent = "            "
        if holds is not None:  # the check is called only when the shortcut cannot tell
            lines.append(f"{indent}if not ({shortcut_test(holds, var)}):")
            indent += "    "
        lines.append(f"{indent}f = c{tag}{k}({var})")
        lines.append(f"{indent}if f is not None:")
        lines.append(f"{indent}    raise _rejected(e{tag}{k}, f)")
    return lines


def _compile(
    request: _Checks, sampling: _Checks, label: str, text: bool
) -> Callable[[RequestFields, Any], None]:
    """A target's checks as one Python function (`label` in tracebacks), compiled once:
    the request's fields held as JSON bytes, then its `sampling_params`' (`raw_check`,
    bounded by the limits the function is given), then the request's rules, then those
    of its `sampling_params` when it has them."""
    namespace: dict[str, Any] = {"_rejected": refusal, "UNSET": UNSET}
    raw_request = _REQUEST_RAW_CHECKS
    if text:  # a target that takes text also takes the media fields
        raw_request += _TEXT_RAW_CHECKS
    lines = ["def check(v, limits):", "    unset = UNSET", "    if True:"]
    lines += _raw_source(raw_request, "v", "r", namespace)
    lines += [
        "    p = v.sampling_params",
        "    sampled = p is not None and p is not unset",
        "    if sampled:",
    ]
    lines += _raw_source(_SAMPLING_RAW_CHECKS, "p", "s", namespace) or ["        pass"]
    lines += ["    if True:"]
    lines += _scope_source(request, REQUEST_DEFAULTS, "v", "r", namespace)
    lines += ["    if sampled:"]
    lines += _scope_source(sampling, SAMPLING_DEFAULTS, "p", "s", namespace)
    return define("\n".join([*lines, "    return None"]), namespace, "check", label)


def _names(when: str | tuple[str, ...] | None) -> tuple[str, ...]:
    return () if when is None else (when,) if isinstance(when, str) else when


# --- one contract per target ------------------------------------------------------

#: normalize_batch_and_arguments()'s words in a release without output-flat.
_WITHOUT_OUTPUT_FLAT = {
    "b64_without_flat": (
        "return_flat_raw_top_logprobs_b64 requires return_flat_raw_top_logprobs."
    ),
}
#: The rule refusing a field a release lacks.
_ABSENT = "needs_newer_sglang"


class Contract(NamedTuple):
    """The rules of one `Target`, compiled once (see `contract_for`)."""

    target: Target
    release: str
    request: _Checks
    sampling: _Checks
    #: The target's `GenerateReqInput` fields and `sampling_params` keys.
    fields: frozenset[str]
    sampling_keys: frozenset[str]
    #: The rule and facts for a `sampling_params` key the target refuses.
    unknown_sampling: tuple[str, dict[str, object]]
    #: (name, default, rule, facts) of each client field the target lacks.
    absent: tuple[tuple[str, Any, str, dict[str, object]], ...]
    #: (key, rule, facts) of each typed `sampling_params` key the target refuses.
    absent_sampling: tuple[tuple[str, str, dict[str, object]], ...]
    #: Keys no typed field holds that pass through unchanged: all of them (None,
    #: `unknown_fields="pass"`), or those the installed SGLang has.
    passes: tuple[frozenset[str] | None, frozenset[str] | None]
    splits: bool  # whether any key passes
    #: Whether the target takes `text` and the media fields (`Target.input == "text"`).
    text_input: bool
    #: `check(request, limits)` raises `RequestRejected` for the first field held as
    #: JSON bytes past `limits` (a `limits.Limits`), then for the first rule the
    #: request breaks.
    check: Callable[[RequestFields, Any], None]

    def refuse_unknown(self, path: str, key: str) -> RequestRejected:
        """The refusal of `key`, which no typed field holds at `path` ("": the top
        level), in the target's words (a "did you mean" hint bounded by its size)."""
        if path == "sampling_params":
            code, facts = self.unknown_sampling
            return reject(code, key=key, **facts)
        if path:
            return reject("unknown_nested_field", key=key, path=path)
        owner = FIELD_OWNERS.get(key)
        if owner is not None:
            return reject(owner, key=key)
        if key in self.sampling_keys and key not in self.fields:
            hint = f"; did you mean `sampling_params.{key}`?"
        else:
            near = _close_field(key, self.target.tables.generate_req_input_fields)
            hint = f"; did you mean `{near}`?" if near else ""
        return reject("unknown_field", key=key, hint=hint, release=self.release)


def _close_field(key: str, fields: tuple[str, ...]) -> str | None:
    """The known field nearest `key`, as `difflib.get_close_matches` finds it, or None.

    difflib indexes every character of `key`, so a long key would cost many times its
    size; at its cutoff of 0.6 a key longer than 7/3 of the longest field can match none
    (the ratio is at most 2 * len(field) / (len(key) + len(field))), so such a key is
    not read at all.
    """
    if 3 * len(key) > 7 * max(map(len, fields), default=0):
        return None
    near = difflib.get_close_matches(key, fields, n=1, cutoff=0.6)
    return near[0] if near else None


#: Checks a field held as JSON bytes (its value, the decode's limits);
#: raises `RequestRejected`.
RawCheck = Callable[[Any, Any], None]
#: The checks of the fields held as JSON bytes (each defaulting to UNSET): the request's,
#: then its `sampling_params`'.
_REQUEST_RAW_CHECKS = tuple((f.path, raw_check(f, "")) for f in REQUEST_RAW_FIELDS)
_SAMPLING_RAW_CHECKS = tuple(
    (f.path, raw_check(f, "sampling_params.")) for f in SAMPLING_RAW_FIELDS
)
_TEXT_FIELDS = frozenset(TEXT_INPUT_FIELDS)
_TEXT_RAW_CHECKS = tuple((f.path, raw_check(f, "")) for f in TEXT_RAW_FIELDS)


def _templates(tables: ReleaseTables) -> frozenset[str]:
    steps = (
        tables.tokenizer_manager_checks,
        tables.init_checks,
        tables.normalize_checks,
        tables.verify_checks,
    )
    return frozenset(check.message for step in steps for check in step)


def _release(target: Target) -> str:
    """The release the target's messages name: the installed SGLang's version, if read."""
    installed = target.installed_fields
    return target.sglang if installed is None else installed.version


def _sampling_refusal(
    target: Target, key: str, unknown: tuple[str, dict[str, object]]
) -> tuple[str, dict[str, object]] | None:
    """Why the target refuses typed `sampling_params.key` (`unknown`: how its gate
    refuses a key it does not list), or None when it takes it."""
    gate = target.gate
    if gate is not None and key not in gate.sampling_keys:
        code, facts = unknown
        return code, {"key": key, **facts}
    if key in target.tables.sampling_params_fields:
        return None
    first = first_release_with(key, sampling=True)
    if first is not None and _newer(first, target.sglang):
        path = f"sampling_params.{key}"
        release = _release(target)
        return _ABSENT, {"key": path, "path": path, "first": first, "release": release}
    if first is not None or gate is not None:  # a key the gate lists, as tested above
        return "unsupported_sampling_param", {"key": key}
    return "unexpected_sampling_param", {"key": key}


def _newer(first: str, release: str) -> bool:
    return KNOWN_RELEASES.index(first) > KNOWN_RELEASES.index(release)


@functools.lru_cache(maxsize=64)
def contract_for(target: Target) -> Contract:
    """The compiled rules of `target`: cached, as targets are hashable."""
    tables = target.tables
    release = _release(target)
    templates = _templates(tables)
    scoped: dict[bool, list[Rule]] = {False: [], True: []}
    text = target.input == "text"
    for rule in RULES:
        if rule.check is None or (rule.code in TEXT_INPUT_RULES and not text):
            continue
        if rule.template is None or rule.template in templates:
            # A rule on `sampling_params` checks them, not the request.
            scoped[(rule.field or "").startswith("sampling_params")].append(rule)
    gate = target.gate
    if gate is not None:
        sampling_keys = frozenset(gate.sampling_keys) & frozenset(
            tables.sampling_params_fields
        )
        expected = ", ".join(f"`{name}`" for name in gate.sampling_keys)
        unknown: tuple[str, dict[str, object]] = (
            "unknown_sampling_param",
            {"expected": f"expected one of {expected}"},
        )
    else:
        sampling_keys = frozenset(tables.sampling_params_fields)
        unknown = ("unexpected_sampling_param", {})
    fields = frozenset(tables.generate_req_input_fields)
    absent = _absent_fields(target, fields, release, text)
    absent_sampling: list[tuple[str, str, dict[str, object]]] = []
    for key in SAMPLING_DEFAULTS:
        refused = _sampling_refusal(target, key, unknown)
        if refused is not None:
            absent_sampling.append((key, *refused))
    messages = {} if tables.features.output_flat else _WITHOUT_OUTPUT_FLAT
    presence = [
        _presence(name, default, code, facts) for name, default, code, facts in absent
    ]
    in_sampling = [
        _presence(key, UNSET, code, facts) for key, code, facts in absent_sampling
    ]
    request = _checks(presence + scoped[False], release, messages)
    sampling = _checks(in_sampling + scoped[True], release, messages)
    passes = _passes(target)
    return Contract(
        target=target,
        release=release,
        request=request,
        sampling=sampling,
        fields=fields,
        sampling_keys=sampling_keys,
        unknown_sampling=unknown,
        absent=tuple(absent),
        absent_sampling=tuple(absent_sampling),
        passes=passes,
        splits=passes != (frozenset(), frozenset()),
        text_input=text,
        check=_compile(
            request, sampling, f"rules check {release} {target.transport}", text
        ),
    )


def _absent_fields(
    target: Target, fields: frozenset[str], release: str, text: bool
) -> list[tuple[str, Any, str, dict[str, object]]]:
    """(name, default, rule, facts) of each client field the target lacks.

    The text and media fields count only on a target that takes text: a token-input
    one refuses them anyway.
    """
    absent: list[tuple[str, Any, str, dict[str, object]]] = []
    for name, default in REQUEST_DEFAULTS.items():
        if (
            name not in fields
            and name != "input_ids"
            and (text or name not in _TEXT_FIELDS)
        ):
            first = first_release_with(name)
            facts: dict[str, object] = {"key": name, "path": name, "release": release}
            if first is not None and _newer(first, target.sglang):
                absent.append((name, default, _ABSENT, {**facts, "first": first}))
            else:  # an installed SGLang without it
                absent.append((name, default, "unknown_field", {**facts, "hint": ""}))
    return absent


def _presence(name: str, default: Any, code: str, facts: dict[str, object]) -> Rule:
    """The rule refusing field `name` (set to other than `default`) with rule `code`."""

    def check(value: Any) -> dict[str, object] | None:
        return facts if getattr(value, name) != default else None

    singleton = default is None or default is False or default is UNSET
    return RULES_BY_CODE[code]._replace(check=check, when=name if singleton else None)


def _passes(target: Target) -> tuple[frozenset[str] | None, frozenset[str] | None]:
    if target.unknown_fields == "pass":
        return None, None
    installed = target.installed_fields
    if installed is None:
        return frozenset(), frozenset()
    top = frozenset(installed.generate_req_input_fields).difference(
        REQUEST_DEFAULTS, FIELD_OWNERS
    )
    return top, frozenset(installed.sampling_params_fields).difference(SAMPLING_DEFAULTS)
