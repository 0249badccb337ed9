"""Wire one promotion: stack settings -> target, clients pointed at the endpoints, the
lease reader, progress for a person or a log, then the report files."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from infra.promote.clients import CloudRun, CloudSql, Endpoints, Metrics
from infra.promote.lease import WorkerLease
from infra.promote.pipeline import Pipeline, Report, Target
from infra.promote.report import LineProgress, LiveProgress, write_outputs
from infra.settings import StackSettings


def target_of(prod: StackSettings, staging: StackSettings, overrides: dict[str, Any] | None = None) -> Target:
    web = [s.name for s in prod.services if not s.runs_worker]
    worker = [s.name for s in prod.services if s.runs_worker]
    if len(web) != 1 or len(worker) != 1 or prod.database is None:
        raise ValueError(f"{prod.stack_file}: promote needs one web service, one worker service and a database; "
                         f"found web {web}, worker {worker}")
    return Target(
        project=prod.project, region=prod.region, staging_service=staging.services[0].name,
        web_service=web[0], worker_service=worker[0], database_instance=prod.database.name,
        prod_storage=prod.storage, staging_mirror=staging.mirror,
        settings=dataclasses.replace(prod.promote, **(overrides or {})),
    )


def mirror_check(mirror, staging_connect, storage_endpoint: str | None, project: str):
    """The bucket drift check of staging's mirror, or the seam's placeholder when the
    staging database was not given."""
    from infra.promote.mirror import NoSyncCheck

    if mirror is None or staging_connect is None:
        return NoSyncCheck()
    from google.cloud import storage

    from infra.promote.mirror_sync import BucketMirrorCheck, MirrorSource

    if storage_endpoint:
        from google.auth.credentials import AnonymousCredentials

        client = storage.Client(project=project, credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": storage_endpoint})
    else:
        client = storage.Client(project=project)  # application default credentials
    source = MirrorSource(bucket=mirror.bucket, table=mirror.table, key_column=mirror.key_column,
                          version_column=mirror.version_column, updated_at_column=mirror.updated_at_column,
                          prefix=mirror.prefix, lag_seconds=mirror.lag_seconds)
    return BucketMirrorCheck(staging_connect, client, source)


def promote(target: Target, endpoints: Endpoints, connect, run_id: str, image: str | None, dry_run: bool,
            report_path: Path | None, mirror_sync=None, today=None) -> Report:
    live = sys.stderr.isatty()
    progress = LiveProgress() if live else LineProgress()
    lease = WorkerLease(connect)
    try:
        pipeline = Pipeline(
            target,
            CloudRun(target.project, target.region, endpoints),
            CloudSql(target.project, target.database_instance, endpoints),
            Metrics(target.project, endpoints),
            lease, progress, run_id=run_id, image=image, dry_run=dry_run, mirror_sync=mirror_sync,
            **({"today": today} if today else {}),
        )
        report = pipeline.execute()
    finally:
        lease.close()
        if isinstance(progress, LiveProgress):
            progress.close()
    write_outputs(report, report_path)
    return report
