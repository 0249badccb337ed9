"""A runtime service account and the project roles it holds, nothing broader.

Cloud Run services and jobs run as one of these; `ProjectGrant` is shared with the CI
deployer so both scope Cloud SQL roles to named instances the same way.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_gcp import projects, serviceaccount

ACCOUNT_ID_RE = re.compile(r"^[a-z](?:[-a-z0-9]{4,28}[a-z0-9])$")
# Primitive roles span every service in the project; grants must name a predefined role.
PRIMITIVE_ROLES = frozenset({"roles/owner", "roles/editor", "roles/viewer"})


@dataclass(frozen=True)
class ProjectGrant:
    """One project-level role, optionally narrowed by an IAM condition.

    Cloud SQL client roles can be limited to named instances with a condition on
    `resource.name`; title and expression come together or not at all.
    """

    role: str
    condition_title: str | None = None
    condition_expression: str | None = None


def role_suffix(role: str) -> str:
    """`roles/cloudsql.client` -> `cloudsql-client`: a stable piece of a child's name."""
    return role.rsplit("/", 1)[-1].replace(".", "-")


def validate_account_id(account_id: str) -> None:
    if not ACCOUNT_ID_RE.match(account_id):
        raise ValueError(
            f"account_id {account_id!r} must be 6-30 characters of lowercase letters, digits and '-', "
            "starting with a letter and not ending with '-'"
        )


def validate_grants(grants: Sequence[ProjectGrant]) -> None:
    seen: set[str] = set()
    for grant in grants:
        if grant.role in PRIMITIVE_ROLES:
            raise ValueError(f"grants: primitive role {grant.role!r} is not allowed; grant a predefined role")
        if (grant.condition_title is None) != (grant.condition_expression is None):
            raise ValueError(
                f"grants: role {grant.role!r} needs both condition_title and condition_expression, or neither"
            )
        # Children are named after the role, so one role may appear once (join conditions with ||).
        if grant.role in seen:
            raise ValueError(f"grants: role {grant.role!r} is granted more than once")
        seen.add(grant.role)


def grant_project_roles(
    name: str,
    project: str,
    member: pulumi.Input[str],
    grants: Sequence[ProjectGrant],
    parent: pulumi.Resource,
) -> list[projects.IAMMember]:
    """One `projects.IAMMember` per grant, named `<name>-<role>`, parented to `parent`."""
    members = []
    for grant in grants:
        condition = None
        if grant.condition_title is not None:
            condition = {"title": grant.condition_title, "expression": grant.condition_expression}
        members.append(
            projects.IAMMember(
                f"{name}-{role_suffix(grant.role)}",
                project=project,
                role=grant.role,
                member=member,
                condition=condition,
                opts=pulumi.ResourceOptions(parent=parent),
            )
        )
    return members


@dataclass(frozen=True)
class RuntimeIdentityArgs:
    account_id: str
    display_name: str
    project: str
    grants: Sequence[ProjectGrant] = field(default_factory=tuple)


class RuntimeIdentity(pulumi.ComponentResource):
    """A service account plus one project IAM member per grant."""

    email: pulumi.Output[str]
    member: pulumi.Output[str]
    id: pulumi.Output[str]

    def __init__(self, name: str, args: RuntimeIdentityArgs, opts: pulumi.ResourceOptions | None = None):
        validate_account_id(args.account_id)
        validate_grants(args.grants)
        super().__init__("brew:gcp:RuntimeIdentity", name, None, opts)

        account = serviceaccount.Account(
            f"{name}-account",
            account_id=args.account_id,
            display_name=args.display_name,
            project=args.project,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.email = account.email
        self.member = account.email.apply(lambda email: f"serviceAccount:{email}")
        self.id = account.id
        grant_project_roles(name, args.project, self.member, args.grants, self)

        self.register_outputs({"email": self.email, "member": self.member, "id": self.id})
