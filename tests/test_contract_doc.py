"""docs/contract.md shows the same tables the code enforces."""

from __future__ import annotations

import re
from pathlib import Path

from sglang_envelope.request.deployment import DEPLOYMENT_RULES
from sglang_envelope.request.engine import ROLE_PLANS
from sglang_envelope.request.fields import FIELD_OWNERS
from sglang_envelope.request.rules import (
    ENGINE_RULES,
    RULES,
    SEQUENCE_RULES,
    TARGET_RULES,
)

CONTRACT = Path(__file__).resolve().parent.parent / "docs" / "contract.md"


def marked_rows(page: Path, name: str) -> list[list[str]]:
    """The cells of each row of the table between `<!-- name:start -->` and `<!-- name:end -->`."""
    text = page.read_text(encoding="utf-8")
    marker = re.escape(name)
    match = re.search(rf"<!-- {marker}:start -->\n(.*?)<!-- {marker}:end -->", text, re.DOTALL)
    assert match is not None, f"{page.name} has no {name} table"
    rows = match[1].strip().splitlines()[2:]  # skip the header and the rule line
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def _table(name: str) -> list[list[str]]:
    return [[cell.strip("`") for cell in row] for row in marked_rows(CONTRACT, name)]


def test_rules_table_matches_the_code() -> None:
    documented = [(code, field, message) for code, field, message, _ in _table("rules")]
    in_code = [(r.code, r.field or "—", r.message) for r in RULES]
    assert documented == in_code


def test_rules_table_says_how_each_rule_is_enforced() -> None:
    enforced = [how for *_, how in _table("rules")]
    assert enforced == [_enforced_by(rule.code, rule.check) for rule in RULES]


def _enforced_by(code: str, check: object) -> str:
    if check is not None:
        return "checked"
    kinds = {"target": TARGET_RULES, "sequences": SEQUENCE_RULES, "engine": ENGINE_RULES}
    return next((kind for kind, codes in kinds.items() if code in codes), "decode")


def test_field_owner_table_matches_the_code() -> None:
    assert dict((field, rule) for field, rule in _table("owners")) == dict(FIELD_OWNERS)


def test_role_table_matches_the_code() -> None:
    documented = {role: (boot, stream, clamp) for role, boot, stream, clamp in _table("roles")}
    in_code = {
        role.value: (
            "yes" if plan.needs_bootstrap else "no",
            "always" if plan.always_streams else "by the server's mode",
            "yes" if plan.is_prefill else "no",
        )
        for role, plan in ROLE_PLANS.items()
    }
    assert documented == in_code


def targets_table() -> list[list[str]]:
    """The per-target table of docs/contract.md, as the compiled contracts have it."""
    from sglang_envelope import Target
    from sglang_envelope.contract import KNOWN_RELEASES
    from sglang_envelope.request.contract import contract_for

    templated = [rule.code for rule in RULES if rule.template is not None]
    rows = []
    for release in KNOWN_RELEASES:
        for transport in ("http", "engine"):
            target = Target(sglang=release, transport=transport)
            contract = contract_for(target)
            scopes = (contract.request, contract.sampling)
            made = {entry[0] for scope in scopes for entry in scope.rules}
            lacking = ", ".join(f"{name} ({code})" for name, _, code, _ in contract.absent)
            keys = ", ".join(f"{key} ({code})" for key, code, _ in contract.absent_sampling)
            skipped = ", ".join(code for code in templated if code not in made)
            rows.append(
                [
                    f"{release} {transport}",
                    "yes" if target.gate is not None else "no",
                    lacking or "—",
                    keys or "—",
                    str(sum(code in made for code in templated)),
                    skipped or "—",
                ]
            )
    return rows


def test_targets_table_matches_the_compiled_contracts() -> None:
    documented = [[cell.replace("`", "") for cell in row] for row in _table("targets")]
    assert documented == targets_table()


def test_deployment_rules_table_matches_the_code() -> None:
    documented = [tuple(row) for row in _table("deployment-rules")]
    assert documented == [(r.code, r.field, r.message) for r in DEPLOYMENT_RULES]
