"""A private-IP-only Cloud SQL for PostgreSQL instance with IAM database login.

The instance has no public address, accepts encrypted connections only, logs who
connects and who waits on locks, and its applications log in as their service accounts,
so no database password exists.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_gcp import sql

IAM_AUTH_FLAG = "cloudsql.iam_authentication"
# The audit trail every instance keeps unless a stack overrides a flag (security rules
# BREW-S009..S013 check it): without it an intrusion or a lock pile-up leaves no trace.
LOGGING_FLAGS = {
    "log_checkpoints": "on",
    "log_connections": "on",
    "log_disconnections": "on",
    "log_lock_waits": "on",
    "log_temp_files": "0",
}
SERVICE_ACCOUNT_SUFFIX = ".gserviceaccount.com"
# Transaction logs for point-in-time recovery: Enterprise keeps up to 7 days, Enterprise Plus 35.
MAX_LOG_RETENTION_DAYS = {"ENTERPRISE": 7, "ENTERPRISE_PLUS": 35}
START_TIME_RE = re.compile(r"^(?:[01]\d|2[0-3]):[0-5]\d$")


class Availability(str, enum.Enum):
    """The API's `availabilityType`: REGIONAL fails over to a standby in another zone."""

    REGIONAL = "REGIONAL"
    ZONAL = "ZONAL"


@dataclass(frozen=True)
class PostgresInstanceArgs:
    instance_name: str
    project: str
    region: str
    private_network: pulumi.Input[str]
    allocated_ip_range: str | None = None
    database_version: str = "POSTGRES_17"
    tier: str = "db-custom-2-7680"
    edition: str = "ENTERPRISE"
    # High availability unless a stack opts out: a zonal outage should not take prod down.
    availability: Availability = Availability.REGIONAL
    backups: bool = True
    point_in_time_recovery: bool = True
    backup_start_time: str = "20:00"
    retained_backups: int = 14
    transaction_log_retention_days: int = 7
    deletion_protection: bool = True
    flags: Mapping[str, str] = field(default_factory=dict)
    databases: Sequence[str] = field(default_factory=tuple)
    iam_service_accounts: Sequence[pulumi.Input[str]] = field(default_factory=tuple)
    disk_size_gb: int = 20
    labels: Mapping[str, str] = field(default_factory=dict)


def iam_user_name(email: str) -> str:
    # Cloud SQL names a Postgres IAM service-account user after the email, minus the suffix.
    return email.removesuffix(SERVICE_ACCOUNT_SUFFIX)


def _validate(args: PostgresInstanceArgs) -> None:
    if not args.instance_name:
        raise ValueError("instance_name must not be empty")
    if args.edition not in MAX_LOG_RETENTION_DAYS:
        raise ValueError(f"edition {args.edition!r} must be one of {', '.join(MAX_LOG_RETENTION_DAYS)}")
    if not isinstance(args.availability, Availability):
        raise ValueError(f"availability {args.availability!r} must be an Availability")
    if args.point_in_time_recovery and not args.backups:
        raise ValueError("point_in_time_recovery=True needs backups=True")
    max_days = MAX_LOG_RETENTION_DAYS[args.edition]
    if not 1 <= args.transaction_log_retention_days <= max_days:
        raise ValueError(
            f"transaction_log_retention_days {args.transaction_log_retention_days} must be 1..{max_days} "
            f"for edition {args.edition}"
        )
    if args.retained_backups < 1:
        raise ValueError(f"retained_backups {args.retained_backups} must be at least 1")
    if not START_TIME_RE.match(args.backup_start_time):
        raise ValueError(f"backup_start_time {args.backup_start_time!r} must be HH:MM (UTC)")
    if args.disk_size_gb < 10:
        raise ValueError(f"disk_size_gb {args.disk_size_gb} must be at least 10")
    if args.flags.get(IAM_AUTH_FLAG, "on") != "on":
        raise ValueError(f"flags: {IAM_AUTH_FLAG}={args.flags[IAM_AUTH_FLAG]!r} would disable IAM login; it stays 'on'")
    if len(set(args.databases)) != len(args.databases):
        raise ValueError(f"databases {list(args.databases)!r} contain a duplicate")
    known = [email for email in args.iam_service_accounts if isinstance(email, str)]
    for email in known:
        if not email.endswith(SERVICE_ACCOUNT_SUFFIX) or "@" not in email:
            raise ValueError(f"iam_service_accounts: {email!r} is not a service account email")
    accounts = [email.split("@", 1)[0] for email in known]
    if len(set(accounts)) != len(accounts):
        raise ValueError(f"iam_service_accounts {known!r} name the same account twice")


class PostgresInstance(pulumi.ComponentResource):
    """The instance, its databases, and one IAM login per service account."""

    name: pulumi.Output[str]
    connection_name: pulumi.Output[str]
    private_ip_address: pulumi.Output[str]
    self_link: pulumi.Output[str]

    def __init__(self, name: str, args: PostgresInstanceArgs, opts: pulumi.ResourceOptions | None = None):
        _validate(args)
        super().__init__("brew:gcp:PostgresInstance", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        flags = {**LOGGING_FLAGS, **args.flags, IAM_AUTH_FLAG: "on"}
        instance = sql.DatabaseInstance(
            f"{name}-instance",
            name=args.instance_name,
            project=args.project,
            region=args.region,
            database_version=args.database_version,
            # Pulumi refuses to delete; the API-side flag below also stops console/gcloud deletes.
            deletion_protection=args.deletion_protection,
            settings={
                "tier": args.tier,
                "edition": args.edition,
                "availability_type": args.availability.value,
                "disk_size": args.disk_size_gb,
                "deletion_protection_enabled": args.deletion_protection,
                "user_labels": dict(args.labels),
                "ip_configuration": {
                    # Reachable only from the VPC through private services access.
                    "ipv4_enabled": False,
                    "private_network": args.private_network,
                    "allocated_ip_range": args.allocated_ip_range,
                    "ssl_mode": "ENCRYPTED_ONLY",
                },
                "backup_configuration": {
                    "enabled": args.backups,
                    "point_in_time_recovery_enabled": args.point_in_time_recovery,
                    "start_time": args.backup_start_time,
                    "transaction_log_retention_days": args.transaction_log_retention_days,
                    "backup_retention_settings": {"retained_backups": args.retained_backups},
                },
                # Sorted so a reordered config map is not a diff.
                "database_flags": [{"name": k, "value": flags[k]} for k in sorted(flags)],
            },
            opts=child,
        )

        for database in args.databases:
            sql.Database(
                f"{name}-{database}",
                name=database,
                instance=instance.name,
                project=args.project,
                opts=child,
            )

        for index, email in enumerate(args.iam_service_accounts):
            # Renaming a user drops its Postgres role, so a known email names the child;
            # an email still being computed can only be named by its position.
            suffix = email.split("@", 1)[0] if isinstance(email, str) else f"iam-{index}"
            sql.User(
                f"{name}-{suffix}",
                name=pulumi.Output.from_input(email).apply(iam_user_name),
                instance=instance.name,
                project=args.project,
                type="CLOUD_IAM_SERVICE_ACCOUNT",
                opts=child,
            )

        self.name = instance.name
        self.connection_name = instance.connection_name
        self.private_ip_address = instance.private_ip_address
        self.self_link = instance.self_link
        self.register_outputs(
            {
                "name": self.name,
                "connection_name": self.connection_name,
                "private_ip_address": self.private_ip_address,
                "self_link": self.self_link,
            }
        )
