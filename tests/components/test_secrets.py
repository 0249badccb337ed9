"""SecretSet: one container per id with labels and automatic replication, one accessor
binding per (secret, accessor), and no secret version (values stay out of state)."""

from __future__ import annotations

import pulumi
import pytest

from infra.components.secrets import SecretSet, SecretSetArgs
from infra.synth.engine import run_program

SECRET = "gcp:secretmanager/secret:Secret"
ACCESSOR = "gcp:secretmanager/secretIamMember:SecretIamMember"
LABELS = {"environment": "prod", "service": "secrets", "managed-by": "pulumi"}
RUNTIME = "serviceAccount:rt@p.iam.gserviceaccount.com"
OPS = "serviceAccount:ops@p.iam.gserviceaccount.com"


def synth(args: SecretSetArgs):
    def program():
        secrets = SecretSet("sec", args)
        pulumi.export("ids", secrets.ids)
        pulumi.export("names", secrets.names)

    return run_program(program, project="brew", stack="test", config={"gcp:project": "p"})


def test_secrets_and_accessors():
    graph = synth(
        SecretSetArgs(project="p", secret_ids=("brew-prod-stripe", "brew_prod_smtp"), accessors=(RUNTIME, OPS), labels=LABELS)
    )
    component = graph.one("brew:gcp:SecretSet", "sec")["urn"]
    for secret_id in ("brew-prod-stripe", "brew_prod_smtp"):
        secret = graph.one(SECRET, f"sec-{secret_id}")
        assert secret["inputs"] == {
            "project": "p",
            "secretId": secret_id,
            "replication": {"auto": {}},
            "labels": LABELS,
        }
        assert secret["parent"] == component
        for index, member in enumerate((RUNTIME, OPS)):
            binding = graph.one(ACCESSOR, f"sec-{secret_id}-accessor-{index}")
            assert binding["inputs"] == {
                "project": "p",
                "secretId": f"projects/p/secrets/{secret_id}",
                "role": "roles/secretmanager.secretAccessor",
                "member": member,
            }
            assert binding["parent"] == component
            assert secret["urn"] in binding["dependencies"]
    assert len(graph.by_type(SECRET)) == 2
    assert len(graph.by_type(ACCESSOR)) == 4
    assert not graph.by_type("gcp:secretmanager/secretVersion:SecretVersion")


def test_outputs_map_secret_id_to_resource():
    outputs = synth(SecretSetArgs(project="p", secret_ids=("a", "b"), accessors=(RUNTIME,))).outputs
    assert outputs["ids"] == {"a": "projects/p/secrets/a", "b": "projects/p/secrets/b"}
    assert outputs["names"] == {"a": "projects/p/secrets/a", "b": "projects/p/secrets/b"}


def test_no_accessors_means_no_bindings():
    graph = synth(SecretSetArgs(project="p", secret_ids=("a",), accessors=()))
    assert len(graph.by_type(SECRET)) == 1
    assert not graph.by_type(ACCESSOR)


@pytest.mark.parametrize(
    ("secret_ids", "message"),
    [
        (("a", "a"), "'a' appears more than once"),
        (("has space",), "'has space'"),
        (("",), "''"),
        (("x" * 256,), "must be 1-255"),
        (("dots.not.allowed",), "dots.not.allowed"),
    ],
)
def test_invalid_ids_raise(secret_ids, message):
    with pytest.raises(ValueError, match=message):
        synth(SecretSetArgs(project="p", secret_ids=secret_ids, accessors=(RUNTIME,)))
