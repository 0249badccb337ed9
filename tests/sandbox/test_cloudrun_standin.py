"""The Cloud Run Admin API v2 stand-in, driven through the real `run_v2` clients (REST).

Every response the stand-in sends during a test is recorded and, at teardown, validated
against the run.v2 discovery document (Service, Revision, Operation with its packed
Service/Revision, List*Response, error envelope).
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from google.api_core import exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import run_v2

from infra.sandbox.cloudrun import CloudRunApi
from infra.sandbox.server import Request, Response, SandboxServer
from tests.sandbox.discovery import validate, validate_error

DOC = "run.v2"
PROJECT, REGION = "brew-stg", "us-central1"
PARENT = f"projects/{PROJECT}/locations/{REGION}"
REVISION_NAME = re.compile(r"^web-\d{5}-[a-z]{3}$")
State = run_v2.Condition.State
Reason = run_v2.Condition.RevisionReason
LATEST = run_v2.TrafficTargetAllocationType.TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST
BY_REVISION = run_v2.TrafficTargetAllocationType.TRAFFIC_TARGET_ALLOCATION_TYPE_REVISION


class Recorder:
    """Wraps the stand-in to keep every (request, response) for schema validation."""

    def __init__(self, api: CloudRunApi):
        self.api = api
        self.prefixes = api.prefixes
        self.seen: list[tuple[Request, Response]] = []
        self._lock = threading.Lock()

    def handle(self, request: Request) -> Response:
        from infra.sandbox.server import ApiError

        try:
            response = self.api.handle(request)
        except ApiError as error:
            response = error.response()
            with self._lock:
                self.seen.append((request, response))
            raise
        with self._lock:
            self.seen.append((request, response))
        return response


def schema_for(request: Request) -> str:
    parts = request.path.split("/")[6:]  # after /v2/projects/p/locations/l/
    tail = parts[-1]
    if request.method in ("POST", "PATCH", "DELETE") and parts[0] == "services":
        return "GoogleLongrunningOperation"
    if parts[0] == "operations":
        return "GoogleProtobufEmpty" if request.method == "DELETE" else "GoogleLongrunningOperation"
    if parts == ["services"]:
        return "GoogleCloudRunV2ListServicesResponse"
    if len(parts) == 2:
        return "GoogleCloudRunV2Service"
    if tail == "revisions":
        return "GoogleCloudRunV2ListRevisionsResponse"
    return "GoogleCloudRunV2Revision"


PACKED = {"type.googleapis.com/google.cloud.run.v2.Service": "GoogleCloudRunV2Service",
          "type.googleapis.com/google.cloud.run.v2.Revision": "GoogleCloudRunV2Revision"}


def validate_exchange(request: Request, response: Response) -> str:
    body = json.loads(response.body) if isinstance(response.body, str) else response.body
    if response.status >= 400:
        validate_error(DOC, body, code=response.status)
        return "error"
    ints = "enum-encoding=int" in (request.param("$alt") or "")
    schema = schema_for(request)
    validate(DOC, schema, body, int_enums=ints)
    if schema == "GoogleLongrunningOperation":
        for key in ("metadata", "response"):
            if key in body:
                packed = dict(body[key])
                validate(DOC, PACKED[packed.pop("@type")], packed, int_enums=ints)
    return schema


@pytest.fixture
def hooks() -> dict[str, list[Any]]:
    return {"ready": [], "traffic": []}


@pytest.fixture
def api(hooks: dict[str, list[Any]]) -> CloudRunApi:
    cloudrun = CloudRunApi(
        operation_delay=0.05, ready_delay=0.1, ready_timeout=0.4,
        on_revision_ready=lambda service, revision: hooks["ready"].append((service, revision)),
        on_traffic_changed=lambda service, split: hooks["traffic"].append((service, split)),
    )
    yield cloudrun
    cloudrun.close()


@pytest.fixture
def recorder(api: CloudRunApi) -> Recorder:
    return Recorder(api)


@pytest.fixture
def server(recorder: Recorder) -> SandboxServer:
    with SandboxServer([recorder]) as sandbox:
        yield sandbox
    kinds = {validate_exchange(req, resp) for req, resp in recorder.seen}
    assert kinds  # every test talks to the stand-in


@pytest.fixture
def services(server: SandboxServer) -> run_v2.ServicesClient:
    return run_v2.ServicesClient(transport="rest", client_options=ClientOptions(api_endpoint=server.endpoint),
                                 credentials=AnonymousCredentials())


@pytest.fixture
def revisions(server: SandboxServer) -> run_v2.RevisionsClient:
    return run_v2.RevisionsClient(transport="rest", client_options=ClientOptions(api_endpoint=server.endpoint),
                                  credentials=AnonymousCredentials())


def seed(api: CloudRunApi, name: str = "web") -> run_v2.Service:
    return api.seed_service(PROJECT, REGION, name, "europe-docker.pkg.dev/brew/app/web:1",
                            env={"MODE": "web"}, min_instances=1, max_instances=4,
                            service_account="web@brew-stg.iam.gserviceaccount.com")


def http(server: SandboxServer, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(server.endpoint + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def ready(revision: run_v2.Revision) -> run_v2.Condition:
    return next(c for c in revision.conditions if c.type_ == "Ready")


def deploy(services: run_v2.ServicesClient, image: str, *, traffic=None, revision: str = "",
           name: str = "web") -> run_v2.Service:
    svc = services.get_service(name=f"{PARENT}/services/{name}")
    svc.template.containers[0].image = image
    svc.template.revision = revision
    if traffic is not None:
        svc.traffic = traffic
    return services.update_service(service=svc).result(timeout=5)


# ---- long-running operations -------------------------------------------------------------

def test_update_is_a_long_running_operation_done_later_with_the_service(api, services, server, recorder):
    seed(api)
    svc = services.get_service(name=f"{PARENT}/services/web")
    svc.template.containers[0].image = "europe-docker.pkg.dev/brew/app/web:2"
    operation = services.update_service(service=svc)
    assert operation.operation.done is False
    assert operation.metadata is None or isinstance(operation.metadata, run_v2.Service)
    result = operation.result(timeout=5)
    assert result.generation == 2 and result.observed_generation == 2 and not result.reconciling
    assert result.latest_created_revision == result.latest_ready_revision
    assert REVISION_NAME.match(short(result.latest_ready_revision))
    assert short(result.latest_ready_revision).startswith("web-00002-")
    assert result.terminal_condition.state == State.CONDITION_SUCCEEDED
    assert [(t.revision, t.percent, t.type_) for t in result.traffic_statuses] == [
        (short(result.latest_ready_revision), 100, LATEST)]
    # the operation's own JSON, polled without the client: done false first, then done with a response
    ops = [json.loads(r.body) for q, r in recorder.seen if "/operations/" in q.path]
    assert ops[-1]["done"] is True and ops[-1]["response"]["@type"].endswith("google.cloud.run.v2.Service")


def test_create_service_then_operation_wait(services, server, api):
    svc = run_v2.Service(template=run_v2.RevisionTemplate(
        containers=[run_v2.Container(image="europe-docker.pkg.dev/brew/app/web:1")],
        service_account="web@brew-stg.iam.gserviceaccount.com"))
    operation = services.create_service(parent=PARENT, service=svc, service_id="web")
    assert operation.operation.done is False
    status, body = http(server, "POST", f"/v2/{operation.operation.name}:wait", {"timeout": "5s"})
    assert status == 200 and body["done"] is True
    result = operation.result(timeout=5)
    assert result.generation == 1 and REVISION_NAME.match(short(result.latest_ready_revision))
    assert short(result.latest_ready_revision).startswith("web-00001-")
    assert result.uri.startswith("https://web-") and result.create_time and result.update_time and result.etag
    assert {c.type_: c.state for c in result.conditions} == {
        "RoutesReady": State.CONDITION_SUCCEEDED, "ConfigurationsReady": State.CONDITION_SUCCEEDED}
    with pytest.raises(exceptions.Conflict):
        services.create_service(parent=PARENT, service=svc, service_id="web")


def test_update_with_allow_missing_creates(services):
    svc = run_v2.Service(name=f"{PARENT}/services/web", template=run_v2.RevisionTemplate(
        containers=[run_v2.Container(image="img:1")]))
    result = services.update_service(request=run_v2.UpdateServiceRequest(service=svc, allow_missing=True)).result(5)
    assert result.generation == 1
    with pytest.raises(exceptions.NotFound):
        services.update_service(service=run_v2.Service(name=f"{PARENT}/services/other"))


# ---- revisions ----------------------------------------------------------------------------

def test_revision_names_generated_given_and_reused(api, services):
    seed(api)
    named = deploy(services, "img:2", revision="web-blue")
    assert short(named.latest_created_revision) == "web-blue"
    # the same name with the same configuration creates nothing
    again = services.get_service(name=f"{PARENT}/services/web")
    assert again.template.revision == "web-blue"
    same = services.update_service(service=again).result(timeout=5)
    assert short(same.latest_created_revision) == "web-blue"
    # a reused name with another configuration: the call itself fails with 409 ALREADY_EXISTS
    with pytest.raises(exceptions.Conflict) as error:
        deploy(services, "img:3", revision="web-blue")
    assert "with different configuration already exists" in error.value.message
    with pytest.raises(exceptions.BadRequest):
        deploy(services, "img:3", revision="other-prefix")
    generated = deploy(services, "img:4")
    assert REVISION_NAME.match(short(generated.latest_created_revision))


def test_revision_get_list_and_fields(api, services, revisions, server):
    seed(api)
    deploy(services, "img:2")
    listed = list(revisions.list_revisions(parent=f"{PARENT}/services/web"))
    assert len(listed) == 2 and listed[0].generation == 1
    newest = revisions.get_revision(name=listed[0].name)
    assert newest.service == f"{PARENT}/services/web"
    assert newest.containers[0].image == "img:2" and newest.containers[0].env[0].value == "web"
    _, raw = http(server, "GET", f"/v2/{newest.name}")
    assert raw["containerStatuses"][0]["imageDigest"].startswith("sha256:")  # not in the pinned client's message
    assert newest.service_account == "web@brew-stg.iam.gserviceaccount.com"
    assert (newest.scaling.min_instance_count, newest.scaling.max_instance_count) == (1, 4)
    assert ready(newest).state == State.CONDITION_SUCCEEDED and not newest.reconciling
    # the old revision lost its traffic: Ready, but RETIRED
    assert ready(listed[1]).state == State.CONDITION_SUCCEEDED
    assert ready(listed[1]).revision_reason == Reason.RETIRED
    page = revisions.list_revisions(request=run_v2.ListRevisionsRequest(parent=f"{PARENT}/services/web", page_size=1))
    assert len(list(page)) == 2  # the pager follows next_page_token


def test_revision_becomes_ready_after_the_delay_and_fires_hooks(api, services, revisions, hooks):
    seed(api)
    assert hooks["ready"] == [(f"{PARENT}/services/web", short(api.service(f"{PARENT}/services/web").latest_ready_revision))]
    assert hooks["traffic"][-1][1] == {short(api.service(f"{PARENT}/services/web").latest_ready_revision): 100}
    svc = services.get_service(name=f"{PARENT}/services/web")
    svc.template.containers[0].image = "img:2"
    api.ready_delay = 0.6  # a constructor setting, also adjustable at runtime
    operation = services.update_service(service=svc)
    now = services.get_service(name=f"{PARENT}/services/web")
    assert now.reconciling and now.generation == 2 and now.observed_generation == 1
    assert now.latest_created_revision != now.latest_ready_revision
    assert ready(revisions.get_revision(name=now.latest_created_revision)).state == State.CONDITION_RECONCILING
    result = operation.result(timeout=5)
    assert hooks["ready"][-1] == (result.name, short(result.latest_created_revision))
    assert hooks["traffic"][-1] == (result.name, {short(result.latest_created_revision): 100})


# ---- traffic ----------------------------------------------------------------------------

def test_traffic_must_sum_to_100(api, services):
    seed(api)
    svc = services.get_service(name=f"{PARENT}/services/web")
    svc.traffic = [run_v2.TrafficTarget(type_=LATEST, percent=60)]
    with pytest.raises(exceptions.BadRequest) as error:
        services.update_service(service=svc)
    assert error.value.code == 400


def test_no_traffic_deploy_keeps_traffic_then_split_and_tags(api, services, revisions, hooks):
    stable = short(seed(api).latest_ready_revision)
    pinned = [run_v2.TrafficTarget(type_=BY_REVISION, revision=stable, percent=100)]
    candidate_svc = deploy(services, "img:2", traffic=pinned)
    candidate = short(candidate_svc.latest_created_revision)
    assert candidate != stable and candidate_svc.latest_ready_revision.endswith(candidate)
    assert [(t.revision, t.percent) for t in candidate_svc.traffic_statuses] == [(stable, 100)]
    assert api.traffic(candidate_svc.name) == {stable: 100}
    cand = revisions.get_revision(name=candidate_svc.latest_created_revision)
    assert ready(cand).state == State.CONDITION_SUCCEEDED and ready(cand).revision_reason == 0  # never served
    # canary 10% with a tag, traffic only (no new revision)
    svc = services.get_service(name=candidate_svc.name)
    svc.traffic = [run_v2.TrafficTarget(type_=BY_REVISION, revision=stable, percent=90),
                   run_v2.TrafficTarget(type_=BY_REVISION, revision=candidate, percent=10, tag="canary")]
    split = services.update_service(service=svc).result(timeout=5)
    assert split.latest_created_revision == candidate_svc.latest_created_revision
    assert [(t.revision, t.percent, t.tag) for t in split.traffic_statuses] == [
        (stable, 90, ""), (candidate, 10, "canary")]
    assert split.traffic_statuses[1].uri.startswith("https://canary---web-")
    assert hooks["traffic"][-1][1] == {stable: 90, candidate: 10}
    # promote: LATEST -> the candidate; the stable one is now RETIRED
    promoted = deploy(services, "img:2", traffic=[run_v2.TrafficTarget(type_=LATEST, percent=100)])
    assert [(t.revision, t.percent, t.type_) for t in promoted.traffic_statuses] == [(candidate, 100, LATEST)]
    old = revisions.get_revision(name=f"{promoted.name}/revisions/{stable}")
    assert ready(old).state == State.CONDITION_SUCCEEDED and ready(old).revision_reason == Reason.RETIRED


def test_traffic_to_an_unknown_revision_fails_the_operation(api, services):
    seed(api)
    with pytest.raises(exceptions.InternalServerError) as error:
        deploy(services, "img:2", traffic=[run_v2.TrafficTarget(type_=BY_REVISION, revision="web-nope", percent=100)])
    assert "does not exist or is deleted" in error.value.message


def test_retire_no_traffic_quirk(api, services, revisions):
    stable = seed(api).latest_ready_revision
    api.retire_no_traffic.add("web")
    result = deploy(services, "img:2",
                    traffic=[run_v2.TrafficTarget(type_=BY_REVISION, revision=short(stable), percent=100)])
    assert result.latest_ready_revision == stable != result.latest_created_revision
    cand = revisions.get_revision(name=result.latest_created_revision)
    assert ready(cand).state == State.CONDITION_SUCCEEDED and ready(cand).revision_reason == Reason.RETIRED


# ---- faults -----------------------------------------------------------------------------

def test_never_ready_revision_fails_after_timeout_and_traffic_stays(api, services, revisions, hooks):
    stable = seed(api).latest_ready_revision
    api.set_never_ready("web")
    svc = services.get_service(name=f"{PARENT}/services/web")
    svc.template.containers[0].image = "img:broken"
    operation = services.update_service(service=svc)
    time.sleep(0.25)  # past ready_delay and operation_delay, before ready_timeout
    assert not operation.done()
    stuck = services.get_service(name=svc.name)
    assert stuck.reconciling and stuck.latest_ready_revision == stable
    assert ready(revisions.get_revision(name=stuck.latest_created_revision)).state == State.CONDITION_RECONCILING
    with pytest.raises(exceptions.FailedPrecondition) as error:
        operation.result(timeout=5)
    assert "is not ready and cannot serve traffic" in error.value.message
    failed = services.get_service(name=svc.name)
    assert failed.terminal_condition.state == State.CONDITION_FAILED and not failed.reconciling
    assert failed.latest_ready_revision == stable and api.traffic(svc.name) == {short(stable): 100}
    cond = ready(revisions.get_revision(name=failed.latest_created_revision))
    assert cond.state == State.CONDITION_FAILED and cond.revision_reason == Reason.HEALTH_CHECK_CONTAINER_ERROR
    assert all(r != short(failed.latest_created_revision) for _, r in hooks["ready"])
    api.set_never_ready("web", False)
    assert short(deploy(services, "img:fixed").latest_ready_revision).startswith("web-00003-")


# ---- etag, errors, enums ----------------------------------------------------------------

def test_stale_etag_is_aborted_409(api, services, server):
    seed(api)
    first = services.get_service(name=f"{PARENT}/services/web")
    deploy(services, "img:2")
    first.template.containers[0].image = "img:3"
    with pytest.raises(exceptions.Conflict) as error:
        services.update_service(service=first)
    assert error.value.code == 409
    status, body = http(server, "PATCH", f"/v2/{PARENT}/services/web", {"etag": first.etag})
    assert status == 409 and body["error"]["status"] == "ABORTED"
    fresh = services.get_service(name=f"{PARENT}/services/web")
    fresh.template.containers[0].image = "img:3"
    assert services.update_service(service=fresh).result(timeout=5).generation == 3


def test_errors_not_found_and_malformed(api, services, revisions, server):
    seed(api)
    with pytest.raises(exceptions.NotFound):
        services.get_service(name=f"{PARENT}/services/missing")
    with pytest.raises(exceptions.NotFound):
        revisions.get_revision(name=f"{PARENT}/services/web/revisions/web-00009-abc")
    with pytest.raises(exceptions.NotFound):
        revisions.list_revisions(parent=f"{PARENT}/services/missing")
    with pytest.raises(exceptions.BadRequest):
        services.get_service(name=f"{PARENT}/services/Bad_Name")
    with pytest.raises(exceptions.BadRequest):
        services.get_service(name=f"projects/{PROJECT}/locations/Nowhere/services/web")
    assert http(server, "GET", f"/v2/{PARENT}/operations/nope")[0] == 404
    assert http(server, "GET", f"/v2/{PARENT}/widgets")[0] == 404
    status, body = http(server, "POST", f"/v2/{PARENT}/services?serviceId=x2", {"bogusField": 1})
    assert status == 400 and body["error"]["status"] == "INVALID_ARGUMENT"


def test_enum_encoding_int_and_names(api, server, services, recorder):
    seed(api)
    services.get_service(name=f"{PARENT}/services/web")
    assert "enum-encoding=int" in recorder.seen[-1][0].param("$alt")  # what the REST transport asks
    _, as_ints = http(server, "GET", f"/v2/{PARENT}/services/web?%24alt=json%3Benum-encoding%3Dint")
    _, as_names = http(server, "GET", f"/v2/{PARENT}/services/web")
    assert as_ints["ingress"] == 1 and as_ints["terminalCondition"]["state"] == 4
    assert as_names["ingress"] == "INGRESS_TRAFFIC_ALL"
    assert as_names["terminalCondition"]["state"] == "CONDITION_SUCCEEDED"
    assert as_names["trafficStatuses"][0]["type"] == "TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST"
    # the client parses both
    for body in (as_ints, as_names):
        parsed = run_v2.Service.from_json(json.dumps(body))
        assert parsed.ingress == run_v2.IngressTraffic.INGRESS_TRAFFIC_ALL
    _, listed = http(server, "GET", f"/v2/{PARENT}/services/web/revisions?%24alt=json%3Benum-encoding%3Dint")
    assert listed["revisions"][0]["conditions"][0]["state"] == 4


def test_list_services_pages_and_delete(api, services, revisions):
    for name in ("api", "web", "worker"):
        seed(api, name)
    api.seed_service("other-project", REGION, "web", "img:1")
    listed = services.list_services(request=run_v2.ListServicesRequest(parent=PARENT, page_size=2))
    assert [short(s.name) for s in listed] == ["api", "web", "worker"]
    serving = services.get_service(name=f"{PARENT}/services/web").latest_ready_revision
    with pytest.raises(exceptions.BadRequest):
        revisions.delete_revision(name=serving)
    deleted = services.delete_service(name=f"{PARENT}/services/web").result(timeout=5)
    assert deleted.delete_time
    with pytest.raises(exceptions.NotFound):
        services.get_service(name=f"{PARENT}/services/web")


# ---- the validator itself ----------------------------------------------------------------

def test_validator_rejects_unknown_fields_wrong_types_and_enums():
    good = {"name": "x", "generation": "3", "ingress": "INGRESS_TRAFFIC_ALL",
            "createTime": "2025-01-02T03:04:05.123456Z", "template": {"timeout": "300s"}}
    validate(DOC, "GoogleCloudRunV2Service", good)
    bad = [
        ({**good, "bogus": 1}, "$.bogus"),
        ({**good, "generation": 3}, "$.generation"),
        ({**good, "generation": "three"}, "$.generation"),
        ({**good, "ingress": "EVERYONE"}, "$.ingress"),
        ({**good, "ingress": 1}, "$.ingress"),  # a number only when the request asked for int enums
        ({**good, "createTime": "yesterday"}, "$.createTime"),
        ({**good, "template": {"containers": [{"image": 5}]}}, "$.template.containers[0].image"),
        ({**good, "template": {"timeout": "5 minutes"}}, "$.template.timeout"),
    ]
    for data, path in bad:
        with pytest.raises(AssertionError, match=re.escape(path)):
            validate(DOC, "GoogleCloudRunV2Service", data)
    validate(DOC, "GoogleCloudRunV2Service", {**good, "ingress": 1}, int_enums=True)
    validate_error(DOC, {"error": {"code": 404, "message": "gone", "status": "NOT_FOUND"}}, code=404)
    with pytest.raises(AssertionError):
        validate_error(DOC, {"error": {"code": 404, "message": "gone", "status": "MISSING"}})


def test_every_kind_of_response_is_validated(api, services, revisions, server, recorder):
    """One pass through every route, then check that each schema was seen (the fixture validates them)."""
    seed(api)
    services.get_service(name=f"{PARENT}/services/web")
    list(services.list_services(parent=PARENT))
    rev = list(revisions.list_revisions(parent=f"{PARENT}/services/web"))[0]
    revisions.get_revision(name=rev.name)
    deploy(services, "img:2")
    revisions.delete_revision(name=rev.name).result(timeout=5)
    with pytest.raises(exceptions.NotFound):
        services.get_service(name=f"{PARENT}/services/none")
    kinds = {validate_exchange(q, r) for q, r in recorder.seen}
    assert kinds == {"GoogleCloudRunV2Service", "GoogleCloudRunV2ListServicesResponse",
                     "GoogleCloudRunV2ListRevisionsResponse", "GoogleCloudRunV2Revision",
                     "GoogleLongrunningOperation", "error"}
    int_answers = [q.path for q, r in recorder.seen if "enum-encoding=int" in (q.param("$alt") or "")]
    assert any("/operations/" not in p for p in int_answers)
