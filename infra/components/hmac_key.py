"""An HMAC key for a service account, for apps that reach Cloud Storage through its
S3-compatible XML API (https://storage.googleapis.com) rather than Google's own clients.

The key's secret exists only as the key resource's secret output; the component stores
it in Secret Manager at once, readable by the accessors named, so a Cloud Run service
takes it as a `secretKeyRef` env var and it never appears in config or plain env. The
access id is not a secret (it names the key, like an account id) and is an output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_gcp import storage

from infra.components.secrets import SECRET_ID_RE, store_secret

SERVICE_ACCOUNT_SUFFIX = ".gserviceaccount.com"
PUBLIC_MEMBERS = frozenset({"allUsers", "allAuthenticatedUsers"})


@dataclass(frozen=True)
class StorageHmacKeyArgs:
    project: str
    # The service account the S3 API acts as: its bucket IAM decides what the key may do.
    service_account_email: pulumi.Input[str]
    # The Secret Manager secret that holds the key's secret.
    secret_id: str
    # Members who may read that secret: the workloads that sign requests with the key.
    accessors: Sequence[pulumi.Input[str]] = field(default_factory=tuple)
    labels: Mapping[str, str] = field(default_factory=dict)


def _validate(args: StorageHmacKeyArgs) -> None:
    email = args.service_account_email
    if isinstance(email, str) and ("@" not in email or not email.endswith(SERVICE_ACCOUNT_SUFFIX)):
        raise ValueError(f"service_account_email: {email!r} is not a service account email")
    if not SECRET_ID_RE.match(args.secret_id):
        raise ValueError(f"secret_id: {args.secret_id!r} must be 1-255 of letters, digits, '_' and '-'")
    for accessor in args.accessors:
        if isinstance(accessor, str) and accessor in PUBLIC_MEMBERS:
            raise ValueError(f"accessors: {accessor!r} would make the key's secret public")


class StorageHmacKey(pulumi.ComponentResource):
    """The HMAC key, and the secret (with its one version) holding the key's secret."""

    access_id: pulumi.Output[str]
    secret_id: pulumi.Output[str]  # the Secret Manager secret's id, for secretKeyRef

    def __init__(self, name: str, args: StorageHmacKeyArgs, opts: pulumi.ResourceOptions | None = None):
        _validate(args)
        super().__init__("brew:gcp:StorageHmacKey", name, None, opts)

        key = storage.HmacKey(
            f"{name}-key",
            project=args.project,
            service_account_email=args.service_account_email,
            opts=pulumi.ResourceOptions(parent=self),
        )
        version = store_secret(name, args.project, args.secret_id, key.secret, args.accessors, args.labels, self)

        self.access_id = key.access_id
        self.secret_id = version.secret
        self.register_outputs({"access_id": self.access_id, "secret_id": self.secret_id})
