"""A Cloud Run (v2) service: by default the Brew app as web, worker or both.

The component owns the service's shape (scaling, resources, networking, env); CI's
promote pipeline owns which image serves and how traffic is split, see `live_image`.
Another app (the Penpot blueprint) brings its own roles and how each is told to the
container (`roles`), and may run sidecars next to it (`sidecars`, e.g. the Cloud SQL
Auth Proxy for an app that cannot log in to Postgres with IAM itself).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


# Brew's app reads its role from the ROLE env var: role -> the env that says it.
BREW_ROLES: Mapping[str, Mapping[str, str]] = {role.value: {"ROLE": role.value} for role in Role}
# The app container's name when sidecars run next to it.
APP_CONTAINER = "app"


@dataclass(frozen=True)
class Sidecar:
    """A container next to the app in every instance (Cloud Run multi-container).

    With `port`, the sidecar gets a TCP startup probe there and the app container starts
    only once it answers (container dependencies), so the app never dials a proxy that is
    not listening yet."""

    name: str
    image: str
    args: Sequence[pulumi.Input[str]] = ()
    cpu: str = "1"
    memory: str = "512Mi"
    port: int | None = None


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
    # What the app process does; one of `roles`.
    role: Role | str
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
    # The app's roles, each with the env that tells the container which one it runs
    # (Brew: ROLE=web...). An app that says its role its own way maps each role to {}.
    roles: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: dict(BREW_ROLES))
    # The port the app listens on; Cloud Run's default (8080, in $PORT) when None. A
    # service with sidecars names it: only the app container takes requests.
    port: int | None = None
    sidecars: Sequence[Sidecar] = ()


def _validate(args: CloudRunServiceArgs) -> tuple[Mapping[str, str], Ingress]:
    role = args.role.value if isinstance(args.role, Role) else args.role
    if role not in args.roles:
        raise ValueError(f"role: {args.role!r} is not one of {list(args.roles)}")
    role_env = args.roles[role]
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
    for name in role_env:
        if name in args.env or name in args.secret_env:
            raise ValueError(f"env: {name!r} is set from role, not from env or secret_env")
    check_container(args.env, args.secret_env, args.network, args.subnetwork)
    if args.invoker_iam_disabled and ingress is Ingress.ALL:
        # That would be a public run.app URL anyone can call.
        raise ValueError(f"invoker_iam_disabled: True needs internal ingress, not {ingress.value}")
    _validate_sidecars(args)
    return role_env, ingress


def _validate_sidecars(args: CloudRunServiceArgs) -> None:
    if args.port is not None and not 1 <= args.port <= 65535:
        raise ValueError(f"port: {args.port} is outside 1..65535")
    if not args.sidecars:
        return
    if args.port is None:
        raise ValueError("port: a service with sidecars names the port its app container listens on")
    names = [sidecar.name for sidecar in args.sidecars]
    if len(set(names)) != len(names) or APP_CONTAINER in names:
        raise ValueError(f"sidecars: names {names} must be unique and not {APP_CONTAINER!r}")
    for sidecar in args.sidecars:
        if not sidecar.image:
            raise ValueError(f"sidecars: {sidecar.name!r} has no image")
        if sidecar.port is not None and sidecar.port == args.port:
            raise ValueError(f"sidecars: {sidecar.name!r} listens on the app's port {args.port}")
        # A bare string would be split into one argument per character.
        if isinstance(sidecar.args, str):
            raise ValueError(f"sidecars: {sidecar.name!r} args must be a sequence of strings, not a string")


def _app_container(args: CloudRunServiceArgs, image: pulumi.Input[str], role_env: Mapping[str, str]) -> dict:
    container = {
        "image": image,
        "envs": container_env({**role_env, **args.env}, args.secret_env),
        "resources": {
            "limits": {"cpu": args.cpu, "memory": args.memory},
            # Workers run outside requests, so they need CPU between them.
            "cpu_idle": not args.cpu_always_allocated,
            "startup_cpu_boost": args.cpu_always_allocated,
        },
    }
    if args.port is not None:
        container["ports"] = {"container_port": args.port}
    if args.sidecars:
        container["name"] = APP_CONTAINER
        container["depends_ons"] = [s.name for s in args.sidecars if s.port is not None]
    return container


def _sidecar_container(sidecar: Sidecar, cpu_always_allocated: bool) -> dict:
    container = {
        "name": sidecar.name,
        "image": sidecar.image,
        "args": list(sidecar.args),
        # Billed like the app: idle between requests unless the app keeps its CPU.
        "resources": {"limits": {"cpu": sidecar.cpu, "memory": sidecar.memory}, "cpu_idle": not cpu_always_allocated},
    }
    if sidecar.port is not None:
        container["startup_probe"] = {"tcp_socket": {"port": sidecar.port}, "period_seconds": 1,
                                      "failure_threshold": 30}
    return container


class CloudRunService(pulumi.ComponentResource):
    def __init__(self, name: str, args: CloudRunServiceArgs, opts: pulumi.ResourceOptions | None = None):
        # Before registering anything, so bad args leave no half-built component behind.
        role_env, ingress = _validate(args)
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
                # The app first: the live image and the rules read the first container.
                containers=[
                    _app_container(args, image, role_env),
                    *(_sidecar_container(sidecar, args.cpu_always_allocated) for sidecar in args.sidecars),
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
