"""The policy pack runs the same rules as `brew-infra check`: registered one policy per
rule, fed pulumi-policy's own argument objects (props behind its unknown-checking proxy,
as during a real preview), it reports what the engine reports."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from infra.policy.engine import evaluate
from infra.policy.model import Severity, Violation, resource_rule, stack_rule
from infra.policy.pulumi_pack import policies
from infra.policy.rules import ALL_RULES, BY_ID
from tests.policy.helpers import changed, graph, resource

PACK = Path(__file__).resolve().parents[2] / "infra" / "policy" / "pack"
SERVICE = "gcp:cloudrunv2/service:Service"


def _opts() -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])


def run_pack(data: dict, pack: list) -> set[tuple[str, str | None, str]]:
    """Every violation the pack reports over a graph, as (policy, urn, message)."""
    reported: set[tuple[str, str | None, str]] = set()
    resources = data["resources"]
    stack_view = {r["urn"]: PolicyResource(r["type"], unknown_checking_proxy(r["inputs"]), r["urn"], r["name"],
                                           _opts(), None, None, [], {}) for r in resources}
    for r in resources:
        stack_view[r["urn"]].parent = stack_view.get(r.get("parent") or "")
        stack_view[r["urn"]].dependencies = [stack_view[d] for d in r.get("dependencies", []) if d in stack_view]
    for policy in pack:
        if isinstance(policy, ResourceValidationPolicy):
            for r in resources:
                args = ResourceValidationArgs(r["type"], unknown_checking_proxy(r["inputs"]), r["urn"], r["name"],
                                              _opts(), None)
                policy.validate(args, lambda m, u=None, p=policy.name, own=r["urn"]: reported.add((p, u or own, m)))
        else:
            policy.validate(StackValidationArgs(list(stack_view.values())),
                            lambda m, u=None, p=policy.name: reported.add((p, u, m)))
    return reported


def engine_view(data: dict) -> set[tuple[str, str | None, str]]:
    return {(f.rule, f.urn, f"[{f.rule}] {f.message}") for f in evaluate(data)}


def test_every_rule_registered_once_with_its_enforcement():
    pack = policies()
    assert [p.name for p in pack] == [rule.id for rule in ALL_RULES]
    for policy in pack:
        rule = BY_ID[policy.name]
        expected = EnforcementLevel.MANDATORY if rule.severity is Severity.ERROR else EnforcementLevel.ADVISORY
        assert policy.enforcement_level == expected
        assert rule.remediation in policy.description
        assert isinstance(policy, ResourceValidationPolicy if rule.scope == "resource" else StackValidationPolicy)


def broken_variants(graphs: dict) -> list[dict]:
    prod = graphs["prod"]
    return [
        changed(prod, SERVICE, "brew-worker", "template.scaling.maxInstanceCount", 2),
        changed(prod, SERVICE, "brew-web", "ingress", "INGRESS_TRAFFIC_ALL"),
        changed(prod, "gcp:storage/bucket:Bucket", "brew-prod", "publicAccessPrevention", "inherited"),
    ]


def test_pack_reports_what_the_engine_reports(graphs):
    pack = policies()
    for data in [*graphs.values(), *broken_variants(graphs)]:
        assert run_pack(data, pack) == engine_view(data), data["stack"]


def test_broken_variants_are_reported_by_the_pack(graphs):
    reported = set().union(*(run_pack(data, policies()) for data in broken_variants(graphs)))
    assert len({policy for policy, _, _ in reported} - {p for p, _, _ in run_pack(graphs["prod"], policies())}) >= 3


@resource_rule("BREW-S998", Severity.ERROR, "t", types=[SERVICE], description="d", remediation="r")
def needs_internal_ingress(res, ctx):
    if res.get("ingress") != "INGRESS_TRAFFIC_INTERNAL_ONLY":
        yield "ingress", f"service {res.physical_name}: ingress is {res.get('ingress')}"


@stack_rule("BREW-I997", Severity.WARNING, "t", description="d", remediation="r")
def every_service_account_named(resources, ctx):
    for r in resources:
        if r.type == SERVICE and not r.get("template.serviceAccount"):
            yield Violation(r, "template.serviceAccount", f"service {r.physical_name} has no identity")


def test_unknown_values_make_a_rule_not_applicable():
    data = graph("prod", resource(SERVICE, "svc", {"name": "svc", "ingress": UNKNOWN_STRING_VALUE,
                                                   "template": {"serviceAccount": UNKNOWN_STRING_VALUE}}))
    assert run_pack(data, policies([needs_internal_ingress, every_service_account_named])) == set()
    known = graph("prod", resource(SERVICE, "svc", {"name": "svc", "ingress": "INGRESS_TRAFFIC_ALL", "template": {}}))
    assert {p for p, _, _ in run_pack(known, policies([needs_internal_ingress, every_service_account_named]))} == {
        "BREW-S998", "BREW-I997"}


def test_pack_folder_is_a_python_policy_pack():
    manifest = (PACK / "PulumiPolicy.yaml").read_text()
    assert "name: python" in manifest and "toolchain: uv" in manifest
    assert (PACK / "../../../.venv").resolve() == (PACK.parents[2] / ".venv").resolve()
    # The entry point must not be imported (PolicyPack serves forever); it must compile.
    spec = importlib.util.spec_from_file_location("pack_main", PACK / "__main__.py")
    assert spec is not None
    compile((PACK / "__main__.py").read_text(), str(PACK / "__main__.py"), "exec")
