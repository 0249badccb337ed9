import datetime as dt
import json

import pytest

from infra.policy.engine import GraphFileError, evaluate, load_graph
from infra.policy.model import Context, Resource, Severity, resource_rule, stack_rule, Violation
from tests.policy.helpers import graph, resource

BUCKET = "gcp:storage/bucket:Bucket"


@resource_rule("BREW-S999", Severity.ERROR, "test rule", types=[BUCKET], description="d", remediation="r")
def versioned(res, ctx):
    if not res.get("versioning.enabled"):
        yield "versioning.enabled", f"bucket {res.physical_name} has no versioning"


@stack_rule("BREW-I999", Severity.WARNING, "test stack rule", description="d", remediation="r")
def at_most_one_bucket(resources, ctx):
    buckets = [r for r in resources if r.type == BUCKET]
    for extra in buckets[1:]:
        yield Violation(extra, "name", f"bucket {extra.physical_name} is one too many in {ctx.stack}")


def test_resource_get_paths():
    r = Resource("t", "n", {"a": {"b": [{"c": 1}], "n": None}, "name": "phys"})
    assert r.get("a.b[0].c") == 1
    assert r.get("a.b[1].c", "dflt") == "dflt"
    assert r.get("a.n.x", 5) == 5
    assert r.get("a.b.c") is None
    assert r.physical_name == "phys"


def test_stack_from_urn_and_production():
    r = Resource("t", "n", {}, urn="urn:pulumi:penpot-prod::penpot::t::n")
    assert r.stack == "penpot-prod"
    assert Context("penpot-prod").production and Context("prod").production
    assert not Context("staging").production


def test_rule_ids_are_checked():
    with pytest.raises(ValueError, match="BREW-S/I/B"):
        resource_rule("BREW-X001", Severity.ERROR, "t", types=[BUCKET], description="d", remediation="r")(versioned.check)


def test_evaluate_orders_errors_first_and_names_resource():
    data = graph("prod", resource(BUCKET, "a", {"name": "brew-a"}), resource(BUCKET, "b", {"name": "brew-b",
                 "versioning": {"enabled": True}}))
    found = evaluate(data, [at_most_one_bucket, versioned])
    assert [(f.rule, f.severity, f.resource, f.property) for f in found] == [
        ("BREW-S999", Severity.ERROR, "brew-a", "versioning.enabled"),
        ("BREW-I999", Severity.WARNING, "brew-b", "name")]
    assert found[0].stack == "prod" and found[0].remediation == "r"
    assert json.dumps([f.to_dict() for f in found])


def test_load_graph_errors(tmp_path):
    with pytest.raises(GraphFileError, match="no such graph file"):
        load_graph(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(GraphFileError, match="not JSON: line 1"):
        load_graph(bad)
    bad.write_text("[]")
    with pytest.raises(GraphFileError, match="not a synthesized graph"):
        load_graph(bad)
    bad.write_text('{"resources": [{"type": 1}]}')
    with pytest.raises(GraphFileError, match=r"resources\[0\]"):
        load_graph(bad)


def test_load_graph_takes_stack_from_file_name(tmp_path):
    path = tmp_path / "edge.json"
    path.write_text('{"resources": []}')
    assert load_graph(path)["stack"] == "edge"


def test_today_reaches_rules():
    seen = []

    @stack_rule("BREW-I998", Severity.WARNING, "t", description="d", remediation="r")
    def record(resources, ctx):
        seen.append(ctx.today)
        return ()

    evaluate(graph("staging"), [record], today=dt.date(2026, 1, 2))
    assert seen == [dt.date(2026, 1, 2)]
