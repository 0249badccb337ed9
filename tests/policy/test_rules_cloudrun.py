"""Cloud Run rules (BREW-S030..S039): the shipped stacks pass, and one changed property or
one public grant fails exactly the rule that guards it, naming the service and the property."""

from __future__ import annotations

import json

import pytest

from infra.policy.model import Rule, Severity
from infra.policy.rules import cloudrun
from tests.policy.helpers import DELETE, changed, find, findings, graph, resource

SERVICE = "gcp:cloudrunv2/service:Service"
JOB = "gcp:cloudrunv2/job:Job"
RULES = [value for value in vars(cloudrun).values() if isinstance(value, Rule)]
ALL = "INGRESS_TRAFFIC_ALL"
INTERNAL = "INGRESS_TRAFFIC_INTERNAL_ONLY"
LOAD_BALANCER = "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"
RUNTIME = "serviceAccount:brew-prod-runtime@squareup-brew.iam.gserviceaccount.com"


def only_violation(rule: Rule, data: dict, name: str, prop: str) -> str:
    """The message of the one finding `rule` reports, after checking where it points."""
    found = findings(rule, data)
    assert [(f.rule, f.resource, f.property) for f in found] == [(rule.id, name, prop)]
    assert found[0].severity is rule.severity
    return found[0].message


def with_env(data: dict, type_token: str, name: str, env_name: str, entry: dict) -> tuple[dict, str]:
    """`data` with one env var of the first container replaced (or added), and its path."""
    containers = "template.template.containers" if type_token == JOB else "template.containers"
    target = find(data, type_token, name)["inputs"]
    for part in containers.split(".")[:-1]:
        target = target[part]
    envs = [e for e in target["containers"][0]["envs"] if e["name"] != env_name]
    envs = sorted([*envs, {"name": env_name, **entry}], key=lambda e: e["name"])
    index = [e["name"] for e in envs].index(env_name)
    return changed(data, type_token, name, f"{containers}[0].envs", envs), f"{containers}[0].envs[{index}]"


def test_ids_and_metadata():
    assert sorted(r.id for r in RULES) == [f"BREW-S{n:03d}" for n in range(30, 38)]
    for rule in RULES:
        assert rule.types and rule.title and rule.remediation
    assert cloudrun.run_default_uri_disabled.severity is Severity.WARNING


@pytest.mark.parametrize(
    ("rule", "name", "path", "value", "says"),
    [
        (cloudrun.run_no_public_ingress, "brew-web", "ingress", ALL, f"ingress is {ALL}"),
        (cloudrun.run_no_public_ingress, "brew-web", "ingress", DELETE, f"ingress is not set, so {ALL}"),
        (cloudrun.run_worker_internal, "brew-worker", "ingress", LOAD_BALANCER, f"ingress is {LOAD_BALANCER}"),
        (cloudrun.run_worker_internal, "brew-worker", "ingress", DELETE, f"ingress is not set, so {ALL}"),
        (cloudrun.run_invoker_iam_behind_load_balancer, "brew-worker", "invokerIamDisabled", True,
         f"invokerIamDisabled is true with ingress {INTERNAL}"),
        (cloudrun.run_own_identity, "brew-web", "template.serviceAccount", DELETE,
         "template.serviceAccount is not set, so it runs as the Compute Engine default service account"),
        (cloudrun.run_own_identity, "brew-worker", "template.serviceAccount",
         "123456789-compute@developer.gserviceaccount.com", "is the default account 123456789-compute@"),
        (cloudrun.run_deletion_protection, "brew-web", "deletionProtection", False, "deletionProtection is false"),
        (cloudrun.run_default_uri_disabled, "brew-web", "defaultUriDisabled", False,
         "defaultUriDisabled is not true"),
    ],
)
def test_changed_prod_service_fails(graphs, rule, name, path, value, says):
    message = only_violation(rule, changed(graphs["prod"], SERVICE, name, path, value), name, path)
    assert message.startswith(f"Cloud Run service {name}: ") and says in message


def test_only_production_services_are_held_to_ingress_and_deletion_protection(graphs):
    staging = changed(graphs["staging"], SERVICE, "shopos-feed", "ingress", ALL)
    staging = changed(staging, SERVICE, "shopos-feed", "invokerIamDisabled", False)
    staging = changed(staging, SERVICE, "shopos-feed", "deletionProtection", False)
    for rule in (cloudrun.run_no_public_ingress, cloudrun.run_deletion_protection,
                 cloudrun.run_default_uri_disabled):
        assert findings(rule, staging) == []


def test_a_worker_is_known_by_its_role_env_without_the_label(graphs):
    data = changed(graphs["prod"], SERVICE, "brew-worker", "labels.role", DELETE)
    data = changed(data, SERVICE, "brew-worker", "ingress", LOAD_BALANCER)
    only_violation(cloudrun.run_worker_internal, data, "brew-worker", "ingress")


def test_web_and_worker_together_is_not_a_worker(graphs):
    # shopos-feed runs both roles and is served through the load balancer.
    assert find(graphs["staging"], SERVICE, "shopos-feed")["inputs"]["ingress"] == LOAD_BALANCER
    assert findings(cloudrun.run_worker_internal, graphs["staging"]) == []


def test_invoker_iam_off_with_open_ingress_fails_in_any_stack(graphs):
    data = changed(graphs["demo"], SERVICE, "brew-demo", "ingress", ALL)
    message = only_violation(cloudrun.run_invoker_iam_behind_load_balancer, data, "brew-demo", "invokerIamDisabled")
    assert f"with ingress {ALL}" in message


def test_job_without_its_own_identity_fails(graphs):
    data = changed(graphs["prod"], JOB, "brew-ops", "template.template.serviceAccount", DELETE)
    message = only_violation(cloudrun.run_own_identity, data, "brew-ops", "template.template.serviceAccount")
    assert message.startswith("Cloud Run job brew-ops: template.template.serviceAccount is not set")


def test_app_engine_default_account_fails(graphs):
    data = changed(graphs["demo"], SERVICE, "brew-demo", "template.serviceAccount",
                   "squareup-brew@appspot.gserviceaccount.com")
    only_violation(cloudrun.run_own_identity, data, "brew-demo", "template.serviceAccount")


@pytest.mark.parametrize(("type_token", "name"), [(SERVICE, "brew-web"), (JOB, "brew-ops")])
def test_plain_secret_env_fails(graphs, type_token, name):
    data, path = with_env(graphs["prod"], type_token, name, "ANTHROPIC_API_KEY", {"value": "sk-live"})
    message = only_violation(cloudrun.run_secrets_from_secret_manager, data, name, f"{path}.value")
    assert f"{path}.value sets ANTHROPIC_API_KEY in plain text" in message


def test_secret_reference_passes(graphs):
    ref = {"valueSource": {"secretKeyRef": {"secret": "projects/squareup-brew/secrets/pg", "version": "latest"}}}
    data, _ = with_env(graphs["prod"], JOB, "brew-ops", "PGPASSWORD", ref)
    assert findings(cloudrun.run_secrets_from_secret_manager, data) == []


@pytest.mark.parametrize("env_name", ["OPENAI_API_KEY", "SLACK_BOT_TOKEN", "PGPASSWORD", "DB_PASSWD",
                                      "META_APP_SECRET", "secret_salt", "GOOGLE_APPLICATION_CREDENTIALS",
                                      "TOKEN"])
def test_secret_like_names(env_name):
    assert cloudrun.SECRET_NAME.search(env_name)


@pytest.mark.parametrize("env_name", ["PGUSER", "PG_POOL_MAX", "GEMINI_MODEL_DEFAULT", "MAX_TOKENS",
                                      "KEYSPACE", "ROLE", "AI_PROVIDER"])
def test_ordinary_names(env_name):
    assert not cloudrun.SECRET_NAME.search(env_name)


@pytest.mark.parametrize(
    ("type_token", "inputs", "prop", "target"),
    [
        ("gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
         {"name": "brew-web", "location": "asia-south1", "role": "roles/run.invoker", "member": "allUsers"},
         "member", "brew-web"),
        ("gcp:cloudrunv2/serviceIamBinding:ServiceIamBinding",
         {"name": "brew-web", "role": "roles/run.invoker", "members": [RUNTIME, "allAuthenticatedUsers"]},
         "members[1]", "brew-web"),
        ("gcp:cloudrunv2/jobIamMember:JobIamMember",
         {"name": "brew-ops", "role": "roles/run.invoker", "member": "allUsers"}, "member", "brew-ops"),
        ("gcp:cloudrunv2/serviceIamPolicy:ServiceIamPolicy",
         {"name": "brew-web", "policyData": json.dumps({"bindings": [
             {"role": "roles/run.invoker", "members": ["allUsers"]}]})}, "policyData", "brew-web"),
        ("gcp:cloudrun/iamMember:IamMember",
         {"service": "brew-web", "role": "roles/run.invoker", "member": "allUsers"}, "member", "brew-web"),
    ],
)
def test_public_invoker_fails(graphs, type_token, inputs, prop, target):
    grant = resource(type_token, "public-invoker", inputs)
    data = {**graphs["prod"], "resources": [*graphs["prod"]["resources"], grant]}
    found = findings(cloudrun.run_no_public_invoker, data)
    assert [(f.rule, f.property) for f in found] == [("BREW-S032", prop)]
    assert found[0].message.startswith(f"Cloud Run {target}: {prop} grants roles/run.invoker to all")


def test_private_invoker_passes():
    grant = resource("gcp:cloudrunv2/serviceIamMember:ServiceIamMember", "lb-invoker",
                     {"name": "brew-web", "role": "roles/run.invoker", "member": RUNTIME})
    assert findings(cloudrun.run_no_public_invoker, graph("prod", grant)) == []
