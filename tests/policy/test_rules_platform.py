"""Platform invariants (BREW-I001..I005): one worker per database and exactly one instance
of it, redundant production web, and staging's mirror flags consistent and retired on
their sunset date."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from infra.policy.model import Rule, Severity
from infra.policy.rules import platform
from tests.policy.helpers import DELETE, changed, find, findings, graph, resource

SERVICE = "gcp:cloudrunv2/service:Service"
JOB = "gcp:cloudrunv2/job:Job"
SQL = "gcp:sql/databaseInstance:DatabaseInstance"
RULES = [value for value in vars(platform).values() if isinstance(value, Rule)]
BEFORE_SUNSET = dt.date(2026, 11, 25)
AFTER_SUNSET = dt.date(2026, 11, 30)


def env_path(data: dict, service: str, name: str) -> str:
    envs = find(data, SERVICE, service)["inputs"]["template"]["containers"][0]["envs"]
    [index] = [i for i, e in enumerate(envs) if e["name"] == name]
    return f"template.containers[0].envs[{index}].value"


def with_env(data: dict, service: str, name: str, value) -> dict:
    return changed(data, SERVICE, service, env_path(data, service, name), value)


def where(rule: Rule, data: dict, today: dt.date | None = None) -> list[tuple[str, str, str]]:
    found = findings(rule, data, today)
    for f in found:
        assert f.resource in f.message and f.property in f.message and f.severity is rule.severity, f
    return [(f.rule, f.resource, f.property) for f in found]


def test_ids_and_metadata():
    assert sorted(r.id for r in RULES) == [f"BREW-I{n:03d}" for n in range(1, 6)]
    for rule in RULES:
        assert rule.title and rule.description and rule.remediation
        assert not re.findall(r"CKV_GCP_\d+|AVD-GCP-\d+", rule.description)
        assert "None of Checkov, KICS or Trivy" in rule.description, rule.id
    assert [r.id for r in RULES if r.severity is Severity.WARNING] == ["BREW-I005"]


@pytest.mark.parametrize(
    ("stack", "service", "path", "value"),
    [
        ("prod", "brew-worker", "template.scaling.maxInstanceCount", 2),
        ("prod", "brew-worker", "template.scaling.minInstanceCount", 0),
        ("prod", "brew-worker", "scaling.manualInstanceCount", 3),
        ("staging", "shopos-feed", "template.scaling.maxInstanceCount", 2),
        ("demo", "brew-demo", "template.scaling.minInstanceCount", 0),
    ],
)
def test_a_worker_runs_exactly_one_instance(graphs, stack, service, path, value):
    data = changed(graphs[stack], SERVICE, service, path, value)
    assert where(platform.worker_single_instance, data) == [("BREW-I001", service, path)]


def test_undeclared_scaling_is_cloud_run_s_default(graphs):
    data = changed(graphs["prod"], SERVICE, "brew-worker", "template.scaling", DELETE)
    assert where(platform.worker_single_instance, data) == [
        ("BREW-I001", "brew-worker", "template.scaling.maxInstanceCount"),
        ("BREW-I001", "brew-worker", "template.scaling.minInstanceCount")]
    # The web scales freely.
    assert where(platform.worker_single_instance, changed(graphs["prod"], SERVICE, "brew-web", "template.scaling",
                                                          DELETE)) == []


def test_two_workers_on_one_database(graphs):
    data = with_env(graphs["prod"], "brew-web", "ROLE", "web,worker")
    assert where(platform.one_worker_per_database, data) == [
        ("BREW-I002", "brew-web", env_path(data, "brew-web", "ROLE")),
        ("BREW-I002", "brew-worker", env_path(data, "brew-worker", "ROLE"))]


def test_no_worker_on_a_database(graphs):
    data = with_env(graphs["staging"], "shopos-feed", "ROLE", "web")
    assert where(platform.one_worker_per_database, data) == [("BREW-I002", "brew-staging", "name")]


def test_workers_on_different_databases_are_one_each():
    db_a, db_b = (resource(SQL, f"db-{x}", {"name": f"db-{x}"}) for x in "ab")
    workers = [resource(SERVICE, f"w-{x}", {"name": f"w-{x}", "template": {"containers": [{"envs": [
        {"name": "ROLE", "value": "worker"}]}], "scaling": {"minInstanceCount": 1, "maxInstanceCount": 1}}},
        dependencies=(db["urn"],)) for x, db in (("a", db_a), ("b", db_b))]
    assert findings(platform.one_worker_per_database, graph("prod", db_a, db_b, *workers)) == []
    workers[1]["dependencies"] = [db_a["urn"]]
    assert {(f.resource, f.property) for f in findings(platform.one_worker_per_database,
                                                       graph("prod", db_a, db_b, *workers))} == {
        ("w-a", "template.containers[0].envs[0].value"), ("w-b", "template.containers[0].envs[0].value")}


def test_production_web_keeps_two_instances(graphs):
    data = changed(graphs["prod"], SERVICE, "brew-web", "template.scaling.minInstanceCount", 1)
    assert where(platform.production_web_redundant, data) == [
        ("BREW-I003", "brew-web", "template.scaling.minInstanceCount")]
    # One instance is staging's and the demo's design, not production's.
    staging_web = with_env(graphs["staging"], "shopos-feed", "ROLE", "web")
    assert where(platform.production_web_redundant, staging_web) == []


def test_readthrough_without_mirror(graphs):
    data = with_env(graphs["staging"], "shopos-feed", "OBJECTS_MIRROR", "0")
    assert where(platform.readthrough_needs_mirror, data) == [
        ("BREW-I004", "shopos-feed", env_path(data, "shopos-feed", "OBJECTS_MIRROR"))]
    both_off = with_env(data, "shopos-feed", "OBJECTS_READTHROUGH", "0")
    assert where(platform.readthrough_needs_mirror, both_off) == []


def test_readthrough_with_no_mirror_variable_at_all(graphs):
    staging = graphs["staging"]
    envs = [e for e in find(staging, SERVICE, "shopos-feed")["inputs"]["template"]["containers"][0]["envs"]
            if e["name"] != "OBJECTS_MIRROR"]
    data = changed(staging, SERVICE, "shopos-feed", "template.containers[0].envs", envs)
    found = findings(platform.readthrough_needs_mirror, data)
    assert [(f.resource, f.property) for f in found] == [
        ("shopos-feed", env_path(data, "shopos-feed", "OBJECTS_READTHROUGH"))]
    assert "OBJECTS_MIRROR=unset" in found[0].message


def test_mirror_flags_past_the_sunset_warn(graphs):
    staging = graphs["staging"]
    assert find(staging, SERVICE, "shopos-feed")["inputs"]["labels"]["mirror-sunset"] == "2026-11-25"
    found = findings(platform.mirror_sunset, staging, AFTER_SUNSET)
    assert [(f.rule, f.severity, f.resource, f.property) for f in found] == [
        ("BREW-I005", Severity.WARNING, "shopos-feed", "labels.mirror-sunset")]
    assert "5 days past the mirror sunset 2026-11-25" in found[0].message
    assert findings(platform.mirror_sunset, staging, BEFORE_SUNSET) == []


def test_mirror_flags_off_never_warn(graphs):
    data = with_env(with_env(graphs["staging"], "shopos-feed", "OBJECTS_MIRROR", "0"), "shopos-feed",
                    "OBJECTS_READTHROUGH", "0")
    assert findings(platform.mirror_sunset, data, AFTER_SUNSET) == []


@pytest.mark.parametrize("label", [DELETE, "soon", "2026-13-01"])
def test_mirror_flags_without_a_sunset_date_warn(graphs, label):
    data = changed(graphs["staging"], SERVICE, "shopos-feed", "labels.mirror-sunset", label)
    assert where(platform.mirror_sunset, data, BEFORE_SUNSET) == [
        ("BREW-I005", "shopos-feed", "labels.mirror-sunset")]


ODD = graph(
    "prod",
    resource(SQL, "db", {"name": "db"}),
    resource(SERVICE, "a", {"labels": ["x"], "scaling": {"manualInstanceCount": "many"}, "template": {
        "containers": [{"envs": [{"name": "ROLE", "value": "web,,worker"}, {"name": "OBJECTS_READTHROUGH",
                                                                             "value": 1}]}],
        "scaling": "auto"}}, dependencies=("urn:pulumi:prod::brew::gcp:sql/databaseInstance:DatabaseInstance::db",)),
    resource(SERVICE, "b", {"template": {"containers": "none"}}, dependencies=("nowhere",)),
    resource(JOB, "j", {"template": {"template": {"containers": [{"envs": [{"name": "OBJECTS_MIRROR",
                                                                           "value": True}]}]}}}),
)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_odd_graphs_do_not_crash(rule):
    for f in findings(rule, ODD, AFTER_SUNSET):
        assert f.rule == rule.id and f.property
