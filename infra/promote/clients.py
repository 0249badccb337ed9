"""Narrow clients over Google's APIs: only the calls the pipeline makes, each with a
deadline and retries with backoff on 429 and 503, and results as small plain views.

The real client libraries do the talking over REST: google-cloud-run `run_v2`,
google-cloud-sql `sqladmin_v1beta4`, and google-api-python-client's `monitoring v3`. `Endpoints` points them
at Google, or at the sandbox's stand-ins with anonymous credentials.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from google.api_core import exceptions, retry as retries
from google.auth.credentials import AnonymousCredentials, Credentials

RETRYABLE = (exceptions.TooManyRequests, exceptions.ServiceUnavailable)
CALL_TIMEOUT = 30.0  # seconds, one HTTP call
CALL_DEADLINE = 120.0  # seconds, one call with all its retries


def retry_policy(deadline: float = CALL_DEADLINE) -> retries.Retry:
    return retries.Retry(predicate=retries.if_exception_type(*RETRYABLE), initial=0.2, maximum=5.0,
                         multiplier=2.0, timeout=deadline)


def wait(op, timeout: float):
    """Wait for a long-running operation: polling starts at 0.1 s and backs off to 5 s
    (the library's default starts at 1 s and grows to 20 s); reading it retries 429/503."""
    from google.api_core.future import polling

    every = polling.DEFAULT_POLLING.with_delay(initial=0.1, maximum=5.0, multiplier=1.5).with_timeout(timeout)
    return op.result(timeout=timeout, retry=retry_policy(timeout), polling=every)


@dataclass(frozen=True)
class Endpoints:
    """Where each API lives; None means Google's own endpoint with default credentials."""

    run: str | None = None
    sqladmin: str | None = None
    monitoring: str | None = None

    def options(self, endpoint: str | None) -> dict:
        return {"api_endpoint": endpoint} if endpoint else {}

    def credentials(self) -> Credentials | None:
        # Stand-ins take no credentials; Google gets application default credentials.
        return AnonymousCredentials() if any((self.run, self.sqladmin, self.monitoring)) else None


def short(name: str) -> str:
    """`projects/p/locations/r/services/s/revisions/x` -> `x`."""
    return name.rstrip("/").rsplit("/", 1)[-1]


# --- Cloud Run -----------------------------------------------------------------------

@dataclass(frozen=True)
class ServiceView:
    name: str  # short name
    image: str  # of the current template
    env: dict[str, str]
    traffic: dict[str, int]  # serving revision (short name) -> percent, from traffic_statuses
    latest_ready: str | None
    latest_created: str | None
    ready: bool  # terminal condition succeeded
    annotations: dict[str, str]
    etag: str

    @property
    def serving(self) -> list[str]:
        return [rev for rev, pct in self.traffic.items() if pct > 0]


@dataclass(frozen=True)
class RevisionView:
    name: str
    image: str
    image_digest: str | None
    ready: bool  # Ready condition succeeded and the revision is not retired
    state: str  # CONDITION_SUCCEEDED, CONDITION_FAILED, CONDITION_PENDING...
    reason: str  # revision_reason, e.g. RETIRED, or the reason of a failure
    message: str


class CloudRun:
    """Cloud Run Admin API v2: the services and revisions of one project and region."""

    def __init__(self, project: str, region: str, endpoints: Endpoints = Endpoints()):
        from google.cloud import run_v2

        self.run_v2 = run_v2
        self.parent = f"projects/{project}/locations/{region}"
        options, credentials = endpoints.options(endpoints.run), endpoints.credentials()
        self.services = run_v2.ServicesClient(transport="rest", client_options=options, credentials=credentials)
        self.revisions = run_v2.RevisionsClient(transport="rest", client_options=options, credentials=credentials)

    def service_name(self, service: str) -> str:
        return f"{self.parent}/services/{service}"

    def _get(self, service: str):
        return self.services.get_service(name=self.service_name(service), retry=retry_policy(), timeout=CALL_TIMEOUT)

    def get_service(self, service: str) -> ServiceView:
        svc = self._get(service)
        container = svc.template.containers[0] if svc.template.containers else None
        Succeeded = self.run_v2.Condition.State.CONDITION_SUCCEEDED
        return ServiceView(
            name=service,
            image=container.image if container else "",
            env={e.name: e.value for e in (container.env if container else []) if e.value},
            traffic={short(t.revision): t.percent for t in svc.traffic_statuses if t.revision and t.percent},
            latest_ready=short(svc.latest_ready_revision) if svc.latest_ready_revision else None,
            latest_created=short(svc.latest_created_revision) if svc.latest_created_revision else None,
            ready=svc.terminal_condition.state == Succeeded,
            annotations=dict(svc.annotations),
            etag=svc.etag,
        )

    def get_revision(self, service: str, revision: str) -> RevisionView:
        rev = self.revisions.get_revision(name=f"{self.service_name(service)}/revisions/{revision}",
                                          retry=retry_policy(), timeout=CALL_TIMEOUT)
        C = self.run_v2.Condition
        ready = next((c for c in rev.conditions if c.type_ == "Ready"), None)
        state = C.State(ready.state).name if ready else "STATE_UNSPECIFIED"
        reason = ""
        if ready is not None:
            reason = C.RevisionReason(ready.revision_reason).name if ready.revision_reason else ready.reason
        container = rev.containers[0] if rev.containers else None
        # A revision with no traffic can report Ready with reason RETIRED: it does not serve.
        serving_ready = (ready is not None and ready.state == C.State.CONDITION_SUCCEEDED
                         and ready.revision_reason not in (C.RevisionReason.RETIRED, C.RevisionReason.RETIRING))
        return RevisionView(
            name=revision,
            image=container.image if container else "",
            image_digest=None,
            ready=serving_ready,
            state=state,
            reason=reason,
            message=ready.message if ready else "",
        )

    def deploy(self, service: str, image: str, traffic: dict[str, int] | None, timeout: float,
               annotations: dict[str, str] | None = None) -> str:
        """A new revision with `image`; `traffic` None sends 100% to it once it is Ready,
        otherwise traffic stays pinned as given. Returns the new revision's name."""
        svc = self._get(service)
        svc.template.containers[0].image = image
        svc.template.revision = ""
        if annotations:
            svc.annotations.update(annotations)
        svc.traffic = self._traffic(traffic)
        op = self.services.update_service(service=svc, retry=retry_policy(), timeout=CALL_TIMEOUT)
        return short(wait(op, timeout).latest_created_revision)

    def set_traffic(self, service: str, traffic: dict[str, int], timeout: float) -> None:
        svc = self._get(service)
        svc.traffic = self._traffic(traffic)
        op = self.services.update_service(service=svc, retry=retry_policy(), timeout=CALL_TIMEOUT)
        wait(op, timeout)

    def update_annotations(self, service: str, changes: dict[str, str | None], etag: str | None = None) -> ServiceView:
        """Set (or with None, remove) service annotations. With `etag`, the update fails
        with Aborted/Conflict/FailedPrecondition if the service changed since it was read."""
        svc = self._get(service)
        if etag is not None:
            svc.etag = etag
        for key, value in changes.items():
            if value is None:
                svc.annotations.pop(key, None)
            else:
                svc.annotations[key] = value
        op = self.services.update_service(service=svc, retry=retry_policy(), timeout=CALL_TIMEOUT)
        wait(op, CALL_DEADLINE)
        return self.get_service(service)

    def _traffic(self, traffic: dict[str, int] | None):
        T = self.run_v2.TrafficTargetAllocationType
        if traffic is None:
            return [self.run_v2.TrafficTarget(type_=T.TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST, percent=100)]
        return [self.run_v2.TrafficTarget(type_=T.TRAFFIC_TARGET_ALLOCATION_TYPE_REVISION, revision=rev, percent=pct)
                for rev, pct in sorted(traffic.items()) if pct > 0]


# --- Cloud SQL -----------------------------------------------------------------------

@dataclass(frozen=True)
class BackupView:
    id: str
    status: str
    description: str
    started: dt.datetime | None


class BackupFailed(Exception):
    pass


class CloudSql:
    """Cloud SQL Admin API: instance state and on-demand backups of one instance.

    Through google-cloud-sql's `sqladmin_v1beta4` clients: the package's `sqladmin_v1`
    clients ship a gRPC transport only, and the pipeline talks REST everywhere (the same
    resources and operations; `v1beta4` is the API version gcloud itself uses).
    """

    def __init__(self, project: str, instance: str, endpoints: Endpoints = Endpoints(),
                 sleep: Callable[[float], None] = time.sleep):
        from google.cloud import sqladmin_v1beta4 as sqladmin  # REST: see the docstring

        self.sql = sqladmin
        self.project, self.instance, self.sleep = project, instance, sleep
        options, credentials = endpoints.options(endpoints.sqladmin), endpoints.credentials()
        kw = dict(transport="rest", client_options=options, credentials=credentials)
        self.instances = sqladmin.SqlInstancesServiceClient(**kw)
        self.backup_runs = sqladmin.SqlBackupRunsServiceClient(**kw)
        self.operations = sqladmin.SqlOperationsServiceClient(**kw)

    def state(self) -> str:
        inst = self.instances.get(request={"project": self.project, "instance": self.instance},
                                  retry=retry_policy(), timeout=CALL_TIMEOUT)
        return self.sql.DatabaseInstance.SqlInstanceState(inst.state).name

    def backups(self, max_results: int = 50) -> list[BackupView]:
        page = self.backup_runs.list(request={"project": self.project, "instance": self.instance,
                                              "max_results": max_results},
                                     retry=retry_policy(), timeout=CALL_TIMEOUT)
        runs = []
        for run in page.items:
            started = run.start_time or run.enqueued_time
            runs.append(BackupView(str(run.id), self.sql.SqlBackupRunStatus(run.status).name, run.description,
                                   started if started else None))
        return runs

    def backup(self, description: str, timeout: float) -> str:
        """Take an on-demand backup and wait for it; returns the backup run's id."""
        op = self.backup_runs.insert(
            request={"project": self.project, "instance": self.instance,
                     "body": {"description": description, "type_": self.sql.SqlBackupRunType.ON_DEMAND}},
            retry=retry_policy(), timeout=CALL_TIMEOUT)
        deadline = time.monotonic() + timeout
        Done = self.sql.Operation.SqlOperationStatus.DONE
        while op.status != Done:
            if time.monotonic() > deadline:
                raise BackupFailed(f"backup operation {op.name} not done after {timeout:.0f} s")
            self.sleep(0.2)
            op = self.operations.get(request={"project": self.project, "operation": op.name},
                                     retry=retry_policy(), timeout=CALL_TIMEOUT)
        if op.error and op.error.errors:
            raise BackupFailed("; ".join(f"{e.code}: {e.message}" for e in op.error.errors))
        for run in self.backups(max_results=10):
            if run.description == description:
                return run.id
        raise BackupFailed(f"backup operation {op.name} finished but no backup run says {description!r}")


# --- Cloud Monitoring ----------------------------------------------------------------

@dataclass
class RequestCounts:
    by_class: dict[str, int] = field(default_factory=dict)  # "2xx" -> count

    @property
    def total(self) -> int:
        return sum(self.by_class.values())

    @property
    def errors(self) -> int:
        return self.by_class.get("5xx", 0)


class Metrics:
    """Cloud Monitoring: a revision's request count by response code class.

    Through google-api-python-client's discovery client for `monitoring v3` (its bundled,
    offline discovery document): google-cloud-monitoring's `monitoring_v3` ships a gRPC
    transport only, and the pipeline talks REST. The discovery client retries 429 and
    5xx with backoff itself (`num_retries`).
    """

    def __init__(self, project: str, endpoints: Endpoints = Endpoints(), now: Callable[[], float] = time.time):
        from googleapiclient.discovery import build

        self.project, self.now = project, now
        if endpoints.monitoring:
            import httplib2

            # The stand-in takes no credentials: an unauthenticated HTTP client.
            self.api = build("monitoring", "v3", http=httplib2.Http(timeout=CALL_TIMEOUT), static_discovery=True,
                             client_options={"api_endpoint": endpoints.monitoring.rstrip("/") + "/"})
        else:
            self.api = build("monitoring", "v3", static_discovery=True, cache_discovery=False)

    def request_counts(self, service: str, revision: str, window_seconds: float) -> RequestCounts:
        end = self.now()
        period = max(60, int(window_seconds))
        body = self.api.projects().timeSeries().list(
            name=f"projects/{self.project}",
            filter=('metric.type = "run.googleapis.com/request_count" AND '
                    'resource.type = "cloud_run_revision" AND '
                    f'resource.labels.service_name = "{service}" AND '
                    f'resource.labels.revision_name = "{revision}"'),
            interval_startTime=_rfc3339(end - window_seconds),
            interval_endTime=_rfc3339(end),
            aggregation_alignmentPeriod=f"{period}s",
            aggregation_perSeriesAligner="ALIGN_DELTA",
            aggregation_crossSeriesReducer="REDUCE_SUM",
            aggregation_groupByFields=["metric.labels.response_code_class"],
            view="FULL",
        ).execute(num_retries=5)
        counts = RequestCounts()
        for ts in body.get("timeSeries", []):
            code_class = ts.get("metric", {}).get("labels", {}).get("response_code_class", "unknown")
            total = sum(int(p["value"].get("int64Value", 0)) for p in ts.get("points", []))
            counts.by_class[code_class] = counts.by_class.get(code_class, 0) + total
        return counts


def _rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat().replace("+00:00", "Z")
