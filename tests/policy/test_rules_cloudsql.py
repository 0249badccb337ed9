"""Cloud SQL rules (BREW-S001..S019): the shipped stacks pass, and one changed property
fails exactly the rule that guards it, naming the instance and the property."""

from __future__ import annotations


import pytest

from infra.policy.model import Rule, Severity
from infra.policy.rules import cloudsql
from tests.policy.helpers import DELETE, changed, find, findings, graph, resource

SQL = "gcp:sql/databaseInstance:DatabaseInstance"
RULES = [value for value in vars(cloudsql).values() if isinstance(value, Rule)]


def with_flag(data: dict, name: str, flag: str, value: str | None) -> dict:
    """`data` with one database flag set, or removed when value is None."""
    flags = [f for f in find(data, SQL, name)["inputs"]["settings"]["databaseFlags"] if f["name"] != flag]
    if value is not None:
        flags.append({"name": flag, "value": value})
    return changed(data, SQL, name, "settings.databaseFlags", flags)


def only_violation(rule: Rule, data: dict, name: str, prop: str) -> str:
    """The message of the one finding `rule` reports, after checking where it points."""
    found = findings(rule, data)
    assert [(f.rule, f.resource, f.property) for f in found] == [(rule.id, name, prop)]
    assert name in found[0].message and found[0].severity is rule.severity
    return found[0].message


def test_ids_and_metadata():
    assert sorted(r.id for r in RULES) == [f"BREW-S{n:03d}" for n in range(1, 14)]
    for rule in RULES:
        assert rule.types == (SQL,) and rule.title and rule.remediation
    assert not any("CKV_GCP_79" in r.references for r in RULES), "POSTGRES_17 is prod's version by design"


@pytest.mark.parametrize(
    ("rule", "stack", "name", "path", "value", "prop", "says"),
    [
        (cloudsql.sql_no_public_ip, "prod", "brew-prod", "settings.ipConfiguration.ipv4Enabled", True,
         "settings.ipConfiguration.ipv4Enabled", "is true"),
        (cloudsql.sql_no_public_ip, "staging", "brew-staging", "settings.ipConfiguration.ipv4Enabled", DELETE,
         "settings.ipConfiguration.ipv4Enabled", "not set, so the provider gives it a public IP"),
        (cloudsql.sql_no_authorized_networks, "prod", "brew-prod", "settings.ipConfiguration.authorizedNetworks",
         [{"name": "office", "value": "0.0.0.0/0"}], "settings.ipConfiguration.authorizedNetworks[0].value",
         "admits 0.0.0.0/0"),
        (cloudsql.sql_encrypted_connections, "prod", "brew-prod", "settings.ipConfiguration.sslMode",
         "ALLOW_UNENCRYPTED_AND_ENCRYPTED", "settings.ipConfiguration.sslMode", "is ALLOW_UNENCRYPTED_AND_ENCRYPTED"),
        (cloudsql.sql_encrypted_connections, "staging", "brew-staging", "settings.ipConfiguration.sslMode", DELETE,
         "settings.ipConfiguration.sslMode", "plaintext is accepted"),
        (cloudsql.sql_backups, "prod", "brew-prod", "settings.backupConfiguration.enabled", False,
         "settings.backupConfiguration.enabled", "automated backups"),
        (cloudsql.sql_point_in_time_recovery, "prod", "brew-prod",
         "settings.backupConfiguration.pointInTimeRecoveryEnabled", False,
         "settings.backupConfiguration.pointInTimeRecoveryEnabled", "point-in-time recovery"),
        (cloudsql.sql_deletion_protection, "prod", "brew-prod", "deletionProtection", False,
         "deletionProtection", "Pulumi may delete"),
        (cloudsql.sql_deletion_protection, "prod", "brew-prod", "settings.deletionProtectionEnabled", DELETE,
         "settings.deletionProtectionEnabled", "the console or gcloud may delete"),
        (cloudsql.sql_regional, "prod", "brew-prod", "settings.availabilityType", "ZONAL",
         "settings.availabilityType", "is ZONAL"),
        (cloudsql.sql_regional, "prod", "brew-prod", "settings.availabilityType", DELETE,
         "settings.availabilityType", "not set, so ZONAL"),
    ],
)
def test_changed_property_fails(graphs, rule, stack, name, path, value, prop, says):
    message = only_violation(rule, changed(graphs[stack], SQL, name, path, value), name, prop)
    assert says in message and prop in message


@pytest.mark.parametrize(
    ("rule", "flag", "value"),
    [
        (cloudsql.sql_iam_authentication, "cloudsql.iam_authentication", "off"),
        (cloudsql.sql_log_connections, "log_connections", "off"),
        (cloudsql.sql_log_disconnections, "log_disconnections", None),
        (cloudsql.sql_log_lock_waits, "log_lock_waits", "off"),
        (cloudsql.sql_log_checkpoints, "log_checkpoints", None),
        (cloudsql.sql_log_temp_files, "log_temp_files", "-1"),
    ],
)
@pytest.mark.parametrize(("stack", "name"), [("prod", "brew-prod"), ("staging", "brew-staging")])
def test_flag_off_or_missing_fails(graphs, rule, flag, value, stack, name):
    message = only_violation(rule, with_flag(graphs[stack], name, flag, value), name, "settings.databaseFlags")
    assert f"{flag} is {'not set' if value is None else repr(value)}" in message


def test_flag_severities():
    errors = {cloudsql.sql_iam_authentication, cloudsql.sql_log_connections, cloudsql.sql_log_disconnections,
              cloudsql.sql_log_lock_waits}
    assert all(rule.severity is Severity.ERROR for rule in errors)
    assert cloudsql.sql_log_checkpoints.severity is cloudsql.sql_log_temp_files.severity is Severity.WARNING


def test_staging_may_be_zonal_without_point_in_time_recovery(graphs):
    staging = graphs["staging"]
    settings = find(staging, SQL, "brew-staging")["inputs"]["settings"]
    assert settings["availabilityType"] == "ZONAL"
    assert settings["backupConfiguration"]["pointInTimeRecoveryEnabled"] is False
    unprotected = changed(staging, SQL, "brew-staging", "settings.deletionProtectionEnabled", False)
    for rule in (cloudsql.sql_regional, cloudsql.sql_point_in_time_recovery, cloudsql.sql_deletion_protection):
        assert findings(rule, unprotected) == []


def test_a_prod_label_makes_an_instance_production_in_any_stack(graphs):
    relabelled = changed(graphs["staging"], SQL, "brew-staging", "settings.userLabels.environment", "prod")
    only_violation(cloudsql.sql_regional, relabelled, "brew-staging", "settings.availabilityType")


def test_read_replica_needs_no_backups_of_its_own():
    replica = resource(SQL, "replica", {"name": "brew-prod-replica", "databaseVersion": "POSTGRES_17",
                                        "masterInstanceName": "brew-prod",
                                        "settings": {"backupConfiguration": {"enabled": False}}})
    assert findings(cloudsql.sql_backups, graph("prod", replica)) == []
    assert findings(cloudsql.sql_point_in_time_recovery, graph("prod", replica)) == []


def test_flags_are_checked_on_postgres_only():
    mysql = resource(SQL, "mysql", {"name": "legacy", "databaseVersion": "MYSQL_8_0", "settings": {}})
    assert findings(cloudsql.sql_log_connections, graph("prod", mysql)) == []
    assert findings(cloudsql.sql_iam_authentication, graph("prod", mysql)) == []


def test_every_authorized_network_is_reported(graphs):
    networks = [{"value": "10.0.0.0/8"}, {"value": "203.0.113.0/24"}]
    data = changed(graphs["prod"], SQL, "brew-prod", "settings.ipConfiguration.authorizedNetworks", networks)
    assert [f.property for f in findings(cloudsql.sql_no_authorized_networks, data)] == [
        "settings.ipConfiguration.authorizedNetworks[0].value",
        "settings.ipConfiguration.authorizedNetworks[1].value",
    ]


def test_client_certificates_are_accepted_too(graphs):
    data = changed(graphs["prod"], SQL, "brew-prod", "settings.ipConfiguration.sslMode",
                   "TRUSTED_CLIENT_CERTIFICATE_REQUIRED")
    assert findings(cloudsql.sql_encrypted_connections, data) == []
