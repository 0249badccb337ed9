"""RuntimeIdentity: a service account and one project IAM member per grant."""

from __future__ import annotations

import pulumi
import pytest

from infra.components.identity import ProjectGrant, RuntimeIdentity, RuntimeIdentityArgs
from infra.synth.engine import run_program

ACCOUNT = "gcp:serviceaccount/account:Account"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
EMAIL = "brew-runtime@p.iam.gserviceaccount.com"
ONLY_DB = "resource.name == 'projects/p/instances/brew-prod-db'"


def synth(args: RuntimeIdentityArgs):
    def program():
        ident = RuntimeIdentity("rt", args)
        pulumi.export("email", ident.email)
        pulumi.export("member", ident.member)
        pulumi.export("id", ident.id)

    return run_program(program, project="brew", stack="test", config={"gcp:project": "p"})


def args(*grants: ProjectGrant, account_id: str = "brew-runtime") -> RuntimeIdentityArgs:
    return RuntimeIdentityArgs(account_id=account_id, display_name="Brew prod runtime", project="p", grants=grants)


def test_account_and_grants():
    graph = synth(
        args(
            ProjectGrant("roles/logging.logWriter"),
            ProjectGrant("roles/cloudsql.client", "only brew-prod-db", ONLY_DB),
        )
    )
    component = graph.one("brew:gcp:RuntimeIdentity", "rt")["urn"]
    account = graph.one(ACCOUNT, "rt-account")
    assert account["inputs"] == {"accountId": "brew-runtime", "displayName": "Brew prod runtime", "project": "p"}
    assert account["parent"] == component
    writer = graph.one(PROJECT_MEMBER, "rt-logging-logWriter")
    assert writer["inputs"] == {
        "project": "p",
        "role": "roles/logging.logWriter",
        "member": f"serviceAccount:{EMAIL}",
    }
    client = graph.one(PROJECT_MEMBER, "rt-cloudsql-client")
    assert client["inputs"]["condition"] == {"title": "only brew-prod-db", "expression": ONLY_DB}
    assert client["inputs"]["role"] == "roles/cloudsql.client"
    for member in (writer, client):
        assert member["parent"] == component
        assert account["urn"] in member["dependencies"]
    assert len(graph.by_type(PROJECT_MEMBER)) == 2


def test_outputs():
    outputs = synth(args()).outputs
    assert outputs == {
        "email": EMAIL,
        "member": f"serviceAccount:{EMAIL}",
        "id": f"projects/p/serviceAccounts/{EMAIL}",
    }


@pytest.mark.parametrize("role", ["roles/owner", "roles/editor", "roles/viewer"])
def test_primitive_roles_refused(role):
    with pytest.raises(ValueError, match=role):
        synth(args(ProjectGrant(role)))


@pytest.mark.parametrize(
    "grant",
    [ProjectGrant("roles/cloudsql.client", "only db", None), ProjectGrant("roles/cloudsql.client", None, ONLY_DB)],
)
def test_half_a_condition_refused(grant):
    with pytest.raises(ValueError, match="condition_title and condition_expression"):
        synth(args(grant))


def test_duplicate_role_refused():
    with pytest.raises(ValueError, match="more than once"):
        synth(args(ProjectGrant("roles/run.developer"), ProjectGrant("roles/run.developer")))


@pytest.mark.parametrize("account_id", ["short", "1starts-with-digit", "ends-with-dash-", "Upper-case-id", "a" * 31])
def test_bad_account_id_refused(account_id):
    with pytest.raises(ValueError, match="account_id"):
        synth(args(account_id=account_id))


@pytest.mark.parametrize("account_id", ["abcdef", "a" * 30, "brew-prod-runtime"])
def test_good_account_ids(account_id):
    assert synth(args(account_id=account_id)).outputs["email"] == f"{account_id}@p.iam.gserviceaccount.com"
