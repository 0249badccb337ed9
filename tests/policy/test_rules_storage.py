"""Bucket rules (BREW-S020..S029): the shipped stacks pass, and one changed property or
one public grant fails exactly the rule that guards it, naming the bucket and the property."""

from __future__ import annotations

import json

import pytest

from infra.policy.model import Rule
from infra.policy.rules import storage
from tests.policy.helpers import DELETE, changed, findings, graph, resource

BUCKET = "gcp:storage/bucket:Bucket"
MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
BINDING = "gcp:storage/bucketIAMBinding:BucketIAMBinding"
POLICY = "gcp:storage/bucketIAMPolicy:BucketIAMPolicy"
FOLDER_MEMBER = "gcp:storage/managedFolderIamMember:ManagedFolderIamMember"
RULES = [value for value in vars(storage).values() if isinstance(value, Rule)]
RUNTIME = "serviceAccount:brew-prod-runtime@squareup-brew.iam.gserviceaccount.com"


def only_violation(rule: Rule, data: dict, name: str, prop: str) -> str:
    """The message of the one finding `rule` reports, after checking where it points."""
    found = findings(rule, data)
    assert [(f.rule, f.resource, f.property) for f in found] == [(rule.id, name, prop)]
    assert found[0].severity is rule.severity
    return found[0].message


def test_ids_and_metadata():
    assert sorted(r.id for r in RULES) == [f"BREW-S{n:03d}" for n in range(20, 25)]
    for rule in RULES:
        assert rule.types and rule.title and rule.remediation


@pytest.mark.parametrize(
    ("rule", "stack", "name", "path", "value", "prop", "says"),
    [
        (storage.bucket_uniform_access, "prod", "brew-prod", "uniformBucketLevelAccess", False,
         "uniformBucketLevelAccess", "is not true"),
        (storage.bucket_uniform_access, "demo", "brew-prototype-demo", "uniformBucketLevelAccess", DELETE,
         "uniformBucketLevelAccess", "is not true"),
        (storage.bucket_public_access_prevention, "staging", "brew-prototype", "publicAccessPrevention",
         "inherited", "publicAccessPrevention", "is inherited"),
        (storage.bucket_public_access_prevention, "prod", "brew-prod", "publicAccessPrevention", DELETE,
         "publicAccessPrevention", "is not set, so inherited"),
        (storage.bucket_versioning, "prod", "brew-prod", "versioning.enabled", False, "versioning.enabled",
         "is not true"),
        (storage.bucket_versioning, "prod", "brew-prod", "versioning", DELETE, "versioning.enabled", "is not true"),
        (storage.bucket_no_force_destroy, "prod", "brew-prod", "forceDestroy", True, "forceDestroy", "is true"),
    ],
)
def test_changed_property_fails(graphs, rule, stack, name, path, value, prop, says):
    message = only_violation(rule, changed(graphs[stack], BUCKET, name, path, value), name, prop)
    assert message.startswith(f"bucket {name}: {prop} {says}")


def test_only_production_buckets_need_versioning_and_no_force_destroy(graphs):
    staging = changed(graphs["staging"], BUCKET, "brew-prototype", "forceDestroy", True)
    assert findings(storage.bucket_versioning, staging) == []
    assert findings(storage.bucket_no_force_destroy, staging) == []
    relabelled = changed(staging, BUCKET, "brew-prototype", "labels.environment", "prod")
    assert [f.property for f in findings(storage.bucket_versioning, relabelled)] == ["versioning.enabled"]


@pytest.mark.parametrize(
    ("type_token", "inputs", "prop", "member"),
    [
        (MEMBER, {"bucket": "brew-prod", "role": "roles/storage.objectViewer", "member": "allUsers"},
         "member", "allUsers"),
        (BINDING, {"bucket": "brew-prod", "role": "roles/storage.objectViewer",
                   "members": [RUNTIME, "allAuthenticatedUsers"]}, "members[1]", "allAuthenticatedUsers"),
        (POLICY, {"bucket": "brew-prod", "policyData": json.dumps({"bindings": [
            {"role": "roles/storage.objectAdmin", "members": [RUNTIME]},
            {"role": "roles/storage.objectViewer", "members": ["allUsers"]}]})}, "policyData", "allUsers"),
        (FOLDER_MEMBER, {"bucket": "brew-prod", "managedFolder": "public/", "role": "roles/storage.objectViewer",
                         "member": "allUsers"}, "member", "allUsers"),
    ],
)
def test_public_member_fails(graphs, type_token, inputs, prop, member):
    grant = resource(type_token, "brew-prod-public", inputs)
    data = {**graphs["prod"], "resources": [*graphs["prod"]["resources"], grant]}
    message = only_violation(storage.bucket_not_public, data, "brew-prod-public", prop)
    assert message.startswith(f"bucket brew-prod: {prop} grants roles/storage.objectViewer to {member}")


@pytest.mark.parametrize("policy", ["[unknown]", "not json", "[]", json.dumps({"bindings": [
    {"role": "roles/storage.objectViewer", "members": [RUNTIME]}]})])
def test_private_or_unreadable_policy_passes(policy):
    data = graph("prod", resource(POLICY, "policy", {"bucket": "brew-prod", "policyData": policy}))
    assert findings(storage.bucket_not_public, data) == []
