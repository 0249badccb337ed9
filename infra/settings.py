"""Typed, validated settings for one stack, read once from its config.

Every value that differs between environments lives in `stacks/Pulumi.<stack>.yaml`.
`load_settings` turns that config into frozen dataclasses and refuses bad input with a
`SettingsError` naming the stack file, the key and what is expected, so a typo never
reaches a cloud API. Components never see config: environments hand them these settings.

The same loader serves `pulumi up` (values from `pulumi.Config`) and offline synthesis
(values read from the stack file): both arrive as a mapping of un-namespaced key to the
parsed value.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NAMESPACE = "brew"
ENVIRONMENTS = ("prod", "staging", "demo", "edge")
APP_ENVIRONMENTS = ("prod", "staging", "demo")  # the ones that run services behind the edge
ROLES = ("web", "worker", "web,worker")
# gcloud's --ingress values, which platform engineers already know, mapped to the API's.
INGRESS = {
    "all": "INGRESS_TRAFFIC_ALL",
    "internal": "INGRESS_TRAFFIC_INTERNAL_ONLY",
    "internal-and-cloud-load-balancing": "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER",
}
STORAGE = ("pg", "bucket")
AVAILABILITY = {"regional": "REGIONAL", "zonal": "ZONAL"}
NAME_RE = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
MEMORY_RE = re.compile(r"^\d+(Mi|Gi)$")
HOST_RE = re.compile(r"^(?=.{1,253}$)([a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")

# Each key: (kind, description). Pulumi.yaml declares the same keys (a test keeps them equal).
KEYS: dict[str, tuple[str, str]] = {
    "environment": ("string", "Which composition this stack is: prod, staging, demo or edge."),
    "region": ("string", "Region for regional resources (Cloud Run, Cloud SQL, NEGs)."),
    "image": ("string", "Initial container image; after the first deploy the promote pipeline decides."),
    "runtimeIdentity": ("object", "Runtime service account: accountId and whether this stack creates it."),
    "services": ("array", "Cloud Run services: name, role, scaling, size, concurrency, ingress, pool."),
    "jobs": ("array", "Cloud Run jobs: name, command, identity, database login."),
    "database": ("object", "Cloud SQL Postgres instance: name, version, tier, availability, backups, flags."),
    "bucket": ("object", "The environment's bucket: name, location, versioning."),
    "env": ("object", "Environment variables every service of the stack gets."),
    "secrets": ("array", "Secret Manager secrets (env var names) for outside providers; values set outside Pulumi."),
    "storage": ("string", "Where the app keeps its objects: pg (Cloud SQL) or bucket."),
    "mirror": ("object", "Staging's bucket mirror flags (objectsMirror, objectsReadthrough) and their sunset date."),
    "alerts": ("object", "Alert notification emails and thresholds."),
    "network": ("object", "The VPC: name, subnet for Direct VPC egress, private services access range."),
    "edge": ("object", "The global HTTPS load balancer: address, URL map, hosts, Cloud Armor, TLS."),
    "deployer": ("object", "The CI promotion identity and its GitHub repository (workload identity federation)."),
    "promote": ("object", "The promote pipeline: traffic steps, bake and settle times, health thresholds, timeouts."),
}


class SettingsError(ValueError):
    """Bad stack config: says which file, which key, and what is expected.

    A key without a namespace is one of `namespace`'s (`brew:` unless another project's
    settings say theirs, e.g. `penpot:`)."""

    def __init__(self, stack_file: str, key: str, message: str, namespace: str = NAMESPACE):
        self.stack_file, self.key, self.message = stack_file, key, message
        qualified = key if ":" in key else f"{namespace}:{key}"
        super().__init__(f"{stack_file}: {qualified}: {message}")


@dataclass(frozen=True)
class ServiceSettings:
    name: str
    role: str
    min_instances: int
    max_instances: int
    cpu: str
    memory: str
    concurrency: int
    timeout_seconds: int
    ingress: str  # the API's INGRESS_TRAFFIC_* value
    cpu_always_allocated: bool
    session_affinity: bool
    pg_pool: int
    env: Mapping[str, str]
    public: bool  # served to the internet through the load balancer

    @property
    def runs_worker(self) -> bool:
        return "worker" in self.role.split(",")


@dataclass(frozen=True)
class JobSettings:
    name: str
    command: tuple[str, ...]
    identity: str  # account id of the service account the job runs as
    database_login: str | None  # "monitoring": a pg_monitor-only IAM login


@dataclass(frozen=True)
class DatabaseSettings:
    name: str
    version: str
    tier: str
    availability: str  # REGIONAL | ZONAL
    backups: bool
    point_in_time_recovery: bool
    deletion_protection: bool
    database: str
    flags: Mapping[str, str]


@dataclass(frozen=True)
class BucketSettings:
    name: str
    location: str
    versioning: bool


@dataclass(frozen=True)
class MirrorFlags:
    """Staging's way back to bucket storage, and the date the plan retires it."""

    objects_mirror: bool
    objects_readthrough: bool
    sunset: dt.date
    # Where the mirror is, for the drift check: rows of `table` as objects `prefix + key`
    # in `bucket` whose custom metadata `version` is at least the row's.
    bucket: str = ""
    table: str = "objects"
    key_column: str = "key"
    version_column: str = "version"
    updated_at_column: str = "updated_at"
    prefix: str = "rows/"
    lag_seconds: int = 60
    # Service account ids that read the mirror for the drift check (the CI deployer):
    # they list the bucket and log in to the database, nothing more.
    readers: tuple[str, ...] = ()

    def env(self) -> dict[str, str]:
        return {
            "OBJECTS_MIRROR": "1" if self.objects_mirror else "0",
            "OBJECTS_READTHROUGH": "1" if self.objects_readthrough else "0",
        }

    def labels(self) -> dict[str, str]:
        """The sunset on the service itself, so a check of the declared resources alone
        (the policy rules, a reviewer) can tell when the flags are overdue."""
        return {"mirror-sunset": self.sunset.isoformat()}


@dataclass(frozen=True)
class AlertSettings:
    emails: tuple[str, ...]
    connection_threshold: int
    queue_wait_minutes: int
    brands_waiting: int
    brands_wait_minutes: int


@dataclass(frozen=True)
class NetworkSettings:
    name: str
    subnet: str
    subnet_cidr: str
    private_services_range: str
    private_services_address: str
    private_services_prefix_length: int


@dataclass(frozen=True)
class EdgeHostSettings:
    host: str
    service: str
    armored: bool
    environment: str  # whose service serves the host: prod, staging or demo


@dataclass(frozen=True)
class EdgeSettings:
    address: str
    url_map: str
    ssl_policy: str
    min_tls_version: str
    armor_policy: str
    rate_limit_per_minute: int
    hosts: tuple[EdgeHostSettings, ...]


@dataclass(frozen=True)
class IdentitySettings:
    account_id: str
    create: bool
    # Cloud SQL instances this identity may connect to (an IAM condition on its
    # cloudsql.client and cloudsql.instanceUser grants); only used where it is created.
    databases: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeployerSettings:
    account_id: str
    github_repository: str
    # Cloud SQL instances it may connect to: production's for the lease, staging's for
    # the mirror drift check (empty: production's only).
    databases: tuple[str, ...] = ()


@dataclass(frozen=True)
class PromoteSettings:
    """How the promote pipeline rolls this stack out (SPEC 5); defaults suit production."""

    steps: tuple[int, ...] = (10, 50, 100)
    bake_seconds: float = 300.0
    max_error_ratio: float = 0.01
    min_requests: int = 100
    on_inconclusive: str = "fail"  # or "hold": leave traffic where it is for a person
    inconclusive_wait_seconds: float = 600.0
    ready_timeout_seconds: float = 600.0
    hand_over_timeout_seconds: float = 120.0
    release_grace_seconds: float = 30.0  # after Ready, before ending the old holder's session
    settle_seconds: float = 120.0
    backup_window_hours: float = 24.0
    lock_ttl_seconds: float = 3600.0


@dataclass(frozen=True)
class StackSettings:
    stack: str
    stack_file: str
    environment: str
    project: str
    region: str
    image: str | None = None
    runtime_identity: IdentitySettings | None = None
    services: tuple[ServiceSettings, ...] = ()
    jobs: tuple[JobSettings, ...] = ()
    storage: str = "pg"
    database: DatabaseSettings | None = None
    bucket: BucketSettings | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    mirror: MirrorFlags | None = None
    alerts: AlertSettings | None = None
    network: NetworkSettings | None = None
    edge: EdgeSettings | None = None
    deployer: DeployerSettings | None = None
    promote: PromoteSettings = field(default_factory=PromoteSettings)

    def identity_email(self, account_id: str) -> str:
        return f"{account_id}@{self.project}.iam.gserviceaccount.com"

    @property
    def network_id(self) -> str:
        assert self.network is not None
        return f"projects/{self.project}/global/networks/{self.network.name}"

    @property
    def uses_database(self) -> bool:
        return self.storage == "pg" and self.database is not None


class Reader:
    """Reads one object of the config, reporting errors with the full key path.

    Shared by every project's settings (infra/penpot_settings.py too): `namespace` is the
    config namespace its errors name."""

    def __init__(self, stack_file: str, path: str, data: Mapping[str, Any], known: Sequence[str],
                 namespace: str = NAMESPACE):
        self.stack_file, self.path, self.data, self.namespace = stack_file, path, data, namespace
        unknown = sorted(set(data) - set(known))
        if unknown:
            self.fail(unknown[0], f"unknown setting; expected one of {', '.join(sorted(known))}")

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def fail(self, name: str, message: str):
        raise SettingsError(self.stack_file, self.key(name), message, self.namespace)

    def raw(self, name: str, default: Any = ...) -> Any:
        if name not in self.data or self.data[name] is None:
            if default is ...:
                self.fail(name, "required setting is missing")
            return default
        return self.data[name]

    def str(self, name: str, default: Any = ..., pattern: re.Pattern | None = None, what: str = "") -> Any:
        value = self.raw(name, default)
        if value is None or (value is default and default is not ...):
            return value
        if not isinstance(value, str) or not value:
            self.fail(name, f"expected a non-empty string, got {value!r}")
        if pattern is not None and not pattern.match(value):
            self.fail(name, f"expected {what or pattern.pattern}, got {value!r}")
        return value

    def choice(self, name: str, choices: Sequence[str], default: Any = ...) -> Any:
        value = self.raw(name, default)
        if value not in choices:
            self.fail(name, f"expected one of {' | '.join(choices)}, got {value!r}")
        return value

    def int(self, name: str, default: Any = ..., lo: int | None = None, hi: int | None = None) -> Any:
        value = self.raw(name, default)
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
            value = int(value)  # the Pulumi CLI hands top-level numbers over as strings
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(name, f"expected an integer, got {value!r}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = f"between {lo} and {hi}" if lo is not None and hi is not None else (
                f"at least {lo}" if lo is not None else f"at most {hi}")
            self.fail(name, f"expected an integer {bounds}, got {value}")
        return value

    def bool(self, name: str, default: Any = ...) -> Any:
        value = self.raw(name, default)
        if isinstance(value, str) and value in ("true", "false"):
            value = value == "true"
        if not isinstance(value, bool):
            self.fail(name, f"expected true or false, got {value!r}")
        return value

    def date(self, name: str) -> dt.date:
        value = self.raw(name)
        if isinstance(value, dt.date):
            return value
        try:
            return dt.date.fromisoformat(str(value))
        except ValueError:
            self.fail(name, f"expected a date as YYYY-MM-DD, got {value!r}")

    def strings(self, name: str, default: Any = ..., pattern: re.Pattern | None = None) -> tuple[str, ...]:
        value = self.raw(name, default)
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.fail(name, f"expected a list of strings, got {value!r}")
        for i, v in enumerate(value):
            if pattern is not None and not pattern.match(v):
                self.fail(f"{name}[{i}]", f"expected {pattern.pattern}, got {v!r}")
        if len(set(value)) != len(value):
            self.fail(name, "expected no duplicates")
        return tuple(value)

    def env(self, name: str) -> dict[str, str]:
        value = self.raw(name, {})
        if not isinstance(value, dict):
            self.fail(name, f"expected a map of NAME: value, got {value!r}")
        for k, v in value.items():
            if not ENV_NAME_RE.match(str(k)):
                self.fail(f"{name}.{k}", "expected an environment variable name like AI_PROVIDER")
            if isinstance(v, bool) or not isinstance(v, (str, int)):
                self.fail(f"{name}.{k}", f"expected a string value, got {v!r}")
        return {str(k): str(v) for k, v in sorted(value.items())}

    def obj(self, name: str, known: Sequence[str], default: Any = ...) -> Reader | None:
        value = self.raw(name, default)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.fail(name, f"expected an object with {', '.join(known)}, got {value!r}")
        return Reader(self.stack_file, self.key(name), value, known, self.namespace)

    def objs(self, name: str, known: Sequence[str], default: Any = ...) -> list[Reader]:
        value = self.raw(name, default)
        if not isinstance(value, list):
            self.fail(name, f"expected a list of objects, got {value!r}")
        readers = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                self.fail(f"{name}[{i}]", f"expected an object, got {item!r}")
            readers.append(Reader(self.stack_file, f"{self.key(name)}[{i}]", item, known, self.namespace))
        return readers


_SERVICE_KEYS = (
    "name", "role", "minInstances", "maxInstances", "cpu", "memory", "concurrency", "timeoutSeconds",
    "ingress", "cpuAlwaysAllocated", "sessionAffinity", "pgPool", "env", "public",
)


def _service(r: Reader) -> ServiceSettings:
    role = r.choice("role", ROLES)
    min_instances = r.int("minInstances", lo=0, hi=1000)
    max_instances = r.int("maxInstances", lo=1, hi=1000)
    if max_instances < min_instances:
        r.fail("maxInstances", f"expected at least minInstances ({min_instances}), got {max_instances}")
    if "worker" in role.split(",") and (min_instances, max_instances) != (1, 1):
        # The lease keeps paid work single, but a second worker instance only waits and
        # burns money; the platform runs exactly one. Refused here, before anything is
        # declared, so `pulumi up` without the policy pack cannot ship it either; the rule
        # (BREW-I001) judges graphs from anywhere.
        r.fail("maxInstances" if max_instances != 1 else "minInstances",
               f"a service with the worker role runs exactly one instance (min 1, max 1), "
               f"got min {min_instances}, max {max_instances} (rule BREW-I001)")
    ingress = r.choice("ingress", tuple(INGRESS), default="internal")
    service = ServiceSettings(
        name=r.str("name", pattern=NAME_RE, what="a Cloud Run service name (lowercase, digits, dashes)"),
        role=role,
        min_instances=min_instances,
        max_instances=max_instances,
        cpu=r.choice("cpu", ("1", "2", "4", "6", "8"), default="1"),
        memory=r.str("memory", default="512Mi", pattern=MEMORY_RE, what="a size like 512Mi or 4Gi"),
        concurrency=r.int("concurrency", default=80, lo=1, hi=1000),
        timeout_seconds=r.int("timeoutSeconds", default=300, lo=1, hi=3600),
        ingress=INGRESS[ingress],
        cpu_always_allocated=r.bool("cpuAlwaysAllocated", default=False),
        session_affinity=r.bool("sessionAffinity", default=False),
        pg_pool=r.int("pgPool", default=0, lo=0, hi=100),
        env=r.env("env"),
        public=r.bool("public", default=False),
    )
    if service.runs_worker and not service.cpu_always_allocated:
        r.fail("cpuAlwaysAllocated", "a service with the worker role needs CPU always allocated (background work)")
    if service.public and ingress != "internal-and-cloud-load-balancing":
        # A public service has invoker IAM off; with any other ingress that is either a
        # run.app URL anyone can call or a load balancer that cannot reach it.
        r.fail("ingress", f"a public service is reached through the load balancer only: "
                          f"internal-and-cloud-load-balancing, not {ingress} (rule BREW-S033)")
    return service


_PROMOTE_KEYS = (
    "steps", "bakeSeconds", "maxErrorRatio", "minRequests", "onInconclusive", "inconclusiveWaitSeconds",
    "readyTimeoutSeconds", "handOverTimeoutSeconds", "releaseGraceSeconds", "settleSeconds",
    "backupWindowHours", "lockTtlSeconds",
)


def _promote(r: Reader) -> PromoteSettings:
    d = PromoteSettings()
    steps = r.raw("steps", list(d.steps))
    if (not isinstance(steps, list) or not steps or any(isinstance(x, bool) or not isinstance(x, int) for x in steps)
            or any(not 0 < x <= 100 for x in steps) or steps != sorted(set(steps)) or steps[-1] != 100):
        r.fail("steps", f"expected ascending percentages ending at 100, like [10, 50, 100], got {steps!r}")
    ratio = r.raw("maxErrorRatio", d.max_error_ratio)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio < 1:
        r.fail("maxErrorRatio", f"expected a ratio between 0 and 1, like 0.01, got {ratio!r}")
    return PromoteSettings(
        steps=tuple(steps),
        bake_seconds=r.int("bakeSeconds", default=int(d.bake_seconds), lo=0),
        max_error_ratio=float(ratio),
        min_requests=r.int("minRequests", default=d.min_requests, lo=1),
        on_inconclusive=r.choice("onInconclusive", ("fail", "hold"), default=d.on_inconclusive),
        inconclusive_wait_seconds=r.int("inconclusiveWaitSeconds", default=int(d.inconclusive_wait_seconds), lo=0),
        ready_timeout_seconds=r.int("readyTimeoutSeconds", default=int(d.ready_timeout_seconds), lo=1),
        hand_over_timeout_seconds=r.int("handOverTimeoutSeconds", default=int(d.hand_over_timeout_seconds), lo=1),
        release_grace_seconds=r.int("releaseGraceSeconds", default=int(d.release_grace_seconds), lo=0),
        settle_seconds=r.int("settleSeconds", default=int(d.settle_seconds), lo=0),
        backup_window_hours=r.int("backupWindowHours", default=int(d.backup_window_hours), lo=1),
        lock_ttl_seconds=r.int("lockTtlSeconds", default=int(d.lock_ttl_seconds), lo=60),
    )


DATABASE_KEYS = ("name", "version", "tier", "availability", "backups", "pointInTimeRecovery", "deletionProtection",
                 "database", "flags")


def read_database(r: Reader, default_database: str = "brew") -> DatabaseSettings:
    """A Cloud SQL Postgres instance's settings (`r` reads the object with DATABASE_KEYS)."""
    backups = r.bool("backups", default=True)
    pitr = r.bool("pointInTimeRecovery", default=backups)
    if pitr and not backups:
        r.fail("pointInTimeRecovery", "point-in-time recovery needs backups: true")
    flags = r.raw("flags", {})
    if not isinstance(flags, dict):
        r.fail("flags", f"expected a map of flag: value, got {flags!r}")
    return DatabaseSettings(
        name=r.str("name", pattern=NAME_RE, what="a Cloud SQL instance name"),
        version=r.str("version", default="POSTGRES_17", pattern=re.compile(r"^POSTGRES_\d+$"),
                      what="a Postgres version like POSTGRES_17"),
        tier=r.str("tier", pattern=re.compile(r"^db-[a-z0-9-]+$"), what="a machine tier like db-custom-2-7680"),
        availability=AVAILABILITY[r.choice("availability", tuple(AVAILABILITY))],
        backups=backups,
        point_in_time_recovery=pitr,
        deletion_protection=r.bool("deletionProtection", default=True),
        database=r.str("database", default=default_database),
        flags={str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in sorted(flags.items())},
    )


def load_settings(stack: str, config: Mapping[str, Any], project: str, stack_file: str | None = None) -> StackSettings:
    """Validate one stack's `brew:` config (un-namespaced keys -> parsed values)."""
    stack_file = stack_file or f"stacks/Pulumi.{stack}.yaml"
    root = Reader(stack_file, "", config, list(KEYS))
    environment = root.choice("environment", ENVIRONMENTS)
    region = root.str("region", default="asia-south1", pattern=re.compile(r"^[a-z]+-[a-z]+\d$"),
                      what="a region like asia-south1")
    if environment == "edge":
        return _edge_stack(root, stack, stack_file, project, region)

    identity = root.obj("runtimeIdentity", ("accountId", "create", "databases"))
    services = tuple(_service(s) for s in root.objs("services", _SERVICE_KEYS))
    if not services:
        root.fail("services", "expected at least one service")
    names = [s.name for s in services]
    if len(set(names)) != len(names):
        root.fail("services", f"service names must be unique, got {names}")
    # One lease holder per database: two worker services on one database would race for
    # it, and the loser would sit idle while still counted in the connection budget.
    workers = [s.name for s in services if s.runs_worker]
    if len(workers) > 1:
        root.fail("services", f"exactly one service per database runs the worker role, got {workers}")
    storage = root.choice("storage", STORAGE, default="pg")
    db = root.obj("database", DATABASE_KEYS, default=None)
    if storage == "pg" and db is None:
        root.fail("database", "storage is pg, so a database is required")
    bucket = root.obj("bucket", ("name", "location", "versioning"))
    mirror = root.obj("mirror", ("objectsMirror", "objectsReadthrough", "sunset", "bucket", "table", "keyColumn",
                                 "versionColumn", "updatedAtColumn", "prefix", "lagSeconds", "readers"), default=None)
    mirror_flags = None
    if mirror is not None:
        column = re.compile(r"^[a-z_][a-z0-9_]*$")
        declared_bucket = (root.data.get("bucket") or {}).get("name", "")
        mirror_flags = MirrorFlags(
            mirror.bool("objectsMirror"), mirror.bool("objectsReadthrough"), mirror.date("sunset"),
            bucket=mirror.str("bucket", default=declared_bucket),
            table=mirror.str("table", default="objects", pattern=column, what="a table name"),
            key_column=mirror.str("keyColumn", default="key", pattern=column, what="a column name"),
            version_column=mirror.str("versionColumn", default="version", pattern=column, what="a column name"),
            updated_at_column=mirror.str("updatedAtColumn", default="updated_at", pattern=column,
                                         what="a column name"),
            prefix=mirror.str("prefix", default="rows/"),
            lag_seconds=mirror.int("lagSeconds", default=60, lo=0, hi=86400),
            readers=mirror.strings("readers", default=[], pattern=NAME_RE),
        )
        if mirror_flags.objects_readthrough and not mirror_flags.objects_mirror:
            mirror.fail("objectsReadthrough", "READTHROUGH needs objectsMirror: true (reads would fall through "
                                              "to a bucket nobody writes)")
    env = root.env("env")
    for s in services:
        for reserved in ("ROLE", "STORAGE", "PG_POOL_MAX", "PGHOST", "PGDATABASE", "PGUSER"):
            if reserved in env or reserved in s.env:
                root.fail("env" if reserved in env else f"services.{s.name}.env",
                          f"{reserved} is set by the stack itself, not by config")
    if mirror_flags and ("OBJECTS_MIRROR" in env or "OBJECTS_READTHROUGH" in env):
        root.fail("env", "the mirror flags come from brew:mirror, not from env")
    jobs = tuple(
        JobSettings(
            name=j.str("name", pattern=NAME_RE, what="a Cloud Run job name"),
            command=j.strings("command"),
            identity=j.str("identity", pattern=NAME_RE, what="a service account id"),
            database_login=j.choice("databaseLogin", ("monitoring",), default=None) if "databaseLogin" in j.data else None,
        )
        for j in root.objs("jobs", ("name", "command", "identity", "databaseLogin"), default=[])
    )
    alerts = root.obj("alerts", ("emails", "connectionThreshold", "queueWaitMinutes", "brandsWaiting",
                                 "brandsWaitMinutes"), default=None)
    network = root.obj("network", ("name", "subnet"))
    deployer = root.obj("deployer", ("accountId", "githubRepository", "databases"), default=None)
    promote = root.obj("promote", _PROMOTE_KEYS, default=None)
    return StackSettings(
        stack=stack,
        stack_file=stack_file,
        environment=environment,
        project=project,
        region=region,
        image=root.str("image"),
        runtime_identity=IdentitySettings(
            identity.str("accountId", pattern=re.compile(r"^[a-z](?:[-a-z0-9]{4,28}[a-z0-9])$"),
                         what="a service account id (6-30 lowercase letters, digits, dashes)"),
            identity.bool("create", default=True),
            identity.strings("databases", default=[], pattern=NAME_RE),
        ),
        services=services,
        jobs=jobs,
        storage=storage,
        database=read_database(db) if db is not None else None,
        bucket=BucketSettings(
            name=bucket.str("name", pattern=re.compile(r"^[a-z0-9][-_.a-z0-9]{1,61}[a-z0-9]$"), what="a bucket name"),
            location=bucket.str("location", default=region.upper()),
            versioning=bucket.bool("versioning", default=False),
        ),
        env=env,
        secrets=root.strings("secrets", default=[], pattern=ENV_NAME_RE),
        mirror=mirror_flags,
        alerts=None if alerts is None else AlertSettings(
            emails=alerts.strings("emails", pattern=re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]+$")),
            connection_threshold=alerts.int("connectionThreshold", default=160, lo=1),
            queue_wait_minutes=alerts.int("queueWaitMinutes", default=10, lo=1),
            brands_waiting=alerts.int("brandsWaiting", default=3, lo=1),
            brands_wait_minutes=alerts.int("brandsWaitMinutes", default=30, lo=1),
        ),
        network=NetworkSettings(
            name=network.str("name", pattern=NAME_RE, what="a VPC name"),
            subnet=network.str("subnet", pattern=NAME_RE, what="a subnetwork name"),
            subnet_cidr="", private_services_range="", private_services_address="",
            private_services_prefix_length=0,
        ),
        deployer=None if deployer is None else DeployerSettings(
            account_id=deployer.str("accountId", pattern=NAME_RE, what="a service account id"),
            github_repository=deployer.str("githubRepository", pattern=re.compile(r"^[\w.-]+/[\w.-]+$"),
                                           what="owner/name"),
            databases=deployer.strings("databases", default=[], pattern=NAME_RE),
        ),
        promote=PromoteSettings() if promote is None else _promote(promote),
    )


NETWORK_KEYS = ("name", "subnet", "subnetCidr", "privateServicesRange", "privateServicesAddress",
                "privateServicesPrefixLength")


def read_network(net: Reader) -> NetworkSettings:
    """A VPC the stack creates itself: its subnet and private services access range."""
    return NetworkSettings(
        name=net.str("name", pattern=NAME_RE, what="a VPC name"),
        subnet=net.str("subnet", pattern=NAME_RE, what="a subnetwork name"),
        subnet_cidr=net.str("subnetCidr", pattern=re.compile(r"^\d+\.\d+\.\d+\.\d+/\d+$"), what="a CIDR"),
        private_services_range=net.str("privateServicesRange", pattern=NAME_RE, what="an address range name"),
        private_services_address=net.str("privateServicesAddress",
                                         pattern=re.compile(r"^\d+\.\d+\.\d+\.\d+$"), what="an IPv4 address"),
        private_services_prefix_length=net.int("privateServicesPrefixLength", lo=8, hi=24),
    )


def _edge_stack(root: Reader, stack: str, stack_file: str, project: str, region: str) -> StackSettings:
    net = root.obj("network", NETWORK_KEYS)
    edge = root.obj("edge", ("address", "urlMap", "sslPolicy", "minTlsVersion", "armorPolicy",
                             "rateLimitPerMinute", "hosts"))
    hosts = tuple(
        EdgeHostSettings(
            host=h.str("host", pattern=HOST_RE, what="a host name like feed.example.com"),
            service=h.str("service", pattern=NAME_RE, what="a Cloud Run service name"),
            armored=h.bool("armored", default=False),
            environment=h.choice("environment", APP_ENVIRONMENTS),
        )
        for h in edge.objs("hosts", ("host", "service", "armored", "environment"))
    )
    if not hosts:
        edge.fail("hosts", "expected at least one host")
    if len({h.host for h in hosts}) != len(hosts):
        edge.fail("hosts", "host names must be unique")
    for key in ("image", "services", "database", "bucket", "runtimeIdentity", "jobs", "mirror", "deployer"):
        if key in root.data:
            root.fail(key, "the edge stack declares the shared network and load balancer only")
    return StackSettings(
        stack=stack,
        stack_file=stack_file,
        environment="edge",
        project=project,
        region=region,
        network=read_network(net),
        edge=EdgeSettings(
            address=edge.str("address", pattern=NAME_RE, what="an address name"),
            url_map=edge.str("urlMap", pattern=NAME_RE, what="a URL map name"),
            ssl_policy=edge.str("sslPolicy", pattern=NAME_RE, what="an SSL policy name"),
            min_tls_version=edge.choice("minTlsVersion", ("TLS_1_2", "TLS_1_3"), default="TLS_1_2"),
            armor_policy=edge.str("armorPolicy", pattern=NAME_RE, what="a security policy name"),
            rate_limit_per_minute=edge.int("rateLimitPerMinute", default=500, lo=1, hi=10000),
            hosts=hosts,
        ),
    )


def parse_config_value(kind: str, raw: str) -> Any:
    """A config value as the Pulumi CLI hands it to a program (strings; JSON for
    objects and arrays), parsed into Python."""
    if kind in ("object", "array"):
        return json.loads(raw)
    return raw


def pulumi_config_values(namespace: str, keys: Mapping[str, tuple[str, str]]) -> tuple[dict[str, Any], str]:
    """The running stack's `namespace:` config (un-namespaced key -> parsed value) and its
    Google Cloud project, read from `pulumi.Config`."""
    import pulumi

    stack_file = f"stacks/Pulumi.{pulumi.get_stack()}.yaml"
    cfg = pulumi.Config(namespace)
    values: dict[str, Any] = {}
    for key, (kind, _) in keys.items():
        raw = cfg.get(key)
        if raw is not None:
            try:
                values[key] = parse_config_value(kind, raw)
            except json.JSONDecodeError:
                raise SettingsError(stack_file, key, f"expected {kind} (JSON), got {raw!r}", namespace) from None
    project = pulumi.Config("gcp").get("project")
    if not project:
        raise SettingsError(stack_file, "gcp:project", "required setting is missing (the Google Cloud project id)")
    return values, project


def from_pulumi_config() -> StackSettings:
    """Settings of the running stack, read once from `pulumi.Config`."""
    import pulumi

    values, project = pulumi_config_values(NAMESPACE, KEYS)
    return load_settings(pulumi.get_stack(), values, project)
