"""The reviewer's diff: crafted pairs of graphs, the Markdown and JSON reports."""

from __future__ import annotations

import copy

import pytest

from infra.policy.model import Severity, resource_rule
from infra.report.diff import compare, flatten, render_markdown, replace_on
from tests.policy.helpers import changed, graph, resource

SERVICE = "gcp:cloudrunv2/service:Service"
SQL = "gcp:sql/databaseInstance:DatabaseInstance"
BUCKET = "gcp:storage/bucket:Bucket"
ADDRESS = "gcp:compute/globalAddress:GlobalAddress"


def diff(base: dict, head: dict, rules=None):
    return compare({base["stack"]: base}, {head["stack"]: head}, "base", "head", rules=rules or [])


def only(report):
    (stack,) = [s for s in report.stacks if s.changes]
    return stack


def test_flatten_paths():
    assert flatten({"a": {"b": [{"c": 1}, 2]}, "e": {}, "f": []}) == {"a.b[0].c": 1, "a.b[1]": 2, "e": {}, "f": []}


def test_no_change(graphs):
    report = diff(graphs["prod"], copy.deepcopy(graphs["prod"]))
    assert not report.changed and not report.dangerous
    assert "No changes" in render_markdown(report)


def test_added_and_removed():
    base = graph("prod", resource(SERVICE, "a", {"name": "a", "location": "x"}))
    head = graph("prod", resource(SERVICE, "b", {"name": "b", "location": "x"}))
    stack = only(diff(base, head))
    assert [(c.name, c.action) for c in stack.changes] == [("a", "remove"), ("b", "add")]
    assert stack.status == "changed"


def test_property_change_is_an_update():
    base = graph("prod", resource(SERVICE, "a", {"name": "a", "template": {"containers": [{"image": "x:1"}]}}))
    head = changed(base, SERVICE, "a", "template.containers[0].image", "x:2")
    (change,) = only(diff(base, head)).changes
    assert change.action == "update" and not change.dangers
    assert [(p.path, p.old, p.new, p.replaces) for p in change.changes] == [
        ("template.containers[0].image", "x:1", "x:2", False)]


@pytest.mark.parametrize("type_token, path, value", [
    (SQL, "region", "europe-west1"),
    (BUCKET, "location", "EU"),
    (ADDRESS, "address", "1.2.3.4"),
])
def test_replace_forcing_property_and_stateful_replacement_is_dangerous(type_token, path, value):
    base = graph("prod", resource(type_token, "r", {"name": "r", path: "old"}))
    head = changed(base, type_token, "r", path, value)
    report = diff(base, head)
    (change,) = only(report).changes
    assert change.action == "replace" and change.changes[0].replaces
    assert report.dangerous and "replaces" in report.dangerous[0][1]


def test_a_major_version_upgrade_is_in_place_and_dangerous():
    base = graph("prod", resource(SQL, "db", {"name": "brew-prod", "databaseVersion": "POSTGRES_17"}))
    report = diff(base, changed(base, SQL, "brew-prod", "databaseVersion", "POSTGRES_18"))
    (change,) = only(report).changes
    assert change.action == "update"
    assert change.dangers == ("major version upgrade of brew-prod in place: it cannot be undone",)


def test_deleting_a_bucket_is_dangerous_and_adding_one_is_not():
    with_bucket = graph("prod", resource(BUCKET, "b", {"name": "brew-prod"}))
    empty = graph("prod")
    assert "deletes a bucket" in diff(with_bucket, empty).dangerous[0][1]
    assert not diff(empty, with_bucket).dangerous


@pytest.mark.parametrize("path, value, words", [
    ("ingress", "INGRESS_TRAFFIC_ALL", "ingress of brew-worker"),
    ("invokerIamDisabled", True, "invoker IAM of brew-worker"),
    ("template.scaling.maxInstanceCount", 2, "scaling of the worker brew-worker"),
])
def test_service_changes_that_are_dangerous(graphs, path, value, words):
    head = changed(graphs["prod"], SERVICE, "brew-worker", path, value)
    report = diff(graphs["prod"], head)
    assert any(words in why for _, why in report.dangerous), report.dangerous


def test_scaling_of_web_is_not_dangerous(graphs):
    head = changed(graphs["prod"], SERVICE, "brew-web", "template.scaling.maxInstanceCount", 12)
    report = diff(graphs["prod"], head)
    assert report.changed and not report.dangerous


@pytest.mark.parametrize("type_token, name, path, value, words", [
    ("gcp:compute/securityPolicy:SecurityPolicy", None, "description", "x", "Cloud Armor"),
    ("gcp:compute/sSLPolicy:SSLPolicy", None, "minTlsVersion", "TLS_1_0", "TLS"),
    ("gcp:compute/backendService:BackendService", "brew-web-backend", "securityPolicy", None, "Cloud Armor"),
    ("gcp:compute/targetHttpsProxy:TargetHttpsProxy", None, "sslPolicy", None, "TLS"),
])
def test_edge_changes_that_are_dangerous(graphs, type_token, name, path, value, words):
    head = changed(graphs["edge"], type_token, name, path, value)
    report = diff(graphs["edge"], head)
    assert any(words in why for _, why in report.dangerous), report.dangerous


def test_every_iam_change_is_dangerous_and_replaces(graphs):
    member = "gcp:projects/iAMMember:IAMMember"
    assert replace_on(member) == ("*",)
    first = next(r for r in graphs["prod"]["resources"] if r["type"] == member)
    head = copy.deepcopy(graphs["prod"])
    for r in head["resources"]:
        if r["urn"] == first["urn"]:
            r["inputs"]["role"] = "roles/run.admin"
    report = diff(graphs["prod"], head)
    (change,) = only(report).changes
    assert change.action == "replace" and any("IAM: roles/run.admin" in why for why in change.dangers)


def test_new_and_fixed_findings_against_the_base():
    @resource_rule("BREW-S997", Severity.ERROR, "t", types=[BUCKET], description="d", remediation="r")
    def versioned(res, ctx):
        if not res.get("versioning.enabled"):
            yield "versioning.enabled", f"bucket {res.physical_name} keeps no versions"

    good = graph("prod", resource(BUCKET, "b", {"name": "brew-prod", "versioning": {"enabled": True}}))
    bad = changed(good, BUCKET, "brew-prod", "versioning.enabled", False)
    report = diff(good, bad, rules=[versioned])
    assert [f.rule for f in report.new_findings] == ["BREW-S997"]
    back = diff(bad, good, rules=[versioned])
    assert not back.new_findings and [f.rule for f in back.stacks[0].fixed_findings] == ["BREW-S997"]


def test_stack_added_and_removed():
    report = compare({"old": graph("old")}, {"new": graph("new", resource(BUCKET, "b", {"name": "n"}))}, "a", "b",
                     rules=[])
    assert {s.stack: s.status for s in report.stacks} == {"new": "added", "old": "removed"}


def test_markdown_sections(graphs):
    head = changed(graphs["prod"], SERVICE, "brew-worker", "ingress", "INGRESS_TRAFFIC_ALL")
    head = changed(head, SERVICE, "brew-web", "template.scaling.maxInstanceCount", 12)
    text = render_markdown(compare({"prod": graphs["prod"]}, {"prod": head}, "main", "working tree"))
    assert text.startswith("## Infrastructure diff: `main` → `working tree`")
    for heading in ("### Dangerous changes", "### New policy findings", "### Stack `prod`"):
        assert heading in text
    assert "| `prod` | changed | 0 | 0 | 0 | 2 | " in text
    assert ":warning: **prod** `brew-worker`" in text
    assert "BREW-S030" in text and "| `ingress` | INGRESS_TRAFFIC_INTERNAL_ONLY | INGRESS_TRAFFIC_ALL |" in text


def test_json_report(graphs):
    head = changed(graphs["prod"], SQL, "brew-prod", "region", "europe-west1")
    data = compare({"prod": graphs["prod"]}, {"prod": head}, "a", "b").to_dict()
    assert data["changed"] and data["dangerous"][0]["type"] == SQL
    (stack,) = data["stacks"]
    assert stack["counts"] == {"add": 0, "remove": 0, "replace": 1, "update": 0}
    assert stack["resources"][0]["changes"][0] == {"path": "region", "old": "asia-south1", "new": "europe-west1",
                                                   "replaces": True}
