"""Identity rules (SPEC 3.5): production data is reachable by production identities only,
and no identity holds a role broader than its job.

Which identities are production: the service accounts a production stack creates. An
identity belongs to the environment of the stack that creates it, so brew-runtime
(created by staging, shared with the demo and the ops jobs) is a stranger in the prod
graph, and a staging graph has no production identity at all. Production data declared
here is production by its labels or its stack; data another stack declares is known by
its name (brew-prod, brew-prod-<secret>).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from infra.policy.model import Context, Resource, Severity, Violation, resource_rule, stack_rule
from infra.policy.rules._graph import (
    INSTANCE,
    JOB,
    account_id,
    env,
    label,
    last_segment,
    members,
    named,
    production_identities,
    production_named,
    service_account,
)

SECRET = "gcp:secretmanager/secret:Secret"
BUCKET = "gcp:storage/bucket:Bucket"
SQL_USER = "gcp:sql/user:User"
SECRET_IAM = ("gcp:secretmanager/secretIamMember:SecretIamMember",
              "gcp:secretmanager/secretIamBinding:SecretIamBinding")
BUCKET_IAM = ("gcp:storage/bucketIAMMember:BucketIAMMember", "gcp:storage/bucketIAMBinding:BucketIAMBinding")
PROJECT_IAM = ("gcp:projects/iAMMember:IAMMember", "gcp:projects/iAMBinding:IAMBinding")
HIERARCHY_IAM = (*PROJECT_IAM, "gcp:folder/iAMMember:IAMMember", "gcp:folder/iAMBinding:IAMBinding",
                 "gcp:organizations/iAMMember:IAMMember", "gcp:organizations/iAMBinding:IAMBinding")
# Every IAM member and binding type a Brew stack declares, or could.
IAM_TYPES = (*HIERARCHY_IAM, *SECRET_IAM, *BUCKET_IAM,
             "gcp:serviceaccount/iAMMember:IAMMember", "gcp:serviceaccount/iAMBinding:IAMBinding",
             "gcp:cloudrunv2/serviceIamMember:ServiceIamMember", "gcp:cloudrunv2/serviceIamBinding:ServiceIamBinding",
             "gcp:cloudrunv2/jobIamMember:JobIamMember", "gcp:cloudrunv2/jobIamBinding:JobIamBinding")

PRIMITIVE_ROLES = ("roles/owner", "roles/editor", "roles/viewer")
# Project-level roles that read every secret's payload / every bucket's objects.
PROJECT_SECRET_READERS = ("roles/owner", "roles/secretmanager.admin", "roles/secretmanager.secretAccessor")
PROJECT_OBJECT_READERS = ("roles/owner", "roles/editor", "roles/storage.admin", "roles/storage.objectAdmin",
                          "roles/storage.objectUser", "roles/storage.objectViewer")
IMPERSONATION_ROLES = ("roles/iam.serviceAccountUser", "roles/iam.serviceAccountTokenCreator")
IAM_SERVICE_ACCOUNT_LOGIN = "CLOUD_IAM_SERVICE_ACCOUNT"
OPS_ROLE = "ops"  # the `role` label of ops jobs (infra/environments/app.py)

_ADMIN = re.compile(r"admin", re.IGNORECASE)
_BROAD = re.compile(r"editor|owner")  # the rest of Checkov CKV_GCP_42's pattern
_DEFAULT_ACCOUNT = re.compile(r"(-compute@developer|@appspot)\.gserviceaccount\.com$")


def _strangers(resource: Resource, trusted: set[str]) -> Iterator[tuple[str, str]]:
    """(path, member) of the members that are not one of the trusted account ids."""
    for path, member in members(resource):
        if account_id(member) not in trusted:
            yield path, member


def _project_grants(resources: Sequence[Resource], roles: Sequence[str], trusted: set[str]) -> Iterator[Violation]:
    for grant in resources:
        if grant.type in PROJECT_IAM and grant.get("role") in roles:
            for path, member in _strangers(grant, trusted):
                yield Violation(grant, path, f"{grant.physical_name}: {member} holds {grant.get('role')} on the "
                                             f"whole project ({path}), which reaches production data")


# --- production data ------------------------------------------------------------------

@stack_rule(
    "BREW-S050", Severity.ERROR, "Only production identities read production secrets",
    description="Production's provider keys must stay out of reach of staging, the demo and the ops jobs (SPEC "
                "3.5): a secret IAM member on a production secret, or a project-level secret role, for any "
                "identity a production stack does not create is a way in. None of Checkov, KICS or Trivy covers "
                "Secret Manager IAM; Google's Secret Manager best practices ask for per-secret, least-privilege "
                "access.",
    remediation="Grant production secrets to brew-prod-runtime only (infra/environments/app.py secrets(), "
                "accessors); never grant secretmanager roles at project level.",
    references=("https://cloud.google.com/secret-manager/docs/best-practices",),
)
def production_secrets_isolated(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    trusted = production_identities(resources, ctx)
    secrets = {str(r.get("secretId")): r for r in resources if r.type == SECRET and r.get("secretId")}
    for grant in resources:
        if grant.type in SECRET_IAM:
            secret = last_segment(grant.get("secretId"))
            if secret and production_named(secret, secrets, ctx):
                for path, member in _strangers(grant, trusted):
                    yield Violation(grant, path, f"{grant.physical_name}: production secret {secret} is readable by "
                                                 f"{member} ({path}), not a production identity")
    yield from _project_grants(resources, PROJECT_SECRET_READERS, trusted)


@stack_rule(
    "BREW-S051", Severity.ERROR, "Only production identities reach the production bucket",
    description="The production bucket holds customers' pictures, video and documents; brew-runtime (staging, "
                "the demo, ops jobs) must not read it (SPEC 3.5). A bucket IAM member on a production bucket, or a "
                "project-level object role, for an identity no production stack creates breaks that. Checkov "
                "CKV_GCP_28 / Trivy AVD-GCP-0001 only catch public members, not a cross-environment one.",
    remediation="Grant the production bucket to brew-prod-runtime only (infra/environments/app.py bucket()); never "
                "grant storage object roles at project level.",
    references=("CKV_GCP_28", "AVD-GCP-0001"),
)
def production_bucket_isolated(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    trusted = production_identities(resources, ctx)
    buckets = named(resources, BUCKET)
    for grant in resources:
        if grant.type in BUCKET_IAM:
            bucket = last_segment(grant.get("bucket"))
            if bucket and production_named(bucket, buckets, ctx):
                for path, member in _strangers(grant, trusted):
                    yield Violation(grant, path, f"{grant.physical_name}: production bucket {bucket} grants "
                                                 f"{grant.get('role')} to {member} ({path}), not a production identity")
    yield from _project_grants(resources, PROJECT_OBJECT_READERS, trusted)


def _ops_logins(resources: Sequence[Resource]) -> set[tuple[str, str]]:
    """(account id, database user) of each ops job: the login it runs as and connects with."""
    logins = set()
    for job in resources:
        user = env(job).get("PGUSER") if job.type == JOB and label(job, "role") == OPS_ROLE else None
        identity = account_id(service_account(job)) if user else None
        if user and identity:
            logins.add((identity, user.value))
    return logins


@stack_rule(
    "BREW-S052", Severity.ERROR, "Non-production identities log in to production databases only as an ops job",
    description="brew-runtime's one door into production is the ops job's monitoring-only login on brew-prod "
                "(pg_monitor: statistics views, never table data; SPEC 3.5). Any other IAM database login on a "
                "production instance for an identity no production stack creates reads production tables. The "
                "pg_monitor grant itself lives in the database, outside the graph: this rule checks that the login "
                "is the one an ops job (label role=ops) runs as and connects with. None of Checkov, KICS or Trivy "
                "checks sql users.",
    remediation="Declare non-production logins on brew-prod only through an ops job with `databaseLogin: "
                "monitoring` (brew:jobs in stacks/Pulumi.prod.yaml); drop any other from the database's IAM users.",
    references=("https://cloud.google.com/sql/docs/postgres/iam-logins",),
)
def production_database_logins(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    trusted = production_identities(resources, ctx)
    instances = named(resources, INSTANCE)
    ops = _ops_logins(resources)
    for user in resources:
        if user.type != SQL_USER or user.get("type") != IAM_SERVICE_ACCOUNT_LOGIN:
            continue
        instance, login = last_segment(user.get("instance")), str(user.get("name") or "")
        identity = account_id(f"{login}.gserviceaccount.com")
        if not (instance and login) or not production_named(instance, instances, ctx) or identity in trusted:
            continue
        if (identity, login) not in ops:
            yield Violation(user, "name", f"production database {instance} has a login for {login} (name), "
                                          "which is neither a production identity nor an ops job's login")


# --- role breadth ---------------------------------------------------------------------

@resource_rule(
    "BREW-S053", Severity.ERROR, "No primitive roles", types=IAM_TYPES,
    description="roles/owner, roles/editor and roles/viewer span every service in the project, far beyond what "
                "any Brew identity needs. Checkov CKV_GCP_117 (project level); applied here to every IAM member "
                "and binding.",
    remediation="Grant the predefined role the task needs (ProjectGrant in infra/components/identity.py).",
    references=("CKV_GCP_117",),
)
def no_primitive_roles(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    role = res.get("role")
    if role in PRIMITIVE_ROLES:
        yield "role", f"{res.physical_name} grants the primitive role {role} (role)"


def _service_account_members(res: Resource) -> list[str]:
    return [member for _, member in members(res) if account_id(member)]


def _scoped_to_resources(res: Resource) -> bool:
    return "resource.name" in str(res.get("condition.expression") or "")


@resource_rule(
    "BREW-S054", Severity.ERROR, "Service accounts hold no admin roles at project level", types=HIERARCHY_IAM,
    description="A compromised workload or CI run acts with its service account's roles: an admin, owner or editor "
                "role turns it into a project takeover. Trivy AVD-GCP-0007 (HIGH) flags roles/owner, roles/editor "
                "and *admin roles; Checkov CKV_GCP_42 also flags any role naming editor or owner "
                "(roles/cloudsql.editor). Such a service-level editor role passes here only under an IAM condition "
                "on resource.name — the only way to grant a Cloud SQL role on one instance — while admin, owner and "
                "editor roles never pass.",
    remediation="Grant a narrower predefined role, and scope Cloud SQL roles to named instances with a condition "
                "(ProjectGrant(role, title, expression) in infra/components/identity.py).",
    references=("CKV_GCP_42", "AVD-GCP-0007"),
)
def no_admin_service_accounts(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    role = str(res.get("role") or "")
    accounts = _service_account_members(res)
    if not accounts:
        return
    always = role in ("roles/owner", "roles/editor") or bool(_ADMIN.search(role))
    if always or (_BROAD.search(role) and not _scoped_to_resources(res)):
        yield "role", f"{res.physical_name} grants {role} to {', '.join(accounts)} at project level (role)"


@resource_rule(
    "BREW-S055", Severity.ERROR, "No project-level service account impersonation", types=HIERARCHY_IAM,
    description="serviceAccountUser or serviceAccountTokenCreator on the project lets the holder act as every "
                "service account in it, brew-prod-runtime included, and so read every production secret. "
                "Checkov CKV_GCP_41, Trivy AVD-GCP-0011 (MEDIUM); an error here because of what it reaches.",
    remediation="Grant actAs on the one account needed (serviceaccount.IAMMember, DeployerIdentityArgs.act_as in "
                "infra/components/deployer.py).",
    references=("CKV_GCP_41", "AVD-GCP-0011"),
)
def no_project_impersonation(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    role = res.get("role")
    if role in IMPERSONATION_ROLES and members(res):
        yield "role", f"{res.physical_name} grants {role} on the whole project to {members(res)[0][1]} (role)"


@resource_rule(
    "BREW-S056", Severity.ERROR, "No roles for default service accounts", types=IAM_TYPES,
    description="The Compute Engine and App Engine default service accounts are shared by anything created "
                "without an identity of its own; a role granted to them reaches every such workload. Checkov "
                "CKV_GCP_46, Trivy AVD-GCP-0006 (MEDIUM).",
    remediation="Grant the role to the workload's own service account (RuntimeIdentity in "
                "infra/components/identity.py).",
    references=("CKV_GCP_46", "AVD-GCP-0006"),
)
def no_default_service_accounts(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    for path, member in members(res):
        if _DEFAULT_ACCOUNT.search(member):
            yield path, f"{res.physical_name} grants {res.get('role')} to the default service account {member} ({path})"
