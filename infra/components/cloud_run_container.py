"""What a Cloud Run service and a Cloud Run job declare the same way: the container's
env (plain and from Secret Manager), Direct VPC egress, the image to run, and the checks
on them. Plain dicts, which pulumi-gcp takes for the service's and the job's input
types alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import pulumi

from infra.components.live_image import serving_image

# Only private addresses (Cloud SQL, Memorystore) go through the VPC; public egress stays
# on Cloud Run's own path, which needs no Cloud NAT.
VPC_EGRESS = "PRIVATE_RANGES_ONLY"


def check_container(env: Mapping[str, Any], secret_env: Mapping[str, Any], network: str | None,
                    subnetwork: str | None) -> None:
    both = sorted(set(env) & set(secret_env))
    if both:
        raise ValueError(f"env: {both} are in both env and secret_env")
    if (network is None) != (subnetwork is None):
        raise ValueError(f"network/subnetwork: {network!r}/{subnetwork!r} must be set together")


def container_env(env: Mapping[str, Any], secret_env: Mapping[str, Any]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
    entries += [{"name": k, "value_source": {"secret_key_ref": {"secret": secret, "version": "latest"}}}
                for k, secret in secret_env.items()]
    # Sorted so reordering a config dict never shows up as a diff.
    return sorted(entries, key=lambda e: e["name"])


def vpc_access(network: str | None, subnetwork: str | None) -> dict[str, Any] | None:
    if network is None:
        return None
    return {"egress": VPC_EGRESS, "network_interfaces": [{"network": network, "subnetwork": subnetwork}]}


def image_to_run(kind: Literal["service", "job"], name: str, project: str, region: str, image: str,
                 follow_live_image: bool, parent: pulumi.Resource) -> str:
    """The live image when following it (see live_image), else the configured one."""
    if not follow_live_image:
        return image
    return serving_image(kind, name, project, region, fallback=image, opts=pulumi.InvokeOptions(parent=parent))
