"""The CI promotion identity: a service account GitHub Actions impersonates through
workload identity federation, so no service-account key ever exists."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_gcp import iam, serviceaccount

from infra.components.identity import ProjectGrant, grant_project_roles, validate_account_id, validate_grants

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
REPOSITORY_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
# Pool and provider ids: 4-32 lowercase letters, digits and '-'; `gcp-` is reserved by Google.
FEDERATION_ID_RE = re.compile(r"^(?!gcp-)[a-z0-9-]{4,32}$")


@dataclass(frozen=True)
class DeployerIdentityArgs:
    account_id: str
    project: str
    github_repository: str
    pool_id: str = "github"
    provider_id: str = "github-actions"
    grants: Sequence[ProjectGrant] = field(default_factory=tuple)
    act_as: Sequence[pulumi.Input[str]] = field(default_factory=tuple)


class DeployerIdentity(pulumi.ComponentResource):
    """Account, project grants, GitHub OIDC pool and provider, and the bindings that let
    only `github_repository`'s workflows act as the account."""

    email: pulumi.Output[str]
    member: pulumi.Output[str]
    provider_name: pulumi.Output[str]

    def __init__(self, name: str, args: DeployerIdentityArgs, opts: pulumi.ResourceOptions | None = None):
        validate_account_id(args.account_id)
        validate_grants(args.grants)
        if not REPOSITORY_RE.match(args.github_repository):
            raise ValueError(f"github_repository {args.github_repository!r} must look like 'owner/name'")
        for field_name, value in (("pool_id", args.pool_id), ("provider_id", args.provider_id)):
            if not FEDERATION_ID_RE.match(value):
                raise ValueError(f"{field_name} {value!r} must be 4-32 of [a-z0-9-] and not start with 'gcp-'")
        super().__init__("brew:gcp:DeployerIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        account = serviceaccount.Account(
            f"{name}-account",
            account_id=args.account_id,
            display_name="Brew CI deployer (GitHub Actions)",
            project=args.project,
            opts=child,
        )
        self.email = account.email
        self.member = account.email.apply(lambda email: f"serviceAccount:{email}")
        grant_project_roles(name, args.project, self.member, args.grants, self)

        # Deploying a revision that runs as another account needs actAs on that account;
        # granting serviceAccountUser per account keeps the deployer from acting as any other.
        for index, runtime_account in enumerate(args.act_as):
            serviceaccount.IAMMember(
                f"{name}-act-as-{index}",
                service_account_id=runtime_account,
                role="roles/iam.serviceAccountUser",
                member=self.member,
                opts=child,
            )

        pool = iam.WorkloadIdentityPool(
            f"{name}-pool",
            project=args.project,
            workload_identity_pool_id=args.pool_id,
            display_name="GitHub Actions",
            opts=child,
        )
        repository = args.github_repository
        provider = iam.WorkloadIdentityPoolProvider(
            f"{name}-provider",
            project=args.project,
            workload_identity_pool_id=pool.workload_identity_pool_id,
            workload_identity_pool_provider_id=args.provider_id,
            display_name="GitHub Actions OIDC",
            attribute_mapping={
                "google.subject": "assertion.sub",
                "attribute.repository": "assertion.repository",
                "attribute.ref": "assertion.ref",
            },
            # Every GitHub repository's tokens come from the same issuer: without this
            # condition any repository on GitHub could exchange a token in this pool.
            attribute_condition=f"assertion.repository == '{repository}'",
            oidc={"issuer_uri": GITHUB_ISSUER},
            opts=child,
        )
        serviceaccount.IAMMember(
            f"{name}-wif-user",
            service_account_id=account.name,
            role="roles/iam.workloadIdentityUser",
            member=pool.name.apply(
                lambda pool_name: f"principalSet://iam.googleapis.com/{pool_name}/attribute.repository/{repository}"
            ),
            opts=child,
        )
        # The provider's full name (with the project number) is what google-github-actions/auth takes.
        self.provider_name = pulumi.Output.all(pool.name, provider.workload_identity_pool_provider_id).apply(
            lambda parts: f"{parts[0]}/providers/{parts[1]}"
        )

        self.register_outputs({"email": self.email, "member": self.member, "provider_name": self.provider_name})
