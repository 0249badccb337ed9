"""The Cloud SQL Admin stand-in, through real clients.

- `google.cloud.sqladmin_v1beta4` clients with `transport="rest"` (the library's REST
  transport: `/sql/v1beta4/...`, `$alt=json;enum-encoding=int`): google-cloud-sql 0.1.2 has
  no REST transport for `sqladmin_v1`, which the first test pins down.
- googleapiclient's discovery client for `sqladmin v1` (`/v1/...`, enums as names).
Every response body is checked against the discovery document's schema.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import httplib2
import pytest
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import sqladmin_v1, sqladmin_v1beta4
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError

from infra.sandbox.cloudsql import OPERATION_IN_PROGRESS, CloudSqlApi
from infra.sandbox.server import Request, Response, SandboxServer
from tests.sandbox.discovery import RPC_CODES, validate

PROJECT, INSTANCE, REGION = "brew-prod", "brew-db", "europe-west1"
DIGEST = "sha256:" + "ab" * 32


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


class Recorder:
    """Wraps the stand-in to keep every (request, response) the clients caused."""

    def __init__(self, api: CloudSqlApi):
        self.api, self.prefixes, self.seen = api, api.prefixes, []

    def handle(self, request: Request) -> Response:
        try:
            response = self.api.handle(request)
        except Exception as error:
            response = error.response()  # type: ignore[attr-defined]
            self.seen.append((request, response))
            raise
        self.seen.append((request, response))
        return response

    def last(self) -> tuple[Request, Response]:
        return self.seen[-1]


class Env:
    def __init__(self, server: SandboxServer, api: CloudSqlApi, recorder: Recorder, clock: Clock):
        self.server, self.api, self.recorder, self.clock = server, api, recorder, clock
        options = {"api_endpoint": server.endpoint}
        kwargs: dict[str, Any] = {"transport": "rest", "client_options": options, "credentials": AnonymousCredentials()}
        self.instances = sqladmin_v1beta4.SqlInstancesServiceClient(**kwargs)
        self.backup_runs = sqladmin_v1beta4.SqlBackupRunsServiceClient(**kwargs)
        self.operations = sqladmin_v1beta4.SqlOperationsServiceClient(**kwargs)
        self.v1 = build("sqladmin", "v1", http=httplib2.Http(), static_discovery=True,
                        client_options={"api_endpoint": server.endpoint + "/"})

    def check_last(self, schema: str) -> dict[str, Any]:
        """Validate the last body against the document of the path's API version."""
        request, response = self.recorder.last()
        ints = "enum-encoding=int" in (request.param("$alt") or "")
        doc = "sqladmin.v1beta4" if request.path.startswith("/sql/v1beta4/") else "sqladmin.v1"
        if response.status >= 400:
            check_error(response.status, response.body)
        else:
            validate(doc, schema, response.body, int_enums=ints)
        return response.body  # type: ignore[return-value]


def check_error(status: int, body: Any) -> None:
    """Google's JSON error envelope as Cloud SQL sends it: the google.rpc.Status fields plus the
    legacy `errors[]` whose `reason` (operationInProgress, instanceDoesNotExist...) clients read.
    The discovery documents for sqladmin do not describe it, so it is checked here."""
    assert isinstance(body, dict) and set(body) == {"error"}
    error = body["error"]
    assert set(error) <= {"code", "message", "status", "errors", "details"}
    assert error["code"] == status and error["message"] and error["status"] in RPC_CODES.values()
    for item in error.get("errors", []):
        assert set(item) == {"message", "domain", "reason"} and all(isinstance(v, str) for v in item.values())


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[SandboxServer, Recorder]]:
    recorder = Recorder(CloudSqlApi())
    with SandboxServer([recorder]) as server:  # one server: stopping one takes half a second
        yield server, recorder


@pytest.fixture
def env(served: tuple[SandboxServer, Recorder]) -> Env:
    server, recorder = served
    clock = Clock()
    api = CloudSqlApi(backup_delay=0.3, now=clock)
    api.seed_instance(PROJECT, INSTANCE, REGION, private_ip="172.30.0.5")
    api.seed_instance(PROJECT, "brew-db-zonal", REGION, database_version="POSTGRES_16", availability="ZONAL")
    recorder.api, recorder.seen = api, []
    return Env(server, api, recorder, clock)


def insert_backup(env: Env, description: str = DIGEST, instance: str = INSTANCE) -> sqladmin_v1beta4.Operation:
    return env.backup_runs.insert(request={"project": PROJECT, "instance": instance,
                                           "body": {"description": description}})


def test_sqladmin_v1_library_is_grpc_only_and_v1beta4_has_rest() -> None:
    for name in ("SqlInstancesServiceClient", "SqlBackupRunsServiceClient", "SqlOperationsServiceClient"):
        assert "rest" not in getattr(sqladmin_v1, name)._transport_registry
        assert "rest" in getattr(sqladmin_v1beta4, name)._transport_registry


def test_instances_get_through_the_rest_client_with_int_enums(env: Env) -> None:
    instance = env.instances.get(request={"project": PROJECT, "instance": INSTANCE})
    request, _ = env.recorder.last()
    assert request.path == f"/sql/v1beta4/projects/{PROJECT}/instances/{INSTANCE}"
    assert request.param("$alt") == "json;enum-encoding=int"
    body = env.check_last("DatabaseInstance")
    assert isinstance(body["state"], int) and isinstance(body["databaseVersion"], int)
    assert instance.state == sqladmin_v1beta4.DatabaseInstance.SqlInstanceState.RUNNABLE
    assert instance.database_version == sqladmin_v1beta4.SqlDatabaseVersion.POSTGRES_17
    assert instance.region == REGION
    assert instance.settings.availability_type == sqladmin_v1beta4.SqlAvailabilityType.REGIONAL
    assert [(ip.type_, ip.ip_address) for ip in instance.ip_addresses] == [
        (sqladmin_v1beta4.SqlIpAddressType.PRIVATE, "172.30.0.5")]
    assert instance.connection_name == f"{PROJECT}:{REGION}:{INSTANCE}"


def test_instances_get_and_list_through_the_discovery_client_with_names(env: Env) -> None:
    body = env.v1.instances().get(project=PROJECT, instance="brew-db-zonal").execute()
    assert env.recorder.last()[0].path == f"/v1/projects/{PROJECT}/instances/brew-db-zonal"
    assert env.check_last("DatabaseInstance") == body
    assert body["state"] == "RUNNABLE" and body["databaseVersion"] == "POSTGRES_16"
    assert body["settings"]["availabilityType"] == "ZONAL"
    assert body["ipAddresses"][0]["type"] == "PRIVATE" and body["ipAddresses"][0]["ipAddress"].startswith("172.30.0.")
    # the v1 library's types read the same JSON
    assert sqladmin_v1.DatabaseInstance.from_json(json.dumps(body)).state == \
        sqladmin_v1.DatabaseInstance.SqlInstanceState.RUNNABLE
    listed = env.v1.instances().list(project=PROJECT).execute()
    env.check_last("InstancesListResponse")
    assert sorted(i["name"] for i in listed["items"]) == ["brew-db", "brew-db-zonal"]
    page = env.instances.list(request={"project": PROJECT})
    assert sorted(i.name for i in page.items) == ["brew-db", "brew-db-zonal"]


def test_int_and_name_enums_describe_the_same_instance(env: Env) -> None:
    def fetch(alt: str) -> dict[str, Any]:
        url = f"{env.server.endpoint}/v1/projects/{PROJECT}/instances/{INSTANCE}?%24alt={alt}"
        with urllib.request.urlopen(url) as answer:
            return json.load(answer)
    as_ints, as_names = fetch("json%3Benum-encoding%3Dint"), fetch("json")
    validate("sqladmin.v1", "DatabaseInstance", as_ints, int_enums=True)
    validate("sqladmin.v1", "DatabaseInstance", as_names)
    assert as_ints["state"] == sqladmin_v1.DatabaseInstance.SqlInstanceState.RUNNABLE.value
    assert sqladmin_v1.DatabaseInstance.from_json(json.dumps(as_ints)) == \
        sqladmin_v1.DatabaseInstance.from_json(json.dumps(as_names))


def test_unknown_instance_is_404(env: Env) -> None:
    with pytest.raises(exceptions.NotFound, match="instance does not exist"):
        env.instances.get(request={"project": PROJECT, "instance": "nope"})
    env.check_last("")
    with pytest.raises(exceptions.NotFound):
        insert_backup(env, instance="nope")
    with pytest.raises(HttpError) as caught:
        env.v1.backupRuns().list(project=PROJECT, instance="nope").execute()
    assert caught.value.resp.status == 404
    assert json.loads(caught.value.content)["error"]["errors"][0]["reason"] == "instanceDoesNotExist"
    env.check_last("")


def test_instance_state_fault(env: Env) -> None:
    for state in ("SUSPENDED", "MAINTENANCE"):
        env.api.set_instance_state(PROJECT, INSTANCE, state)
        instance = env.instances.get(request={"project": PROJECT, "instance": INSTANCE})
        assert instance.state.name == state
        assert env.v1.instances().get(project=PROJECT, instance=INSTANCE).execute()["state"] == state
        env.check_last("DatabaseInstance")
    env.api.set_instance_state(PROJECT, INSTANCE, None)
    assert env.instances.get(request={"project": PROJECT, "instance": INSTANCE}).state.name == "RUNNABLE"
    with pytest.raises(ValueError):
        env.api.set_instance_state(PROJECT, INSTANCE, "ASLEEP")


def test_on_demand_backup_progresses_pending_running_done(env: Env) -> None:
    t0 = env.clock.t
    operation = insert_backup(env)
    request, _ = env.recorder.last()
    assert request.method == "POST"
    assert request.path == f"/sql/v1beta4/projects/{PROJECT}/instances/{INSTANCE}/backupRuns"
    env.check_last("Operation")
    assert operation.status == sqladmin_v1beta4.Operation.SqlOperationStatus.PENDING
    assert operation.operation_type == sqladmin_v1beta4.Operation.SqlOperationType.BACKUP_VOLUME
    assert operation.target_id == INSTANCE and operation.target_project == PROJECT
    assert operation.target_link.endswith(f"/projects/{PROJECT}/instances/{INSTANCE}")
    assert not operation.error.errors

    runs = env.backup_runs.list(request={"project": PROJECT, "instance": INSTANCE})
    env.check_last("BackupRunsListResponse")
    (run,) = runs.items
    assert run.status == sqladmin_v1beta4.SqlBackupRunStatus.ENQUEUED
    assert run.type_ == sqladmin_v1beta4.SqlBackupRunType.ON_DEMAND
    assert run.description == DIGEST and run.id == operation.backup_context.backup_id
    assert run.window_start_time.timestamp() == pytest.approx(t0)
    assert "startTime" not in env.recorder.last()[1].body["items"][0]

    env.clock.t = t0 + 0.15
    got = env.operations.get(request={"project": PROJECT, "operation": operation.name})
    assert env.recorder.last()[0].path == f"/sql/v1beta4/projects/{PROJECT}/operations/{operation.name}"
    env.check_last("Operation")
    assert got.status == sqladmin_v1beta4.Operation.SqlOperationStatus.RUNNING
    run = env.backup_runs.get(request={"project": PROJECT, "instance": INSTANCE, "id": run.id})
    env.check_last("BackupRun")
    assert run.status == sqladmin_v1beta4.SqlBackupRunStatus.RUNNING
    assert run.start_time.timestamp() == pytest.approx(t0 + 0.1)

    env.clock.t = t0 + 0.3
    got = env.operations.get(request={"project": PROJECT, "operation": operation.name})
    assert got.status == sqladmin_v1beta4.Operation.SqlOperationStatus.DONE and not got.error.errors
    assert got.end_time.timestamp() == pytest.approx(t0 + 0.3)
    # the same through v1, names for enums
    body = env.v1.backupRuns().get(project=PROJECT, instance=INSTANCE, id=str(run.id)).execute()
    env.check_last("BackupRun")
    assert body["status"] == "SUCCESSFUL" and body["type"] == "ON_DEMAND" and body["description"] == DIGEST
    assert body["id"] == str(run.id) and "endTime" in body and "startTime" in body
    op_body = env.v1.operations().get(project=PROJECT, operation=operation.name).execute()
    env.check_last("Operation")
    assert op_body["status"] == "DONE" and op_body["operationType"] == "BACKUP_VOLUME"
    assert env.api.backups(PROJECT, INSTANCE)[0]["status"] == "SUCCESSFUL"


def test_backup_while_one_runs_is_409_operation_in_progress(env: Env) -> None:
    insert_backup(env)
    with pytest.raises(exceptions.Conflict) as caught:
        insert_backup(env, "second")
    assert caught.value.code == 409 and OPERATION_IN_PROGRESS in caught.value.message
    assert caught.value.errors[0]["reason"] == "operationInProgress"
    env.check_last("")
    with pytest.raises(HttpError) as raw:
        env.v1.backupRuns().insert(project=PROJECT, instance=INSTANCE, body={"description": "x"}).execute()
    assert raw.value.resp.status == 409
    insert_backup(env, instance="brew-db-zonal")  # another instance is not blocked
    env.clock.t += 0.3
    insert_backup(env, "after the first is done")
    assert [r["description"] for r in env.api.backups(PROJECT, INSTANCE)] == ["after the first is done", DIGEST]


def test_backup_on_instance_in_maintenance_or_suspended(env: Env) -> None:
    env.api.set_instance_state(PROJECT, INSTANCE, "MAINTENANCE")
    with pytest.raises(exceptions.Conflict):
        insert_backup(env)
    env.api.set_instance_state(PROJECT, INSTANCE, "SUSPENDED")
    with pytest.raises(exceptions.BadRequest, match="not running"):
        insert_backup(env)
    env.check_last("")
    assert env.api.backups(PROJECT, INSTANCE) == []


def test_fail_next_backup_ends_done_with_error(env: Env) -> None:
    env.api.fail_next_backup(INSTANCE, message="disk snapshot failed")
    operation = insert_backup(env)
    env.clock.t += 0.3
    done = env.operations.get(request={"project": PROJECT, "operation": operation.name})
    env.check_last("Operation")
    assert done.status == sqladmin_v1beta4.Operation.SqlOperationStatus.DONE
    assert [(e.code, e.message) for e in done.error.errors] == [("BACKUP_FAILED", "disk snapshot failed")]
    run = env.v1.backupRuns().list(project=PROJECT, instance=INSTANCE).execute()["items"][0]
    env.check_last("BackupRunsListResponse")
    assert run["status"] == "FAILED" and run["error"]["message"] == "disk snapshot failed"
    # only the next one fails
    second = insert_backup(env)
    env.clock.t += 0.3
    assert not env.operations.get(request={"project": PROJECT, "operation": second.name}).error.errors


def test_unknown_operation_and_backup_run_are_404(env: Env) -> None:
    with pytest.raises(exceptions.NotFound):
        env.operations.get(request={"project": PROJECT, "operation": "00000000-0000-0000-0000-000000000000"})
    env.check_last("")
    with pytest.raises(exceptions.NotFound):
        env.backup_runs.get(request={"project": PROJECT, "instance": INSTANCE, "id": 42})
    env.check_last("")


def test_malformed_requests_are_400(env: Env) -> None:
    with pytest.raises(HttpError) as caught:
        env.v1.backupRuns().get(project=PROJECT, instance=INSTANCE, id="not-a-number").execute()
    assert caught.value.resp.status == 400
    env.check_last("")
    with pytest.raises(HttpError) as caught:
        env.v1.backupRuns().insert(project=PROJECT, instance=INSTANCE, body={"descripton": "typo"}).execute()
    assert caught.value.resp.status == 400 and "descripton" in str(caught.value)
    env.check_last("")
    with pytest.raises(exceptions.BadRequest):
        env.backup_runs.insert(request={"project": PROJECT, "instance": INSTANCE,
                                        "body": {"type_": sqladmin_v1beta4.SqlBackupRunType.AUTOMATED}})
    request = urllib.request.Request(f"{env.server.endpoint}/v1/projects/{PROJECT}/instances/{INSTANCE}/backupRuns",
                                     data=b"{not json", method="POST")
    with pytest.raises(urllib.error.HTTPError) as raw:
        urllib.request.urlopen(request)
    assert raw.value.code == 400
    assert env.api.backups(PROJECT, INSTANCE) == []


def test_backup_runs_list_pages(env: Env) -> None:
    for n in range(3):
        insert_backup(env, f"backup {n}")
        env.clock.t += 1
    first = env.v1.backupRuns().list(project=PROJECT, instance=INSTANCE, maxResults=2).execute()
    env.check_last("BackupRunsListResponse")
    assert [r["description"] for r in first["items"]] == ["backup 2", "backup 1"] and first["nextPageToken"]
    rest = env.v1.backupRuns().list(project=PROJECT, instance=INSTANCE, maxResults=2,
                                    pageToken=first["nextPageToken"]).execute()
    assert [r["description"] for r in rest["items"]] == ["backup 0"] and "nextPageToken" not in rest
    # the library's pager follows the tokens itself
    pager = env.backup_runs.list(request={"project": PROJECT, "instance": INSTANCE, "max_results": 1})
    assert [r.description for r in pager.items] == ["backup 2"]


def test_default_clock_finishes_a_backup_in_real_time() -> None:
    api = CloudSqlApi(backup_delay=0.05)
    api.seed_instance(PROJECT, INSTANCE, REGION)
    with SandboxServer([api]) as server:
        client = sqladmin_v1beta4.SqlOperationsServiceClient(
            transport="rest", client_options={"api_endpoint": server.endpoint}, credentials=AnonymousCredentials())
        runs = sqladmin_v1beta4.SqlBackupRunsServiceClient(
            transport="rest", client_options={"api_endpoint": server.endpoint}, credentials=AnonymousCredentials())
        operation = runs.insert(request={"project": PROJECT, "instance": INSTANCE, "body": {"description": DIGEST}})
        seen = {operation.status.name}
        deadline = time.monotonic() + 5
        while operation.status.name != "DONE" and time.monotonic() < deadline:
            time.sleep(0.01)
            operation = client.get(request={"project": PROJECT, "operation": operation.name})
            seen.add(operation.status.name)
        assert operation.status.name == "DONE" and seen >= {"PENDING", "DONE"}
        assert api.backups(PROJECT, INSTANCE)[0]["status"] == "SUCCESSFUL"


def test_seed_refuses_unknown_enums() -> None:
    with pytest.raises(ValueError):
        CloudSqlApi().seed_instance(PROJECT, INSTANCE, REGION, database_version="POSTGRES_99")
