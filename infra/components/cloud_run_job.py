"""A Cloud Run (v2) job: one-off or scheduled tasks (migrations, batch work) of the Brew app.

Like the service, the job's image is whatever the promote pipeline last deployed, see
`live_image`; the component owns everything else about the job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_gcp import cloudrunv2

from infra.components.cloud_run_container import check_container, container_env, image_to_run, vpc_access

# gcloud writes client/clientVersion and the operation-id annotation on every deploy, so
# declaring them would show a diff each run. A job has no revisions or traffic to ignore.
# The image is deliberately NOT here (see live_image).
JOB_IGNORE_CHANGES: tuple[str, ...] = (
    "client",
    "clientVersion",
    'template.annotations["run.googleapis.com/operation-id"]',
)

@dataclass(frozen=True)
class CloudRunJobArgs:
    job_name: str
    project: str
    region: str
    # Used on the first deploy only while follow_live_image is on.
    image: str
    service_account_email: pulumi.Input[str]
    command: Sequence[str] = ()
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    # Env var name -> Secret Manager secret id or name; always its latest version.
    secret_env: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    cpu: str = "1"
    memory: str = "512Mi"
    timeout_seconds: int = 600
    max_retries: int = 0
    task_count: int = 1
    # Direct VPC egress: both or neither.
    network: str | None = None
    subnetwork: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    deletion_protection: bool = True
    follow_live_image: bool = True


def _validate(args: CloudRunJobArgs) -> None:
    if not args.job_name:
        raise ValueError(f"job_name: {args.job_name!r} must not be empty")
    if not args.image:
        raise ValueError(f"image: {args.image!r} must not be empty")
    if args.timeout_seconds <= 0:
        raise ValueError(f"timeout_seconds: {args.timeout_seconds} must be > 0")
    if args.max_retries < 0:
        raise ValueError(f"max_retries: {args.max_retries} must be >= 0")
    if args.task_count < 1:
        raise ValueError(f"task_count: {args.task_count} must be >= 1")
    # A bare string would be split into one argument per character.
    if isinstance(args.command, str) or isinstance(args.args, str):
        raise ValueError(f"command/args: {args.command!r}/{args.args!r} must be sequences of strings, not a string")
    check_container(args.env, args.secret_env, args.network, args.subnetwork)


class CloudRunJob(pulumi.ComponentResource):
    def __init__(self, name: str, args: CloudRunJobArgs, opts: pulumi.ResourceOptions | None = None):
        # Before registering anything, so bad args leave no half-built component behind.
        _validate(args)
        super().__init__("brew:gcp:CloudRunJob", name, None, opts)

        image = image_to_run("job", args.job_name, args.project, args.region, args.image,
                             args.follow_live_image, self)

        self.job = cloudrunv2.Job(
            f"{name}-job",
            name=args.job_name,
            project=args.project,
            location=args.region,
            labels=dict(args.labels),
            deletion_protection=args.deletion_protection,
            template=cloudrunv2.JobTemplateArgs(
                task_count=args.task_count,
                template=cloudrunv2.JobTemplateTemplateArgs(
                    service_account=args.service_account_email,
                    timeout=f"{args.timeout_seconds}s",
                    max_retries=args.max_retries,
                    containers=[
                        cloudrunv2.JobTemplateTemplateContainerArgs(
                            image=image,
                            # Empty means "use the image's ENTRYPOINT/CMD"; omit rather than send [].
                            commands=list(args.command) or None,
                            args=list(args.args) or None,
                            envs=container_env(args.env, args.secret_env),
                            resources=cloudrunv2.JobTemplateTemplateContainerResourcesArgs(
                                limits={"cpu": args.cpu, "memory": args.memory},
                            ),
                        )
                    ],
                    vpc_access=vpc_access(args.network, args.subnetwork),
                ),
            ),
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=list(JOB_IGNORE_CHANGES)),
        )

        self.name = self.job.name
        self.id = self.job.id
        self.image: pulumi.Output[str] = pulumi.Output.from_input(image)
        self.register_outputs({"name": self.name, "id": self.id, "image": self.image})
