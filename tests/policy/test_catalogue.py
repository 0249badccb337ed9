"""What holds for every rule: a complete entry in the catalogue, and the shipped stacks
passing it (the per-concern files test each rule failing)."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from infra.policy.engine import evaluate
from infra.policy.model import Severity
from infra.policy.rules import ALL_RULES
from tests.policy.helpers import findings

SCANNER_ID = re.compile(r"CKV2?_GCP_\d+|AVD-GCP-\d+")
BEFORE_SUNSET = dt.date(2026, 11, 1)


def test_at_least_thirty_rules_with_unique_ids():
    ids = [rule.id for rule in ALL_RULES]
    assert len(ids) >= 30 and len(set(ids)) == len(ids)


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_catalogue_entry(rule):
    assert rule.title and rule.description and rule.remediation
    cited = set(SCANNER_ID.findall(rule.description))
    assert cited <= set(rule.references), f"{rule.id} cites {cited - set(rule.references)} without a reference"
    if not cited and not re.search(r"KICS", rule.description):
        assert re.search(r"[Nn]one of Checkov, KICS or Trivy|no Checkov, KICS or Trivy", rule.description), rule.id


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_shipped_stacks_pass_before_the_sunset(graphs, rule):
    for data in graphs.values():
        assert findings(rule, data, BEFORE_SUNSET) == [], (rule.id, data["stack"])


def test_after_the_sunset_only_the_mirror_warning(graphs):
    found = [f for data in graphs.values() for f in evaluate(data, today=dt.date(2026, 12, 1))]
    assert [(f.rule, f.severity, f.stack) for f in found] == [("BREW-I005", Severity.WARNING, "staging")]
