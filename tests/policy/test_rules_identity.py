"""Identity rules (BREW-S050..S056): the shipped stacks pass; production secrets, buckets
and databases refuse identities no production stack creates (brew-runtime's one door is
the ops job's login), and over-broad roles fail, naming the grant and the property."""

from __future__ import annotations

import copy

import pytest

from infra.policy.model import Rule, Severity
from infra.policy.rules import identity
from tests.policy.helpers import DELETE, findings, graph, resource

SECRET_MEMBER = "gcp:secretmanager/secretIamMember:SecretIamMember"
SECRET_BINDING = "gcp:secretmanager/secretIamBinding:SecretIamBinding"
BUCKET_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
SQL_USER = "gcp:sql/user:User"
JOB = "gcp:cloudrunv2/job:Job"
RULES = [value for value in vars(identity).values() if isinstance(value, Rule)]
RUNTIME = "serviceAccount:brew-runtime@squareup-brew.iam.gserviceaccount.com"
PROD_RUNTIME = "serviceAccount:brew-prod-runtime@squareup-brew.iam.gserviceaccount.com"


def plus(data: dict, *extra: dict) -> dict:
    """A copy of `data` with crafted resources added, in its stack."""
    data = copy.deepcopy(data)
    for r in extra:
        r["urn"] = r["urn"].replace("urn:pulumi:prod::", f"urn:pulumi:{data['stack']}::")
    data["resources"] += list(extra)
    return data


def edited(data: dict, logical_name: str, path: str, value) -> dict:
    """A copy of `data` with one input of the resource of that logical name set (DELETE removes)."""
    data = copy.deepcopy(data)
    [target] = [r for r in data["resources"] if r["name"] == logical_name]
    *parents, last = path.split(".")
    inputs = target["inputs"]
    for part in parents:
        inputs = inputs.setdefault(part, {})
    if value is DELETE:
        inputs.pop(last, None)
    else:
        inputs[last] = value
    return data


def where(rule: Rule, data: dict) -> list[tuple[str, str, str]]:
    found = findings(rule, data)
    for f in found:
        assert f.resource in f.message and f.property in f.message and f.severity is rule.severity, f
    return [(f.rule, f.resource, f.property) for f in found]


def grant(type_token: str, name: str, **inputs) -> dict:
    return resource(type_token, name, {"project": "squareup-brew", **inputs})


def test_ids_and_metadata():
    assert sorted(r.id for r in RULES) == [f"BREW-S{n:03d}" for n in range(50, 57)]
    for rule in RULES:
        assert rule.title and rule.description and rule.remediation and rule.severity is Severity.ERROR


# --- production secrets ---------------------------------------------------------------

def test_brew_runtime_on_a_production_secret_in_prod(graphs):
    data = plus(graphs["prod"], grant(SECRET_MEMBER, "leak", role="roles/secretmanager.secretAccessor", member=RUNTIME,
                                      secretId="projects/squareup-brew/secrets/brew-prod-treg-api-key"))
    assert where(identity.production_secrets_isolated, data) == [("BREW-S050", "leak", "member")]


def test_a_production_secret_granted_from_staging_is_known_by_its_name(graphs):
    data = plus(graphs["staging"], grant(SECRET_BINDING, "leak", secretId="brew-prod-openai-api-key",
                                         role="roles/secretmanager.secretAccessor", members=[RUNTIME, RUNTIME]))
    assert where(identity.production_secrets_isolated, data) == [
        ("BREW-S050", "leak", "members[0]"), ("BREW-S050", "leak", "members[1]")]
    # Staging's own secrets stay readable by staging's runtime.
    ours = plus(graphs["staging"], grant(SECRET_MEMBER, "ours", secretId="brew-staging-extra",
                                         role="roles/secretmanager.secretAccessor", member=RUNTIME))
    assert where(identity.production_secrets_isolated, ours) == []


def test_project_level_secret_access_reaches_production_secrets(graphs):
    data = plus(graphs["staging"], grant(PROJECT_MEMBER, "wide", role="roles/secretmanager.secretAccessor",
                                         member=RUNTIME))
    assert where(identity.production_secrets_isolated, data) == [("BREW-S050", "wide", "member")]


# --- production bucket ----------------------------------------------------------------

@pytest.mark.parametrize("stack", ["prod", "staging", "demo"])
def test_brew_runtime_on_the_production_bucket(graphs, stack):
    data = plus(graphs[stack], grant(BUCKET_MEMBER, "peek", bucket="brew-prod", role="roles/storage.objectViewer",
                                     member=RUNTIME))
    assert where(identity.production_bucket_isolated, data) == [("BREW-S051", "peek", "member")]


def test_project_level_object_roles_reach_the_production_bucket(graphs):
    data = plus(graphs["demo"], grant(PROJECT_MEMBER, "wide", role="roles/storage.objectViewer", member=RUNTIME))
    assert where(identity.production_bucket_isolated, data) == [("BREW-S051", "wide", "member")]
    trusted = plus(graphs["prod"], grant(PROJECT_MEMBER, "wide", role="roles/storage.objectViewer",
                                         member=PROD_RUNTIME))
    assert where(identity.production_bucket_isolated, trusted) == []


# --- production database --------------------------------------------------------------

def test_brew_runtime_s_prod_login_is_the_ops_job_s(graphs):
    prod = graphs["prod"]
    assert where(identity.production_database_logins, prod) == []
    expected = [("BREW-S052", "brew-runtime@squareup-brew.iam", "name")]
    assert where(identity.production_database_logins, edited(prod, "brew-ops-job", "labels.role", "batch")) == expected
    job_env = next(r for r in prod["resources"] if r["name"] == "brew-ops-job")["inputs"]["template"]["template"]
    other_user = [dict(e, value="someone@squareup-brew.iam") if e["name"] == "PGUSER" else e
                  for e in job_env["containers"][0]["envs"]]
    relogged = copy.deepcopy(prod)
    next(r for r in relogged["resources"] if r["name"] == "brew-ops-job")["inputs"]["template"]["template"][
        "containers"][0]["envs"] = other_user
    assert where(identity.production_database_logins, relogged) == expected
    no_ops = {**prod, "resources": [r for r in prod["resources"] if r["type"] != JOB]}
    assert where(identity.production_database_logins, no_ops) == expected


def test_another_non_production_login_on_brew_prod(graphs):
    data = plus(graphs["prod"], resource(SQL_USER, "demo-login", {
        "instance": "brew-prod", "name": "brew-demo-runtime@squareup-brew.iam", "type": "CLOUD_IAM_SERVICE_ACCOUNT"}))
    assert where(identity.production_database_logins, data) == [
        ("BREW-S052", "brew-demo-runtime@squareup-brew.iam", "name")]


def test_a_staging_stack_declaring_a_login_on_brew_prod(graphs):
    data = plus(graphs["staging"], resource(SQL_USER, "sneak", {
        "instance": "brew-prod", "name": "brew-runtime@squareup-brew.iam", "type": "CLOUD_IAM_SERVICE_ACCOUNT"}))
    assert where(identity.production_database_logins, data) == [
        ("BREW-S052", "brew-runtime@squareup-brew.iam", "name")]


# --- role breadth ---------------------------------------------------------------------

@pytest.mark.parametrize(
    ("rule", "logical", "path", "value", "prop"),
    [
        (identity.no_primitive_roles, "brew-prod-runtime-aiplatform-user", "role", "roles/viewer", "role"),
        (identity.no_primitive_roles, "brew-prod-storage-objectAdmin-0", "role", "roles/editor", "role"),
        (identity.no_admin_service_accounts, "brew-prod-runtime-aiplatform-user", "role", "roles/aiplatform.admin",
         "role"),
        (identity.no_admin_service_accounts, "brew-deployer-run-developer", "role", "roles/owner", "role"),
        (identity.no_admin_service_accounts, "brew-deployer-cloudsql-editor", "condition", DELETE, "role"),
        (identity.no_project_impersonation, "brew-deployer-run-developer", "role", "roles/iam.serviceAccountUser",
         "role"),
        (identity.no_project_impersonation, "brew-deployer-run-developer", "role",
         "roles/iam.serviceAccountTokenCreator", "role"),
        (identity.no_default_service_accounts, "brew-prod-runtime-aiplatform-user", "member",
         "serviceAccount:123456789012-compute@developer.gserviceaccount.com", "member"),
        (identity.no_default_service_accounts, "brew-prod-storage-objectAdmin-0", "member",
         "serviceAccount:squareup-brew@appspot.gserviceaccount.com", "member"),
    ],
)
def test_one_changed_grant_fails_its_rule(graphs, rule, logical, path, value, prop):
    found = findings(rule, edited(graphs["prod"], logical, path, value))
    assert [(f.rule, f.resource, f.property) for f in found] == [(rule.id, logical, prop)]
    assert logical in found[0].message


def test_an_instance_scoped_editor_role_passes_but_an_admin_one_does_not(graphs):
    scoped = edited(graphs["prod"], "brew-deployer-cloudsql-editor", "role", "roles/cloudsql.admin")
    assert where(identity.no_admin_service_accounts, scoped) == [
        ("BREW-S054", "brew-deployer-cloudsql-editor", "role")]
    human = plus(graphs["prod"], grant(PROJECT_MEMBER, "human", role="roles/cloudsql.admin", member="user:a@b.com"))
    assert where(identity.no_admin_service_accounts, human) == []


def test_act_as_on_one_account_is_not_project_impersonation(graphs):
    act_as = [r for r in graphs["prod"]["resources"] if r["name"] == "brew-deployer-act-as-0"]
    assert act_as[0]["inputs"]["role"] == "roles/iam.serviceAccountUser"
    assert findings(identity.no_project_impersonation, graphs["prod"]) == []


ODD = graph(
    "prod",
    resource("gcp:serviceaccount/account:Account", "acct", {"accountId": ["x"]}),
    resource(SECRET_MEMBER, "s", {"secretId": {"a": 1}, "member": 5}),
    resource(SECRET_BINDING, "b", {"secretId": "brew-prod-x", "members": "serviceAccount:x@y.iam.gserviceaccount.com"}),
    resource(BUCKET_MEMBER, "bm", {"bucket": None, "member": None}),
    resource(PROJECT_MEMBER, "p", {"role": ["roles/owner"], "member": "serviceAccount:@.gserviceaccount.com",
                                   "condition": "x"}),
    resource(SQL_USER, "u", {"instance": "brew-prod", "name": None, "type": "CLOUD_IAM_SERVICE_ACCOUNT"}),
    resource(JOB, "j", {"labels": "ops", "template": {"template": {"containers": [{"envs": [None, {"name": 1}]}],
                                                                    "serviceAccount": 3}}}),
)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_odd_graphs_do_not_crash(rule):
    for f in findings(rule, ODD):
        assert f.rule == rule.id and f.property
