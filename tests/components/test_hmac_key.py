"""StorageHmacKey: an HMAC key for a service account, its secret stored in Secret Manager
at once (a version whose data is the key's secret output), readable by the accessors only."""

from __future__ import annotations

import dataclasses
from typing import Any

import pulumi
import pytest

from infra.components.hmac_key import StorageHmacKey, StorageHmacKeyArgs
from infra.synth.engine import SECRET, run_program

KEY = "gcp:storage/hmacKey:HmacKey"
SECRET_RESOURCE = "gcp:secretmanager/secret:Secret"
VERSION = "gcp:secretmanager/secretVersion:SecretVersion"
ACCESSOR = "gcp:secretmanager/secretIamMember:SecretIamMember"
EMAIL = "backend@p.iam.gserviceaccount.com"


def make_args(**overrides: Any) -> StorageHmacKeyArgs:
    base = StorageHmacKeyArgs(project="p", service_account_email=EMAIL, secret_id="storage-hmac",
                              accessors=(f"serviceAccount:{EMAIL}",), labels={"service": "storage-hmac"})
    return dataclasses.replace(base, **overrides)


def synth(args: StorageHmacKeyArgs):
    def program():
        key = StorageHmacKey("hmac", args)
        pulumi.export("accessId", key.access_id)
        pulumi.export("secretId", key.secret_id)

    return run_program(program, project="brew", stack="test", config={"gcp:project": "p"})


def test_the_key_s_secret_lives_in_secret_manager_only():
    graph = synth(make_args())
    component = graph.one("brew:gcp:StorageHmacKey", "hmac")["urn"]
    key = graph.one(KEY, "hmac-key")
    assert key["inputs"] == {"project": "p", "serviceAccountEmail": EMAIL}
    secret = graph.one(SECRET_RESOURCE, "hmac-secret")
    assert secret["inputs"] == {"project": "p", "secretId": "storage-hmac", "replication": {"auto": {}},
                                "labels": {"service": "storage-hmac"}}
    version = graph.one(VERSION, "hmac-version")
    assert version["inputs"] == {"secret": "projects/p/secrets/storage-hmac", "secretData": SECRET}
    assert key["urn"] in version["dependencies"]
    accessor = graph.one(ACCESSOR, "hmac-accessor-0")
    assert accessor["inputs"]["member"] == f"serviceAccount:{EMAIL}"
    assert accessor["inputs"]["role"] == "roles/secretmanager.secretAccessor"
    assert {r["parent"] for r in (key, secret, version, accessor)} == {component}
    # The access id names the key (plain); consumers refer to the secret through the version.
    assert graph.outputs["accessId"].startswith("GOOG1E")
    assert graph.outputs["secretId"] == "projects/p/secrets/storage-hmac"
    assert "mock-hmac-secret" not in str(graph.to_dict())


def test_no_accessors_means_nobody_reads_the_secret():
    graph = synth(make_args(accessors=()))
    assert not graph.by_type(ACCESSOR)
    assert len(graph.by_type(VERSION)) == 1


@pytest.mark.parametrize(("overrides", "message"), [
    ({"service_account_email": "someone@example.com"}, "service_account_email: 'someone@example.com'"),
    ({"secret_id": "has space"}, "secret_id: 'has space'"),
    ({"accessors": ("allUsers",)}, "accessors: 'allUsers'"),
])
def test_invalid_args_raise_one_line_value_error(overrides, message):
    with pytest.raises(ValueError) as raised:
        synth(make_args(**overrides))
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)
