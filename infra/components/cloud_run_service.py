"""A Cloud Run (v2) service running the Brew app as web, worker or both.

The component owns the service's shape (scaling, resources, networking, env); CI's
promote pipeline owns which image serves and how traffic is split, see `live_image`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

import pulumi
from pulumi_gcp import cloudrunv2

from infra.components.cloud_run_container import check_container, container_env, image_to_run, vpc_access


class Role(str, Enum):
    """What the app process does; the container reads it from the ROLE env var."""

    WEB = "web"
    WORKER = "worker"
    WEB_AND_WORKER = "web,worker"


class Ingress(str, Enum):
    ALL = "INGRESS_TRAFFIC_ALL"
    INTERNAL = "INGRESS_TRAFFIC_INTERNAL_ONLY"
    INTERNAL_AND_LOAD_BALANCER = "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"


# Cloud Run and gcloud write the first four themselves, so declaring them would show a
# diff on every run; traffic splits belong to the promote pipeline (canary, rollback).
# The image is deliberately NOT here: ignoring it would make Pulumi resend its stored
# image on the next update and roll a promotion back (see live_image).
SERVICE_IGNORE_CHANGES: tuple[str, ...] = (
    "client",
    "clientVersion",
    "template.revision",
    'template.annotations["run.googleapis.com/operation-id"]',
    "traffics",
)

@dataclass(frozen=True)
class CloudRunServiceArgs:
    service_name: str
    project: str
    region: str
    role: Role
    # Used on the first deploy only while follow_live_image is on.
    image: str
    service_account_email: pulumi.Input[str]
    min_instances: int = 0
    max_instances: int = 1
    cpu: str = "1"
    memory: str = "512Mi"
    concurrency: int = 80
    timeout_seconds: int = 300
    ingress: Ingress = Ingress.INTERNAL
    cpu_always_allocated: bool = False
    session_affinity: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    # Env var name -> Secret Manager secret id or name; always its latest version.
    secret_env: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    # Direct VPC egress: both or neither.
    network: str | None = None
    subnetwork: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    deletion_protection: bool = True
    invoker_iam_disabled: bool = False
    default_uri_disabled: bool = False
    follow_live_image: bool = True


def _validate(args: CloudRunServiceArgs) -> tuple[Role, Ingress]:
    try:
        role = Role(args.role)
    except ValueError:
        raise ValueError(f"role: {args.role!r} is not one of {[r.value for r in Role]}") from None
    try:
        ingress = Ingress(args.ingress)
    except ValueError:
        raise ValueError(f"ingress: {args.ingress!r} is not one of {[i.value for i in Ingress]}") from None
    if not args.service_name:
        raise ValueError(f"service_name: {args.service_name!r} must not be empty")
    if not args.image:
        raise ValueError(f"image: {args.image!r} must not be empty")
    if args.min_instances < 0:
        raise ValueError(f"min_instances: {args.min_instances} must be >= 0")
    if args.min_instances > args.max_instances:
        raise ValueError(f"min_instances: {args.min_instances} exceeds max_instances {args.max_instances}")
    if not 1 <= args.concurrency <= 1000:
        raise ValueError(f"concurrency: {args.concurrency} is outside 1..1000")
    if not 1 <= args.timeout_seconds <= 3600:
        raise ValueError(f"timeout_seconds: {args.timeout_seconds} is outside 1..3600")
    if "ROLE" in args.env or "ROLE" in args.secret_env:
        raise ValueError("env: 'ROLE' is set from role, not from env or secret_env")
    check_container(args.env, args.secret_env, args.network, args.subnetwork)
    if args.invoker_iam_disabled and ingress is Ingress.ALL:
        # That would be a public run.app URL anyone can call.
        raise ValueError(f"invoker_iam_disabled: True needs internal ingress, not {ingress.value}")
    return role, ingress


class CloudRunService(pulumi.ComponentResource):
    def __init__(self, name: str, args: CloudRunServiceArgs, opts: pulumi.ResourceOptions | None = None):
        # Before registering anything, so bad args leave no half-built component behind.
        role, ingress = _validate(args)
        super().__init__("brew:gcp:CloudRunService", name, None, opts)

        image = image_to_run("service", args.service_name, args.project, args.region, args.image,
                             args.follow_live_image, self)

        self.service = cloudrunv2.Service(
            f"{name}-service",
            name=args.service_name,
            project=args.project,
            location=args.region,
            ingress=ingress.value,
            labels=dict(args.labels),
            deletion_protection=args.deletion_protection,
            invoker_iam_disabled=args.invoker_iam_disabled,
            default_uri_disabled=args.default_uri_disabled,
            template=cloudrunv2.ServiceTemplateArgs(
                service_account=args.service_account_email,
                timeout=f"{args.timeout_seconds}s",
                max_instance_request_concurrency=args.concurrency,
                session_affinity=args.session_affinity,
                scaling=cloudrunv2.ServiceTemplateScalingArgs(
                    min_instance_count=args.min_instances,
                    max_instance_count=args.max_instances,
                ),
                containers=[
                    cloudrunv2.ServiceTemplateContainerArgs(
                        image=image,
                        envs=container_env({"ROLE": role.value, **args.env}, args.secret_env),
                        resources=cloudrunv2.ServiceTemplateContainerResourcesArgs(
                            limits={"cpu": args.cpu, "memory": args.memory},
                            # Workers run outside requests, so they need CPU between them.
                            cpu_idle=not args.cpu_always_allocated,
                            startup_cpu_boost=args.cpu_always_allocated,
                        ),
                    )
                ],
                vpc_access=vpc_access(args.network, args.subnetwork),
            ),
            traffics=[cloudrunv2.ServiceTrafficArgs(type="TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST", percent=100)],
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=list(SERVICE_IGNORE_CHANGES)),
        )

        self.name = self.service.name
        self.id = self.service.id
        self.uri = self.service.uri
        self.image: pulumi.Output[str] = pulumi.Output.from_input(image)
        self.register_outputs({"name": self.name, "id": self.id, "uri": self.uri, "image": self.image})
