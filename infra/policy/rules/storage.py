"""Cloud Storage security rules (BREW-S020..S029): buckets readable only through IAM,
never by the public, and production objects that survive an overwrite or a stray destroy.

Absent properties are judged by the provider's default: per-object ACLs allowed, public
access prevention inherited from the project (so not enforced), no versioning.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

from infra.policy.model import Context, Resource, Severity, is_production, resource_rule

BUCKET = "gcp:storage/bucket:Bucket"
BUCKET_IAM = (
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "gcp:storage/bucketIAMBinding:BucketIAMBinding",
    "gcp:storage/bucketIAMPolicy:BucketIAMPolicy",
    "gcp:storage/managedFolderIamMember:ManagedFolderIamMember",
    "gcp:storage/managedFolderIamBinding:ManagedFolderIamBinding",
    "gcp:storage/managedFolderIamPolicy:ManagedFolderIamPolicy",
)
PUBLIC_MEMBERS = frozenset({"allUsers", "allAuthenticatedUsers"})
BUCKET_COMPONENT = "the Bucket component (infra/components/bucket.py)"


def public_grants(r: Resource) -> Iterator[tuple[str, str, str]]:
    """(property, member, role) for each public member an IAM member, binding or policy grants.

    A policy's `policyData` is a JSON string; one not known yet (or not JSON) grants nothing
    this rule can see.
    """
    role = str(r.get("role", ""))
    if r.get("member") in PUBLIC_MEMBERS:
        yield "member", str(r.get("member")), role
    for index, member in enumerate(r.get("members") or ()):
        if member in PUBLIC_MEMBERS:
            yield f"members[{index}]", member, role
    policy = r.get("policyData")
    if not isinstance(policy, str):
        return
    try:
        bindings = json.loads(policy).get("bindings") or ()
    except (ValueError, AttributeError):
        return
    for binding in bindings:
        if isinstance(binding, Mapping):
            for member in set(binding.get("members") or ()) & PUBLIC_MEMBERS:
                yield "policyData", member, str(binding.get("role", ""))


@resource_rule(
    "BREW-S020", Severity.ERROR, "Bucket uses uniform bucket-level access", types=[BUCKET],
    description="With per-object ACLs any writer can make one object public, and who can read what "
                "is spread over millions of ACLs instead of one IAM policy. The default allows ACLs. "
                "Checkov CKV_GCP_29, Trivy AVD-GCP-0002.",
    remediation=f"Set uniformBucketLevelAccess: true, as {BUCKET_COMPONENT} does.",
    references=("CKV_GCP_29", "AVD-GCP-0002"),
)
def bucket_uniform_access(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if r.get("uniformBucketLevelAccess") is True:
        return
    yield ("uniformBucketLevelAccess",
           f"bucket {r.physical_name}: uniformBucketLevelAccess is not true; access is granted by "
           "bucket IAM only, never per-object ACLs")


@resource_rule(
    "BREW-S021", Severity.ERROR, "Bucket enforces public access prevention", types=[BUCKET],
    description="Enforced public access prevention refuses any grant to allUsers or "
                "allAuthenticatedUsers, whatever IAM or ACL change comes later; the default, "
                "inherited, enforces nothing unless the organization does. Checkov CKV_GCP_114; "
                "Pulumi's compliance policy enforcePublicAccessPrevention (critical).",
    remediation=f"Set publicAccessPrevention: enforced, as {BUCKET_COMPONENT} does.",
    references=("CKV_GCP_114",),
)
def bucket_public_access_prevention(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    setting = r.get("publicAccessPrevention")
    if setting == "enforced":
        return
    state = "not set, so inherited" if setting is None else setting
    yield ("publicAccessPrevention",
           f"bucket {r.physical_name}: publicAccessPrevention is {state}; Brew buckets are never public, "
           "so it is enforced")


@resource_rule(
    "BREW-S022", Severity.ERROR, "Production bucket keeps object versions", types=[BUCKET],
    description="Production's pictures, videos and documents exist nowhere else: without "
                "versioning an overwrite or delete (a bug, a bad script) loses them for good. "
                "Checkov CKV_GCP_78, Trivy AVD-GCP-0078.",
    remediation="Set versioning: true under brew:bucket in stacks/Pulumi.<stack>.yaml "
                "(versioning.enabled).",
    references=("CKV_GCP_78", "AVD-GCP-0078"),
)
def bucket_versioning(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if not is_production(r, ctx) or r.get("versioning.enabled") is True:
        return
    yield ("versioning.enabled",
           f"bucket {r.physical_name}: versioning.enabled is not true; production objects keep "
           "their earlier versions")


@resource_rule(
    "BREW-S023", Severity.ERROR, "Bucket IAM grants nothing to allUsers or allAuthenticatedUsers",
    types=BUCKET_IAM,
    description="allUsers is anyone on the internet and allAuthenticatedUsers any Google account: "
                "either makes the bucket's objects public. Covers IAM members, bindings and "
                "policies on buckets and managed folders. Checkov CKV_GCP_28, Trivy AVD-GCP-0001.",
    remediation="Remove the member; grant the role to a service account or group instead (the "
                "Bucket component's iam argument, which refuses public members).",
    references=("CKV_GCP_28", "AVD-GCP-0001"),
)
def bucket_not_public(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    bucket = r.get("bucket", r.name)
    for prop, member, role in public_grants(r):
        yield (prop, f"bucket {bucket}: {prop} grants {role or 'a role'} to {member}; Brew buckets are "
                     "never public")


@resource_rule(
    "BREW-S024", Severity.ERROR, "Production bucket cannot be force-destroyed", types=[BUCKET],
    description="forceDestroy lets `pulumi destroy`, or a change that replaces the bucket, delete "
                "every object and every kept version with it. None of Checkov, KICS or Trivy has "
                "this rule.",
    remediation=f"Leave forceDestroy false (the default of {BUCKET_COMPONENT}).",
)
def bucket_no_force_destroy(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if is_production(r, ctx) and r.get("forceDestroy") is True:
        yield ("forceDestroy",
               f"bucket {r.physical_name}: forceDestroy is true; Pulumi may delete a production bucket "
               "with its objects")
