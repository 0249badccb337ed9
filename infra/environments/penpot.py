"""Penpot on Google Cloud (SPEC 6; seeds penpot-prod-infra.md, penpot-exporter.md), composed
from the components Brew's stacks use.

- frontend: the static app, behind the load balancer;
- backend: web backends (disable-backend-worker), behind the load balancer;
- worker: worker-enabled backends (enable-backend-worker), their own service and size:
  dispatcher and runners claim tasks with FOR UPDATE SKIP LOCKED, so more than one
  instance is safe except for the two cron tasks that are not idempotent (rule BREW-I103);
- exporter: polls the backend's exporter queue on Redis, K pollers and K-sized pools;
- Cloud SQL Postgres, which the backends reach through a Cloud SQL Auth Proxy sidecar
  with IAM login (Penpot's JDBC pool cannot mint IAM tokens itself), so no database
  password exists;
- Memorystore for Redis (message bus, cache, the dispatcher -> runner hand-off lists),
  its URI with the AUTH string in Secret Manager;
- the assets bucket through GCS's S3-compatible API with an HMAC key of the backends'
  service account, whose secret goes straight to Secret Manager.

Stages: network -> identities -> secrets set outside Pulumi -> bucket and HMAC key ->
Postgres -> Redis -> services -> alerts -> exports.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import pulumi

from infra.components.alerts import AlertPolicy, Alerts, AlertsArgs, Condition
from infra.components.bucket import Bucket, BucketArgs
from infra.components.cloud_run_service import CloudRunService, CloudRunServiceArgs, Ingress, Sidecar
from infra.components.hmac_key import StorageHmacKey, StorageHmacKeyArgs
from infra.components.identity import ProjectGrant, RuntimeIdentity, RuntimeIdentityArgs
from infra.components.labels import standard_labels
from infra.components.memorystore import Memorystore, MemorystoreArgs, Tier
from infra.components.network import Network
from infra.components.postgres import PostgresInstance, iam_user_name
from infra.components.secrets import SecretSet, SecretSetArgs
from infra.environments.app import Runtime, instance_condition, postgres as app_postgres, vpc as app_vpc
from infra.penpot_settings import ROLES, PenpotSettings, ServiceSettings
from infra.runbooks import render_runbook

SYSTEM = "penpot"
# Penpot says what a process does in PENPOT_FLAGS (built by the settings), not in a role
# variable: every role maps to no env of its own.
PENPOT_ROLES: Mapping[str, Mapping[str, str]] = {role: {} for role in ROLES}
S3_ENDPOINT = "https://storage.googleapis.com"
BACKEND_PORT = 6060  # Penpot's backend HTTP port (PENPOT_HTTP_SERVER_PORT's default)
PROXY_PORT = 5432  # the Cloud SQL Auth Proxy sidecar, on localhost
BASE_ROLES = ("roles/logging.logWriter", "roles/monitoring.metricWriter")


def build(s: PenpotSettings) -> None:
    network = vpc(s)
    runtimes = identities(s)
    outside = secrets(s, runtimes)
    assets, hmac = storage(s, runtimes)
    db = database(s, runtimes, network)
    cache = redis(s, runtimes, network)
    declared = services(s, runtimes, outside, hmac, db, cache, network)
    alerts(s)
    pulumi.export("services", {name: svc.uri for name, svc in declared.items()})
    pulumi.export("database", db.connection_name)
    pulumi.export("redis", cache.host)
    pulumi.export("bucket", assets.name)


def labels(s: PenpotSettings, service: str, role: str | None = None) -> dict[str, str]:
    return standard_labels(s.environment, service, {"system": SYSTEM, **({"role": role} if role else {})})


def vpc(s: PenpotSettings) -> Network:
    return app_vpc(s.network, s.project, s.region, labels(s, s.network.name))


def identities(s: PenpotSettings) -> dict[str, Runtime]:
    """role -> the identity it runs as. The workers run as the backends (same database,
    bucket and secrets); the exporter and the frontend get nothing of those."""
    database = s.database.name
    cloudsql = instance_condition(s.project, (database,))
    grants = {
        "backend": (*(ProjectGrant(role) for role in BASE_ROLES),
                    ProjectGrant("roles/cloudsql.client", f"only {database}", cloudsql),
                    ProjectGrant("roles/cloudsql.instanceUser", f"only {database}", cloudsql)),
        "exporter": tuple(ProjectGrant(role) for role in BASE_ROLES),
        "frontend": tuple(ProjectGrant(role) for role in BASE_ROLES),
    }
    accounts = {"backend": s.identities.backend, "exporter": s.identities.exporter,
                "frontend": s.identities.frontend}
    runtimes = {}
    for role, account_id in accounts.items():
        identity = RuntimeIdentity(
            account_id,
            RuntimeIdentityArgs(account_id=account_id, display_name=f"Penpot {s.environment} {role}",
                                project=s.project, grants=grants[role]),
        )
        runtimes[role] = Runtime(email=identity.email, member=identity.member)
    runtimes["worker"] = runtimes["backend"]
    return runtimes


def secrets(s: PenpotSettings, runtimes: dict[str, Runtime]) -> dict[str, tuple[pulumi.Input[str], SecretSet]]:
    """Secrets whose values are set with gcloud, outside Pulumi: env name -> (secret id,
    the set declaring it). One set per group of readers, so each secret is readable by
    exactly the identities of the roles that use it."""
    groups: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for env_name, roles in s.secrets().items():
        readers = tuple(sorted({"backend" if role == "worker" else role for role in roles}))
        groups[readers].append(env_name)
    found = {}
    for readers, names in sorted(groups.items()):
        secret_set = SecretSet(
            f"penpot-{s.environment}-secrets-for-{'-'.join(readers)}",
            SecretSetArgs(
                project=s.project,
                secret_ids=tuple(s.secret_id(name) for name in names),
                accessors=tuple(runtimes[role].member for role in readers),
                labels=labels(s, "secrets"),
            ),
        )
        for name in names:
            found[name] = (secret_set.ids[s.secret_id(name)], secret_set)
    return found


def storage(s: PenpotSettings, runtimes: dict[str, Runtime]) -> tuple[Bucket, StorageHmacKey]:
    """The assets bucket, writable by the backends only, and the HMAC key they sign S3
    requests with (the key acts as their service account)."""
    backend = runtimes["backend"]
    bucket = Bucket(
        s.bucket.name,
        BucketArgs(
            bucket_name=s.bucket.name,
            project=s.project,
            location=s.bucket.location,
            versioning=s.bucket.versioning,
            labels=labels(s, s.bucket.name),
            iam={"roles/storage.objectAdmin": (backend.member,)},
        ),
    )
    hmac = StorageHmacKey(
        f"penpot-{s.environment}-storage-hmac",
        StorageHmacKeyArgs(
            project=s.project,
            service_account_email=backend.email,
            secret_id=s.secret_id("PENPOT_STORAGE_HMAC_SECRET"),
            accessors=(backend.member,),
            labels=labels(s, "storage-hmac"),
        ),
    )
    return bucket, hmac


def database(s: PenpotSettings, runtimes: dict[str, Runtime], network: Network) -> PostgresInstance:
    return app_postgres(s.database, s.project, s.region, s.network_id, (runtimes["backend"].email,),
                        labels(s, s.database.name), allocated_ip_range=s.network.private_services_range,
                        # Private IP comes from the private services access peering.
                        opts=pulumi.ResourceOptions(depends_on=[network]))


def redis(s: PenpotSettings, runtimes: dict[str, Runtime], network: Network) -> Memorystore:
    r = s.redis
    return Memorystore(
        f"{r.name}-redis",
        MemorystoreArgs(
            instance_name=r.name,
            project=s.project,
            region=s.region,
            authorized_network=s.network_id,
            reserved_ip_range=s.network.private_services_range,
            tier=Tier(r.tier),
            memory_size_gb=r.memory_size_gb,
            redis_version=r.version,
            transit_encryption=r.transit_encryption,
            uri_secret_id=s.secret_id("PENPOT_REDIS_URI"),
            uri_accessors=(runtimes["backend"].member, runtimes["exporter"].member),
            deletion_protection=s.environment == "prod",
            labels=labels(s, r.name),
        ),
        opts=pulumi.ResourceOptions(depends_on=[network]),
    )


def backend_env(s: PenpotSettings, svc: ServiceSettings, hmac: StorageHmacKey) -> dict[str, pulumi.Input[str]]:
    """What a backend (web or worker) reads: flags, Postgres through the proxy sidecar,
    objects through the S3 API, SMTP and LDAP when configured."""
    assert svc.db_pool is not None
    env: dict[str, pulumi.Input[str]] = {
        "PENPOT_FLAGS": s.process_flags(svc.role),
        "PENPOT_PUBLIC_URI": s.public_uri,
        "PENPOT_TENANT": s.tenant,
        # The proxy logs in as the service account (IAM); the pool needs no password.
        "PENPOT_DATABASE_URI": f"postgresql://127.0.0.1:{PROXY_PORT}/{s.database.database}",
        "PENPOT_DATABASE_USERNAME": iam_user_name(s.identity_email(s.identities.backend)),
        "PENPOT_DATABASE_MAX_POOL_SIZE": str(svc.db_pool),
        "PENPOT_OBJECTS_STORAGE_BACKEND": "s3",
        "PENPOT_OBJECTS_STORAGE_S3_ENDPOINT": S3_ENDPOINT,
        "PENPOT_OBJECTS_STORAGE_S3_BUCKET": s.bucket.name,
        "PENPOT_OBJECTS_STORAGE_S3_REGION": s.s3_region,
        # The key's name, not its secret: the secret comes from Secret Manager below.
        "AWS_ACCESS_KEY_ID": hmac.access_id,
    }
    if s.smtp is not None:
        env.update(s.smtp.env())
    if s.ldap is not None:
        env.update(s.ldap.env())
    return {**env, **svc.env}


def services(
    s: PenpotSettings,
    runtimes: dict[str, Runtime],
    outside: dict[str, tuple[pulumi.Input[str], SecretSet]],
    hmac: StorageHmacKey,
    db: PostgresInstance,
    cache: Memorystore,
    network: Network,
) -> dict[str, CloudRunService]:
    assert cache.uri_secret_id is not None
    proxy = Sidecar(
        name="cloud-sql-proxy",
        image=s.images.database_proxy,
        args=("--auto-iam-authn", "--private-ip", "--structured-logs", f"--port={PROXY_PORT}", db.connection_name),
        port=PROXY_PORT,
    )

    def secret_env(role: str) -> dict[str, pulumi.Input[str]]:
        found = {name: secret for name, (secret, _) in outside.items() if role in s.secrets()[name]}
        found["PENPOT_REDIS_URI"] = cache.uri_secret_id
        if role in ("backend", "worker"):
            found["AWS_SECRET_ACCESS_KEY"] = hmac.secret_id
        return found

    def ready(role: str) -> list[pulumi.Resource]:
        sets = [secret_set for name, (_, secret_set) in outside.items() if role in s.secrets()[name]]
        return [network, cache, *dict.fromkeys(sets), *((db, hmac) if role in ("backend", "worker") else ())]

    def declare(svc: ServiceSettings, image: str, env: Mapping[str, pulumi.Input[str]], *, public: bool,
                background: bool, vpc: bool, depends_on: list[pulumi.Resource],
                secrets: Mapping[str, pulumi.Input[str]] | None = None, port: int | None = None,
                sidecars: tuple[Sidecar, ...] = ()) -> CloudRunService:
        return CloudRunService(
            svc.name,
            CloudRunServiceArgs(
                service_name=svc.name,
                project=s.project,
                region=s.region,
                role=svc.role,
                roles=PENPOT_ROLES,
                image=image,
                # Penpot's version is the stack's to decide (config), not a promote pipeline's.
                follow_live_image=False,
                service_account_email=runtimes[svc.role].email,
                min_instances=svc.min_instances,
                max_instances=svc.max_instances,
                cpu=svc.cpu,
                memory=svc.memory,
                concurrency=svc.concurrency,
                timeout_seconds=svc.timeout_seconds,
                # Users reach the frontend and the web backends through the load balancer only;
                # the workers and the exporter take no requests at all.
                ingress=Ingress.INTERNAL_AND_LOAD_BALANCER if public else Ingress.INTERNAL,
                invoker_iam_disabled=public,
                default_uri_disabled=public,
                cpu_always_allocated=background,
                session_affinity=svc.session_affinity,
                env=dict(env),
                secret_env=dict(secrets or {}),
                network=s.network.name if vpc else None,
                subnetwork=s.network.subnet if vpc else None,
                port=port,
                sidecars=sidecars,
                labels=labels(s, svc.name, svc.role),
                deletion_protection=s.environment == "prod",
            ),
            opts=pulumi.ResourceOptions(depends_on=depends_on),
        )

    frontend = s.frontend
    exporter = s.exporter.service
    return {
        frontend.name: declare(
            frontend, s.images.frontend,
            # The image's nginx resolves its /api upstream at start; the load balancer sends
            # /api to the backends before it reaches the frontend.
            {"PENPOT_FLAGS": s.process_flags("frontend"), "PENPOT_BACKEND_URI": s.public_uri, **frontend.env},
            public=True, background=False, vpc=False, depends_on=[]),
        s.backend.name: declare(
            s.backend, s.images.backend, backend_env(s, s.backend, hmac), public=True, background=False, vpc=True,
            depends_on=ready("backend"), secrets=secret_env("backend"), port=BACKEND_PORT, sidecars=(proxy,)),
        s.worker.name: declare(
            # Dispatcher and runners poll between requests: CPU always allocated.
            s.worker, s.images.backend, backend_env(s, s.worker, hmac), public=False, background=True, vpc=True,
            depends_on=ready("worker"), secrets=secret_env("worker"), port=BACKEND_PORT, sidecars=(proxy,)),
        exporter.name: declare(
            # K pollers block on Redis for as long as the exporter runs: CPU always allocated.
            exporter, s.images.exporter, {**s.exporter.env(s.public_uri, s.tenant), **exporter.env},
            public=False, background=True, vpc=True, depends_on=ready("exporter"), secrets=secret_env("exporter")),
    }


def alerts(s: PenpotSettings) -> Alerts | None:
    """Postgres connections above the alert level, with the backends' budget as its runbook."""
    a, db = s.alerts, s.database
    if a is None:
        return None
    budget = [{"service": svc.name, "instances": svc.max_instances, "pool": svc.db_pool}
              for svc in (s.backend, s.worker)]
    policy = AlertPolicy(
        key="postgres-connections",
        display_name=f"Postgres connections above {a.connection_threshold}",
        conditions=(
            Condition(
                display_name=f"{db.name} backends above {a.connection_threshold}",
                filter='metric.type="cloudsql.googleapis.com/database/postgresql/num_backends"'
                ' AND resource.type="cloudsql_database"'
                f' AND resource.labels.database_id="{s.project}:{db.name}"',
                threshold=a.connection_threshold,
                duration_seconds=300,
                aligner="ALIGN_MAX",
                reducer="REDUCE_SUM",
            ),
        ),
        # Penpot's workers hold no lease connection and the stack runs no jobs.
        documentation=render_runbook("postgres-connections", database=db.name, threshold=a.connection_threshold,
                                     budget=budget, lease_connections=0, job_connections=0),
    )
    return Alerts(
        f"penpot-{s.environment}-alerts",
        AlertsArgs(project=s.project, notification_emails=a.emails, policies=(policy,),
                   labels=labels(s, "alerts")),
    )
