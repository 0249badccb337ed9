"""A private Cloud Storage bucket: uniform access, public access prevented, IAM per role."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_gcp import storage

PUBLIC_MEMBERS = frozenset({"allUsers", "allAuthenticatedUsers"})


@dataclass(frozen=True)
class BucketArgs:
    bucket_name: str
    project: str
    location: str = "ASIA-SOUTH1"
    versioning: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    iam: Mapping[str, Sequence[pulumi.Input[str]]] = field(default_factory=dict)
    force_destroy: bool = False


class Bucket(pulumi.ComponentResource):
    """The bucket and one `BucketIAMMember` per (role, member)."""

    name: pulumi.Output[str]
    url: pulumi.Output[str]

    def __init__(self, name: str, args: BucketArgs, opts: pulumi.ResourceOptions | None = None):
        if not args.bucket_name:
            raise ValueError("bucket_name must not be empty")
        for role, members in args.iam.items():
            for member in members:
                if isinstance(member, str) and member in PUBLIC_MEMBERS:
                    raise ValueError(f"iam: {role} for {member!r} would make the bucket public")
        super().__init__("brew:gcp:Bucket", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        bucket = storage.Bucket(
            f"{name}-bucket",
            name=args.bucket_name,
            project=args.project,
            location=args.location,
            labels=dict(args.labels),
            force_destroy=args.force_destroy,
            versioning={"enabled": args.versioning},
            # IAM only, no per-object ACLs: one place to audit who can read what.
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            opts=child,
        )

        for role in sorted(args.iam):
            short_role = role.rsplit("/", 1)[-1].replace(".", "-")
            for index, member in enumerate(args.iam[role]):
                storage.BucketIAMMember(
                    f"{name}-{short_role}-{index}",
                    bucket=bucket.name,
                    role=role,
                    member=member,
                    opts=child,
                )

        self.name = bucket.name
        self.url = bucket.url
        self.register_outputs({"name": self.name, "url": self.url})
