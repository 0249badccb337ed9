"""Connection budget rules (BREW-B001..B005): per database, max instances x pool (plus the
worker's lease and the jobs) stays under the alert level, which stays under
max_connections; production has the alert; the messages show the arithmetic."""

from __future__ import annotations

import re

import pytest

from infra.policy.engine import resources_of
from infra.policy.model import Resource, Rule, Severity
from infra.policy.rules import budgets
from tests.policy.helpers import DELETE, changed, find, findings, graph, resource

SERVICE = "gcp:cloudrunv2/service:Service"
JOB = "gcp:cloudrunv2/job:Job"
SQL = "gcp:sql/databaseInstance:DatabaseInstance"
ALERT = "gcp:monitoring/alertPolicy:AlertPolicy"
RULES = [value for value in vars(budgets).values() if isinstance(value, Rule)]
THRESHOLD = "conditions[0].conditionThreshold.thresholdValue"
PROD_SUM = "brew-web 10 x 5 + brew-worker 1 x (10 + 1 lease) + brew-ops 1 x 1 = 62"


def connections_alert(data: dict) -> dict:
    [policy] = [r for r in data["resources"] if r["type"] == ALERT and r["name"].endswith("postgres-connections")]
    return policy


def with_alert(data: dict, **condition) -> dict:
    """`data` with prod's connections alert condition changed (thresholdValue, comparison...)."""
    policy = connections_alert(data)
    threshold = {**policy["inputs"]["conditions"][0]["conditionThreshold"], **condition}
    data = {**data, "resources": [r for r in data["resources"] if r is not policy]}
    changed_policy = {**policy, "inputs": {**policy["inputs"], "conditions": [
        {**policy["inputs"]["conditions"][0], "conditionThreshold": threshold}]}}
    return {**data, "resources": [*data["resources"], changed_policy]}


def with_env(data: dict, service: str, name: str, value) -> dict:
    envs = find(data, SERVICE, service)["inputs"]["template"]["containers"][0]["envs"]
    [index] = [i for i, e in enumerate(envs) if e["name"] == name]
    return changed(data, SERVICE, service, f"template.containers[0].envs[{index}].value", value)


def where(rule: Rule, data: dict) -> list[tuple[str, str, str]]:
    found = findings(rule, data)
    for f in found:
        assert f.resource in f.message and f.property in f.message and f.severity is rule.severity, f
    return [(f.rule, f.resource, f.property) for f in found]


def test_ids_and_metadata():
    assert sorted(r.id for r in RULES) == [f"BREW-B{n:03d}" for n in range(1, 6)]
    for rule in RULES:
        assert rule.title and rule.description and rule.remediation and rule.severity is Severity.ERROR
        assert "None of Checkov, KICS or Trivy" in rule.description, rule.id


def test_shipped_budgets(graphs):
    prod = budgets.budgets(resources_of(graphs["prod"]))
    assert [(b.instance.physical_name, b.arithmetic()) for b in prod] == [("brew-prod", PROD_SUM)]
    staging = budgets.budgets(resources_of(graphs["staging"]))
    assert [b.arithmetic() for b in staging] == ["shopos-feed 1 x (10 + 1 lease) = 11"]
    assert budgets.budgets(resources_of(graphs["demo"])) == []


def test_budget_over_the_alert_level_shows_the_arithmetic(graphs):
    data = with_alert(graphs["prod"], thresholdValue=60)
    found = findings(budgets.budget_under_alert_level, data)
    assert [(f.rule, f.property) for f in found] == [("BREW-B001", THRESHOLD)]
    assert found[0].message == (f"database brew-prod: {PROD_SUM} connections, not under the alert level 60 of "
                                f"prod-alerts-postgres-connections ({THRESHOLD})")
    assert findings(budgets.budget_under_alert_level, with_alert(graphs["prod"], thresholdValue=63)) == []


def test_scaling_the_web_out_breaks_both_limits(graphs):
    data = changed(graphs["prod"], SERVICE, "brew-web", "template.scaling.maxInstanceCount", 40)
    assert "brew-web 40 x 5 +" in findings(budgets.budget_under_alert_level, data)[0].message
    assert where(budgets.budget_under_max_connections, data) == [
        ("BREW-B002", "brew-prod", "settings.databaseFlags[6].value")]


def test_staging_max_connections_comes_from_its_tier(graphs):
    data = with_env(graphs["staging"], "shopos-feed", "PG_POOL_MAX", "99")
    found = findings(budgets.budget_under_max_connections, data)
    assert [(f.resource, f.property) for f in found] == [("brew-staging", "settings.tier")]
    assert "= 100 connections, not under max_connections 100 (tier db-custom-1-3840 (3.75 GB)" in found[0].message
    assert findings(budgets.budget_under_max_connections, with_env(graphs["staging"], "shopos-feed", "PG_POOL_MAX",
                                                                   "98")) == []


def test_an_unknown_tier_without_the_flag_cannot_be_budgeted(graphs):
    data = changed(graphs["staging"], SQL, "brew-staging", "settings.tier", "db-perf-optimized-N-8")
    assert where(budgets.budget_under_max_connections, data) == [("BREW-B002", "brew-staging", "settings.tier")]


@pytest.mark.parametrize(
    ("tier", "expected"),
    [("db-f1-micro", 25), ("db-g1-small", 50), ("db-custom-1-3072", 50), ("db-custom-1-3840", 100),
     ("db-custom-2-5120", 100), ("db-custom-1-6144", 200), ("db-custom-2-7680", 400), ("db-custom-4-15360", 500),
     ("db-custom-8-30720", 600), ("db-custom-16-61440", 800), ("db-custom-64-262144", 1000),
     ("db-n1-standard-2", 400), ("db-n1-highmem-1", 200), ("db-unknown", None)],
)
def test_default_max_connections_by_tier(tier, expected):
    limit = budgets.max_connections(Resource(SQL, "db", {"settings": {"tier": tier}}))
    assert (limit.value if limit else None) == expected


def test_the_max_connections_flag_wins_over_the_tier():
    instance = Resource(SQL, "db", {"settings": {"tier": "db-f1-micro", "databaseFlags": [
        {"name": "log_connections", "value": "on"}, {"name": "max_connections", "value": "300"}]}})
    assert budgets.max_connections(instance) == budgets.Limit(300, "settings.databaseFlags[1].value",
                                                              "flag max_connections")


def test_alert_level_at_max_connections_never_fires(graphs):
    data = with_alert(graphs["prod"], thresholdValue=200)
    assert where(budgets.alert_level_under_max_connections, data) == [
        ("BREW-B003", "prod-alerts-postgres-connections", THRESHOLD)]
    # Without the flag, brew-prod's 7.5 GB tier allows 400.
    flags = [f for f in find(data, SQL, "brew-prod")["inputs"]["settings"]["databaseFlags"]
             if f["name"] != "max_connections"]
    assert findings(budgets.alert_level_under_max_connections,
                    changed(data, SQL, "brew-prod", "settings.databaseFlags", flags)) == []


def test_production_needs_a_connections_alert(graphs):
    prod = graphs["prod"]
    without = {**prod, "resources": [r for r in prod["resources"] if r is not connections_alert(prod)]}
    assert where(budgets.production_connections_alert, without) == [("BREW-B004", "brew-prod", "name")]
    disabled = {**prod, "resources": [{**r, "inputs": {**r["inputs"], "enabled": False}}
                                      if r is connections_alert(prod) else r for r in prod["resources"]]}
    assert where(budgets.production_connections_alert, disabled) == [("BREW-B004", "brew-prod", "name")]
    for data in (with_alert(prod, comparison="COMPARISON_LT"), with_alert(prod, thresholdValue=None)):
        assert where(budgets.production_connections_alert, data) == [
            ("BREW-B004", "prod-alerts-postgres-connections", THRESHOLD)]


def test_an_alert_on_another_database_does_not_count(graphs):
    policy = connections_alert(graphs["prod"])
    query = policy["inputs"]["conditions"][0]["conditionThreshold"]["filter"]
    data = with_alert(graphs["prod"], filter=query.replace("squareup-brew:brew-prod", "squareup-brew:brew-staging"))
    assert where(budgets.production_connections_alert, data) == [("BREW-B004", "brew-prod", "name")]


@pytest.mark.parametrize(("value", "prop"), [(DELETE, "template.containers[0].envs"), ("lots", None)])
def test_a_service_without_a_pool_size_has_no_bound(graphs, value, prop):
    prod = graphs["prod"]
    envs = find(prod, SERVICE, "brew-web")["inputs"]["template"]["containers"][0]["envs"]
    index = next(i for i, e in enumerate(envs) if e["name"] == "PG_POOL_MAX")
    new = [e for e in envs if e["name"] != "PG_POOL_MAX"] if value is DELETE else [
        dict(e, value=value) if i == index else e for i, e in enumerate(envs)]
    data = changed(prod, SERVICE, "brew-web", "template.containers[0].envs", new)
    assert where(budgets.services_declare_pool, data) == [
        ("BREW-B005", "brew-web", prop or f"template.containers[0].envs[{index}].value")]


def test_jobs_count_their_parallel_tasks():
    db = resource(SQL, "db", {"name": "db", "settings": {"tier": "db-f1-micro"}})

    def job(name: str, template: dict, pool: str | None) -> dict:
        envs = [{"name": "PG_POOL_MAX", "value": pool}] if pool else []
        return resource(JOB, name, {"name": name, "template": {**template, "template": {"containers": [
            {"envs": envs}]}}}, dependencies=(db["urn"],))

    data = graph("prod", db, job("all-at-once", {"taskCount": 3}, "2"), job("two-at-a-time",
                 {"taskCount": 5, "parallelism": 2}, "4"), job("no-pool", {}, None))
    [budget] = budgets.budgets(resources_of(data))
    assert budget.arithmetic() == "all-at-once 3 x 2 + two-at-a-time 2 x 4 + no-pool 1 x 1 = 15"


ODD = graph(
    "prod",
    resource(SQL, "db", {"name": "db", "settings": {"tier": 5, "databaseFlags": [{"name": "max_connections",
                                                                                  "value": "many"}, "x"]}}),
    resource(SERVICE, "s", {"name": "s", "template": {"scaling": {"maxInstanceCount": "ten"}, "containers": [
        {"envs": [{"name": "PG_POOL_MAX", "value": "5"}]}]}},
        dependencies=("urn:pulumi:prod::brew::gcp:sql/databaseInstance:DatabaseInstance::db",)),
    resource(JOB, "j", {"template": {"parallelism": "x", "taskCount": None}},
             dependencies=("urn:pulumi:prod::brew::gcp:sql/databaseInstance:DatabaseInstance::db",)),
    resource(ALERT, "a", {"conditions": [None, {"conditionThreshold": {
        "filter": 'metric.type="cloudsql.googleapis.com/database/postgresql/num_backends" '
                  'AND resource.labels.database_id="p:db"', "thresholdValue": "high"}}]}),
)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_odd_graphs_do_not_crash(rule):
    for f in findings(rule, ODD):
        assert f.rule == rule.id and f.property
    assert re.match(r"BREW-B\d{3}", rule.id)
