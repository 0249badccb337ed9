"""Production: brew-web and brew-worker over brew-prod, the ops job, alerts and the CI
deployer identity (SPEC 3.1, 3.5)."""

from __future__ import annotations

import pulumi

from infra.components.alerts import (
    AlertPolicy,
    Alerts,
    AlertsArgs,
    Condition,
    CustomMetric,
    LogMetric,
)
from infra.components.deployer import DeployerIdentity, DeployerIdentityArgs
from infra.components.identity import ProjectGrant
from infra.components.labels import standard_labels
from infra.environments import app
from infra.runbooks import render_runbook
from infra.settings import StackSettings

LEASE_KEY = 727275
LEASE_LOST_METRIC = "brew/worker_lease_lost"
QUEUE_WAIT_METRIC = "custom.googleapis.com/brew/queue/oldest_wait_seconds"
BRANDS_WAITING_METRIC = "custom.googleapis.com/brew/builds/brands_waiting"


def build(s: StackSettings) -> None:
    runtime = app.runtime_identity(s)
    provider_secrets = app.secrets(s, runtime)
    app.bucket(s, runtime)
    ops_logins = tuple(s.identity_email(job.identity) for job in s.jobs if job.database_login)
    deployer_email = (s.identity_email(s.deployer.account_id),) if s.deployer else ()
    db = app.database(s, (runtime.email, *ops_logins, *deployer_email))
    services = app.services(s, runtime, db, provider_secrets)
    app.jobs(s, db)
    alerts(s)
    if s.deployer:
        # CI's workload identity provider (google-github-actions/auth's workload_identity_provider).
        pulumi.export("deployerProvider", deployer(s).provider_name)
    pulumi.export("services", {name: svc.uri for name, svc in services.items()})
    if db is not None:
        pulumi.export("database", db.connection_name)


def deployer(s: StackSettings) -> DeployerIdentity:
    """CI's promotion identity: deploys revisions, backs up and reads the lease, no more."""
    assert s.deployer is not None and s.database is not None and s.runtime_identity is not None
    only_prod_db = app.instance_condition(s.project, (s.database.name,))
    title = f"only {s.database.name}"
    databases = s.deployer.databases or (s.database.name,)
    readable = app.instance_condition(s.project, databases)
    readable_title = "only " + ", ".join(databases)
    runtime_email = s.identity_email(s.runtime_identity.account_id)
    return DeployerIdentity(
        s.deployer.account_id,
        DeployerIdentityArgs(
            account_id=s.deployer.account_id,
            project=s.project,
            github_repository=s.deployer.github_repository,
            grants=(
                ProjectGrant("roles/run.developer"),
                ProjectGrant("roles/monitoring.viewer"),
                # On-demand backups need cloudsql.backupRuns.create (editor), on production
                # only; the lease check (production) and the mirror drift check (staging)
                # connect as an IAM user whose database role only reads.
                ProjectGrant("roles/cloudsql.editor", title, only_prod_db),
                ProjectGrant("roles/cloudsql.client", readable_title, readable),
                ProjectGrant("roles/cloudsql.instanceUser", readable_title, readable),
            ),
            act_as=(f"projects/{s.project}/serviceAccounts/{runtime_email}",),
        ),
    )


def alerts(s: StackSettings) -> Alerts | None:
    a, db = s.alerts, s.database
    if a is None or db is None:
        return None
    worker = next(svc for svc in s.services if svc.runs_worker)
    ops_job = s.jobs[0].name if s.jobs else "brew-ops"
    budget = [
        {"service": svc.name, "instances": svc.max_instances, "pool": svc.pg_pool} for svc in s.services
    ]
    run_filter = f'resource.type="cloud_run_revision" AND resource.labels.service_name="{worker.name}"'
    policies = (
        AlertPolicy(
            key="worker-lost-lease",
            display_name="worker lost its lease",
            conditions=(
                Condition(
                    display_name=f"{worker.name} logged a lost lease",
                    filter=f'metric.type="logging.googleapis.com/user/{LEASE_LOST_METRIC}" AND {run_filter}',
                    comparison="COMPARISON_GT",
                    threshold=0,
                    duration_seconds=0,
                    aligner="ALIGN_SUM",
                ),
                Condition(
                    display_name=f"{worker.name} has no running instance",
                    filter=f'metric.type="run.googleapis.com/container/instance_count" AND {run_filter}'
                    ' AND metric.labels.state="active"',
                    duration_seconds=300,
                    aligner="ALIGN_MAX",
                    absent=True,
                ),
            ),
            documentation=render_runbook(
                "worker-lost-lease", worker_service=worker.name, lease_key=LEASE_KEY,
                database=db.name, ops_job=ops_job, region=s.region,
            ),
        ),
        AlertPolicy(
            key="queue-wait",
            display_name=f"oldest queued job waits over {a.queue_wait_minutes} minutes",
            conditions=(
                Condition(
                    display_name=f"oldest queued job older than {a.queue_wait_minutes} min",
                    filter=f'metric.type="{QUEUE_WAIT_METRIC}" AND resource.type="global"',
                    threshold=a.queue_wait_minutes * 60,
                    duration_seconds=60,
                    aligner="ALIGN_MAX",
                ),
            ),
            documentation=render_runbook("queue-wait", minutes=a.queue_wait_minutes),
        ),
        AlertPolicy(
            key="postgres-connections",
            display_name=f"Postgres connections above {a.connection_threshold}",
            conditions=(
                Condition(
                    display_name=f"{db.name} backends above {a.connection_threshold}",
                    filter='metric.type="cloudsql.googleapis.com/database/postgresql/num_backends"'
                    f' AND resource.type="cloudsql_database"'
                    f' AND resource.labels.database_id="{s.project}:{db.name}"',
                    threshold=a.connection_threshold,
                    duration_seconds=300,
                    aligner="ALIGN_MAX",
                    reducer="REDUCE_SUM",
                ),
            ),
            documentation=render_runbook(
                "postgres-connections", database=db.name, threshold=a.connection_threshold, budget=budget,
            ),
        ),
        AlertPolicy(
            key="brands-waiting",
            display_name=f"more than {a.brands_waiting} brands waited over {a.brands_wait_minutes} minutes",
            conditions=(
                Condition(
                    display_name=f"brands waiting over {a.brands_wait_minutes} min above {a.brands_waiting}",
                    filter=f'metric.type="{BRANDS_WAITING_METRIC}" AND resource.type="global"'
                    f' AND metric.labels.wait_minutes="{a.brands_wait_minutes}"',
                    threshold=a.brands_waiting,
                    duration_seconds=300,
                    aligner="ALIGN_MAX",
                ),
            ),
            documentation=render_runbook("brands-waiting", brands=a.brands_waiting, minutes=a.brands_wait_minutes),
            severity="WARNING",
        ),
    )
    return Alerts(
        f"{s.environment}-alerts",
        AlertsArgs(
            project=s.project,
            notification_emails=a.emails,
            log_metrics=(
                LogMetric(
                    name=LEASE_LOST_METRIC,
                    filter=f'{run_filter} AND jsonPayload.event="lease_lost"',
                    description=f"{worker.name} log lines saying the background lease (key {LEASE_KEY}) was lost",
                ),
            ),
            custom_metrics=(
                CustomMetric(
                    metric_type=QUEUE_WAIT_METRIC,
                    display_name="Oldest queued job wait",
                    description="Age of the oldest queued job in the Postgres jobs table, written by the app.",
                    unit="s",
                    labels=(("queue", "interactive, slow or batch"),),
                ),
                CustomMetric(
                    metric_type=BRANDS_WAITING_METRIC,
                    display_name="Brands waiting for a build",
                    description="Brands whose build has waited longer than wait_minutes; above the alert "
                    "level one worker is no longer enough (open question 1).",
                    unit="1",
                    value_type="INT64",
                    labels=(("wait_minutes", "the wait the count is measured against"),),
                ),
            ),
            policies=policies,
            labels=standard_labels(s.environment, "alerts"),
        ),
    )
