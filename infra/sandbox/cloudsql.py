"""A stand-in for the Cloud SQL Admin API (instances.get/list, backupRuns, operations).

Served paths, from Google's discovery documents (`sqladmin.v1.json`, `sqladmin.v1beta4.json`):

    GET  /v1/projects/{project}/instances                       instances.list
    GET  /v1/projects/{project}/instances/{instance}            instances.get
    POST /v1/projects/{project}/instances/{instance}/backupRuns backupRuns.insert -> Operation
    GET  /v1/projects/{project}/instances/{instance}/backupRuns backupRuns.list
    GET  /v1/projects/{project}/instances/{instance}/backupRuns/{id}  backupRuns.get
    GET  /v1/projects/{project}/operations/{operation}         operations.get

and the same under `/sql/v1beta4/projects/`. Why both: the `google.cloud.sqladmin_v1` client
classes in the pinned google-cloud-sql 0.1.2 have no REST transport (gRPC only); the same
package's `google.cloud.sqladmin_v1beta4` clients do (`transport="rest"`), and they call the
`/sql/v1beta4/...` paths. The v1 paths serve discovery-based REST clients
(googleapiclient `build("sqladmin", "v1")`). Each answer is built from the message types of
the matching library module and serialized with its JSON mapping, enums as numbers when
the request carries `$alt=json;enum-encoding=int` (what the library's REST transport sends)
and as names otherwise.

Behaviour:
- an on-demand backup is an Operation (BACKUP_VOLUME) that is PENDING for the first third
  of `backup_delay`, RUNNING until `backup_delay` has passed, then DONE; its BackupRun goes
  ENQUEUED -> RUNNING -> SUCCESSFUL (or FAILED, with the operation's `error`, after
  `fail_next_backup`). Times come from the injectable clock `now`.
- a second backup while one is running, or on an instance in MAINTENANCE, is refused with
  HTTP 409, reason `operationInProgress`, "Operation failed because another operation was
  already in progress." (the code Cloud SQL has answered since 2019: terraform-provider-google
  #4370 / magic-modules #2275, crossplane provider-gcp #121, apache/airflow #68040; before
  that it answered 403).
- unknown instance / backup run / operation: 404; malformed id or body: 400.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import ModuleType
from typing import Any

from google.cloud import sqladmin_v1, sqladmin_v1beta4
from google.protobuf import json_format

from infra.sandbox.server import ApiError, Request, Response

OPERATION_IN_PROGRESS = "Operation failed because another operation was already in progress."
LINK_ROOT = "https://sqladmin.googleapis.com"

# path version prefix -> (library module, version path as Google writes it in links)
_VERSIONS: dict[str, tuple[ModuleType, str]] = {
    "/v1": (sqladmin_v1, "/v1"),
    "/sql/v1beta4": (sqladmin_v1beta4, "/sql/v1beta4"),
}
_ROUTE = re.compile(
    r"^(?P<version>/v1|/sql/v1beta4)/projects/(?P<project>[^/]+)"
    r"(?:/instances(?:/(?P<instance>[^/]+)(?:/backupRuns(?:/(?P<run>[^/]+))?|(?P<inst_rest>/.+))?)?"
    r"|/operations(?:/(?P<operation>[^/]+))?)?$"
)


class SqlApiError(ApiError):
    """An ApiError with the `errors[].reason` Cloud SQL puts beside the google.rpc.Status."""

    def __init__(self, status: int, message: str, reason: str, rpc_status: str | None = None):
        super().__init__(status, message, rpc_status)
        self.reason = reason

    def response(self) -> Response:
        response = super().response()
        error = dict(response.body["error"])  # type: ignore[index]
        error["errors"] = [{"message": self.message, "domain": "global", "reason": self.reason}]
        return Response(self.status, {"error": error})


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class _Instance:
    project: str
    name: str
    region: str
    database_version: str
    availability: str
    private_ip: str
    created: float
    state: str = "RUNNABLE"


@dataclass
class _Backup:
    """One on-demand backup: its BackupRun and the Operation that made it."""

    project: str
    instance: str
    run_id: int
    operation: str
    description: str
    database_version: str
    location: str
    enqueued: float
    delay: float
    fail_message: str | None = None

    def phase(self, now: float) -> str:
        elapsed = now - self.enqueued + 1e-6  # a clock set to enqueued + delay is done, floats aside
        if elapsed >= self.delay:
            return "DONE"
        return "PENDING" if elapsed < self.delay / 3 else "RUNNING"


@dataclass
class _Faults:
    instance_state: dict[tuple[str, str], str] = field(default_factory=dict)
    fail_next_backup: list[tuple[str | None, str]] = field(default_factory=list)  # (instance or any, message)


class CloudSqlApi:
    """The Cloud SQL Admin stand-in. Seed instances, then point clients at the server."""

    prefixes = ("/v1/projects/", "/sql/v1beta4/projects/")

    def __init__(self, backup_delay: float = 0.3, now: Callable[[], float] = time.time):
        self.backup_delay = backup_delay
        self.now = now
        self.faults = _Faults()
        self._instances: dict[tuple[str, str], _Instance] = {}
        self._backups: list[_Backup] = []
        self._run_ids = itertools.count(int(now() * 1000))
        self._ips = itertools.count(2)
        self._lock = threading.Lock()

    # ---- seeding and faults -------------------------------------------------------------

    def seed_instance(self, project: str, name: str, region: str, database_version: str = "POSTGRES_17",
                      availability: str = "REGIONAL", private_ip: str | None = None) -> None:
        for enum, value in ((sqladmin_v1.SqlDatabaseVersion, database_version),
                            (sqladmin_v1.SqlAvailabilityType, availability)):
            if value not in enum.__members__:
                raise ValueError(f"{value!r} is not a {enum.__name__}")
        with self._lock:
            ip = private_ip or f"172.30.0.{next(self._ips)}"
            self._instances[(project, name)] = _Instance(project, name, region, database_version, availability,
                                                         ip, self.now())

    def set_instance_state(self, project: str, instance: str, state: str | None) -> None:
        """Fault: answer `state` (e.g. SUSPENDED, MAINTENANCE) for the instance; None clears it."""
        if state is not None and state not in sqladmin_v1.DatabaseInstance.SqlInstanceState.__members__:
            raise ValueError(f"{state!r} is not a SqlInstanceState")
        with self._lock:
            if state is None:
                self.faults.instance_state.pop((project, instance), None)
            else:
                self.faults.instance_state[(project, instance)] = state

    def fail_next_backup(self, instance: str | None = None,
                         message: str = "An internal error occurred while taking the backup.") -> None:
        """Fault: the next backup (of `instance`, or of any instance) ends DONE with `error`."""
        with self._lock:
            self.faults.fail_next_backup.append((instance, message))

    def backups(self, project: str, instance: str) -> list[dict[str, Any]]:
        """The instance's backup runs as JSON (names for enums), newest first: for tests and status."""
        with self._lock:
            return [self._backup_run_json(sqladmin_v1, "/v1", b, False) for b in self._runs(project, instance)]

    # ---- HTTP ---------------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        match = _ROUTE.match(request.path)
        if not match or match["inst_rest"]:
            raise ApiError(404, f"Method not found: {request.method} {request.path}")
        module, version = _VERSIONS[match["version"]]
        alt = request.param("$alt") or request.param("alt") or "json"
        ints = "enum-encoding=int" in alt
        project, instance, run, operation = match["project"], match["instance"], match["run"], match["operation"]
        method = request.method
        with self._lock:
            if operation is not None and method == "GET":
                return self._answer(self._operation_json(module, version, self._operation(project, operation), ints))
            if instance is None:
                if method == "GET" and "/operations" not in request.path:
                    items = [self._instance_json(module, version, i, ints)
                             for (p, _), i in sorted(self._instances.items()) if p == project]
                    return self._answer({"kind": "sql#instancesList", "items": items},
                                        module.InstancesListResponse, ints)
                raise ApiError(404, f"Method not found: {method} {request.path}")
            record = self._instance(project, instance)
            if "/backupRuns" not in request.path:
                if method == "GET":
                    return self._answer(self._instance_json(module, version, record, ints))
            elif run is not None:
                if method == "GET":
                    backup = self._run(project, instance, run)
                    return self._answer(self._backup_run_json(module, version, backup, ints))
            elif method == "POST":
                backup = self._insert_backup(module, record, request)
                return self._answer(self._operation_json(module, version, backup, ints))
            elif method == "GET":
                return self._answer(self._list_runs(module, version, record, request, ints))
        raise ApiError(404, f"Method not found: {method} {request.path}")

    # ---- the methods --------------------------------------------------------------------

    def _instance(self, project: str, name: str) -> _Instance:
        record = self._instances.get((project, name))
        if record is None:
            raise SqlApiError(404, "The Cloud SQL instance does not exist.", "instanceDoesNotExist")
        return record

    def _state(self, record: _Instance) -> str:
        return self.faults.instance_state.get((record.project, record.name), record.state)

    def _runs(self, project: str, instance: str) -> list[_Backup]:
        return sorted((b for b in self._backups if (b.project, b.instance) == (project, instance)),
                      key=lambda b: -b.run_id)

    def _run(self, project: str, instance: str, run: str) -> _Backup:
        if not run.isdigit():
            raise SqlApiError(400, f"Invalid value at 'id' (TYPE_INT64), \"{run}\"", "invalid")
        for backup in self._backups:
            if (backup.project, backup.instance, backup.run_id) == (project, instance, int(run)):
                return backup
        raise SqlApiError(404, "The backup run does not exist.", "backupRunDoesNotExist")

    def _operation(self, project: str, name: str) -> _Backup:
        for backup in self._backups:
            if (backup.project, backup.operation) == (project, name):
                return backup
        raise SqlApiError(404, f"The Cloud SQL operation {name} does not exist.", "operationDoesNotExist")

    def _insert_backup(self, module: ModuleType, record: _Instance, request: Request) -> _Backup:
        try:
            body = module.BackupRun.pb()()
            json_format.Parse(request.body or b"{}", body, ignore_unknown_fields=False)
        except json_format.ParseError as error:
            raise SqlApiError(400, f"Invalid JSON payload received. {error}", "invalid") from None
        if body.type_ not in (0, module.SqlBackupRunType.ON_DEMAND):
            raise SqlApiError(400, "Invalid request: only ON_DEMAND backups can be requested.", "invalid")
        now = self.now()
        state = self._state(record)
        if state == "MAINTENANCE" or any(b.phase(now) != "DONE" for b in self._runs(record.project, record.name)):
            raise SqlApiError(409, OPERATION_IN_PROGRESS, "operationInProgress")
        if state != "RUNNABLE":
            raise SqlApiError(400, "Invalid request since instance is not running.", "invalid")
        fail = None
        for index, (target, message) in enumerate(self.faults.fail_next_backup):
            if target in (None, record.name):
                fail = self.faults.fail_next_backup.pop(index)[1]
                break
        backup = _Backup(record.project, record.name, next(self._run_ids), str(uuid.uuid4()), body.description,
                         record.database_version, record.region, now, self.backup_delay, fail)
        self._backups.append(backup)
        return backup

    def _list_runs(self, module: ModuleType, version: str, record: _Instance, request: Request,
                   ints: bool) -> dict[str, Any]:
        try:
            size = int(request.param("maxResults") or 0) or 1000
            start = int(request.param("pageToken") or 0)
        except ValueError:
            raise SqlApiError(400, "Invalid value for maxResults or pageToken.", "invalid") from None
        runs = self._runs(record.project, record.name)
        page = [self._backup_run_json(module, version, b, ints) for b in runs[start:start + size]]
        answer: dict[str, Any] = {"kind": "sql#backupRunsList", "items": page}
        if start + size < len(runs):
            answer["nextPageToken"] = str(start + size)
        return self._message(module.BackupRunsListResponse, answer, ints)

    # ---- messages -----------------------------------------------------------------------

    @staticmethod
    def _message(cls: Any, data: dict[str, Any], ints: bool) -> dict[str, Any]:
        """Parse `data` into the library's message (unknown field: error) and serialize it back."""
        message = json_format.ParseDict(data, cls.pb()(), ignore_unknown_fields=False)
        return json_format.MessageToDict(message, use_integers_for_enums=ints)

    def _answer(self, body: dict[str, Any], cls: Any = None, ints: bool = False) -> Response:
        return Response(200, self._message(cls, body, ints) if cls is not None else body)

    def _instance_json(self, module: ModuleType, version: str, i: _Instance, ints: bool) -> dict[str, Any]:
        data = {
            "kind": "sql#instance",
            "name": i.name,
            "project": i.project,
            "state": self._state(i),
            "databaseVersion": i.database_version,
            "region": i.region,
            "gceZone": f"{i.region}-b",
            **({"secondaryGceZone": f"{i.region}-c"} if i.availability == "REGIONAL" else {}),
            "backendType": "SECOND_GEN",
            "instanceType": "CLOUD_SQL_INSTANCE",
            "connectionName": f"{i.project}:{i.region}:{i.name}",
            "selfLink": f"{LINK_ROOT}{version}/projects/{i.project}/instances/{i.name}",
            "createTime": _rfc3339(i.created),
            "ipAddresses": [{"type": "PRIVATE", "ipAddress": i.private_ip}],
            "settings": {
                "kind": "sql#settings",
                "tier": "db-custom-2-7680",
                "availabilityType": i.availability,
                "activationPolicy": "ALWAYS",
                "pricingPlan": "PER_USE",
                "dataDiskSizeGb": "10",
                "settingsVersion": "1",
                "ipConfiguration": {"ipv4Enabled": False,
                                    "privateNetwork": f"projects/{i.project}/global/networks/default"},
                "backupConfiguration": {"kind": "sql#backupConfiguration", "enabled": True, "startTime": "03:00",
                                        "pointInTimeRecoveryEnabled": True},
            },
        }
        return self._message(module.DatabaseInstance, data, ints)

    def _backup_run_json(self, module: ModuleType, version: str, b: _Backup, ints: bool) -> dict[str, Any]:
        phase = b.phase(self.now())
        status = {"PENDING": "ENQUEUED", "RUNNING": "RUNNING"}.get(phase, "FAILED" if b.fail_message else "SUCCESSFUL")
        data: dict[str, Any] = {
            "kind": "sql#backupRun",
            "id": str(b.run_id),
            "instance": b.instance,
            "status": status,
            "type": "ON_DEMAND",
            "backupKind": "SNAPSHOT",
            "description": b.description,
            "databaseVersion": b.database_version,
            "location": b.location,
            "enqueuedTime": _rfc3339(b.enqueued),
            "windowStartTime": _rfc3339(b.enqueued),
            "selfLink": f"{LINK_ROOT}{version}/projects/{b.project}/instances/{b.instance}/backupRuns/{b.run_id}",
        }
        if phase != "PENDING":
            data["startTime"] = _rfc3339(b.enqueued + b.delay / 3)
        if phase == "DONE":
            data["endTime"] = _rfc3339(b.enqueued + b.delay)
            if b.fail_message:
                data["error"] = {"kind": "sql#operationError", "code": "BACKUP_FAILED", "message": b.fail_message}
        if not b.description:
            del data["description"]
        return self._message(module.BackupRun, data, ints)

    def _operation_json(self, module: ModuleType, version: str, b: _Backup, ints: bool) -> dict[str, Any]:
        phase = b.phase(self.now())
        data: dict[str, Any] = {
            "kind": "sql#operation",
            "name": b.operation,
            "operationType": "BACKUP_VOLUME",
            "status": phase,
            "user": "sandbox@brew-infra.iam.gserviceaccount.com",
            "insertTime": _rfc3339(b.enqueued),
            "targetId": b.instance,
            "targetProject": b.project,
            "targetLink": f"{LINK_ROOT}{version}/projects/{b.project}/instances/{b.instance}",
            "selfLink": f"{LINK_ROOT}{version}/projects/{b.project}/operations/{b.operation}",
            "backupContext": {"kind": "sql#backupContext", "backupId": str(b.run_id)},
        }
        if phase != "PENDING":
            data["startTime"] = _rfc3339(b.enqueued + b.delay / 3)
        if phase == "DONE":
            data["endTime"] = _rfc3339(b.enqueued + b.delay)
            if b.fail_message:
                data["error"] = {"kind": "sql#operationErrors",
                                 "errors": [{"kind": "sql#operationError", "code": "BACKUP_FAILED",
                                             "message": b.fail_message}]}
        return self._message(module.Operation, data, ints)

