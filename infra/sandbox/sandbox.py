"""The whole sandbox: a real PostgreSQL, the stand-ins for the Cloud Run, Cloud SQL Admin
and Monitoring APIs on one local HTTP server, and simulated workers, wired the way
production behaves:

- a worker revision that becomes Ready starts a worker process, which takes the lease
  (a session advisory lock) on its own connection, named after its revision;
- a worker revision that loses its traffic gets SIGTERM and lets the lease go; one that
  gets traffic back is started again (a rollback);
- web revisions serve requests in proportion to their traffic, counted per response
  class for the Monitoring stand-in.

Seeded from the stacks' declared services and database. Faults (`FAULTS`) bend one
behaviour each. The promote pipeline is only pointed at `endpoints()`.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from infra.sandbox.cloudrun import CloudRunApi
from infra.sandbox.cloudsql import CloudSqlApi
from infra.sandbox.monitoring import MonitoringApi, TrafficModel
from infra.sandbox.postgres import APP_ROLE, DEPLOYER_ROLE, LocalPostgres
from infra.sandbox.server import ApiError, Request, SandboxServer
from infra.sandbox.workers import WorkerSupervisor
from infra.sandbox.faults import FAULTS, PROMOTE_OVERRIDES  # noqa: F401 - part of this module's surface
from infra.settings import MirrorFlags

MIRROR_ROWS = 60  # rows in staging's objects table, mirrored in its bucket
STAGING_DATABASE = "brew_staging"

STAGING_IMAGE = "asia-south1-docker.pkg.dev/squareup-brew/brew/brew@sha256:" + "5" * 64
PROD_IMAGE = "asia-south1-docker.pkg.dev/squareup-brew/brew/brew@sha256:" + "0" * 64
WEB_REQUESTS_PER_SECOND = 2000.0  # enough for a 10% step to be judged within a short bake
LOW_REQUESTS_PER_SECOND = 1.0
WEB_ERROR_RATIO = 0.2
STALE_REVISION = "brew-worker-00000-old"  # holder-not-serving: a revision nothing serves
LOCK_ANNOTATION = "brew.joinsquareup.com/promotion"



class UnknownFault(ValueError):
    pass


@dataclass(frozen=True)
class Topology:
    """The names the sandbox seeds, from the prod and staging stacks."""

    project: str
    region: str
    staging_service: str
    staging_env: dict[str, str]
    web_service: str
    worker_service: str
    database_instance: str
    mirror: MirrorFlags | None = None


def check_faults(faults: Iterable[str]) -> frozenset[str]:
    chosen = frozenset(faults)
    unknown = sorted(chosen - set(FAULTS))
    if unknown:
        raise UnknownFault(f"unknown fault {unknown[0]!r}; choose from {', '.join(FAULTS)}")
    return chosen


class Sandbox:
    def __init__(self, topology: Topology, faults: Iterable[str] = (), *, ready_delay: float = 0.2,
                 operation_delay: float = 0.1, backup_delay: float = 0.3, base_dir: Path | None = None,
                 pg: LocalPostgres | None = None):
        """`pg`: a running server to use instead of starting one (it is left running)."""
        self.top = topology
        self.faults = check_faults(faults)
        self.ready_delay, self.operation_delay, self.backup_delay = ready_delay, operation_delay, backup_delay
        self.base_dir = base_dir
        self.pg: LocalPostgres | None = pg
        self._own_pg = pg is None
        self.workers: WorkerSupervisor | None = None
        self.server: SandboxServer | None = None
        self.cloudrun: CloudRunApi | None = None
        self.cloudsql: CloudSqlApi | None = None
        self.traffic = TrafficModel(location=topology.region)
        self.gcs = None  # LocalGcs, when staging mirrors to a bucket
        self.seeded: set[str] = set()
        self._requests = 0
        self._lock = threading.Lock()

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> Sandbox:
        top = self.top
        if self._own_pg:
            self.pg = LocalPostgres(base_dir=self.base_dir).start()
        self.workers = WorkerSupervisor(self.pg.dsn(APP_ROLE))
        self.cloudrun = CloudRunApi(
            operation_delay=self.operation_delay, ready_delay=self.ready_delay, ready_timeout=3.0,
            on_revision_ready=self._revision_ready, on_traffic_changed=self._traffic_changed,
            never_ready={top.worker_service} if "worker-never-ready" in self.faults else set(),
            retire_no_traffic={top.web_service})
        self.cloudsql = CloudSqlApi(backup_delay=self.backup_delay)
        self.server = SandboxServer([self.cloudrun, self.cloudsql, MonitoringApi(self.traffic)],
                                    before=self._flaky if "api-flaky" in self.faults else None).start()
        self._seed()
        if top.mirror is not None:
            self._seed_mirror(top.mirror)
        return self

    def stop(self) -> None:
        # Workers before Postgres, so none is left blocked on a lock of a dead server.
        for shut in (self.server and self.server.stop, self.cloudrun and self.cloudrun.close,
                     self.workers and self.workers.close, self.gcs and self.gcs.stop,
                     self.pg and (self.pg.stop if self._own_pg else self._drop_staging_database)):
            if shut:
                try:
                    shut()
                except Exception:  # noqa: BLE001 - tear everything down even if one part fails
                    pass

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def endpoints(self) -> dict[str, str]:
        assert self.server is not None and self.pg is not None
        endpoints = {"run": self.server.endpoint, "sqladmin": self.server.endpoint,
                     "monitoring": self.server.endpoint, "database": self.pg.dsn(DEPLOYER_ROLE),
                     "today": self.today().isoformat()}
        if self.gcs is not None:
            endpoints |= {"storage": self.gcs.endpoint, "staging_database": self.pg.dsn(DEPLOYER_ROLE, STAGING_DATABASE)}
        return endpoints

    def today(self) -> dt.date:
        """The sandbox's calendar: the day before the mirror's sunset, or after it with past-sunset."""
        sunset = self.top.mirror.sunset if self.top.mirror else dt.date(2026, 1, 1)
        return sunset + dt.timedelta(days=1 if "past-sunset" in self.faults else -1)

    def write_endpoints(self, path: Path) -> None:
        path.write_text(json.dumps({"endpoints": self.endpoints(), "faults": sorted(self.faults)}, indent=2))

    # --- seeding ----------------------------------------------------------------------

    def _seed(self) -> None:
        top, run, sql = self.top, self.cloudrun, self.cloudsql
        assert run is not None and sql is not None and self.workers is not None
        sql.seed_instance(top.project, top.database_instance, top.region)
        if "db-down" in self.faults:
            sql.set_instance_state(top.project, top.database_instance, "MAINTENANCE")
        if "holder-not-serving" in self.faults:
            self.workers.start(STALE_REVISION)
            self._wait_for_holder(STALE_REVISION)
        staging_env = dict(top.staging_env)
        if "readthrough-without-mirror" in self.faults:
            staging_env |= {"OBJECTS_MIRROR": "0", "OBJECTS_READTHROUGH": "1"}
        if "flags-drift" in self.faults:
            staging_env |= {"OBJECTS_READTHROUGH": "0"}
        run.seed_service(top.project, top.region, top.staging_service, STAGING_IMAGE, env=staging_env,
                         min_instances=1, max_instances=1)
        run.seed_service(top.project, top.region, top.web_service, PROD_IMAGE, min_instances=2, max_instances=10,
                         ingress="INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER")
        run.seed_service(top.project, top.region, top.worker_service, PROD_IMAGE, min_instances=1, max_instances=1,
                         ingress="INGRESS_TRAFFIC_INTERNAL_ONLY")
        self.seeded = {next(iter(run.traffic(self._full(name)))) for name in
                       (top.web_service, top.worker_service)}
        worker_revision = next(iter(run.traffic(self._full(top.worker_service))))
        if "holder-not-serving" not in self.faults:
            self._wait_for_holder(worker_revision if "no-lease-holder" not in self.faults else None)
        if "concurrent-promote" in self.faults:
            self._foreign_lock()

    def _seed_mirror(self, mirror: MirrorFlags) -> None:
        """Staging's database rows and their bucket mirror, in sync unless a fault says not."""
        from infra.sandbox.gcs import LocalGcs, seed_mirror

        assert self.pg is not None
        self._drop_staging_database()
        admin = self.pg.connect()
        try:
            admin.run(f'CREATE DATABASE "{STAGING_DATABASE}"')
        finally:
            admin.close()
        rows = [(f"brand-{i:04d}/doc", 1 + i % 3) for i in range(MIRROR_ROWS)]
        conn = self.pg.connect(database=STAGING_DATABASE)
        try:
            conn.run(f'CREATE TABLE "{mirror.table}" ("{mirror.key_column}" text PRIMARY KEY, '
                     f'"{mirror.version_column}" bigint NOT NULL, '
                     f'"{mirror.updated_at_column}" timestamptz NOT NULL)')
            conn.run(f'GRANT SELECT ON "{mirror.table}" TO {DEPLOYER_ROLE}')
            # Changed an hour ago: outside any lag window. The same keys and versions as `rows`.
            conn.run(f'INSERT INTO "{mirror.table}" SELECT format(\'brand-%s/doc\', lpad(i::text, 4, \'0\')), '
                     f"1 + i % 3, now() - interval '1 hour' FROM generate_series(0, {MIRROR_ROWS - 1}) AS i")
        finally:
            conn.close()
        self.gcs = LocalGcs().start()
        client = self.gcs.client(self.top.project)
        self.gcs.create_bucket(mirror.bucket)
        mirrored = rows
        if "mirror-out-of-sync" in self.faults:
            # Three rows never mirrored, two mirrored at an older version.
            mirrored = [(k, v - 1 if i in (10, 11) else v) for i, (k, v) in enumerate(rows) if i not in (3, 4, 5)]
        seed_mirror(client, mirror.bucket, mirror.prefix, mirrored)

    def _drop_staging_database(self) -> None:
        assert self.pg is not None
        admin = self.pg.connect()
        try:
            admin.run(f'DROP DATABASE IF EXISTS "{STAGING_DATABASE}" WITH (FORCE)')
        finally:
            admin.close()

    def _full(self, service: str) -> str:
        return f"projects/{self.top.project}/locations/{self.top.region}/services/{service}"

    def _wait_for_holder(self, revision: str | None, timeout: float = 10.0) -> None:
        import time

        assert self.pg is not None
        deadline = time.monotonic() + timeout
        conn = self.pg.connect()
        try:
            while True:
                rows = conn.run("SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                                "WHERE l.locktype = 'advisory' AND l.objid = 727275 AND l.granted")
                if revision is None or [r[0] for r in rows] == [revision]:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sandbox: {revision} did not take the lease within {timeout} s")
                time.sleep(0.05)
        finally:
            conn.close()

    def _foreign_lock(self) -> None:
        import datetime as dt

        from google.auth.credentials import AnonymousCredentials
        from google.cloud import run_v2

        assert self.server is not None
        client = run_v2.ServicesClient(transport="rest", credentials=AnonymousCredentials(),
                                       client_options={"api_endpoint": self.server.endpoint})
        svc = client.get_service(name=self._full(self.top.worker_service))
        expires = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)).isoformat()
        svc.annotations[LOCK_ANNOTATION] = json.dumps({"run": "another-pipeline", "image": STAGING_IMAGE,
                                                       "expires": expires})
        client.update_service(service=svc).result(timeout=10)

    # --- production behaviour ---------------------------------------------------------

    def _short(self, service_full: str) -> str:
        return service_full.rsplit("/", 1)[-1]

    def _revision_ready(self, service_full: str, revision: str) -> None:
        service = self._short(service_full)
        if service != self.top.worker_service or self.workers is None:
            return
        seeded = not self.seeded or revision in self.seeded
        if seeded:
            if "no-lease-holder" in self.faults:
                return
            self.workers.start(revision, ignore_sigterm="old-holder-stuck" in self.faults)
        else:
            self.workers.start(revision, never_take_lease="lease-never-taken" in self.faults,
                               drop_lease_after=1.0 if "lease-lost-during-web" in self.faults else None)

    def _traffic_changed(self, service_full: str, traffic: dict[str, int]) -> None:
        service = self._short(service_full)
        if service == self.top.web_service:
            rate = LOW_REQUESTS_PER_SECOND if "low-traffic" in self.faults else WEB_REQUESTS_PER_SECOND
            for revision, percent in traffic.items():
                errors = WEB_ERROR_RATIO if ("web-errors" in self.faults and revision not in self.seeded) else 0.0
                if percent > 0:
                    self.traffic.set_rate(service, revision, rate * percent / 100, errors)
                else:
                    self.traffic.stop(service, revision)
            for rev in [r.revision for r in self.traffic.revisions() if r.service == service]:
                if traffic.get(rev, 0) == 0 and self.traffic.current(service, rev) not in (None, (0.0, 0.0)):
                    self.traffic.stop(service, rev)
            return
        if service != self.top.worker_service or self.workers is None:
            return
        running = self.workers.running()
        for revision in running:
            if revision != STALE_REVISION and traffic.get(revision, 0) == 0:
                # Cloud Run shuts the instances of a revision without traffic: SIGTERM.
                threading.Thread(target=self.workers.stop, args=(revision,), daemon=True).start()
        for revision, percent in traffic.items():
            if percent > 0 and revision not in running and revision in self.seeded and \
                    "no-lease-holder" not in self.faults:
                self.workers.start(revision)

    def _flaky(self, request: Request) -> None:
        # Bursts: two failures in every eight requests, alternating 429 and 503.
        with self._lock:
            self._requests += 1
            n = self._requests
        if n % 8 in (1, 2):
            status = 429 if n % 10 < 5 else 503
            raise ApiError(status, "Quota exceeded" if status == 429 else "The service is currently unavailable.")


def topology_from_stacks(prod_stack: str = "prod", staging_stack: str = "staging") -> Topology:
    """The names to seed, from the declared stacks (never constants)."""
    from infra.synth.stacks import read_stack, settings_of

    prod, staging = settings_of(read_stack(prod_stack)), settings_of(read_stack(staging_stack))
    web = next(s for s in prod.services if not s.runs_worker)
    worker = next(s for s in prod.services if s.runs_worker)
    feed = staging.services[0]
    env = {**staging.env, **feed.env, "ROLE": feed.role, "STORAGE": staging.storage,
           **(staging.mirror.env() if staging.mirror else {})}
    assert prod.database is not None
    return Topology(project=prod.project, region=prod.region, staging_service=feed.name, staging_env=env,
                    web_service=web.name, worker_service=worker.name, database_instance=prod.database.name,
                    mirror=staging.mirror)
