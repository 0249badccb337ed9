"""Secret Manager containers for a stack's provider secrets, and who may read them.

`SecretSet` declares only the containers and their IAM: values are added with gcloud
outside Pulumi, so no secret value ever reaches Pulumi state or a preview diff.
`store_secret` is for the other kind, a value a resource generated (an HMAC key's
secret, a Redis AUTH string): it is in Pulumi's state already, encrypted, as that
resource's secret output, and is stored as a secret version so Cloud Run reads it by
reference, never as a plain env value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_gcp import secretmanager

SECRET_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,255}$")


@dataclass(frozen=True)
class SecretSetArgs:
    project: str
    secret_ids: Sequence[str]
    accessors: Sequence[pulumi.Input[str]] = field(default_factory=tuple)
    labels: Mapping[str, str] = field(default_factory=dict)


class SecretSet(pulumi.ComponentResource):
    """One secret per id, each readable by every accessor and nobody else this stack names."""

    ids: dict[str, pulumi.Output[str]]
    names: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, args: SecretSetArgs, opts: pulumi.ResourceOptions | None = None):
        seen: set[str] = set()
        for secret_id in args.secret_ids:
            if not SECRET_ID_RE.match(secret_id):
                raise ValueError(f"secret_ids: {secret_id!r} must be 1-255 of letters, digits, '_' and '-'")
            if secret_id in seen:
                raise ValueError(f"secret_ids: {secret_id!r} appears more than once")
            seen.add(secret_id)
        super().__init__("brew:gcp:SecretSet", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        self.ids = {}
        self.names = {}
        for secret_id in args.secret_ids:
            secret = secretmanager.Secret(
                f"{name}-{secret_id}",
                project=args.project,
                secret_id=secret_id,
                replication={"auto": {}},
                labels=dict(args.labels),
                opts=child,
            )
            for index, accessor in enumerate(args.accessors):
                secretmanager.SecretIamMember(
                    f"{name}-{secret_id}-accessor-{index}",
                    project=args.project,
                    secret_id=secret.id,
                    role="roles/secretmanager.secretAccessor",
                    member=accessor,
                    opts=child,
                )
            self.ids[secret_id] = secret.id
            self.names[secret_id] = secret.name

        self.register_outputs({"ids": self.ids, "names": self.names})


def store_secret(
    name: str,
    project: str,
    secret_id: str,
    data: pulumi.Input[str],
    accessors: Sequence[pulumi.Input[str]],
    labels: Mapping[str, str],
    parent: pulumi.Resource,
) -> secretmanager.SecretVersion:
    """A secret holding a generated value: the secret `<name>-secret`, its version
    `<name>-version` with `data`, and `<name>-accessor-<i>` per accessor, under `parent`.

    Returns the version: a workload referring to the secret through `version.secret`
    waits for the value, not just for the empty secret."""
    if not SECRET_ID_RE.match(secret_id):
        raise ValueError(f"secret_id: {secret_id!r} must be 1-255 of letters, digits, '_' and '-'")
    child = pulumi.ResourceOptions(parent=parent)
    secret = secretmanager.Secret(
        f"{name}-secret",
        project=project,
        secret_id=secret_id,
        replication={"auto": {}},
        labels=dict(labels),
        opts=child,
    )
    version = secretmanager.SecretVersion(
        f"{name}-version",
        secret=secret.id,
        # Secret whatever the caller passed: the value never shows in a preview or a graph.
        secret_data=pulumi.Output.secret(data),
        opts=child,
    )
    for index, accessor in enumerate(accessors):
        secretmanager.SecretIamMember(
            f"{name}-accessor-{index}",
            project=project,
            secret_id=secret.id,
            role="roles/secretmanager.secretAccessor",
            member=accessor,
            opts=child,
        )
    return version
