"""The VPC every environment shares: one regional subnet for Cloud Run's Direct VPC
egress, and the private services access range and peering Cloud SQL's private IPs
come from."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
from pulumi_gcp import compute, servicenetworking


@dataclass(frozen=True)
class NetworkArgs:
    network_name: str
    project: str
    region: str
    subnet_name: str
    subnet_cidr: str
    private_services_range_name: str
    private_services_address: str = "172.30.0.0"
    private_services_prefix_length: int = 20
    # Networks and subnetworks take no labels; the private services range does.
    labels: Mapping[str, str] = field(default_factory=dict)


def _validate(args: NetworkArgs) -> None:
    try:
        subnet = ipaddress.IPv4Network(args.subnet_cidr)
    except ValueError as exc:
        raise ValueError(f"subnet_cidr {args.subnet_cidr!r} is not an IPv4 network: {exc}") from None
    psa_cidr = f"{args.private_services_address}/{args.private_services_prefix_length}"
    try:
        psa = ipaddress.IPv4Network(psa_cidr)
    except ValueError as exc:
        raise ValueError(
            f"private_services_address/prefix_length {psa_cidr!r} is not an IPv4 network: {exc}"
        ) from None
    # Private services access needs at least a /24 to allocate producer subnets from.
    if args.private_services_prefix_length > 24:
        raise ValueError(f"private_services_prefix_length {args.private_services_prefix_length} must be 24 or less")
    if subnet.overlaps(psa):
        raise ValueError(f"subnet_cidr {args.subnet_cidr!r} overlaps the private services range {psa_cidr!r}")


class Network(pulumi.ComponentResource):
    """VPC, subnet, private services range, and the service networking peering."""

    id: pulumi.Output[str]
    name: pulumi.Output[str]
    subnetwork_id: pulumi.Output[str]
    subnetwork_name: pulumi.Output[str]
    private_services: servicenetworking.Connection

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        _validate(args)
        super().__init__("brew:gcp:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        network = compute.Network(
            f"{name}-network",
            name=args.network_name,
            project=args.project,
            # Subnets are declared, never one per region by default.
            auto_create_subnetworks=False,
            opts=child,
        )
        subnet = compute.Subnetwork(
            f"{name}-subnet",
            name=args.subnet_name,
            project=args.project,
            region=args.region,
            network=network.id,
            ip_cidr_range=args.subnet_cidr,
            # Cloud Run egresses through this subnet and still reaches Google APIs privately.
            private_ip_google_access=True,
            opts=child,
        )
        psa_range = compute.GlobalAddress(
            f"{name}-psa-range",
            name=args.private_services_range_name,
            project=args.project,
            network=network.id,
            purpose="VPC_PEERING",
            address_type="INTERNAL",
            address=args.private_services_address,
            prefix_length=args.private_services_prefix_length,
            labels=dict(args.labels) or None,
            opts=child,
        )
        self.private_services = servicenetworking.Connection(
            f"{name}-psa",
            network=network.id,
            service="servicenetworking.googleapis.com",
            reserved_peering_ranges=[psa_range.name],
            opts=child,
        )

        self.id = network.id
        self.name = network.name
        self.subnetwork_id = subnet.id
        self.subnetwork_name = subnet.name
        self.register_outputs(
            {
                "id": self.id,
                "name": self.name,
                "subnetwork_id": self.subnetwork_id,
                "subnetwork_name": self.subnetwork_name,
            }
        )
