"""`brew-infra storage check` against moto's S3 server, a real HTTP endpoint on a local port.

moto accepts any key unless IAM authentication is on, so the fixture first creates IAM
users and their access keys through the server's IAM API, then switches authentication
on through the server's `/moto-api/reset-auth`: from then on every call's SigV4 signature
is checked against the keys IAM holds, and the user's policy against the action, as GCS
checks an HMAC key and its service account's role.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
import requests
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

from infra.storage_check import (
    STEPS,
    Credentials,
    Problem,
    StorageInputError,
    Target,
    run_check,
    s3_client,
)
from infra.synth.stacks import REPO_ROOT

BUCKET = "penpot-assets"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class Store:
    endpoint: str
    penpot: Credentials  # objects in BUCKET only, like roles/storage.objectAdmin on the bucket
    platform: Credentials  # objects in every bucket, like the same role on the project
    outsider: Credentials  # a valid key whose user has no policy at all

    def client(self, credentials: Credentials | None = None) -> Any:
        return s3_client(Target(self.endpoint, BUCKET), credentials or self.penpot)

    def holds(self, key: str) -> bool:
        try:
            self.client().head_object(Bucket=BUCKET, Key=key)
        except ClientError as error:
            assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 404, error
            return False
        return True


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    # Authentication is still off: any key sets the scene.
    setup = {"endpoint_url": endpoint, "region_name": "us-east-1",
             "aws_access_key_id": "setup", "aws_secret_access_key": "setup"}
    iam = boto3.client("iam", **setup)
    boto3.client("s3", **setup).create_bucket(Bucket=BUCKET)
    iam.create_user(UserName="penpot")
    iam.put_user_policy(UserName="penpot", PolicyName="penpot-assets-objects", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow",
                       "Action": ["s3:PutObject", "s3:GetObject", "s3:DeleteObject", "s3:ListBucket"],
                       "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]}],
    }))
    iam.create_user(UserName="platform")
    iam.put_user_policy(UserName="platform", PolicyName="all-objects", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    iam.create_user(UserName="outsider")
    users = ("penpot", "platform", "outsider")
    keys = {user: iam.create_access_key(UserName=user)["AccessKey"] for user in users}
    previous = requests.post(f"{endpoint}/moto-api/reset-auth", data=b"0", timeout=10).json()
    try:
        yield Store(endpoint, *(Credentials(keys[u]["AccessKeyId"], keys[u]["SecretAccessKey"])
                                for u in users))
    finally:
        # The server runs in this process: give moto's global auth setting and state back.
        requests.post(f"{endpoint}/moto-api/reset-auth",
                      data=previous["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"].encode(), timeout=10)
        requests.post(f"{endpoint}/moto-api/reset", timeout=10)
        server.stop()


def check(store: Store, credentials: Credentials | None = None, *, bucket: str = BUCKET,
          endpoint: str | None = None, client: Any = None):
    target = Target(endpoint or store.endpoint, bucket, timeout=2)
    credentials = credentials or store.penpot
    return run_check(client or s3_client(target, credentials), target, credentials)


def statuses(result) -> dict[str, str]:
    return {step.name: step.status.value for step in result.steps}


def test_round_trip_passes_and_leaves_nothing_behind(store: Store) -> None:
    result = check(store)

    assert result.ok, result.message
    assert statuses(result) == dict.fromkeys(STEPS, "ok")
    assert all(step.ms is not None and step.ms >= 0 for step in result.steps)
    assert result.key.startswith("brew-infra-smoke/") and result.size == 16 * 1024
    assert not store.holds(result.key)


def test_wrong_secret_is_rejected_as_credentials(store: Store) -> None:
    forged = Credentials(store.penpot.access_key_id, "not-the-secret")
    result = check(store, forged)

    assert result.problem is Problem.CREDENTIALS_REJECTED
    assert result.message == f"credentials rejected by {store.endpoint}: SignatureDoesNotMatch"
    # A refused put stored nothing, so there is nothing to clean up.
    assert statuses(result) == {"put": "failed", "get": "skipped", "list": "skipped",
                                "delete": "skipped", "gone": "skipped"}
    assert not store.holds(result.key)


def test_unknown_access_key_is_rejected_as_credentials(store: Store) -> None:
    result = check(store, Credentials("GOOG1EUNKNOWNKEYUNKNOWNKEY", "whatever"))

    assert result.problem is Problem.CREDENTIALS_REJECTED
    assert result.message.endswith(": InvalidAccessKeyId")


def test_valid_key_without_access_to_the_bucket_is_access_denied(store: Store) -> None:
    result = check(store, store.outsider)

    assert result.problem is Problem.CREDENTIALS_REJECTED
    assert result.message == (f"credentials rejected by {store.endpoint}: AccessDenied (the key is known "
                              f"but may not use bucket {BUCKET}: check the name and the key's role on it)")


def test_missing_bucket_is_named(store: Store) -> None:
    result = check(store, store.platform, bucket="penpot-assets-typo")

    assert result.problem is Problem.BUCKET_MISSING
    assert result.message == f"bucket penpot-assets-typo does not exist at {store.endpoint}"


def test_key_granted_on_one_bucket_is_refused_on_a_misspelled_one(store: Store) -> None:
    # The grant is checked before the bucket is looked up, so the hint names both causes.
    result = check(store, bucket="penpot-assets-typo")

    assert result.problem is Problem.CREDENTIALS_REJECTED
    assert "may not use bucket penpot-assets-typo: check the name" in result.message


def test_endpoint_that_does_not_answer() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    target = Target(endpoint, BUCKET, timeout=2)
    credentials = Credentials("GOOG1EKEY", "secret")
    result = run_check(s3_client(target, credentials), target, credentials)

    assert result.problem is Problem.UNREACHABLE
    assert result.message == f"{endpoint} does not answer: [Errno 111] Connection refused"
    assert statuses(result)["delete"] == "skipped"


class CorruptingReads:
    """The real client, except that every object read comes back with its first byte flipped."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_object(self, **kwargs: Any) -> dict[str, Any]:
        answer = self._client.get_object(**kwargs)
        body = bytearray(answer["Body"].read())
        body[0] ^= 0xFF
        return answer | {"Body": io.BytesIO(bytes(body))}


def test_bytes_that_come_back_different_fail_and_the_object_is_still_deleted(store: Store) -> None:
    result = check(store, client=CorruptingReads(store.client()))

    assert result.problem is Problem.ROUND_TRIP_FAILED
    assert "get returned different bytes" in result.message
    assert statuses(result) == {"put": "ok", "get": "failed", "list": "skipped", "delete": "ok", "gone": "ok"}
    assert not store.holds(result.key)


@pytest.mark.parametrize(("addressing", "url"), [
    ("path", "https://storage.googleapis.com/penpot-assets/k"),
    ("virtual", "https://penpot-assets.storage.googleapis.com/k"),
])
def test_addressing_decides_where_the_bucket_goes(addressing: str, url: str) -> None:
    target = Target("https://storage.googleapis.com", BUCKET, addressing=addressing)  # type: ignore[arg-type]
    client = s3_client(target, Credentials("GOOG1EKEY", "secret"))

    assert client.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": "k"}).startswith(url + "?")


@pytest.mark.parametrize(("endpoint", "bucket", "complaint"), [
    ("storage.googleapis.com", BUCKET, "must be an http:// or https:// URL"),
    ("ftp://storage.googleapis.com", BUCKET, "must be an http:// or https:// URL"),
    ("https://storage.googleapis.com/penpot-assets", BUCKET, "without a path"),
    ("https://storage.googleapis.com", "Penpot Assets", "is not a bucket name"),
])
def test_bad_input_is_refused_before_any_call(endpoint: str, bucket: str, complaint: str) -> None:
    with pytest.raises(StorageInputError, match=complaint):
        Target(endpoint, bucket)


def test_missing_key_names_the_variables_to_set() -> None:
    with pytest.raises(StorageInputError, match="^set AWS_SECRET_ACCESS_KEY: the HMAC key"):
        Credentials.from_env({"AWS_ACCESS_KEY_ID": "GOOG1EKEY"})
    assert "secret" not in repr(Credentials("GOOG1EKEY", "secret"))


# The command, as a person or CI runs it.

def cli(*args: str, credentials: Credentials | None = None) -> subprocess.CompletedProcess[str]:
    # Nothing from the machine's own AWS or Penpot settings may reach the check.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PENPOT_"))}
    env |= {"PYTHONPATH": str(REPO_ROOT), "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
    if credentials:
        env |= {"AWS_ACCESS_KEY_ID": credentials.access_key_id, "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key}
    return subprocess.run([sys.executable, "-m", "infra.cli", "storage", "check", *args],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_cli_passes_with_a_timed_line_per_step(store: Store) -> None:
    run = cli("--s3-endpoint", store.endpoint, "--bucket", BUCKET, "--prefix", "smoke", credentials=store.penpot)

    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"storage check: {store.endpoint} bucket {BUCKET} (path-style, region auto")
    assert [line.split()[:2] for line in lines[1:6]] == [[step, "ok"] for step in STEPS]
    assert " smoke/" in lines[1] and all(" ms" in line for line in lines[1:6])
    assert lines[6].startswith("passed: put, get, list and delete work")
    assert run.stderr == ""


def test_cli_json_reports_every_step(store: Store) -> None:
    run = cli("--s3-endpoint", store.endpoint, "--bucket", BUCKET, "--format", "json", credentials=store.penpot)

    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["ok"] is True and report["problem"] is None and report["exit_code"] == 0
    assert [(s["step"], s["status"]) for s in report["steps"]] == [(step, "ok") for step in STEPS]
    assert all(isinstance(s["ms"], float) for s in report["steps"])
    assert report["access_key"] == store.penpot.access_key_id[:8] + "…"
    assert store.penpot.secret_access_key not in run.stdout
    assert not store.holds(report["key"])


@pytest.mark.parametrize(("case", "code", "message"), [
    ("wrong secret", 90, "error: credentials rejected by {endpoint}: SignatureDoesNotMatch"),
    ("missing bucket", 91, "error: bucket penpot-assets-typo does not exist at {endpoint}"),
    ("nothing listening", 92, "error: {dead} does not answer: [Errno 111] Connection refused"),
    ("no key in the environment", 2, "error: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: the HMAC key's "
                                     "access ID and secret, the same variables Penpot's backend reads"),
    ("not a URL", 2, "error: --s3-endpoint must be an http:// or https:// URL, got 'storage.googleapis.com'"),
])
def test_cli_failure_is_one_line_and_its_exit_code(store: Store, case: str, code: int, message: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    endpoint, bucket, credentials = {
        "wrong secret": (store.endpoint, BUCKET, Credentials(store.penpot.access_key_id, "not-the-secret")),
        "missing bucket": (store.endpoint, "penpot-assets-typo", store.platform),
        "nothing listening": (dead, BUCKET, store.penpot),
        "no key in the environment": (store.endpoint, BUCKET, None),
        "not a URL": ("storage.googleapis.com", BUCKET, store.penpot),
    }[case]
    run = cli("--s3-endpoint", endpoint, "--bucket", bucket, "--timeout", "2", credentials=credentials)

    assert run.returncode == code
    assert run.stderr.splitlines() == [message.format(endpoint=store.endpoint, dead=dead)]
    assert "Traceback" not in run.stdout


def test_help_shows_the_gcs_example_the_key_variables_and_exit_codes() -> None:
    run = cli("--help")

    assert run.returncode == 0
    for words in ("https://storage.googleapis.com", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                  "PENPOT_OBJECTS_STORAGE_S3_ENDPOINT", "90 credentials rejected", "93 round trip failed"):
        assert words in run.stdout, words
