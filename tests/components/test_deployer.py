"""DeployerIdentity: GitHub Actions reaches the account through workload identity
federation, only from one repository, and may act as named runtime accounts only."""

from __future__ import annotations

import dataclasses

import pulumi
import pytest

from infra.components.deployer import DeployerIdentity, DeployerIdentityArgs
from infra.components.identity import ProjectGrant
from infra.synth.engine import run_program

ACCOUNT = "gcp:serviceaccount/account:Account"
SA_MEMBER = "gcp:serviceaccount/iAMMember:IAMMember"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
POOL = "gcp:iam/workloadIdentityPool:WorkloadIdentityPool"
PROVIDER = "gcp:iam/workloadIdentityPoolProvider:WorkloadIdentityPoolProvider"
EMAIL = "brew-deployer@p.iam.gserviceaccount.com"
RUNTIME_SA = "projects/p/serviceAccounts/brew-runtime@p.iam.gserviceaccount.com"
POOL_NAME = "projects/000000000000/locations/global/workloadIdentityPools"

ARGS = DeployerIdentityArgs(
    account_id="brew-deployer",
    project="p",
    github_repository="brew-co/brew",
    grants=(ProjectGrant("roles/run.developer"), ProjectGrant("roles/cloudsql.client", "only db", "resource.name == 'x'")),
    act_as=(RUNTIME_SA,),
)


def synth(args: DeployerIdentityArgs):
    def program():
        deployer = DeployerIdentity("deployer", args)
        pulumi.export("email", deployer.email)
        pulumi.export("member", deployer.member)
        pulumi.export("provider_name", deployer.provider_name)

    return run_program(program, project="brew", stack="test", config={"gcp:project": "p"})


def test_account_grants_and_act_as():
    graph = synth(ARGS)
    component = graph.one("brew:gcp:DeployerIdentity", "deployer")["urn"]
    account = graph.one(ACCOUNT, "deployer-account")
    assert account["inputs"]["accountId"] == "brew-deployer"
    assert account["inputs"]["project"] == "p"
    developer = graph.one(PROJECT_MEMBER, "deployer-run-developer")
    assert developer["inputs"] == {"project": "p", "role": "roles/run.developer", "member": f"serviceAccount:{EMAIL}"}
    client = graph.one(PROJECT_MEMBER, "deployer-cloudsql-client")
    assert client["inputs"]["condition"] == {"title": "only db", "expression": "resource.name == 'x'"}
    act_as = graph.one(SA_MEMBER, "deployer-act-as-0")
    # Scoped to the runtime account itself, not a project-wide serviceAccountUser.
    assert act_as["inputs"] == {
        "serviceAccountId": RUNTIME_SA,
        "role": "roles/iam.serviceAccountUser",
        "member": f"serviceAccount:{EMAIL}",
    }
    assert not [m for m in graph.by_type(PROJECT_MEMBER) if m["inputs"]["role"] == "roles/iam.serviceAccountUser"]
    for child in (account, developer, client, act_as):
        assert child["parent"] == component


def test_federation_is_limited_to_the_repository():
    graph = synth(dataclasses.replace(ARGS, pool_id="ci-pool", provider_id="gha-oidc"))
    component = graph.one("brew:gcp:DeployerIdentity", "deployer")["urn"]
    pool = graph.one(POOL, "deployer-pool")
    assert pool["inputs"]["workloadIdentityPoolId"] == "ci-pool"
    assert pool["inputs"]["project"] == "p"
    provider = graph.one(PROVIDER, "deployer-provider")
    inputs = provider["inputs"]
    assert inputs["workloadIdentityPoolId"] == "ci-pool"
    assert inputs["workloadIdentityPoolProviderId"] == "gha-oidc"
    assert inputs["project"] == "p"
    assert inputs["oidc"] == {"issuerUri": "https://token.actions.githubusercontent.com"}
    assert inputs["attributeMapping"] == {
        "google.subject": "assertion.sub",
        "attribute.repository": "assertion.repository",
        "attribute.ref": "assertion.ref",
    }
    assert inputs["attributeCondition"] == "assertion.repository == 'brew-co/brew'"
    assert pool["urn"] in provider["dependencies"]
    wif = graph.one(SA_MEMBER, "deployer-wif-user")
    assert wif["inputs"] == {
        "serviceAccountId": f"projects/p/serviceAccounts/{EMAIL}",
        "role": "roles/iam.workloadIdentityUser",
        "member": f"principalSet://iam.googleapis.com/{POOL_NAME}/ci-pool/attribute.repository/brew-co/brew",
    }
    for child in (pool, provider, wif):
        assert child["parent"] == component
    assert graph.outputs["provider_name"] == f"{POOL_NAME}/ci-pool/providers/gha-oidc"


def test_defaults_and_outputs():
    graph = synth(DeployerIdentityArgs(account_id="brew-deployer", project="p", github_repository="o/r"))
    assert graph.one(POOL, "deployer-pool")["inputs"]["workloadIdentityPoolId"] == "github"
    assert graph.one(PROVIDER, "deployer-provider")["inputs"]["workloadIdentityPoolProviderId"] == "github-actions"
    assert not graph.by_type(PROJECT_MEMBER)
    assert [m["name"] for m in graph.by_type(SA_MEMBER)] == ["deployer-wif-user"]
    assert graph.outputs == {
        "email": EMAIL,
        "member": f"serviceAccount:{EMAIL}",
        "provider_name": f"{POOL_NAME}/github/providers/github-actions",
    }


@pytest.mark.parametrize(
    "repository", ["brew", "owner/", "/name", "owner/name/extra", "owner name/x", "https://github.com/o/r", ""]
)
def test_malformed_repository_refused(repository):
    with pytest.raises(ValueError, match="github_repository"):
        synth(dataclasses.replace(ARGS, github_repository=repository))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"account_id": "Deployer"}, "account_id"),
        ({"grants": (ProjectGrant("roles/editor"),)}, "roles/editor"),
        ({"grants": (ProjectGrant("roles/cloudsql.editor", "only db"),)}, "condition_title"),
        ({"pool_id": "gcp-pool"}, "pool_id"),
        ({"provider_id": "x"}, "provider_id"),
    ],
)
def test_other_invalid_args_raise(overrides, message):
    with pytest.raises(ValueError, match=message):
        synth(dataclasses.replace(ARGS, **overrides))
