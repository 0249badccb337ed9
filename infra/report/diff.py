"""What a change declares, for reviewers: two sets of synthesized graphs (or a `pulumi
preview --json`) compared resource by resource and property by property, the dangerous
changes flagged, and the guardrail findings a change brings in or fixes.

Plain graph data only (SPEC 2): this module imports neither pulumi_gcp nor components.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.policy.engine import Finding, evaluate, resources_of
from infra.policy.model import Resource, Rule

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"

# Inputs whose change makes the provider delete and recreate the resource (ForceNew in the
# Terraform google provider that pulumi-gcp bridges; resources with no update call, such as
# IAM members, NEGs and managed certificates, have every input here). Not databaseVersion:
# pulumi-gcp 10 upgrades a Cloud SQL major version in place (see its DatabaseInstance
# docs) — flagged as dangerous instead, since the upgrade cannot be undone.
_NAMES = ("name", "project")
REPLACE_ON: dict[str, tuple[str, ...]] = {
    "gcp:sql/databaseInstance:DatabaseInstance": (*_NAMES, "region", "masterInstanceName", "encryptionKeyName"),
    "gcp:sql/database:Database": (*_NAMES, "instance"),
    "gcp:sql/user:User": (*_NAMES, "instance", "host", "type"),
    "gcp:storage/bucket:Bucket": (*_NAMES, "location"),
    "gcp:storage/hmacKey:HmacKey": ("project", "serviceAccountEmail"),
    "gcp:cloudrunv2/service:Service": (*_NAMES, "location"),
    "gcp:cloudrunv2/job:Job": (*_NAMES, "location"),
    "gcp:serviceaccount/account:Account": ("accountId", "project"),
    "gcp:compute/globalAddress:GlobalAddress": (*_NAMES, "address", "addressType", "ipVersion", "purpose",
                                                 "network", "prefixLength", "description"),
    "gcp:compute/regionNetworkEndpointGroup:RegionNetworkEndpointGroup": (
        *_NAMES, "region", "networkEndpointType", "cloudRun", "description"),
    "gcp:compute/managedSslCertificate:ManagedSslCertificate": (*_NAMES, "managed", "type", "description"),
    "gcp:compute/backendService:BackendService": (*_NAMES, "loadBalancingScheme"),
    "gcp:compute/globalForwardingRule:GlobalForwardingRule": (*_NAMES, "ipAddress", "ipProtocol", "portRange",
                                                               "loadBalancingScheme"),
    "gcp:compute/securityPolicy:SecurityPolicy": (*_NAMES, "type"),
    "gcp:compute/network:Network": (*_NAMES, "autoCreateSubnetworks"),
    "gcp:compute/subnetwork:Subnetwork": (*_NAMES, "region", "network"),
    "gcp:servicenetworking/connection:Connection": ("network", "service"),
    "gcp:secretmanager/secret:Secret": ("secretId", "project", "replication"),
    "gcp:secretmanager/secretVersion:SecretVersion": ("secret", "secretData"),
    "gcp:monitoring/metricDescriptor:MetricDescriptor": ("project", "type", "metricKind", "valueType"),
    "gcp:iam/workloadIdentityPool:WorkloadIdentityPool": ("project", "workloadIdentityPoolId"),
    "gcp:iam/workloadIdentityPoolProvider:WorkloadIdentityPoolProvider": (
        "project", "workloadIdentityPoolId", "workloadIdentityPoolProviderId"),
    "gcp:redis/instance:Instance": (*_NAMES, "region", "authorizedNetwork", "connectMode", "tier"),
    "gcp:memorystore/instance:Instance": ("instanceId", "project", "location"),
}
DEFAULT_REPLACE_ON = (*_NAMES, "location", "region")
# Deleting or replacing these loses data or the address every DNS record points at.
STATEFUL = {
    "gcp:sql/databaseInstance:DatabaseInstance": "a Cloud SQL instance (its data and backups)",
    "gcp:sql/database:Database": "a database (its tables)",
    "gcp:storage/bucket:Bucket": "a bucket (its objects)",
    "gcp:compute/globalAddress:GlobalAddress": "the global address every DNS record points at",
}
ARMOR = "gcp:compute/securityPolicy:SecurityPolicy"
TLS_TYPES = {"gcp:compute/sSLPolicy:SSLPolicy": "the SSL policy",
             "gcp:compute/managedSslCertificate:ManagedSslCertificate": "a managed certificate"}
SERVICE = "gcp:cloudrunv2/service:Service"
MAX_VALUE = 80


def is_iam(type_token: str) -> bool:
    kind = type_token.rsplit(":", 1)[-1].lower()
    return kind.startswith("iam") or "iammember" in kind or "iambinding" in kind or "iampolicy" in kind


def replace_on(type_token: str) -> tuple[str, ...]:
    if is_iam(type_token):
        return ("*",)  # members, bindings and policies are replaced on any change
    return REPLACE_ON.get(type_token, DEFAULT_REPLACE_ON)


@dataclass(frozen=True)
class PropertyChange:
    path: str
    old: Any
    new: Any
    replaces: bool = False


@dataclass(frozen=True)
class ResourceChange:
    stack: str
    urn: str
    type: str
    name: str  # physical name
    action: str  # add | remove | replace | update
    changes: tuple[PropertyChange, ...] = ()
    dangers: tuple[str, ...] = ()


@dataclass
class StackDiff:
    stack: str
    status: str  # added | removed | changed | same
    changes: list[ResourceChange] = field(default_factory=list)
    new_findings: list[Finding] = field(default_factory=list)
    fixed_findings: list[Finding] = field(default_factory=list)

    def count(self, action: str) -> int:
        return sum(1 for c in self.changes if c.action == action)


@dataclass
class DiffReport:
    base: str
    head: str
    stacks: list[StackDiff]

    @property
    def dangerous(self) -> list[tuple[ResourceChange, str]]:
        return [(c, why) for s in self.stacks for c in s.changes for why in c.dangers]

    @property
    def new_findings(self) -> list[Finding]:
        return [f for s in self.stacks for f in s.new_findings]

    @property
    def changed(self) -> bool:
        return any(s.changes or s.status in ("added", "removed") for s in self.stacks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base, "head": self.head, "changed": self.changed,
            "dangerous": [{"stack": c.stack, "urn": c.urn, "type": c.type, "name": c.name, "action": c.action,
                           "why": why} for c, why in self.dangerous],
            "stacks": [{
                "stack": s.stack, "status": s.status,
                "counts": {a: s.count(a) for a in ("add", "remove", "replace", "update")},
                "resources": [{"urn": c.urn, "type": c.type, "name": c.name, "action": c.action,
                               "dangers": list(c.dangers),
                               "changes": [{"path": p.path, "old": p.old, "new": p.new, "replaces": p.replaces}
                                           for p in c.changes]} for c in s.changes],
                "new_findings": [f.to_dict() for f in s.new_findings],
                "fixed_findings": [f.to_dict() for f in s.fixed_findings],
            } for s in self.stacks],
        }


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested inputs as {dotted.path[0]: leaf}; empty containers are leaves."""
    if isinstance(value, Mapping) and value:
        flat: dict[str, Any] = {}
        for key in sorted(value):
            flat.update(flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(value, list) and value:
        flat = {}
        for i, item in enumerate(value):
            flat.update(flatten(item, f"{prefix}[{i}]"))
        return flat
    return {prefix: value}


def _top(path: str) -> str:
    return path.split(".", 1)[0].split("[", 1)[0]


def property_changes(type_token: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[PropertyChange, ...]:
    before, after = flatten(old), flatten(new)
    forcing = replace_on(type_token)
    changes = []
    for path in sorted(set(before) | set(after)):
        a, b = before.get(path), after.get(path)
        if a != b:
            changes.append(PropertyChange(path, a, b, "*" in forcing or _top(path) in forcing))
    return tuple(changes)


def _is_worker(resource: Resource) -> bool:
    if resource.labels.get("role") == "worker":
        return True
    for env in resource.get("template.containers[0].envs", []) or []:
        if isinstance(env, Mapping) and env.get("name") == "ROLE" and "worker" in str(env.get("value", "")):
            return True
    return False


def dangers(action: str, resource: Resource, changes: Sequence[PropertyChange]) -> tuple[str, ...]:
    """Why a reviewer must look twice at this change, one line each."""
    kind, name = resource.type, resource.physical_name
    found: list[str] = []
    if action in ("remove", "replace") and kind in STATEFUL:
        verb = "deletes" if action == "remove" else "replaces (deletes, then creates)"
        found.append(f"{verb} {STATEFUL[kind]}: {name}")
    if is_iam(kind):
        who = resource.get("member") or ", ".join(resource.get("members") or []) or "?"
        found.append(f"IAM: {resource.get('role') or 'policy'} for {who} ({action})")
    if kind == ARMOR:
        found.append(f"Cloud Armor: policy {name} ({action})")
    if kind in TLS_TYPES:
        found.append(f"TLS: {TLS_TYPES[kind]} {name} ({action})")
    paths = {c.path for c in changes}
    tops = {_top(p) for p in paths}
    if kind == SERVICE and action == "update":
        if "ingress" in tops:
            found.append(f"ingress of {name} changes")
        if "invokerIamDisabled" in tops:
            found.append(f"invoker IAM of {name} changes")
    if kind == SERVICE and _is_worker(resource) and any(
            p.startswith(("template.scaling", "scaling")) for p in paths):
        found.append(f"scaling of the worker {name} changes (the single-worker invariant)")
    if kind == "gcp:sql/databaseInstance:DatabaseInstance" and action == "update" and "databaseVersion" in tops:
        found.append(f"major version upgrade of {name} in place: it cannot be undone")
    if kind == "gcp:compute/backendService:BackendService" and "securityPolicy" in tops:
        found.append(f"Cloud Armor: the policy on backend {name} changes")
    if kind == "gcp:compute/targetHttpsProxy:TargetHttpsProxy" and tops & {"sslPolicy", "sslCertificates"}:
        found.append(f"TLS: the HTTPS proxy {name} changes {', '.join(sorted(tops & {'sslPolicy', 'sslCertificates'}))}")
    return tuple(dict.fromkeys(found))


def _change(stack: str, action: str, old: Resource | None, new: Resource | None) -> ResourceChange | None:
    subject = new or old
    assert subject is not None
    changes: tuple[PropertyChange, ...] = ()
    if old is not None and new is not None:
        changes = property_changes(subject.type, old.inputs, new.inputs)
        if not changes:
            return None
        action = "replace" if any(c.replaces for c in changes) else "update"
    return ResourceChange(stack, subject.urn, subject.type, subject.physical_name, action, changes,
                          dangers(action, new if action != "remove" else subject, changes))


def compare_stack(stack: str, base: Mapping[str, Any] | None, head: Mapping[str, Any] | None,
                  rules: Sequence[Rule] | None = None) -> StackDiff:
    before = {r.urn: r for r in resources_of(base)} if base else {}
    after = {r.urn: r for r in resources_of(head)} if head else {}
    status = "added" if base is None else "removed" if head is None else "same"
    diff = StackDiff(stack, status)
    for urn in sorted(set(before) | set(after)):
        old, new = before.get(urn), after.get(urn)
        action = "add" if old is None else "remove" if new is None else "update"
        change = _change(stack, action, old, new)
        if change is not None:
            diff.changes.append(change)
    if diff.status == "same" and diff.changes:
        diff.status = "changed"
    old_findings = {f.key: f for f in evaluate(base, rules)} if base else {}
    new_findings = {f.key: f for f in evaluate(head, rules)} if head else {}
    diff.new_findings = [f for k, f in new_findings.items() if k not in old_findings]
    diff.fixed_findings = [f for k, f in old_findings.items() if k not in new_findings]
    return diff


def compare(base: Mapping[str, Mapping[str, Any]], head: Mapping[str, Mapping[str, Any]], base_label: str,
            head_label: str, rules: Sequence[Rule] | None = None) -> DiffReport:
    """Per stack (by name) the differences from `base` to `head`."""
    stacks = [compare_stack(s, base.get(s), head.get(s), rules) for s in sorted(set(base) | set(head))]
    return DiffReport(base_label, head_label, stacks)


def show(value: Any) -> str:
    """A value for a table cell: JSON-ish, one line, long values cut."""
    import json

    text = "(none)" if value is None else json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    text = text.replace("\n", "\\n").replace("|", "\\|")
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE - 1] + "…"


def cell(text: str) -> str:
    """Text for a Markdown table cell, in full."""
    return str(text).replace("\n", " ").replace("|", "\\|")


def short_type(token: str) -> str:
    return token.split(":", 1)[-1].rsplit(":", 1)[0] if token.count(":") >= 2 else token


def render_markdown(report: DiffReport) -> str:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined, keep_trailing_newline=True,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["show"] = show
    env.filters["short_type"] = short_type
    env.filters["cell"] = cell
    return env.get_template("diff.md.j2").render(report=report)


def graphs_by_stack(graphs: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {g["stack"]: g for g in graphs}
