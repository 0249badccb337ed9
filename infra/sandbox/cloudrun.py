"""A stand-in of the Cloud Run Admin API v2 (services, revisions, operations), in memory.

URL templates and verbs come from the discovery document `run.v2.json`; responses are built
from the client library's own message types (`run_v2.Service`, `run_v2.Revision`,
`google.longrunning.Operation`) and serialized with its JSON mapping, so the real
`run_v2.ServicesClient` / `RevisionsClient` (REST transport) parse them as they parse Google's.
Enums are numbers when the request asks `$alt=json;enum-encoding=int` (the REST transport
does), names otherwise.

Behaviour reproduced (see tests/sandbox/test_cloudrun_standin.py):
- create / update / delete answer a long-running operation, `done: false` first; it ends
  with `response` (the Service, also sent as `metadata`) or `error` (a google.rpc.Status).
- An update whose template differs from the current one creates a revision named
  `<service>-<5-digit generation>-<3 letters>` unless `template.revision` names it. A named
  revision that exists with a different template is refused at once with 409
  ALREADY_EXISTS "Revision named '...' with different configuration already exists." (the
  call itself fails, as googleapis/google-cloud-python#14259 shows for update_service); the
  same name with the same template is accepted and creates nothing.
- A stale `service.etag` is refused at once with 409 ABORTED (AIP-154: etag mismatch is
  ABORTED, which Google's front end sends as HTTP 409; the client raises `Conflict`).
- Traffic entries must sum to 100 (400 INVALID_ARGUMENT); empty traffic means 100% LATEST.
  LATEST resolves to the latest ready revision; entries pinning revisions keep traffic where
  they say (a no-traffic deploy). A pinned revision that does not exist fails the operation
  with code 13, "Revision '...' does not exist or is deleted..." as the real API does.
- A new revision becomes Ready after `ready_delay`; a service in `never_ready` keeps its new
  revisions reconciling, and after `ready_timeout` (None: never) they fail with
  HEALTH_CHECK_CONTAINER_ERROR and the operation fails with code 9 FAILED_PRECONDITION
  "Revision '...' is not ready and cannot serve traffic...". Traffic stays where it was.
- A revision that served and lost all its traffic reports Ready (CONDITION_SUCCEEDED) with
  `revisionReason: RETIRED`. A service in `retire_no_traffic` reproduces the quirk that a
  no-traffic candidate reports RETIRED as soon as it is ready and `latestReadyRevision`
  does not move to it.

Resource names: `latestReadyRevision`, `latestCreatedRevision` and `Revision.service` are
full resource names; traffic entries (`traffic[].revision`, `trafficStatuses[].revision`)
use the short revision name. The hooks get the service's full name and short revision names.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import itertools
import json
import logging
import random
import re
import string
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from google.api import launch_stage_pb2
from google.cloud import run_v2
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, duration_pb2, json_format
from google.rpc import status_pb2

from infra.sandbox.server import ApiError, Request, Response

log = logging.getLogger(__name__)

RevisionReadyHook = Callable[[str, str], None]  # (service full name, revision short name)
TrafficHook = Callable[[str, dict[str, int]], None]  # (service full name, {revision short name: percent})

Cond = run_v2.Condition
State = run_v2.Condition.State
LATEST = run_v2.TrafficTargetAllocationType.TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST
BY_REVISION = run_v2.TrafficTargetAllocationType.TRAFFIC_TARGET_ALLOCATION_TYPE_REVISION

_ID = r"[a-z]([-a-z0-9]{0,47}[a-z0-9])?"
_SERVICE_ID = re.compile(rf"^{_ID}$")
_REVISION_ID = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_PROJECT = re.compile(r"^[a-z0-9][-a-z0-9.:]{0,62}$")
_LOCATION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
_PREFIX = "/v2/"

# Fields a caller sets on a Service; everything else is output only and kept from our state.
_SERVICE_INPUT_FIELDS = (
    "description", "labels", "annotations", "client", "client_version", "ingress", "launch_stage",
    "binary_authorization", "template", "traffic", "scaling", "invoker_iam_disabled",
    "default_uri_disabled", "iap_enabled", "custom_audiences", "multi_region_settings", "build_config",
)
_CAMEL = {f: re.sub(r"_([a-z])", lambda m: m.group(1).upper(), f) for f in _SERVICE_INPUT_FIELDS}

_NOT_READY_MESSAGE = (
    "Revision '{rev}' is not ready and cannot serve traffic. The user-provided container failed to start "
    "and listen on the port defined provided by the PORT=8080 environment variable within the allocated "
    "timeout. This can happen when the container port is misconfigured or if the timeout is too short."
)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _copy(message: Any) -> Any:
    cls = type(message)
    return cls.deserialize(cls.serialize(message))


def _assign(dst: Any, src: Any, name: str) -> None:
    """dst.name = src.name, keeping an unset message field unset (no `{}` on output)."""
    if type(dst).pb(dst).DESCRIPTOR.fields_by_name[name].message_type is not None \
            and type(dst).pb(dst).DESCRIPTOR.fields_by_name[name].label != 3 and name not in src:
        type(dst).pb(dst).ClearField(name)
    else:
        setattr(dst, name, getattr(src, name))


def _template_key(template: run_v2.RevisionTemplate) -> bytes:
    pb = run_v2.RevisionTemplate.pb(template)
    return pb.SerializeToString(deterministic=True)


def _condition(type_: str, state: State, *, message: str = "", reason: Any = None,
               revision_reason: Any = None) -> run_v2.Condition:
    cond = run_v2.Condition(type_=type_, state=state, last_transition_time=_now(), message=message)
    if reason is not None:
        cond.reason = reason
    if revision_reason is not None:
        cond.revision_reason = revision_reason
    return cond


@dataclass
class _Revision:
    message: run_v2.Revision
    key: bytes  # the template it was made from, to tell a reused name with another configuration
    # `containerStatuses` (resolved image digests) is in the run.v2 discovery document but not in the
    # run_v2 message of the pinned client: added to GET/LIST revision JSON by hand (clients ignore it)
    container_statuses: list[dict[str, str]] = field(default_factory=list)
    ready: bool = False
    failed: bool = False
    served: bool = False  # has had traffic at some point


@dataclass
class _Service:
    message: run_v2.Service
    project: str
    location: str
    short: str
    revisions: dict[str, _Revision] = field(default_factory=dict)  # short name -> revision, creation order
    percents: dict[str, int] = field(default_factory=dict)  # resolved traffic now


@dataclass
class _Operation:
    name: str
    service: str  # full service name
    generation: int
    metadata: Any  # the Service (or Revision) message at request time
    response_type: str = "service"  # "service" | "revision"
    revision: str | None = None  # short name of the revision the operation waits for
    delay_passed: bool = False
    done: bool = False
    response: Any = None
    error: tuple[int, str] | None = None


class CloudRunApi:
    """Cloud Run Admin API v2 stand-in for `SandboxServer`.

    operation_delay: seconds before an operation may finish (default 0.1).
    ready_delay: seconds before a new revision becomes Ready (default 0.2).
    ready_timeout: seconds after which a never-ready revision fails (None: it reconciles forever).
    on_revision_ready(service_full_name, revision_short_name): called when a revision becomes Ready.
    on_traffic_changed(service_full_name, {revision_short_name: percent}): called when the
        resolved traffic split changes. Both hooks run outside the lock, on the stand-in's timer
        thread (or the caller's thread for `seed_service`).
    never_ready: service short names whose NEW revisions never become Ready (settable at runtime:
        the attribute, or `set_never_ready`).
    retire_no_traffic: service short names whose no-traffic new revisions report Ready with
        revisionReason RETIRED at once, latestReadyRevision staying where it was.
    """

    prefixes = ("/v2/projects/",)

    def __init__(
        self,
        *,
        operation_delay: float = 0.1,
        ready_delay: float = 0.2,
        ready_timeout: float | None = 2.0,
        on_revision_ready: RevisionReadyHook | None = None,
        on_traffic_changed: TrafficHook | None = None,
        never_ready: set[str] | None = None,
        retire_no_traffic: set[str] | None = None,
        project_number: str = "123456789012",
    ):
        self.operation_delay = operation_delay
        self.ready_delay = ready_delay
        self.ready_timeout = ready_timeout
        self.on_revision_ready = on_revision_ready
        self.on_traffic_changed = on_traffic_changed
        self.never_ready: set[str] = set(never_ready or ())
        self.retire_no_traffic: set[str] = set(retire_no_traffic or ())
        self.project_number = project_number
        self._lock = threading.RLock()
        self._services: dict[str, _Service] = {}
        self._operations: dict[str, _Operation] = {}
        self._random = random.Random()
        # timer: (due, seq, event); an event runs under the lock and returns hooks to call after
        self._timer: list[tuple[float, int, Callable[[], list[Callable[[], None]]]]] = []
        self._seq = itertools.count()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._thread = threading.Thread(target=self._run_timer, name="cloudrun-standin", daemon=True)
        self._thread.start()

    # ---- public helpers for supervisors and tests -------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        self._thread.join(timeout=2)

    def set_never_ready(self, service: str, never: bool = True) -> None:
        with self._lock:
            (self.never_ready.add if never else self.never_ready.discard)(service)

    def seed_service(
        self,
        project: str,
        region: str,
        name: str,
        image: str,
        *,
        env: dict[str, str] | None = None,
        min_instances: int = 0,
        max_instances: int = 100,
        service_account: str = "",
        ingress: str | run_v2.IngressTraffic = "INGRESS_TRAFFIC_ALL",
    ) -> run_v2.Service:
        """Create a service with one Ready revision serving 100%, at once, firing the hooks."""
        template = run_v2.RevisionTemplate(
            containers=[run_v2.Container(
                image=image, env=[run_v2.EnvVar(name=k, value=v) for k, v in (env or {}).items()])],
            scaling=run_v2.RevisionScaling(min_instance_count=min_instances, max_instance_count=max_instances),
            service_account=service_account,
        )
        spec = run_v2.Service(
            template=template,
            ingress=run_v2.IngressTraffic[ingress] if isinstance(ingress, str) else ingress,
            traffic=[run_v2.TrafficTarget(type_=LATEST, percent=100)],
        )
        full = f"projects/{project}/locations/{region}/services/{name}"
        hooks: list[Callable[[], None]] = []
        with self._lock:
            if full in self._services:
                raise ValueError(f"{full} already exists")
            svc = self._new_service(project, region, name, spec)
            rev = self._create_revision(svc)
            hooks += self._mark_ready(svc, rev)
            hooks += self._reconcile(svc)
            result = _copy(svc.message)
        self._call(hooks)
        return result

    def service(self, name: str) -> run_v2.Service:
        """A copy of the stored service (full resource name)."""
        with self._lock:
            return _copy(self._get(name).message)

    def traffic(self, name: str) -> dict[str, int]:
        """The resolved traffic split {revision short name: percent} of a service."""
        with self._lock:
            return dict(self._get(name).percents)

    # ---- HTTP ---------------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        ints = "enum-encoding=int" in (request.param("$alt") or "")
        path = request.path[len(_PREFIX):]
        custom = None
        if ":" in path.rsplit("/", 1)[-1]:
            path, custom = path.rsplit(":", 1)
        parts = path.split("/")
        if len(parts) < 5 or parts[0] != "projects" or parts[2] != "locations":
            raise ApiError(404, f"The requested URL {request.path} was not found on this server.")
        project, location = parts[1], parts[3]
        if not _PROJECT.match(project) or not _LOCATION.match(location):
            raise ApiError(400, f"Invalid resource name: projects/{project}/locations/{location}")
        parent = f"projects/{project}/locations/{location}"
        rest, method = parts[4:], request.method
        route = (tuple(p if i % 2 == 0 else "*" for i, p in enumerate(rest)), method, custom)
        if route == (("services",), "GET", None):
            return self._json(self._list_services(parent, request), "ListServicesResponse", ints)
        if route == (("services",), "POST", None):
            return self._op_json(self._create_service(parent, request), ints)
        if rest[0] == "services" and len(rest) >= 2:
            self._check_id(rest[1], _SERVICE_ID, "service")
        if route == (("services", "*"), "GET", None):
            with self._lock:
                return self._json(self._get(f"{parent}/services/{rest[1]}").message, "Service", ints)
        if route == (("services", "*"), "PATCH", None):
            return self._op_json(self._update_service(f"{parent}/services/{rest[1]}", request), ints)
        if route == (("services", "*"), "DELETE", None):
            return self._op_json(self._delete_service(f"{parent}/services/{rest[1]}", request), ints)
        if route == (("services", "*", "revisions"), "GET", None):
            listing = self._list_revisions(f"{parent}/services/{rest[1]}", request)
            body = json.loads(self._json(listing, "ListRevisionsResponse", ints).body)
            for item in body.get("revisions", []):
                self._add_container_statuses(item)
            return Response(200, body)
        if rest[0] == "services" and len(rest) == 4:
            self._check_id(rest[3], _REVISION_ID, "revision")
        if route == (("services", "*", "revisions", "*"), "GET", None):
            with self._lock:
                rev = self._get_revision(f"{parent}/services/{rest[1]}", rest[3])
                body = json.loads(self._json(rev.message, "Revision", ints).body)
            return Response(200, self._add_container_statuses(body))
        if route == (("services", "*", "revisions", "*"), "DELETE", None):
            return self._op_json(self._delete_revision(f"{parent}/services/{rest[1]}", rest[3]), ints)
        if route == (("operations", "*"), "GET", None):
            return self._op_json(self._get_operation(f"{parent}/operations/{rest[1]}"), ints)
        if route == (("operations", "*"), "POST", "wait"):
            return self._op_json(self._wait_operation(f"{parent}/operations/{rest[1]}", request), ints)
        if route == (("operations", "*"), "DELETE", None):
            with self._lock:
                self._get_operation(f"{parent}/operations/{rest[1]}")
                del self._operations[f"{parent}/operations/{rest[1]}"]
            return Response(200, {})
        raise ApiError(404, f"The requested URL {request.path} was not found on this server.")

    # ---- serialization ------------------------------------------------------------------

    def _add_container_statuses(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            parts = body["name"].split("/")
            svc = self._services.get("/".join(parts[:6]))
            rev = svc.revisions.get(parts[7]) if svc else None
            if rev is not None and rev.container_statuses:
                body["containerStatuses"] = [dict(s) for s in rev.container_statuses]
        return body

    @staticmethod
    def _json(message: Any, kind: str, ints: bool) -> Response:
        cls = {"Service": run_v2.Service, "Revision": run_v2.Revision,
               "ListServicesResponse": run_v2.ListServicesResponse,
               "ListRevisionsResponse": run_v2.ListRevisionsResponse}[kind]
        return Response(200, cls.to_json(message, use_integers_for_enums=ints,
                                         always_print_fields_with_no_presence=False, indent=None))

    def _op_json(self, op: _Operation, ints: bool) -> Response:
        with self._lock:
            return Response(200, json_format.MessageToJson(self._op_message(op), use_integers_for_enums=ints,
                                                           indent=None))

    @staticmethod
    def _pack(message: Any) -> any_pb2.Any:
        packed = any_pb2.Any()
        packed.Pack(type(message).pb(message))
        return packed

    def _op_message(self, op: _Operation) -> operations_pb2.Operation:
        msg = operations_pb2.Operation(name=op.name, done=op.done)
        msg.metadata.CopyFrom(self._pack(op.metadata))
        if op.done and op.error is not None:
            msg.error.CopyFrom(status_pb2.Status(code=op.error[0], message=op.error[1]))
        elif op.done:
            msg.response.CopyFrom(self._pack(op.response))
        return msg

    # ---- lookups and validation ----------------------------------------------------------

    @staticmethod
    def _check_id(value: str, pattern: re.Pattern[str], what: str) -> None:
        if not pattern.match(value):
            raise ApiError(400, f"Invalid {what} name '{value}': must use only lowercase alphanumeric "
                                f"characters and dashes, begin with a letter, and not end with a dash.")

    def _get(self, name: str) -> _Service:
        svc = self._services.get(name)
        if svc is None:
            raise ApiError(404, f"Resource '{name.rsplit('/', 1)[-1]}' of kind 'SERVICE' in region "
                                f"'{name.split('/')[3]}' in project '{name.split('/')[1]}' does not exist.")
        return svc

    def _get_revision(self, service: str, revision: str) -> _Revision:
        svc = self._services.get(service)
        rev = svc.revisions.get(revision) if svc else None
        if rev is None:
            raise ApiError(404, f"Resource '{revision}' of kind 'REVISION' in region '{service.split('/')[3]}' "
                                f"in project '{service.split('/')[1]}' does not exist.")
        return rev

    def _get_operation(self, name: str) -> _Operation:
        with self._lock:
            op = self._operations.get(name)
        if op is None:
            raise ApiError(404, f"Operation '{name}' not found.")
        return op

    @staticmethod
    def _parse_service(request: Request) -> run_v2.Service:
        pb = run_v2.Service.pb(run_v2.Service())
        try:
            json_format.Parse(request.body or b"{}", pb, ignore_unknown_fields=False)
        except json_format.ParseError as error:
            raise ApiError(400, f"Invalid JSON payload received. {error}") from None
        return run_v2.Service.wrap(pb)

    @staticmethod
    def _page(items: list[Any], request: Request) -> tuple[list[Any], str]:
        try:
            size = int(request.param("pageSize") or 0) or 100
            start = int(request.param("pageToken") or 0)
        except ValueError:
            raise ApiError(400, "Invalid page token or page size.") from None
        return items[start:start + size], (str(start + size) if start + size < len(items) else "")

    @staticmethod
    def _validate_traffic(spec: run_v2.Service) -> None:
        if not spec.traffic:
            spec.traffic = [run_v2.TrafficTarget(type_=LATEST, percent=100)]
        total = 0
        for target in spec.traffic:
            if target.type_ == LATEST and target.revision:
                raise ApiError(400, "Traffic target with type LATEST must not name a revision.")
            if target.type_ == BY_REVISION and not target.revision:
                raise ApiError(400, "Traffic target with type REVISION must name a revision.")
            if target.type_ not in (LATEST, BY_REVISION):
                raise ApiError(400, "Traffic target type must be LATEST or REVISION.")
            if not 0 <= target.percent <= 100:
                raise ApiError(400, f"Traffic percent {target.percent} must be between 0 and 100.")
            total += target.percent
        if total != 100:
            raise ApiError(400, f"Traffic percentages must add up to 100, got {total}.")

    # ---- services -----------------------------------------------------------------------

    def _list_services(self, parent: str, request: Request) -> run_v2.ListServicesResponse:
        with self._lock:
            found = [_copy(s.message) for n, s in sorted(self._services.items()) if n.startswith(parent + "/")]
        page, token = self._page(found, request)
        return run_v2.ListServicesResponse(services=page, next_page_token=token)

    def _list_revisions(self, service: str, request: Request) -> run_v2.ListRevisionsResponse:
        with self._lock:
            svc = self._get(service)
            found = [_copy(r.message) for r in reversed(list(svc.revisions.values()))]  # newest first
        page, token = self._page(found, request)
        return run_v2.ListRevisionsResponse(revisions=page, next_page_token=token)

    def _create_service(self, parent: str, request: Request) -> _Operation:
        service_id = request.param("serviceId") or ""
        self._check_id(service_id, _SERVICE_ID, "service")
        spec = self._parse_service(request)
        if request.param("validateOnly") == "true":
            raise ApiError(501, "validateOnly is not supported by the sandbox.")
        self._validate_traffic(spec)
        project, location = parent.split("/")[1], parent.split("/")[3]
        with self._lock:
            full = f"{parent}/services/{service_id}"
            if full in self._services:
                raise ApiError(409, f"Resource '{service_id}' already exists.")
            self._check_revision_name(None, service_id, spec.template)
            svc = self._new_service(project, location, service_id, spec)
            return self._start_rollout(svc, template_changed=True)

    def _update_service(self, name: str, request: Request) -> _Operation:
        spec = self._parse_service(request)
        if spec.name and spec.name != name:
            raise ApiError(400, f"service.name '{spec.name}' does not match the URL.")
        if request.param("validateOnly") == "true":
            raise ApiError(501, "validateOnly is not supported by the sandbox.")
        mask = [p for p in (request.param("updateMask") or "").split(",") if p]
        with self._lock:
            if name not in self._services:
                if request.param("allowMissing") == "true":
                    parts = name.split("/")
                    self._validate_traffic(spec)
                    self._check_revision_name(None, parts[5], spec.template)
                    svc = self._new_service(parts[1], parts[3], parts[5], spec)
                    return self._start_rollout(svc, template_changed=True)
                self._get(name)  # 404
            svc = self._services[name]
            current = svc.message
            if spec.etag and spec.etag != current.etag:
                raise ApiError(409, f"Etag mismatch: the service '{svc.short}' was modified since "
                                    f"etag {spec.etag} was read; read it again and retry.", "ABORTED")
            merged = _copy(current)
            for field_name in _SERVICE_INPUT_FIELDS:
                top = {field_name, _CAMEL[field_name]}
                if mask and not any(p.split(".")[0] in top for p in mask):
                    continue
                _assign(merged, spec, field_name)
            self._validate_traffic(merged)
            changed = _template_key(merged.template) != _template_key(current.template)
            create = changed and self._check_revision_name(svc, svc.short, merged.template)
            for field_name in _SERVICE_INPUT_FIELDS:
                _assign(current, merged, field_name)
            current.generation += 1
            return self._start_rollout(svc, template_changed=create)

    def _check_revision_name(self, svc: _Service | None, short: str, template: run_v2.RevisionTemplate) -> bool:
        """Whether the template needs a new revision; 409 if its name is taken by another configuration."""
        name = template.revision
        if not name:
            return True
        self._check_id(name, _REVISION_ID, "revision")
        if not name.startswith(short + "-"):
            raise ApiError(400, f"Revision name '{name}' must be prefixed by the name of the enclosing "
                                f"Service or Configuration with a trailing -")
        existing = svc.revisions.get(name) if svc else None
        if existing is None:
            return True
        if existing.key != _template_key(template):
            raise ApiError(409, f"Revision named '{name}' with different configuration already exists.")
        return False

    def _delete_service(self, name: str, request: Request) -> _Operation:
        with self._lock:
            svc = self._get(name)
            etag = request.param("etag")
            if etag and etag != svc.message.etag:
                raise ApiError(409, f"Etag mismatch for service '{svc.short}'.", "ABORTED")
            del self._services[name]
            svc.message.delete_time = _now()
            svc.message.reconciling = True
            op = self._new_operation(svc, svc.message)
            op.response = _copy(svc.message)
            self._after(self.operation_delay, lambda: self._finish_plain(op))
            return op

    def _delete_revision(self, service: str, revision: str) -> _Operation:
        with self._lock:
            svc = self._get(service)
            rev = self._get_revision(service, revision)
            if svc.percents.get(revision) or any(t.revision == revision for t in svc.message.traffic):
                raise ApiError(400, f"Revision '{revision}' is receiving traffic and cannot be deleted.",
                               "FAILED_PRECONDITION")
            if svc.message.latest_created_revision == rev.message.name:
                raise ApiError(400, f"Revision '{revision}' is the latest revision of its service and cannot be "
                                    f"deleted.", "FAILED_PRECONDITION")
            del svc.revisions[revision]
            rev.message.delete_time = _now()
            op = self._new_operation(svc, rev.message, response_type="revision")
            op.response = _copy(rev.message)
            self._after(self.operation_delay, lambda: self._finish_plain(op))
            return op

    # ---- rollout machinery (all under the lock) ------------------------------------------

    def _new_service(self, project: str, location: str, short: str, spec: run_v2.Service) -> _Service:
        msg = run_v2.Service()
        for field_name in _SERVICE_INPUT_FIELDS:
            _assign(msg, spec, field_name)
        msg.name = f"projects/{project}/locations/{location}/services/{short}"
        msg.uid = str(uuid.uuid4())
        msg.generation = 1
        msg.create_time = _now()
        msg.creator = msg.last_modifier = "sandbox@example.com"
        if not msg.launch_stage:
            msg.launch_stage = launch_stage_pb2.LaunchStage.GA
        msg.uri = f"https://{short}-{self.project_number}.{location}.run.app"
        msg.urls = [msg.uri]
        svc = _Service(msg, project, location, short)
        self._services[msg.name] = svc
        return svc

    def _stamp(self, svc: _Service) -> None:
        msg = svc.message
        msg.update_time = _now()
        digest = hashlib.sha256(f"{msg.uid}/{msg.generation}/{time.time_ns()}".encode()).digest()
        msg.etag = '"' + base64.urlsafe_b64encode(digest[:18]).decode() + '"'

    def _start_rollout(self, svc: _Service, *, template_changed: bool) -> _Operation:
        msg = svc.message
        msg.last_modifier = "sandbox@example.com"
        msg.reconciling = True
        msg.terminal_condition = _condition("Ready", State.CONDITION_RECONCILING,
                                            reason=Cond.CommonReason.WAITING_FOR_OPERATION)
        self._stamp(svc)
        rev = None
        if template_changed:
            rev = self._create_revision(svc)
            msg.conditions = [_condition("RoutesReady", State.CONDITION_RECONCILING),
                              _condition("ConfigurationsReady", State.CONDITION_RECONCILING)]
            if rev.failed is False and svc.short not in self.never_ready:
                self._after(self.ready_delay, lambda: self._revision_ready_event(svc, rev))
            elif self.ready_timeout is not None:
                self._after(self.ready_timeout, lambda: self._revision_failed_event(svc, rev))
        else:
            msg.conditions = [_condition("RoutesReady", State.CONDITION_RECONCILING),
                              _condition("ConfigurationsReady", State.CONDITION_SUCCEEDED)]
        op = self._new_operation(svc, msg)
        op.revision = rev.message.name.rsplit("/", 1)[-1] if rev else None
        self._after(self.operation_delay, lambda: self._op_delay_event(op))
        return op

    def _create_revision(self, svc: _Service) -> _Revision:
        msg, template = svc.message, svc.message.template
        short = template.revision
        if not short:
            while True:
                letters = "".join(self._random.choice(string.ascii_lowercase) for _ in range(3))
                short = f"{svc.short}-{msg.generation:05d}-{letters}"
                if short not in svc.revisions:
                    break
        now = _now()
        containers = [_copy(c) for c in template.containers]
        statuses = []
        for i, container in enumerate(containers):
            if not container.name and len(containers) > 1:
                container.name = f"container-{i}"
            digest = container.image.split("@", 1)[1] if "@" in container.image else \
                "sha256:" + hashlib.sha256(container.image.encode()).hexdigest()
            statuses.append({"name": container.name, "imageDigest": digest} if container.name
                            else {"imageDigest": digest})
        scaling = _copy(template.scaling) if "scaling" in template else run_v2.RevisionScaling(max_instance_count=100)
        rev = run_v2.Revision(
            name=f"{msg.name}/revisions/{short}",
            uid=str(uuid.uuid4()),
            generation=1,
            labels=dict(template.labels),
            annotations=dict(template.annotations),
            create_time=now,
            update_time=now,
            launch_stage=msg.launch_stage,
            service=msg.name,
            scaling=scaling,
            max_instance_request_concurrency=template.max_instance_request_concurrency or 80,
            timeout=template.timeout if "timeout" in template else duration_pb2.Duration(seconds=300),
            service_account=template.service_account
            or f"{self.project_number}-compute@developer.gserviceaccount.com",
            containers=containers,
            volumes=[_copy(v) for v in template.volumes],
            execution_environment=template.execution_environment,
            session_affinity=template.session_affinity,
            reconciling=True,
            observed_generation=1,
            log_uri=f"https://console.cloud.google.com/logs/viewer?project={svc.project}"
                    f"&resource=cloud_run_revision/service_name/{svc.short}/revision_name/{short}",
            scaling_status=run_v2.RevisionScalingStatus(desired_min_instance_count=scaling.min_instance_count),
            creator="sandbox@example.com",
            etag='"' + hashlib.sha256(short.encode()).hexdigest()[:24] + '"',
        )
        if "vpc_access" in template:
            rev.vpc_access = template.vpc_access
        rev.conditions = [
            _condition("Ready", State.CONDITION_RECONCILING),
            _condition("ContainerHealthy", State.CONDITION_RECONCILING),
            _condition("ResourcesAvailable", State.CONDITION_RECONCILING),
        ]
        record = _Revision(rev, _template_key(template), container_statuses=statuses)
        svc.revisions[short] = record
        msg.latest_created_revision = rev.name
        return record

    def _mark_ready(self, svc: _Service, rev: _Revision) -> list[Callable[[], None]]:
        rev.ready = True
        rev.message.reconciling = False
        rev.message.update_time = _now()
        rev.message.conditions = [
            _condition("Ready", State.CONDITION_SUCCEEDED),
            _condition("ContainerHealthy", State.CONDITION_SUCCEEDED),
            _condition("ResourcesAvailable", State.CONDITION_SUCCEEDED),
        ]
        short = rev.message.name.rsplit("/", 1)[-1]
        service_name, hook = svc.message.name, self.on_revision_ready
        return [lambda: hook(service_name, short)] if hook else []

    def _revision_ready_event(self, svc: _Service, rev: _Revision) -> list[Callable[[], None]]:
        if self._services.get(svc.message.name) is not svc:
            return []
        hooks = self._mark_ready(svc, rev)
        return hooks + self._try_finish(svc)

    def _revision_failed_event(self, svc: _Service, rev: _Revision) -> list[Callable[[], None]]:
        if self._services.get(svc.message.name) is not svc or rev.ready:
            return []
        rev.failed = True
        rev.message.reconciling = False
        short = rev.message.name.rsplit("/", 1)[-1]
        message = _NOT_READY_MESSAGE.format(rev=short)
        rev.message.conditions = [
            _condition("Ready", State.CONDITION_FAILED, message=message,
                       revision_reason=Cond.RevisionReason.HEALTH_CHECK_CONTAINER_ERROR),
            _condition("ContainerHealthy", State.CONDITION_FAILED, message=message),
            _condition("ResourcesAvailable", State.CONDITION_SUCCEEDED),
        ]
        return self._try_finish(svc)

    def _op_delay_event(self, op: _Operation) -> list[Callable[[], None]]:
        op.delay_passed = True
        svc = self._services.get(op.service)
        if svc is None:
            return self._fail_op(op, 5, f"Service '{op.service}' was deleted.")
        return self._try_finish(svc)

    def _finish_plain(self, op: _Operation) -> list[Callable[[], None]]:
        op.done = True
        return []

    def _fail_op(self, op: _Operation, code: int, message: str) -> list[Callable[[], None]]:
        op.done, op.error = True, (code, message)
        return []

    def _try_finish(self, svc: _Service) -> list[Callable[[], None]]:
        """Settle every operation of `svc` whose delay has passed and whose revision is settled."""
        hooks: list[Callable[[], None]] = []
        pending = [op for op in self._operations.values()
                   if op.service == svc.message.name and not op.done and op.delay_passed and op.response_type == "service"]
        for op in sorted(pending, key=lambda o: o.generation):
            if op.generation != svc.message.generation:  # superseded by a later update
                op.done, op.response = True, _copy(svc.message)
                continue
            rev = svc.revisions.get(op.revision) if op.revision else None
            if rev is not None and not rev.ready and not rev.failed:
                continue  # still waiting for the revision
            if rev is not None and rev.failed:
                text = rev.message.conditions[0].message
                self._settle_status(svc, State.CONDITION_FAILED, text, Cond.CommonReason.REVISION_FAILED,
                                    configurations=State.CONDITION_FAILED)
                op.done, op.error = True, (9, text)
                continue
            missing = [t.revision for t in svc.message.traffic
                       if t.type_ == BY_REVISION and t.revision not in svc.revisions]
            if missing:
                text = (f"Revision '{missing[0]}' does not exist or is deleted. Update all traffic to route "
                        f"to currently available revisions.")
                self._settle_status(svc, State.CONDITION_FAILED, text, routes=State.CONDITION_FAILED)
                op.done, op.error = True, (13, text)
                continue
            hooks += self._reconcile(svc)
            op.done, op.response = True, _copy(svc.message)
        return hooks

    def _settle_status(self, svc: _Service, state: State, message: str = "", reason: Any = None, *,
                       routes: State = State.CONDITION_SUCCEEDED, configurations: State = State.CONDITION_SUCCEEDED) -> None:
        msg = svc.message
        msg.reconciling = False
        msg.observed_generation = msg.generation
        msg.terminal_condition = _condition("Ready", state, message=message, reason=reason)
        msg.conditions = [
            _condition("RoutesReady", routes, message="" if routes == State.CONDITION_SUCCEEDED else message),
            _condition("ConfigurationsReady", configurations,
                       message="" if configurations == State.CONDITION_SUCCEEDED else message),
        ]
        self._stamp(svc)

    def _latest_ready(self, svc: _Service) -> _Revision | None:
        for rev in reversed(list(svc.revisions.values())):
            if rev.ready and not (rev.message.conditions[0].revision_reason == Cond.RevisionReason.RETIRED
                                  and not rev.served and svc.short in self.retire_no_traffic):
                return rev
        return None

    def _reconcile(self, svc: _Service) -> list[Callable[[], None]]:
        """Resolve traffic to ready revisions, update statuses, mark the service settled."""
        msg = svc.message
        latest = self._latest_ready(svc)
        created = svc.revisions.get(msg.latest_created_revision.rsplit("/", 1)[-1])
        percents: dict[str, int] = {}
        statuses = []
        for target in msg.traffic:
            if target.type_ == LATEST:
                revision = latest.message.name.rsplit("/", 1)[-1] if latest else ""
            else:
                revision = target.revision
            if target.percent:
                percents[revision] = percents.get(revision, 0) + target.percent
            status = run_v2.TrafficTargetStatus(type_=target.type_, revision=revision, percent=target.percent,
                                                tag=target.tag)
            if target.tag:
                status.uri = f"https://{target.tag}---{svc.short}-{self.project_number}.{svc.location}.run.app"
            statuses.append(status)
        msg.traffic_statuses = statuses
        # a no-traffic candidate that the quirk retires at once
        if (created is not None and created.ready and not created.served and svc.short in self.retire_no_traffic
                and created.message.name.rsplit("/", 1)[-1] not in percents):
            created.message.conditions[0].revision_reason = Cond.RevisionReason.RETIRED
            latest = self._latest_ready(svc)
        for short, rev in svc.revisions.items():
            ready = rev.message.conditions[0]
            if short in percents:
                rev.served = True
                if ready.revision_reason:
                    ready.revision_reason = Cond.RevisionReason.REVISION_REASON_UNDEFINED
                    ready.last_transition_time = _now()
            elif rev.served and rev.ready and ready.revision_reason != Cond.RevisionReason.RETIRED:
                ready.revision_reason = Cond.RevisionReason.RETIRED
                ready.last_transition_time = _now()
        if latest is not None:
            msg.latest_ready_revision = latest.message.name
        self._settle_status(svc, State.CONDITION_SUCCEEDED)
        changed = percents != svc.percents
        svc.percents = percents
        hook, name = self.on_traffic_changed, msg.name
        return [lambda: hook(name, dict(percents))] if hook and changed else []

    def _new_operation(self, svc: _Service, metadata: Any, response_type: str = "service") -> _Operation:
        name = f"projects/{svc.project}/locations/{svc.location}/operations/{uuid.uuid4()}"
        op = _Operation(name=name, service=svc.message.name, generation=svc.message.generation,
                        metadata=_copy(metadata), response_type=response_type)
        self._operations[name] = op
        return op

    def _wait_operation(self, name: str, request: Request) -> _Operation:
        op = self._get_operation(name)
        body = request.json()
        timeout = 10.0
        if body.get("timeout"):
            timeout = min(timeout, float(str(body["timeout"]).rstrip("s")))
        deadline = time.monotonic() + timeout
        with self._lock:
            while not op.done and time.monotonic() < deadline:
                self._wake.wait(timeout=max(0.0, min(0.05, deadline - time.monotonic())))
        return op

    # ---- timer --------------------------------------------------------------------------

    def _after(self, delay: float, event: Callable[[], list[Callable[[], None]]]) -> None:
        heapq.heappush(self._timer, (time.monotonic() + max(0.0, delay), next(self._seq), event))
        self._wake.notify_all()

    def _run_timer(self) -> None:
        while True:
            with self._lock:
                while not self._closed and (not self._timer or self._timer[0][0] > time.monotonic()):
                    wait = self._timer[0][0] - time.monotonic() if self._timer else None
                    self._wake.wait(timeout=wait)
                if self._closed:
                    return
                _, _, event = heapq.heappop(self._timer)
                try:
                    hooks = event()
                except Exception:  # noqa: BLE001 - a stand-in bug must not stop the clock
                    log.exception("cloud run stand-in event failed")
                    hooks = []
                self._wake.notify_all()
            self._call(hooks)

    @staticmethod
    def _call(hooks: list[Callable[[], None]]) -> None:
        for hook in hooks:
            try:
                hook()
            except Exception:  # noqa: BLE001 - a supervisor's hook must not break the API
                log.exception("cloud run stand-in hook failed")
