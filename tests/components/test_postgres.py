"""PostgresInstance: private IP only, IAM login always on, connection logging on unless a
stack overrides it, backups and deletion protection reach both Pulumi and the API, and bad
args fail before anything is registered."""

from __future__ import annotations

import dataclasses
import re

import pulumi
import pytest

from infra.components.postgres import (
    IAM_AUTH_FLAG,
    LOGGING_FLAGS,
    Availability,
    PostgresInstance,
    PostgresInstanceArgs,
)
from infra.synth.engine import run_program

INSTANCE = "gcp:sql/databaseInstance:DatabaseInstance"
USER = "gcp:sql/user:User"
DATABASE = "gcp:sql/database:Database"
NETWORK_ID = "projects/p/global/networks/brew-vpc"


def base_args(**overrides) -> PostgresInstanceArgs:
    args = PostgresInstanceArgs(
        instance_name="brew-prod-db",
        project="p",
        region="asia-south1",
        private_network=NETWORK_ID,
    )
    return dataclasses.replace(args, **overrides)


def synth(args: PostgresInstanceArgs, name: str = "db", extra=None):
    def program():
        db = PostgresInstance(name, args)
        pulumi.export("name", db.name)
        pulumi.export("connection_name", db.connection_name)
        pulumi.export("private_ip_address", db.private_ip_address)
        pulumi.export("self_link", db.self_link)
        if extra:
            extra()

    return run_program(program, project="brew", stack="test", config={"gcp:project": "p"})


def test_every_arg_reaches_the_instance():
    graph = synth(
        base_args(
            allocated_ip_range="brew-psa",
            database_version="POSTGRES_16",
            tier="db-custom-4-15360",
            edition="ENTERPRISE_PLUS",
            availability=Availability.ZONAL,
            backup_start_time="03:30",
            retained_backups=30,
            transaction_log_retention_days=21,
            deletion_protection=False,
            disk_size_gb=50,
            labels={"environment": "prod", "service": "db", "managed-by": "pulumi"},
        )
    )
    inputs = graph.one(INSTANCE, "db-instance")["inputs"]
    assert inputs["name"] == "brew-prod-db"
    assert inputs["project"] == "p"
    assert inputs["region"] == "asia-south1"
    assert inputs["databaseVersion"] == "POSTGRES_16"
    assert inputs["deletionProtection"] is False
    settings = inputs["settings"]
    assert settings["tier"] == "db-custom-4-15360"
    assert settings["edition"] == "ENTERPRISE_PLUS"
    assert settings["availabilityType"] == "ZONAL"
    assert settings["diskSize"] == 50
    assert settings["deletionProtectionEnabled"] is False
    assert settings["userLabels"] == {"environment": "prod", "service": "db", "managed-by": "pulumi"}
    assert settings["ipConfiguration"] == {
        "ipv4Enabled": False,
        "privateNetwork": NETWORK_ID,
        "allocatedIpRange": "brew-psa",
        "sslMode": "ENCRYPTED_ONLY",
    }
    assert settings["backupConfiguration"] == {
        "enabled": True,
        "pointInTimeRecoveryEnabled": True,
        "startTime": "03:30",
        "transactionLogRetentionDays": 21,
        "backupRetentionSettings": {"retainedBackups": 30},
    }


def test_defaults_are_private_protected_and_backed_up():
    settings_inputs = synth(base_args()).one(INSTANCE, "db-instance")["inputs"]
    assert settings_inputs["databaseVersion"] == "POSTGRES_17"
    assert settings_inputs["deletionProtection"] is True
    settings = settings_inputs["settings"]
    assert settings["tier"] == "db-custom-2-7680"
    assert settings["edition"] == "ENTERPRISE"
    assert settings["availabilityType"] == "REGIONAL"
    assert settings["diskSize"] == 20
    assert settings["deletionProtectionEnabled"] is True
    assert settings["ipConfiguration"]["ipv4Enabled"] is False
    assert "allocatedIpRange" not in settings["ipConfiguration"]
    assert settings["backupConfiguration"]["enabled"] is True
    assert settings["backupConfiguration"]["pointInTimeRecoveryEnabled"] is True
    assert settings["backupConfiguration"]["startTime"] == "20:00"
    assert settings["backupConfiguration"]["transactionLogRetentionDays"] == 7
    assert settings["backupConfiguration"]["backupRetentionSettings"] == {"retainedBackups": 14}


def test_backups_can_be_turned_off_without_pitr():
    backup = synth(base_args(backups=False, point_in_time_recovery=False)).one(INSTANCE, "db-instance")
    assert backup["inputs"]["settings"]["backupConfiguration"]["enabled"] is False
    assert backup["inputs"]["settings"]["backupConfiguration"]["pointInTimeRecoveryEnabled"] is False


def flags_of(graph) -> dict[str, str]:
    return {f["name"]: f["value"] for f in graph.one(INSTANCE, "db-instance")["inputs"]["settings"]["databaseFlags"]}


def test_iam_and_logging_flags_are_merged_and_flags_sorted():
    graph = synth(base_args(flags={"max_connections": "200", "log_min_duration_statement": "500"}))
    flags = graph.one(INSTANCE, "db-instance")["inputs"]["settings"]["databaseFlags"]
    assert flags == [
        {"name": "cloudsql.iam_authentication", "value": "on"},
        {"name": "log_checkpoints", "value": "on"},
        {"name": "log_connections", "value": "on"},
        {"name": "log_disconnections", "value": "on"},
        {"name": "log_lock_waits", "value": "on"},
        {"name": "log_min_duration_statement", "value": "500"},
        {"name": "log_temp_files", "value": "0"},
        {"name": "max_connections", "value": "200"},
    ]


def test_iam_and_logging_flags_present_with_no_caller_flags():
    assert flags_of(synth(base_args())) == {IAM_AUTH_FLAG: "on", **LOGGING_FLAGS}


def test_caller_flags_override_the_logging_defaults():
    # Only temp files above 10 MB, say, on a busy instance; the rest of the defaults stay.
    flags = flags_of(synth(base_args(flags={"log_temp_files": "10240"})))
    assert flags["log_temp_files"] == "10240"
    assert flags["log_connections"] == "on"


def test_databases_and_iam_users_are_children_of_the_component():
    graph = synth(
        base_args(
            databases=("brew", "analytics"),
            iam_service_accounts=("brew-runtime@p.iam.gserviceaccount.com", "brew-ops@p.iam.gserviceaccount.com"),
        )
    )
    component = graph.one("brew:gcp:PostgresInstance", "db")
    for db_name in ("brew", "analytics"):
        database = graph.one(DATABASE, f"db-{db_name}")
        assert database["inputs"] == {"instance": "brew-prod-db", "name": db_name, "project": "p"}
        assert database["parent"] == component["urn"]
    runtime = graph.one(USER, "db-brew-runtime")
    assert runtime["inputs"] == {
        "instance": "brew-prod-db",
        "name": "brew-runtime@p.iam",
        "project": "p",
        "type": "CLOUD_IAM_SERVICE_ACCOUNT",
    }
    assert graph.one(USER, "db-brew-ops")["inputs"]["name"] == "brew-ops@p.iam"
    assert len(graph.by_type(USER)) == 2
    assert runtime["parent"] == component["urn"]
    assert graph.one(INSTANCE, "db-instance")["parent"] == component["urn"]


def test_iam_user_from_an_output_email():
    from infra.components.identity import RuntimeIdentity, RuntimeIdentityArgs

    def program():
        ident = RuntimeIdentity("rt", RuntimeIdentityArgs("brew-runtime", "Runtime", "p"))
        PostgresInstance("db", base_args(iam_service_accounts=(ident.email,)))

    graph = run_program(program, project="brew", stack="test", config={"gcp:project": "p"})
    user = graph.one(USER, "db-iam-0")
    assert user["inputs"]["name"] == "brew-runtime@p.iam"
    assert user["inputs"]["type"] == "CLOUD_IAM_SERVICE_ACCOUNT"


def test_outputs():
    graph = synth(base_args())
    assert graph.outputs == {
        "name": "brew-prod-db",
        "connection_name": "p:asia-south1:brew-prod-db",
        "private_ip_address": graph.outputs["private_ip_address"],
        "self_link": "https://sqladmin.googleapis.com/sql/v1beta4/projects/p/instances/brew-prod-db",
    }
    assert graph.outputs["private_ip_address"].startswith("172.30.0.")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"instance_name": ""}, "instance_name"),
        ({"backups": False}, "point_in_time_recovery"),
        ({"transaction_log_retention_days": 0}, "transaction_log_retention_days 0"),
        ({"transaction_log_retention_days": 8}, "transaction_log_retention_days 8"),
        ({"edition": "ENTERPRISE_PLUS", "transaction_log_retention_days": 36}, "transaction_log_retention_days 36"),
        ({"edition": "STANDARD"}, "edition 'STANDARD'"),
        ({"flags": {"cloudsql.iam_authentication": "off"}}, "cloudsql.iam_authentication"),
        ({"retained_backups": 0}, "retained_backups 0"),
        ({"backup_start_time": "8pm"}, "backup_start_time '8pm'"),
        ({"disk_size_gb": 5}, "disk_size_gb 5"),
        ({"databases": ("brew", "brew")}, "databases"),
        ({"iam_service_accounts": ("someone@example.com",)}, "someone@example.com"),
        (
            {"iam_service_accounts": ("ops@a.iam.gserviceaccount.com", "ops@b.iam.gserviceaccount.com")},
            "iam_service_accounts",
        ),
    ],
)
def test_invalid_args_raise(overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        synth(base_args(**overrides))


def test_caller_may_repeat_the_iam_flag_as_on():
    assert flags_of(synth(base_args(flags={IAM_AUTH_FLAG: "on"}))) == {IAM_AUTH_FLAG: "on", **LOGGING_FLAGS}


def test_longer_log_retention_allowed_on_enterprise_plus():
    graph = synth(base_args(edition="ENTERPRISE_PLUS", transaction_log_retention_days=35))
    backup = graph.one(INSTANCE, "db-instance")["inputs"]["settings"]["backupConfiguration"]
    assert backup["transactionLogRetentionDays"] == 35
