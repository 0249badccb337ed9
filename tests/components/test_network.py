"""Network: custom-mode VPC, the Direct VPC egress subnet, and private services access."""

from __future__ import annotations

import dataclasses

import pulumi
import pytest

from infra.components.network import Network, NetworkArgs
from infra.synth.engine import run_program

ARGS = NetworkArgs(
    network_name="brew-vpc",
    project="p",
    region="asia-south1",
    subnet_name="brew-run",
    subnet_cidr="10.10.0.0/24",
    private_services_range_name="brew-psa",
)


def synth(args: NetworkArgs):
    def program():
        net = Network("net", args)
        pulumi.export("id", net.id)
        pulumi.export("name", net.name)
        pulumi.export("subnetwork_id", net.subnetwork_id)
        pulumi.export("subnetwork_name", net.subnetwork_name)
        pulumi.export("private_services", net.private_services.id)

    return run_program(program, project="brew", stack="test", config={"gcp:project": "p"})


def test_resources_and_inputs():
    graph = synth(dataclasses.replace(ARGS, private_services_address="172.31.0.0", private_services_prefix_length=22))
    component = graph.one("brew:gcp:Network", "net")["urn"]
    network = graph.one("gcp:compute/network:Network", "net-network")
    subnet = graph.one("gcp:compute/subnetwork:Subnetwork", "net-subnet")
    psa_range = graph.one("gcp:compute/globalAddress:GlobalAddress", "net-psa-range")
    peering = graph.one("gcp:servicenetworking/connection:Connection", "net-psa")
    assert network["inputs"] == {"name": "brew-vpc", "project": "p", "autoCreateSubnetworks": False}
    network_id = graph.outputs["id"]
    assert subnet["inputs"] == {
        "name": "brew-run",
        "project": "p",
        "region": "asia-south1",
        "network": network_id,
        "ipCidrRange": "10.10.0.0/24",
        "privateIpGoogleAccess": True,
    }
    assert psa_range["inputs"] == {
        "name": "brew-psa",
        "project": "p",
        "network": network_id,
        "purpose": "VPC_PEERING",
        "addressType": "INTERNAL",
        "address": "172.31.0.0",
        "prefixLength": 22,
    }
    assert peering["inputs"] == {
        "network": network_id,
        "service": "servicenetworking.googleapis.com",
        "reservedPeeringRanges": ["brew-psa"],
    }
    assert psa_range["urn"] in peering["dependencies"]
    for child in (network, subnet, psa_range, peering):
        assert child["parent"] == component


def test_defaults_give_the_cloud_sql_range():
    psa_range = synth(ARGS).one("gcp:compute/globalAddress:GlobalAddress", "net-psa-range")
    assert psa_range["inputs"]["address"] == "172.30.0.0"
    assert psa_range["inputs"]["prefixLength"] == 20


def test_outputs():
    outputs = synth(ARGS).outputs
    assert outputs["name"] == "brew-vpc"
    assert outputs["subnetwork_name"] == "brew-run"
    assert outputs["id"] and outputs["subnetwork_id"] and outputs["private_services"]
    assert outputs["id"] != outputs["subnetwork_id"]


def test_private_services_is_the_connection():
    seen = {}

    def program():
        seen["net"] = Network("net", ARGS)

    run_program(program, project="brew", stack="test", config={"gcp:project": "p"})
    from pulumi_gcp import servicenetworking

    assert isinstance(seen["net"].private_services, servicenetworking.Connection)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"subnet_cidr": "10.10.0.0/33"}, "subnet_cidr"),
        ({"subnet_cidr": "10.10.0.1/24"}, "subnet_cidr"),
        ({"subnet_cidr": "not-a-cidr"}, "subnet_cidr"),
        ({"private_services_address": "172.30.0.1"}, "private_services_address"),
        ({"private_services_address": "bogus"}, "private_services_address"),
        ({"private_services_prefix_length": 40}, "private_services_address"),
        ({"private_services_prefix_length": 28}, "private_services_prefix_length 28"),
        ({"subnet_cidr": "172.30.4.0/24"}, "overlaps"),
    ],
)
def test_invalid_args_raise(overrides, message):
    with pytest.raises(ValueError, match=message):
        synth(dataclasses.replace(ARGS, **overrides))


def test_private_services_range_carries_the_labels():
    labels = {"environment": "edge", "service": "brew-vpc", "managed-by": "pulumi"}
    graph = synth(dataclasses.replace(ARGS, labels=labels))
    assert graph.one("gcp:compute/globalAddress:GlobalAddress", "net-psa-range")["inputs"]["labels"] == labels
