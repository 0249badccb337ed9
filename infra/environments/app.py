"""The pieces every application environment (prod, staging, demo) is made of.

Each function turns typed settings into one component; `prod`, `staging` and `demo`
compose them in a few lines. Cross-stack references are by physical name (the network,
identities created by another stack), never by stack output, so every stack can be
synthesized on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from infra.components.bucket import Bucket, BucketArgs
from infra.components.cloud_run_job import CloudRunJob, CloudRunJobArgs
from infra.components.cloud_run_service import CloudRunService, CloudRunServiceArgs, Ingress, Role
from infra.components.identity import ProjectGrant, RuntimeIdentity, RuntimeIdentityArgs
from infra.components.labels import standard_labels
from infra.components.network import Network, NetworkArgs
from infra.components.postgres import Availability, PostgresInstance, PostgresInstanceArgs
from infra.components.secrets import SecretSet, SecretSetArgs
from infra.settings import DatabaseSettings, NetworkSettings, ServiceSettings, StackSettings

# What every runtime identity needs besides its database, bucket and secrets.
RUNTIME_ROLES = ("roles/aiplatform.user", "roles/logging.logWriter", "roles/monitoring.metricWriter")


@dataclass(frozen=True)
class Runtime:
    """The identity an environment runs as, whether this stack created it or not."""

    email: pulumi.Input[str]
    member: pulumi.Input[str]


def vpc(net: NetworkSettings, project: str, region: str, labels: dict[str, str]) -> Network:
    """The VPC with its subnet and the private services access range Cloud SQL and
    Memorystore take their addresses from."""
    return Network(
        net.name,
        NetworkArgs(
            network_name=net.name,
            project=project,
            region=region,
            subnet_name=net.subnet,
            subnet_cidr=net.subnet_cidr,
            private_services_range_name=net.private_services_range,
            private_services_address=net.private_services_address,
            private_services_prefix_length=net.private_services_prefix_length,
            labels=labels,
        ),
    )


def iam_database_user(email: str) -> str:
    # Cloud SQL names a Postgres IAM service-account user after the email, minus the suffix.
    return email.removesuffix(".gserviceaccount.com")


def instance_condition(project: str, instances: tuple[str, ...]) -> str:
    return " || ".join(f"resource.name == 'projects/{project}/instances/{name}'" for name in instances)


def runtime_identity(s: StackSettings) -> Runtime:
    ident = s.runtime_identity
    assert ident is not None
    if not ident.create:
        email = s.identity_email(ident.account_id)
        return Runtime(email=email, member=f"serviceAccount:{email}")
    grants = [ProjectGrant(role) for role in RUNTIME_ROLES]
    if ident.databases:
        title = "only " + ", ".join(ident.databases)
        expression = instance_condition(s.project, ident.databases)
        grants += [
            ProjectGrant("roles/cloudsql.client", title, expression),
            ProjectGrant("roles/cloudsql.instanceUser", title, expression),
        ]
    identity = RuntimeIdentity(
        ident.account_id,
        RuntimeIdentityArgs(
            account_id=ident.account_id,
            display_name=f"Brew {s.environment} runtime",
            project=s.project,
            grants=tuple(grants),
        ),
    )
    return Runtime(email=identity.email, member=identity.member)


@dataclass(frozen=True)
class Secrets:
    """Env var name -> secret id, and the component to wait for before a revision reads them."""

    env: dict[str, pulumi.Input[str]]
    ready: SecretSet | None


def secrets(s: StackSettings, runtime: Runtime) -> Secrets:
    """The stack's provider secrets, readable by its own runtime only."""
    if not s.secrets:
        return Secrets({}, None)
    ids = {name: f"brew-{s.environment}-{name.lower().replace('_', '-')}" for name in s.secrets}
    secret_set = SecretSet(
        f"{s.environment}-secrets",
        SecretSetArgs(
            project=s.project,
            secret_ids=tuple(ids.values()),
            accessors=(runtime.member,),
            labels=standard_labels(s.environment, "secrets"),
        ),
    )
    return Secrets({name: secret_set.ids[secret_id] for name, secret_id in ids.items()}, secret_set)


def bucket(s: StackSettings, runtime: Runtime, readers: tuple[str, ...] = ()) -> Bucket:
    """The environment's bucket: its runtime reads and writes objects; `readers` (emails)
    may only list and read them."""
    b = s.bucket
    assert b is not None
    iam: dict[str, tuple] = {"roles/storage.objectAdmin": (runtime.member,)}
    if readers:
        iam["roles/storage.objectViewer"] = tuple(f"serviceAccount:{email}" for email in readers)
    return Bucket(
        b.name,
        BucketArgs(
            bucket_name=b.name,
            project=s.project,
            location=b.location,
            versioning=b.versioning,
            labels=standard_labels(s.environment, b.name),
            iam=iam,
        ),
    )


def database(s: StackSettings, iam_users: tuple[pulumi.Input[str], ...]) -> PostgresInstance | None:
    if not s.uses_database or s.database is None:
        return None
    return postgres(s.database, s.project, s.region, s.network_id, iam_users,
                    standard_labels(s.environment, s.database.name))


def postgres(db: DatabaseSettings, project: str, region: str, network_id: str,
             iam_users: tuple[pulumi.Input[str], ...], labels: dict[str, str], *,
             allocated_ip_range: str | None = None, opts: pulumi.ResourceOptions | None = None) -> PostgresInstance:
    """The Cloud SQL instance a stack's database settings describe, on its private network."""
    return PostgresInstance(
        db.name,
        PostgresInstanceArgs(
            instance_name=db.name,
            project=project,
            region=region,
            private_network=network_id,
            allocated_ip_range=allocated_ip_range,
            database_version=db.version,
            tier=db.tier,
            availability=Availability(db.availability),
            backups=db.backups,
            point_in_time_recovery=db.point_in_time_recovery,
            deletion_protection=db.deletion_protection,
            flags=dict(db.flags),
            databases=(db.database,),
            iam_service_accounts=iam_users,
            labels=labels,
        ),
        opts=opts,
    )


def database_env(s: StackSettings, db: PostgresInstance | None, login_email: str, pool: int) -> dict:
    """How the app reaches Postgres: private IP over Direct VPC egress, IAM login."""
    if db is None or s.database is None:
        return {}
    return {
        "PGHOST": db.private_ip_address,
        "PGDATABASE": s.database.database,
        "PGUSER": iam_database_user(login_email),
        "PG_POOL_MAX": str(pool),
    }


def services(
    s: StackSettings,
    runtime: Runtime,
    db: PostgresInstance | None,
    provider_secrets: Secrets,
    extra_env: dict[str, str] | None = None,
    extra_labels: dict[str, str] | None = None,
) -> dict[str, CloudRunService]:
    assert s.runtime_identity is not None and s.network is not None and s.image is not None
    login = s.identity_email(s.runtime_identity.account_id)
    declared: dict[str, CloudRunService] = {}
    for svc in s.services:
        env = {**s.env, **(extra_env or {}), **svc.env, "STORAGE": s.storage}
        env.update(database_env(s, db, login, svc.pg_pool))
        declared[svc.name] = CloudRunService(
            svc.name,
            CloudRunServiceArgs(
                service_name=svc.name,
                project=s.project,
                region=s.region,
                role=Role(svc.role),
                image=s.image,
                service_account_email=runtime.email,
                min_instances=svc.min_instances,
                max_instances=svc.max_instances,
                cpu=svc.cpu,
                memory=svc.memory,
                concurrency=svc.concurrency,
                timeout_seconds=svc.timeout_seconds,
                ingress=Ingress(svc.ingress),
                cpu_always_allocated=svc.cpu_always_allocated,
                session_affinity=svc.session_affinity,
                env=env,
                secret_env=provider_secrets.env,
                network=s.network.name,
                subnetwork=s.network.subnet,
                labels=standard_labels(s.environment, svc.name, {**(extra_labels or {}), "role": _role_label(svc)}),
                deletion_protection=s.environment == "prod",
                # Public through the load balancer only: Cloud Run IAM still applies behind
                # it, so the public web turns invoker IAM off rather than granting allUsers.
                invoker_iam_disabled=svc.public,
                default_uri_disabled=svc.public,
            ),
            # A revision that cannot reach its database or read its secrets never gets Ready.
            opts=pulumi.ResourceOptions(depends_on=[r for r in (db, provider_secrets.ready) if r is not None]),
        )
    return declared


def _role_label(svc: ServiceSettings) -> str:
    return svc.role.replace(",", "-")


def jobs(s: StackSettings, db: PostgresInstance | None) -> dict[str, CloudRunJob]:
    assert s.network is not None and s.image is not None
    declared: dict[str, CloudRunJob] = {}
    for job in s.jobs:
        login = s.identity_email(job.identity)
        declared[job.name] = CloudRunJob(
            job.name,
            CloudRunJobArgs(
                job_name=job.name,
                project=s.project,
                region=s.region,
                image=s.image,
                service_account_email=login,
                command=job.command,
                env=database_env(s, db, login, 1),
                network=s.network.name,
                subnetwork=s.network.subnet,
                labels=standard_labels(s.environment, job.name, {"role": "ops"}),
                deletion_protection=s.environment == "prod",
            ),
        )
    return declared
