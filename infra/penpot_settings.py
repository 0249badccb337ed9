"""Typed, validated settings for a Penpot stack (the second blueprint, SPEC 6), read once
from its `penpot:` config in `penpot/stacks/Pulumi.<stack>.yaml`.

The same machinery as Brew's (infra/settings.py): a `Reader` over the un-namespaced
config refuses bad input with one `SettingsError` line naming the stack file and the
`penpot:` key, before any resource is declared. What Penpot itself reads is named here
once: the exporter's configuration table (penpot-exporter.md) with its defaults, the
PENPOT_FLAGS the stack derives, and the env names the stack sets itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.settings import (
    DATABASE_KEYS,
    MEMORY_RE,
    NAME_RE,
    NETWORK_KEYS,
    BucketSettings,
    DatabaseSettings,
    NetworkSettings,
    Reader,
    pulumi_config_values,
    read_database,
    read_network,
)

NAMESPACE = "penpot"
ROLES = ("frontend", "backend", "worker", "exporter")
CPUS = ("1", "2", "4", "6", "8")
FLAG_RE = re.compile(r"^(enable|disable)-[a-z0-9]+(?:-[a-z0-9]+)*$")
URI_RE = re.compile(r"^https?://[^\s/]+(?:/\S*)?$")
ACCOUNT_ID_RE = re.compile(r"^[a-z](?:[-a-z0-9]{4,28}[a-z0-9])$")
EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]+$")

# Flags the stack derives, never taken from penpot:flags: the worker split (per service),
# LDAP login (penpot:ldap.enabled) and SMTP (penpot:smtp).
WORKER_FLAG = "backend-worker"
LDAP_FLAG = "login-with-ldap"
SMTP_FLAG = "smtp"
DERIVED_FLAGS = (WORKER_FLAG, LDAP_FLAG, SMTP_FLAG)

# Env the stack sets itself: a service's own `env` may not override it.
RESERVED_ENV = ("PENPOT_FLAGS", "PENPOT_PUBLIC_URI", "PENPOT_INTERNAL_URI", "PENPOT_TENANT", "PENPOT_REDIS_URI",
                "PENPOT_SECRET_KEY", "PENPOT_HTTP_SERVER_PORT")
RESERVED_PREFIXES = ("PENPOT_DATABASE_", "PENPOT_OBJECTS_STORAGE_", "PENPOT_SMTP_", "PENPOT_LDAP_",
                     "PENPOT_EXPORTER_", "PENPOT_WASM_WORKER_", "PENPOT_BROWSER_POOL_", "AWS_")

# Each key: (kind, description). penpot/Pulumi.yaml declares the same keys (a test keeps them equal).
KEYS: dict[str, tuple[str, str]] = {
    "environment": ("string", "Which environment this stack is (prod); labels and secret ids carry it."),
    "region": ("string", "Region for regional resources (Cloud Run, Cloud SQL, Memorystore)."),
    "publicUri": ("string", "The URL users reach Penpot at (PENPOT_PUBLIC_URI)."),
    "tenant": ("string", "Queue prefix shared by the backends and the exporter (PENPOT_TENANT)."),
    "flags": ("array", "Extra PENPOT_FLAGS for the frontend and the backends, e.g. disable-telemetry."),
    "images": ("object", "Container images: frontend, backend, exporter, databaseProxy."),
    "identities": ("object", "Service account ids: backend (and workers), exporter, frontend."),
    "network": ("object", "The VPC this stack creates: subnet for Direct VPC egress, private services access range."),
    "database": ("object", "Cloud SQL Postgres instance: name, version, tier, availability, backups, flags."),
    "redis": ("object", "Memorystore for Redis: name, tier, memory, version, transit encryption."),
    "bucket": ("object", "The assets bucket Penpot reaches through the S3 API: name, location, versioning, s3Region."),
    "frontend": ("object", "The frontend service: name, scaling, size, concurrency."),
    "backend": ("object", "The backend web service (no worker): name, scaling, size, concurrency, dbPool."),
    "worker": ("object", "The worker-enabled backend service: name, scaling, size, dbPool."),
    "exporter": ("object", "The exporter service and its configuration table (workerConcurrency K, pools, TTLs)."),
    "smtp": ("object", "The SMTP relay: host, port, tls, ssl, from and reply-to; credentials are secrets."),
    "ldap": ("object", "LDAP login: enabled, host, port, ssl, starttls, DNs, query, attributes; bind password secret."),
    "alerts": ("object", "Alert notification emails and the Postgres connections threshold."),
}


@dataclass(frozen=True)
class ServiceSettings:
    """One Penpot Cloud Run service and its size."""

    name: str
    role: str  # frontend | backend | worker | exporter
    min_instances: int
    max_instances: int
    cpu: str
    memory: str
    concurrency: int
    timeout_seconds: int
    session_affinity: bool
    env: Mapping[str, str]
    db_pool: int | None = None  # PENPOT_DATABASE_MAX_POOL_SIZE, backends only


@dataclass(frozen=True)
class ExporterSettings:
    """penpot-exporter.md's configuration table; every default is the table's."""

    service: ServiceSettings
    internal_uri: str | None = None  # None: the exporter falls back to the public URI
    shared_key: bool = False  # True: PENPOT_EXPORTER_SHARED_KEY from Secret Manager; else derived from the secret
    job_ttl_seconds: int = 3600
    worker_concurrency: int = 2  # K: pollers, running exports, and both pools' size
    wasm_worker_pool_min: int = 1
    wasm_worker_idle_timeout_seconds: int = 300
    wasm_worker_image_cache_size: int = 134217728

    def env(self, public_uri: str, tenant: str) -> dict[str, str]:
        """The table as the exporter reads it. K sizes the pollers and, through the pool
        maximums, the browser and render-worker pools, so none can drift from it."""
        k = str(self.worker_concurrency)
        env = {
            "PENPOT_PUBLIC_URI": public_uri,
            "PENPOT_TENANT": tenant,
            "PENPOT_EXPORTER_JOB_TTL": str(self.job_ttl_seconds),
            "PENPOT_EXPORTER_WORKER_CONCURRENCY": k,
            "PENPOT_WASM_WORKER_POOL_MAX": k,
            "PENPOT_BROWSER_POOL_MAX": k,
            "PENPOT_WASM_WORKER_POOL_MIN": str(self.wasm_worker_pool_min),
            "PENPOT_WASM_WORKER_IDLE_TIMEOUT": str(self.wasm_worker_idle_timeout_seconds),
            "PENPOT_WASM_WORKER_IMAGE_CACHE_SIZE": str(self.wasm_worker_image_cache_size),
        }
        if self.internal_uri:
            env["PENPOT_INTERNAL_URI"] = self.internal_uri
        return env


@dataclass(frozen=True)
class ImageSettings:
    frontend: str
    backend: str
    exporter: str
    database_proxy: str


@dataclass(frozen=True)
class IdentitySettings:
    backend: str  # the backend and the workers: database, bucket (HMAC key), SMTP and LDAP secrets
    exporter: str  # the Redis queue and the shared key only
    frontend: str  # nothing but logs and metrics


@dataclass(frozen=True)
class RedisSettings:
    name: str
    tier: str  # BASIC | STANDARD_HA
    memory_size_gb: int
    version: str
    transit_encryption: bool


@dataclass(frozen=True)
class SmtpSettings:
    host: str
    port: int
    tls: bool
    ssl: bool
    default_from: str
    default_reply_to: str

    def env(self) -> dict[str, str]:
        return {
            "PENPOT_SMTP_HOST": self.host,
            "PENPOT_SMTP_PORT": str(self.port),
            "PENPOT_SMTP_TLS": str(self.tls).lower(),
            "PENPOT_SMTP_SSL": str(self.ssl).lower(),
            "PENPOT_SMTP_DEFAULT_FROM": self.default_from,
            "PENPOT_SMTP_DEFAULT_REPLY_TO": self.default_reply_to,
        }


@dataclass(frozen=True)
class LdapSettings:
    host: str
    port: int
    ssl: bool
    starttls: bool
    base_dn: str
    bind_dn: str
    user_query: str = "(|(uid=:username)(mail=:username))"
    attrs_username: str = "uid"
    attrs_email: str = "mail"
    attrs_fullname: str = "cn"

    def env(self) -> dict[str, str]:
        return {
            "PENPOT_LDAP_HOST": self.host,
            "PENPOT_LDAP_PORT": str(self.port),
            "PENPOT_LDAP_SSL": str(self.ssl).lower(),
            "PENPOT_LDAP_STARTTLS": str(self.starttls).lower(),
            "PENPOT_LDAP_BASE_DN": self.base_dn,
            "PENPOT_LDAP_BIND_DN": self.bind_dn,
            "PENPOT_LDAP_USER_QUERY": self.user_query,
            "PENPOT_LDAP_ATTRS_USERNAME": self.attrs_username,
            "PENPOT_LDAP_ATTRS_EMAIL": self.attrs_email,
            "PENPOT_LDAP_ATTRS_FULLNAME": self.attrs_fullname,
        }


@dataclass(frozen=True)
class AlertSettings:
    emails: tuple[str, ...]
    connection_threshold: int


@dataclass(frozen=True)
class PenpotSettings:
    stack: str
    stack_file: str
    project: str
    environment: str
    region: str
    public_uri: str
    tenant: str
    flags: tuple[str, ...]
    images: ImageSettings
    identities: IdentitySettings
    network: NetworkSettings
    database: DatabaseSettings
    redis: RedisSettings
    bucket: BucketSettings
    s3_region: str
    frontend: ServiceSettings
    backend: ServiceSettings
    worker: ServiceSettings
    exporter: ExporterSettings
    smtp: SmtpSettings | None = None
    ldap: LdapSettings | None = None  # None: LDAP login is off, and nothing LDAP is declared
    alerts: AlertSettings | None = None

    def identity_email(self, account_id: str) -> str:
        return f"{account_id}@{self.project}.iam.gserviceaccount.com"

    @property
    def network_id(self) -> str:
        return f"projects/{self.project}/global/networks/{self.network.name}"

    def process_flags(self, role: str) -> str:
        """PENPOT_FLAGS of one service: what its role needs, then penpot:flags.

        Web backends say disable-backend-worker (Penpot enables the worker by default);
        the worker service enable-backend-worker. The frontend shows LDAP login when on.
        """
        flags: list[str] = []
        if role == "backend":
            flags.append(f"disable-{WORKER_FLAG}")
        if role == "worker":
            flags.append(f"enable-{WORKER_FLAG}")
        if role in ("backend", "worker") and self.smtp is not None:
            flags.append(f"enable-{SMTP_FLAG}")
        if role in ("frontend", "backend", "worker") and self.ldap is not None:
            flags.append(f"enable-{LDAP_FLAG}")
        return " ".join([*flags, *self.flags])

    def secrets(self) -> dict[str, tuple[str, ...]]:
        """Secrets whose values are set outside Pulumi: env name -> the roles that read it."""
        secrets: dict[str, tuple[str, ...]] = {"PENPOT_SECRET_KEY": ("backend", "worker", "exporter")}
        if self.exporter.shared_key:
            secrets["PENPOT_EXPORTER_SHARED_KEY"] = ("backend", "worker", "exporter")
        if self.smtp is not None:
            secrets["PENPOT_SMTP_USERNAME"] = ("backend", "worker")
            secrets["PENPOT_SMTP_PASSWORD"] = ("backend", "worker")
        if self.ldap is not None:
            secrets["PENPOT_LDAP_BIND_PASSWORD"] = ("backend", "worker")
        return secrets

    def secret_id(self, env_name: str) -> str:
        """`PENPOT_SMTP_PASSWORD` -> `penpot-prod-smtp-password`."""
        return f"penpot-{self.environment}-" + env_name.removeprefix("PENPOT_").lower().replace("_", "-")


_SERVICE_KEYS = ("name", "minInstances", "maxInstances", "cpu", "memory", "concurrency", "timeoutSeconds",
                 "sessionAffinity", "env")
_BACKEND_KEYS = (*_SERVICE_KEYS, "dbPool")
_EXPORTER_KEYS = (*_SERVICE_KEYS, "internalUri", "sharedKey", "jobTtlSeconds", "workerConcurrency",
                  "wasmWorkerPoolMin", "wasmWorkerIdleTimeoutSeconds", "wasmWorkerImageCacheSize")


def _reserved(name: str) -> bool:
    return name in RESERVED_ENV or name.startswith(RESERVED_PREFIXES)


def _service(r: Reader, role: str) -> ServiceSettings:
    minimum = r.int("minInstances", default=1 if role in ("worker", "exporter") else 0, lo=0, hi=1000)
    maximum = r.int("maxInstances", lo=1, hi=1000)
    if maximum < minimum:
        r.fail("maxInstances", f"expected at least minInstances ({minimum}), got {maximum}")
    if role in ("worker", "exporter") and minimum < 1:
        # Nothing calls them: they poll Postgres or Redis, and at zero instances nobody polls.
        r.fail("minInstances", f"the {role} takes no requests, so it keeps at least one instance, got {minimum}")
    env = r.env("env")
    for name in env:
        if _reserved(name):
            r.fail(f"env.{name}", "is set by the stack itself, not by config")
    return ServiceSettings(
        name=r.str("name", pattern=NAME_RE, what="a Cloud Run service name (lowercase, digits, dashes)"),
        role=role,
        min_instances=minimum,
        max_instances=maximum,
        cpu=r.choice("cpu", CPUS, default="1"),
        memory=r.str("memory", default="1Gi", pattern=MEMORY_RE, what="a size like 512Mi or 4Gi"),
        concurrency=r.int("concurrency", default=80, lo=1, hi=1000),
        timeout_seconds=r.int("timeoutSeconds", default=300, lo=1, hi=3600),
        session_affinity=r.bool("sessionAffinity", default=False),
        env=env,
        # Penpot's own default is 60 per instance: stated here, so the budget is the stack's.
        db_pool=r.int("dbPool", default=60, lo=1, hi=1000) if role in ("backend", "worker") else None,
    )


def _exporter(r: Reader) -> ExporterSettings:
    d = ExporterSettings(service=_service(r, "exporter"))
    k = r.int("workerConcurrency", default=d.worker_concurrency, lo=1, hi=64)
    pool_min = r.int("wasmWorkerPoolMin", default=d.wasm_worker_pool_min, lo=0, hi=64)
    if pool_min > k:
        # The exporter would clamp it silently: the warm pool the stack declares would not exist.
        r.fail("wasmWorkerPoolMin", f"expected at most workerConcurrency ({k}), the pool's maximum, got {pool_min} "
                                    "(rule BREW-I101)")
    return ExporterSettings(
        service=d.service,
        internal_uri=r.str("internalUri", default=None, pattern=URI_RE, what="an http(s) URL"),
        shared_key=r.bool("sharedKey", default=d.shared_key),
        job_ttl_seconds=r.int("jobTtlSeconds", default=d.job_ttl_seconds, lo=60, hi=7 * 86400),
        worker_concurrency=k,
        wasm_worker_pool_min=pool_min,
        wasm_worker_idle_timeout_seconds=r.int("wasmWorkerIdleTimeoutSeconds",
                                               default=d.wasm_worker_idle_timeout_seconds, lo=1, hi=86400),
        wasm_worker_image_cache_size=r.int("wasmWorkerImageCacheSize", default=d.wasm_worker_image_cache_size,
                                           lo=1024 * 1024, hi=16 * 1024 ** 3),
    )


def _flags(root: Reader) -> tuple[str, ...]:
    flags = root.strings("flags", default=[], pattern=FLAG_RE)
    seen: dict[str, str] = {}
    for i, flag in enumerate(flags):
        switch, _, name = flag.partition("-")
        if name in DERIVED_FLAGS:
            where = {WORKER_FLAG: "the backend and worker services", LDAP_FLAG: "penpot:ldap.enabled",
                     SMTP_FLAG: "penpot:smtp"}[name]
            root.fail(f"flags[{i}]", f"{flag} is set by the stack from {where}, not by flags")
        if name in seen and seen[name] != switch:
            root.fail(f"flags[{i}]", f"{flag} contradicts {seen[name]}-{name}")
        seen[name] = switch
    return flags


def _ldap(r: Reader | None) -> LdapSettings | None:
    if r is None or not r.bool("enabled", default=False):
        return None
    d = LdapSettings(host="", port=389, ssl=False, starttls=False, base_dn="", bind_dn="")
    ssl, starttls = r.bool("ssl", default=d.ssl), r.bool("starttls", default=d.starttls)
    if ssl and starttls:
        r.fail("starttls", "LDAP over SSL (ssl: true) and STARTTLS exclude each other")
    return LdapSettings(
        host=r.str("host"),
        port=r.int("port", default=636 if ssl else d.port, lo=1, hi=65535),
        ssl=ssl,
        starttls=starttls,
        base_dn=r.str("baseDn"),
        bind_dn=r.str("bindDn"),
        user_query=r.str("userQuery", default=d.user_query),
        attrs_username=r.str("attrsUsername", default=d.attrs_username),
        attrs_email=r.str("attrsEmail", default=d.attrs_email),
        attrs_fullname=r.str("attrsFullname", default=d.attrs_fullname),
    )


def load_settings(stack: str, config: Mapping[str, Any], project: str, stack_file: str | None = None) -> PenpotSettings:
    """Validate one stack's `penpot:` config (un-namespaced keys -> parsed values)."""
    stack_file = stack_file or f"stacks/Pulumi.{stack}.yaml"
    root = Reader(stack_file, "", config, list(KEYS), NAMESPACE)
    region = root.str("region", default="asia-south1", pattern=re.compile(r"^[a-z]+-[a-z]+\d$"),
                      what="a region like asia-south1")
    images = root.obj("images", ("frontend", "backend", "exporter", "databaseProxy"))
    identities = root.obj("identities", ("backend", "exporter", "frontend"))
    account = {"pattern": ACCOUNT_ID_RE, "what": "a service account id (6-30 lowercase letters, digits, dashes)"}
    redis = root.obj("redis", ("name", "tier", "memorySizeGb", "version", "transitEncryption"))
    bucket = root.obj("bucket", ("name", "location", "versioning", "s3Region"))
    smtp = root.obj("smtp", ("host", "port", "tls", "ssl", "defaultFrom", "defaultReplyTo"), default=None)
    ldap = root.obj("ldap", ("enabled", "host", "port", "ssl", "starttls", "baseDn", "bindDn", "userQuery",
                             "attrsUsername", "attrsEmail", "attrsFullname"), default=None)
    alerts = root.obj("alerts", ("emails", "connectionThreshold"), default=None)
    settings = PenpotSettings(
        stack=stack,
        stack_file=stack_file,
        project=project,
        environment=root.str("environment", pattern=NAME_RE, what="an environment name like prod"),
        region=region,
        public_uri=root.str("publicUri", pattern=URI_RE, what="an http(s) URL like https://design.example.com"),
        tenant=root.str("tenant", default="default", pattern=re.compile(r"^[a-z0-9][-a-z0-9_]*$"),
                        what="a queue prefix (lowercase letters, digits, - and _)"),
        flags=_flags(root),
        images=ImageSettings(
            frontend=images.str("frontend"),
            backend=images.str("backend"),
            exporter=images.str("exporter"),
            database_proxy=images.str("databaseProxy",
                                      default="gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.18.2"),
        ),
        identities=IdentitySettings(
            backend=identities.str("backend", **account),
            exporter=identities.str("exporter", **account),
            frontend=identities.str("frontend", **account),
        ),
        network=read_network(root.obj("network", NETWORK_KEYS)),
        database=read_database(root.obj("database", DATABASE_KEYS), default_database="penpot"),
        redis=RedisSettings(
            name=redis.str("name", pattern=re.compile(r"^[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?$"),
                           what="a Memorystore instance id (1-40 lowercase letters, digits, dashes)"),
            tier={"basic": "BASIC", "standard-ha": "STANDARD_HA"}[
                redis.choice("tier", ("basic", "standard-ha"), default="standard-ha")],
            memory_size_gb=redis.int("memorySizeGb", default=1, lo=1, hi=300),
            version=redis.str("version", default="REDIS_7_2", pattern=re.compile(r"^REDIS_\d+_(?:\d+|X)$"),
                              what="a Redis version like REDIS_7_2"),
            transit_encryption=redis.bool("transitEncryption", default=True),
        ),
        bucket=BucketSettings(
            name=bucket.str("name", pattern=re.compile(r"^[a-z0-9][-_.a-z0-9]{1,61}[a-z0-9]$"), what="a bucket name"),
            location=bucket.str("location", default=region.upper()),
            versioning=bucket.bool("versioning", default=True),
        ),
        # GCS ignores the region of an S3 signature; "auto" is what Google's HMAC docs use.
        s3_region=bucket.str("s3Region", default="auto"),
        frontend=_service(root.obj("frontend", _SERVICE_KEYS), "frontend"),
        backend=_service(root.obj("backend", _BACKEND_KEYS), "backend"),
        worker=_service(root.obj("worker", _BACKEND_KEYS), "worker"),
        exporter=_exporter(root.obj("exporter", _EXPORTER_KEYS)),
        smtp=None if smtp is None else SmtpSettings(
            host=smtp.str("host"),
            port=smtp.int("port", default=587, lo=1, hi=65535),
            tls=smtp.bool("tls", default=True),
            ssl=smtp.bool("ssl", default=False),
            default_from=smtp.str("defaultFrom", pattern=EMAIL_RE, what="an email address"),
            default_reply_to=smtp.str("defaultReplyTo", pattern=EMAIL_RE, what="an email address"),
        ),
        ldap=_ldap(ldap),
        alerts=None if alerts is None else AlertSettings(
            emails=alerts.strings("emails", pattern=EMAIL_RE),
            connection_threshold=alerts.int("connectionThreshold", default=160, lo=1),
        ),
    )
    names = [s.name for s in (settings.frontend, settings.backend, settings.worker, settings.exporter.service)]
    if len(set(names)) != len(names):
        root.fail("frontend", f"service names must be unique, got {names}")
    return settings


def from_pulumi_config() -> PenpotSettings:
    """Settings of the running Penpot stack, read once from `pulumi.Config`."""
    import pulumi

    values, project = pulumi_config_values(NAMESPACE, KEYS)
    return load_settings(pulumi.get_stack(), values, project)
