"""Every rule, one module per concern. IDs are stable and never reused: BREW-Snnn security,
BREW-Innn platform invariants, BREW-Bnnn budgets; a blueprint's own start at 101 (penpot:
BREW-I101.., BREW-B101..)."""

from __future__ import annotations

from infra.policy.model import Rule

RULE_MODULES = ("cloudsql", "storage", "cloudrun", "edge", "identity", "platform", "budgets", "penpot")


def _collect() -> tuple[Rule, ...]:
    import importlib

    rules: list[Rule] = []
    for module_name in RULE_MODULES:
        module = importlib.import_module(f"infra.policy.rules.{module_name}")
        rules.extend(value for value in vars(module).values() if isinstance(value, Rule))
    ids = [rule.id for rule in rules]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        raise RuntimeError(f"rule ids used twice: {', '.join(duplicated)}")
    return tuple(sorted(rules, key=lambda rule: rule.id))


ALL_RULES: tuple[Rule, ...] = _collect()
BY_ID: dict[str, Rule] = {rule.id: rule for rule in ALL_RULES}
