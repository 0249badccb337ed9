"""Memorystore: a Redis instance on the private services access range, AUTH and TLS on by
default, and its connection URI (AUTH string inside) only ever in Secret Manager."""

from __future__ import annotations

import dataclasses
from typing import Any

import pulumi
import pytest

from infra.components.memorystore import Memorystore, MemorystoreArgs, Tier, connection_uri
from infra.synth.engine import SECRET, run_program

REDIS = "gcp:redis/instance:Instance"
SECRET_RESOURCE = "gcp:secretmanager/secret:Secret"
VERSION = "gcp:secretmanager/secretVersion:SecretVersion"
ACCESSOR = "gcp:secretmanager/secretIamMember:SecretIamMember"
NETWORK = "projects/p/global/networks/vpc"
BACKEND = "serviceAccount:backend@p.iam.gserviceaccount.com"
EXPORTER = "serviceAccount:exporter@p.iam.gserviceaccount.com"


def make_args(**overrides: Any) -> MemorystoreArgs:
    base = MemorystoreArgs(instance_name="cache-prod", project="p", region="asia-south1", authorized_network=NETWORK)
    return dataclasses.replace(base, **overrides)


def synth(args: MemorystoreArgs):
    def program():
        cache = Memorystore("cache", args)
        pulumi.export("host", cache.host)
        pulumi.export("port", cache.port)
        pulumi.export("uri", cache.uri)
        pulumi.export("uriSecret", cache.uri_secret_id)

    return run_program(program, project="brew", stack="test", config={"gcp:project": "p"})


def test_defaults_are_high_availability_auth_and_tls_on_private_services_access():
    graph = synth(make_args(labels={"environment": "prod"}))
    instance = graph.one(REDIS, "cache-instance")
    assert instance["inputs"] == {
        "name": "cache-prod",
        "project": "p",
        "region": "asia-south1",
        "tier": "STANDARD_HA",
        "memorySizeGb": 1,
        "redisVersion": "REDIS_7_2",
        "authorizedNetwork": NETWORK,
        "connectMode": "PRIVATE_SERVICE_ACCESS",
        "authEnabled": True,
        "transitEncryptionMode": "SERVER_AUTHENTICATION",
        "deletionProtection": True,
        "labels": {"environment": "prod"},
    }
    assert instance["parent"] == graph.one("brew:gcp:Memorystore", "cache")["urn"]
    # Memorystore serves TLS on 6378; the URI (with the AUTH string) is a secret even as an output.
    assert graph.outputs["port"] == 6378
    assert graph.outputs["uri"] == SECRET
    assert not graph.by_type(SECRET_RESOURCE)


def test_the_uri_goes_to_secret_manager_readable_by_the_accessors_only():
    graph = synth(make_args(uri_secret_id="cache-uri", uri_accessors=(BACKEND, EXPORTER),
                            reserved_ip_range="psa-range", labels={"service": "cache"}))
    assert graph.one(REDIS, "cache-instance")["inputs"]["reservedIpRange"] == "psa-range"
    secret = graph.one(SECRET_RESOURCE, "cache-secret")
    assert secret["inputs"] == {"project": "p", "secretId": "cache-uri", "replication": {"auto": {}},
                                "labels": {"service": "cache"}}
    version = graph.one(VERSION, "cache-version")
    assert version["inputs"] == {"secret": "projects/p/secrets/cache-uri", "secretData": SECRET}
    # The value is the instance's: the version waits for it.
    assert graph.one(REDIS, "cache-instance")["urn"] in version["dependencies"]
    members = {graph.one(ACCESSOR, f"cache-accessor-{i}")["inputs"]["member"] for i in range(2)}
    assert members == {BACKEND, EXPORTER}
    assert len(graph.by_type(ACCESSOR)) == 2
    assert graph.outputs["uriSecret"] == "projects/p/secrets/cache-uri"


def test_tls_off_and_a_basic_tier_are_a_stack_s_choice():
    graph = synth(make_args(tier=Tier.BASIC, transit_encryption=False, memory_size_gb=5,
                            configs={"maxmemory-policy": "noeviction"}))
    inputs = graph.one(REDIS, "cache-instance")["inputs"]
    assert (inputs["tier"], inputs["transitEncryptionMode"], inputs["memorySizeGb"]) == ("BASIC", "DISABLED", 5)
    assert inputs["redisConfigs"] == {"maxmemory-policy": "noeviction"}
    assert graph.outputs["port"] == 6379


@pytest.mark.parametrize(("auth", "tls", "expected"), [
    ("s3cret", False, "redis://:s3cret@10.0.0.3:6379/0"),
    ("s3cret", True, "rediss://:s3cret@10.0.0.3:6379/0"),
    (None, False, "redis://10.0.0.3:6379/0"),
])
def test_connection_uri(auth, tls, expected):
    assert connection_uri(auth, "10.0.0.3", 6379, 0, tls) == expected


@pytest.mark.parametrize(("overrides", "message"), [
    ({"instance_name": "Cache"}, "instance_name: 'Cache'"),
    ({"instance_name": "x" * 41}, "instance_name:"),
    ({"tier": "STANDARD_HA"}, "tier: 'STANDARD_HA' must be a Tier"),
    ({"memory_size_gb": 0}, "memory_size_gb: 0"),
    ({"redis_version": "7.2"}, "redis_version: '7.2'"),
    ({"database": 16}, "database: 16"),
    ({"uri_accessors": (BACKEND,)}, "uri_accessors: given without uri_secret_id"),
    ({"uri_secret_id": "has space"}, "uri_secret_id: 'has space'"),
    ({"uri_secret_id": "u", "uri_accessors": ("allUsers",)}, "uri_accessors: 'allUsers'"),
])
def test_invalid_args_raise_one_line_value_error(overrides, message):
    with pytest.raises(ValueError) as raised:
        synth(make_args(**overrides))
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)
