"""Bucket: private by construction, every arg reaches the bucket, IAM per (role, member)."""

from __future__ import annotations

import pulumi
import pytest

from infra.components.bucket import Bucket, BucketArgs
from infra.synth.engine import run_program

BUCKET = "gcp:storage/bucket:Bucket"
MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
LABELS = {"environment": "prod", "service": "media", "managed-by": "pulumi"}


def synth(args: BucketArgs):
    def program():
        bucket = Bucket("media", args)
        pulumi.export("name", bucket.name)
        pulumi.export("url", bucket.url)

    return run_program(program, project="brew", stack="test", config={"gcp:project": "p"})


def test_every_arg_reaches_the_bucket():
    graph = synth(
        BucketArgs(
            bucket_name="brew-prod-media",
            project="p",
            location="US-CENTRAL1",
            versioning=True,
            labels=LABELS,
            force_destroy=True,
        )
    )
    bucket = graph.one(BUCKET, "media-bucket")
    assert bucket["inputs"] == {
        "name": "brew-prod-media",
        "project": "p",
        "location": "US-CENTRAL1",
        "versioning": {"enabled": True},
        "labels": LABELS,
        "forceDestroy": True,
        "uniformBucketLevelAccess": True,
        "publicAccessPrevention": "enforced",
    }
    assert bucket["parent"] == graph.one("brew:gcp:Bucket", "media")["urn"]
    assert graph.outputs == {"name": "brew-prod-media", "url": "gs://brew-prod-media"}


def test_defaults():
    inputs = synth(BucketArgs(bucket_name="b", project="p")).one(BUCKET, "media-bucket")["inputs"]
    assert inputs["location"] == "ASIA-SOUTH1"
    assert inputs["versioning"] == {"enabled": False}
    assert inputs["forceDestroy"] is False
    assert inputs["uniformBucketLevelAccess"] is True
    assert inputs["publicAccessPrevention"] == "enforced"


def test_one_iam_member_per_role_and_member():
    graph = synth(
        BucketArgs(
            bucket_name="brew-prod-media",
            project="p",
            iam={
                "roles/storage.objectAdmin": ("serviceAccount:rt@p.iam.gserviceaccount.com",),
                "roles/storage.objectViewer": ("group:ops@example.com", "user:a@example.com"),
            },
        )
    )
    component = graph.one("brew:gcp:Bucket", "media")["urn"]
    members = {r["name"]: r for r in graph.by_type(MEMBER)}
    assert set(members) == {
        "media-storage-objectAdmin-0",
        "media-storage-objectViewer-0",
        "media-storage-objectViewer-1",
    }
    assert members["media-storage-objectAdmin-0"]["inputs"] == {
        "bucket": "brew-prod-media",
        "role": "roles/storage.objectAdmin",
        "member": "serviceAccount:rt@p.iam.gserviceaccount.com",
    }
    assert members["media-storage-objectViewer-1"]["inputs"]["member"] == "user:a@example.com"
    assert all(m["parent"] == component for m in members.values())
    # The binding waits for the bucket it names.
    bucket_urn = graph.one(BUCKET, "media-bucket")["urn"]
    assert all(bucket_urn in m["dependencies"] for m in members.values())


@pytest.mark.parametrize("member", ["allUsers", "allAuthenticatedUsers"])
def test_public_members_are_refused(member):
    args = BucketArgs(bucket_name="b", project="p", iam={"roles/storage.objectViewer": ("user:a@example.com", member)})
    with pytest.raises(ValueError, match=member):
        synth(args)


def test_empty_name_is_refused():
    with pytest.raises(ValueError, match="bucket_name"):
        synth(BucketArgs(bucket_name="", project="p"))
