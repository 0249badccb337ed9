"""Cloud SQL security rules (BREW-S001..S019): reachable only from the VPC over TLS,
IAM logins, an audit trail in the logs, and production that survives a zone, a bad
migration and a stray delete.

Absent properties are judged by the provider's default: a public IP, unencrypted
connections allowed, zonal, no API-side deletion protection.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from infra.policy.model import Context, Resource, Rule, Severity, is_production, resource_rule

SQL_INSTANCE = "gcp:sql/databaseInstance:DatabaseInstance"
ENCRYPTED_SSL_MODES = ("ENCRYPTED_ONLY", "TRUSTED_CLIENT_CERTIFICATE_REQUIRED")
STACK_DATABASE = "brew:database in stacks/Pulumi.<stack>.yaml"
PITR_DOCS = "https://cloud.google.com/sql/docs/postgres/backup-recovery/pitr"
HA_DOCS = "https://cloud.google.com/sql/docs/postgres/high-availability"
IAM_LOGIN_DOCS = "https://cloud.google.com/sql/docs/postgres/iam-logins"
DELETION_DOCS = "https://cloud.google.com/sql/docs/postgres/deletion-protection"


def _is_postgres(r: Resource) -> bool:
    return str(r.get("databaseVersion", "")).startswith("POSTGRES")


def _is_replica(r: Resource) -> bool:
    # A read replica takes no backups of its own; its primary's backups cover it.
    return bool(r.get("masterInstanceName"))


def _flags(r: Resource) -> dict[str, str]:
    return {str(f.get("name")): str(f.get("value")) for f in r.get("settings.databaseFlags") or ()
            if isinstance(f, Mapping)}


@resource_rule(
    "BREW-S001", Severity.ERROR, "Cloud SQL has no public IP", types=[SQL_INSTANCE],
    description="A public IPv4 address puts the database's login prompt on the internet; Brew's "
                "services reach Postgres over Direct VPC egress, so nothing needs it. Omitting "
                "ipv4Enabled means the provider default, a public IP. Checkov CKV_GCP_60, "
                "Trivy AVD-GCP-0017.",
    remediation="Set settings.ipConfiguration.ipv4Enabled: false with a privateNetwork, as the "
                "PostgresInstance component (infra/components/postgres.py) does.",
    references=("CKV_GCP_60", "AVD-GCP-0017"),
)
def sql_no_public_ip(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    enabled = r.get("settings.ipConfiguration.ipv4Enabled")
    if enabled is False:
        return
    state = "not set, so the provider gives it a public IP" if enabled is None else str(enabled).lower()
    yield ("settings.ipConfiguration.ipv4Enabled",
           f"Cloud SQL instance {r.physical_name}: settings.ipConfiguration.ipv4Enabled is {state}; "
           "Brew databases take private IP only")


@resource_rule(
    "BREW-S002", Severity.ERROR, "Cloud SQL has no authorized networks", types=[SQL_INSTANCE],
    description="Authorized networks open the public IP to address ranges, and a range such as "
                "0.0.0.0/0 opens it to everyone; a private-IP-only instance has no use for them. "
                "Checkov CKV_GCP_11, Trivy AVD-GCP-0017.",
    remediation="Remove settings.ipConfiguration.authorizedNetworks; reach the database from the "
                "VPC, or through the Cloud SQL Auth Proxy with IAM login.",
    references=("CKV_GCP_11", "AVD-GCP-0017"),
)
def sql_no_authorized_networks(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    networks = r.get("settings.ipConfiguration.authorizedNetworks") or ()
    for index, network in enumerate(networks):
        value = network.get("value") if isinstance(network, Mapping) else network
        prop = f"settings.ipConfiguration.authorizedNetworks[{index}].value"
        yield (prop, f"Cloud SQL instance {r.physical_name}: {prop} admits {value}; Brew databases admit "
                     "no network from outside the VPC")


@resource_rule(
    "BREW-S003", Severity.ERROR, "Cloud SQL accepts encrypted connections only", types=[SQL_INSTANCE],
    description="Without an sslMode that refuses plaintext, a misconfigured client sends its "
                "queries and results unencrypted across the VPC. The default, "
                "ALLOW_UNENCRYPTED_AND_ENCRYPTED, accepts both. Checkov CKV_GCP_6 (which wants "
                "client certificates), Trivy AVD-GCP-0015 (which also accepts ENCRYPTED_ONLY).",
    remediation="Set settings.ipConfiguration.sslMode: ENCRYPTED_ONLY (IAM login, as the "
                "PostgresInstance component does) or TRUSTED_CLIENT_CERTIFICATE_REQUIRED.",
    references=("CKV_GCP_6", "AVD-GCP-0015"),
)
def sql_encrypted_connections(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    mode = r.get("settings.ipConfiguration.sslMode")
    if mode in ENCRYPTED_SSL_MODES:
        return
    state = "not set, so plaintext is accepted" if mode is None else f"{mode}"
    yield ("settings.ipConfiguration.sslMode",
           f"Cloud SQL instance {r.physical_name}: settings.ipConfiguration.sslMode is {state}; "
           f"it must be one of {', '.join(ENCRYPTED_SSL_MODES)}")


@resource_rule(
    "BREW-S004", Severity.ERROR, "Production Cloud SQL takes automated backups", types=[SQL_INSTANCE],
    description="Without daily backups a dropped table or a corrupting migration on production "
                "cannot be undone. Read replicas are skipped: their primary's backups cover them. "
                "Checkov CKV_GCP_14, Trivy AVD-GCP-0024.",
    remediation=f"Set backups: true under {STACK_DATABASE} (settings.backupConfiguration.enabled).",
    references=("CKV_GCP_14", "AVD-GCP-0024"),
)
def sql_backups(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if not is_production(r, ctx) or _is_replica(r) or r.get("settings.backupConfiguration.enabled") is True:
        return
    yield ("settings.backupConfiguration.enabled",
           f"Cloud SQL instance {r.physical_name}: settings.backupConfiguration.enabled is not true; "
           "production databases take automated backups")


@resource_rule(
    "BREW-S005", Severity.ERROR, "Production Cloud SQL has point-in-time recovery", types=[SQL_INSTANCE],
    description="Daily backups alone lose up to a day of orders and jobs; point-in-time recovery "
                "replays the transaction log to any second in the retention window. It is off by "
                "default for Enterprise instances created through the API. None of Checkov, KICS "
                "or Trivy has this rule (Cloud SQL PITR documentation).",
    remediation=f"Set pointInTimeRecovery: true (with backups: true) under {STACK_DATABASE}.",
    references=(PITR_DOCS,),
)
def sql_point_in_time_recovery(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if not is_production(r, ctx) or _is_replica(r) \
            or r.get("settings.backupConfiguration.pointInTimeRecoveryEnabled") is True:
        return
    yield ("settings.backupConfiguration.pointInTimeRecoveryEnabled",
           f"Cloud SQL instance {r.physical_name}: settings.backupConfiguration.pointInTimeRecoveryEnabled "
           "is not true; production databases keep point-in-time recovery")


@resource_rule(
    "BREW-S006", Severity.ERROR, "Production Cloud SQL has deletion protection", types=[SQL_INSTANCE],
    description="Deleting an instance can take its automated backups with it. Pulumi's "
                "deletionProtection (default true) stops `pulumi destroy` and replacements; the "
                "API's settings.deletionProtectionEnabled also stops the console and gcloud, so "
                "production needs both. None of Checkov, KICS or Trivy has this rule.",
    remediation=f"Set deletionProtection: true under {STACK_DATABASE}; the PostgresInstance "
                "component sets both deletionProtection and settings.deletionProtectionEnabled from it.",
    references=(DELETION_DOCS,),
)
def sql_deletion_protection(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if not is_production(r, ctx):
        return
    if r.get("deletionProtection") is False:
        yield ("deletionProtection",
               f"Cloud SQL instance {r.physical_name}: deletionProtection is false; Pulumi may delete "
               "a production database and its backups")
    if r.get("settings.deletionProtectionEnabled") is not True:
        yield ("settings.deletionProtectionEnabled",
               f"Cloud SQL instance {r.physical_name}: settings.deletionProtectionEnabled is not true; "
               "the console or gcloud may delete a production database and its backups")


@resource_rule(
    "BREW-S007", Severity.ERROR, "Production Cloud SQL is regional (HA)", types=[SQL_INSTANCE],
    description="A zonal instance goes down with its zone and takes every production service "
                "with it; REGIONAL keeps a synchronous standby in a second zone and fails over. "
                "The default is ZONAL. None of Checkov, KICS or Trivy has this rule.",
    remediation=f"Set availability: regional under {STACK_DATABASE} (settings.availabilityType: REGIONAL).",
    references=(HA_DOCS,),
)
def sql_regional(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    availability = r.get("settings.availabilityType")
    if not is_production(r, ctx) or availability == "REGIONAL":
        return
    state = "not set, so ZONAL" if availability is None else availability
    yield ("settings.availabilityType",
           f"Cloud SQL instance {r.physical_name}: settings.availabilityType is {state}; production "
           "databases are REGIONAL")


def _flag_rule(id: str, severity: Severity, flag: str, value: str, *, why: str, scanners: str,
               references: Sequence[str]) -> Rule:
    """A rule that a Postgres instance sets one database flag to one value."""

    @resource_rule(
        id, severity, f"Cloud SQL Postgres sets {flag}={value}", types=[SQL_INSTANCE],
        description=f"{why} Only Postgres instances are checked. {scanners}",
        remediation=f"Keep the PostgresInstance component's default, or set flags.{flag}: "
                    f"\"{value}\" under {STACK_DATABASE}.",
        references=references,
    )
    def check(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
        if not _is_postgres(r):
            return
        actual = _flags(r).get(flag)
        if actual == value:
            return
        state = "not set" if actual is None else f"{actual!r}"
        yield ("settings.databaseFlags",
               f"Cloud SQL instance {r.physical_name}: settings.databaseFlags {flag} is {state}; "
               f"it must be {value!r}")

    return check


sql_iam_authentication = _flag_rule(
    "BREW-S008", Severity.ERROR, "cloudsql.iam_authentication", "on",
    why="IAM database login lets services connect as their service accounts, so no database "
        "password exists to leak, rotate or revoke.",
    scanners="None of Checkov, KICS or Trivy has this rule (Cloud SQL IAM login documentation).",
    references=(IAM_LOGIN_DOCS,),
)
sql_log_connections = _flag_rule(
    "BREW-S009", Severity.ERROR, "log_connections", "on",
    why="Every connection attempt in the logs is how a stolen identity or a brute force is noticed.",
    scanners="Checkov CKV_GCP_52, Trivy AVD-GCP-0016.",
    references=("CKV_GCP_52", "AVD-GCP-0016"),
)
sql_log_disconnections = _flag_rule(
    "BREW-S010", Severity.ERROR, "log_disconnections", "on",
    why="The end of each session, with its duration, completes the connection audit trail.",
    scanners="Checkov CKV_GCP_53, Trivy AVD-GCP-0022.",
    references=("CKV_GCP_53", "AVD-GCP-0022"),
)
sql_log_lock_waits = _flag_rule(
    "BREW-S011", Severity.ERROR, "log_lock_waits", "on",
    why="A session holding locks (a stuck migration, a runaway query) starves the worker's lease "
        "and the queue; without this flag the waits leave no trace.",
    scanners="Checkov CKV_GCP_54, Trivy AVD-GCP-0020.",
    references=("CKV_GCP_54", "AVD-GCP-0020"),
)
sql_log_checkpoints = _flag_rule(
    "BREW-S012", Severity.WARNING, "log_checkpoints", "on",
    why="Checkpoint logs explain I/O stalls; diagnostic rather than a security control, hence a warning.",
    scanners="Checkov CKV_GCP_51, Trivy AVD-GCP-0025.",
    references=("CKV_GCP_51", "AVD-GCP-0025"),
)
sql_log_temp_files = _flag_rule(
    "BREW-S013", Severity.WARNING, "log_temp_files", "0",
    why="Logging every temporary file shows queries that spill to disk; diagnostic rather than "
        "a security control, hence a warning.",
    scanners="Checkov CKV_GCP_56, Trivy AVD-GCP-0014.",
    references=("CKV_GCP_56", "AVD-GCP-0014"),
)
