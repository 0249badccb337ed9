"""Run a Pulumi program under Pulumi's mock runtime and capture what the engine would receive.

No Pulumi CLI, no credentials: `pulumi.runtime.set_mocks` swaps the resource monitor for
an in-process one. We subclass that monitor so every `RegisterResource` request is
recorded exactly as the engine would get it (type token, parent, dependencies, inputs in
their camelCase wire names), and `RegisterResourceOutputs` of the root stack gives the
stack's exports.

Stages for one stack: fresh event loop -> configure mocks and config -> run the program
inside a new root Stack -> wait for every outstanding RPC -> freeze the records into a
plain, sorted graph.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
import pulumi
from pulumi.runtime import mocks, rpc, settings
from pulumi.runtime import stack as runtime_stack

from infra.gcp_ids import LIVE_ID

STACK_TYPE = "pulumi:pulumi:Stack"
SECRET = "[secret]"


class InvokeNotFound(Exception):
    """A data-source lookup of a resource that does not exist, under the mocks.

    The message mirrors the Terraform-bridged data sources' own (`<resource id> not
    found`), so the program's not-found handling is exercised as against the provider.
    """


class EngineInvokeError(grpc.RpcError):
    """How the real engine reports a failed invoke: a gRPC error with code UNKNOWN.

    The SDK turns it into `Exception("invoke of <tok> failed: <details>")` raised in the
    program, where it can be caught. A plain Python exception from the mock monitor would
    instead be recorded as an unhandled RPC failure and fail the whole run, which no real
    data-source error does.
    """

    def __init__(self, token: str, error: BaseException):
        super().__init__(f"invocation of {token} returned an error: invoking {token}: "
                         f"1 error occurred:\n\t* {error}")

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNKNOWN

    def details(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Graph:
    project: str
    stack: str
    resources: list[dict[str, Any]]
    outputs: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "stack": self.stack,
            "resources": self.resources,
            "outputs": self.outputs,
        }

    def by_type(self, type_token: str) -> list[dict[str, Any]]:
        return [r for r in self.resources if r["type"] == type_token]

    def one(self, type_token: str, name: str) -> dict[str, Any]:
        for r in self.resources:
            if r["type"] == type_token and r["name"] == name:
                return r
        raise KeyError(f"no {type_token} named {name!r} in stack {self.stack}")


def _fake_id(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:12]


class PlatformMocks(mocks.Mocks):
    """Fills in what Google Cloud would compute, deterministically, by type token.

    `live` answers data-source lookups (invokes): token -> callable(args) -> result dict.
    A lookup with no answer raises `InvokeNotFound`, as a lookup of a missing resource does.
    """

    def __init__(self, project: str, live: Mapping[str, Callable[[dict], dict]] | None = None):
        self.project = project
        self.live = dict(live or {})

    def call(self, args: mocks.MockCallArgs):
        answer = self.live.get(args.token)
        if answer is None:
            raise InvokeNotFound(f"{_lookup_id(args.token, args.args, self.project)} not found")
        return answer(args.args), []

    def new_resource(self, args: mocks.MockResourceArgs):
        inputs = dict(args.inputs)
        project = inputs.get("project") or self.project
        name = inputs.get("name") or args.name
        typ = args.typ
        state = dict(inputs)
        state.setdefault("project", project)
        if typ == "gcp:serviceaccount/account:Account":
            account_id = inputs["accountId"]
            state["email"] = f"{account_id}@{project}.iam.gserviceaccount.com"
            state["member"] = f"serviceAccount:{state['email']}"
            state["name"] = f"projects/{project}/serviceAccounts/{state['email']}"
            return state["name"], state
        if typ == "gcp:compute/globalAddress:GlobalAddress" and "address" not in inputs:
            state["address"] = "203.0.113." + str(int(_fake_id(name), 16) % 250 + 1)
        if typ == "gcp:sql/databaseInstance:DatabaseInstance":
            region = inputs.get("region", "")
            state["connectionName"] = f"{project}:{region}:{name}"
            state["privateIpAddress"] = "172.30.0." + str(int(_fake_id(name), 16) % 250 + 2)
            state["selfLink"] = f"https://sqladmin.googleapis.com/sql/v1beta4/projects/{project}/instances/{name}"
        if typ in ("gcp:cloudrunv2/service:Service", "gcp:cloudrunv2/job:Job"):
            state["uri"] = f"https://{name}-{_fake_id(project, name)[:10]}.a.run.app"
        if typ == "gcp:secretmanager/secret:Secret":
            state["name"] = f"projects/{project}/secrets/{inputs.get('secretId', name)}"
            return state["name"], state
        if typ == "gcp:iam/workloadIdentityPool:WorkloadIdentityPool":
            state["name"] = f"projects/000000000000/locations/global/workloadIdentityPools/{inputs.get('workloadIdentityPoolId')}"
            return state["name"], state
        if typ == "gcp:monitoring/notificationChannel:NotificationChannel":
            state["name"] = f"projects/{project}/notificationChannels/{_fake_id(args.name)}"
            return state["name"], state
        if typ == "gcp:storage/bucket:Bucket":
            state["url"] = f"gs://{name}"
        if typ == "gcp:redis/instance:Instance":
            # Memorystore serves TLS on 6378, plaintext on 6379.
            tls = inputs.get("transitEncryptionMode") == "SERVER_AUTHENTICATION"
            state["host"] = "172.30.8." + str(int(_fake_id(name), 16) % 250 + 2)
            state["port"] = 6378 if tls else 6379
            if inputs.get("authEnabled"):
                state["authString"] = f"mock-auth-{_fake_id(project, name)}"
        if typ == "gcp:storage/hmacKey:HmacKey":
            # Service-account HMAC access ids start with GOOG1E; the secret is 40 base64 characters.
            state["accessId"] = "GOOG1E" + _fake_id("hmac", project, args.name).upper()
            state["secret"] = f"mock-hmac-secret-{_fake_id('hmac-secret', project, args.name)}"
            state["state"] = inputs.get("state") or "ACTIVE"
        live_id = _live_id(typ, inputs, project)
        if live_id is None:
            return f"{args.name}-{_fake_id(typ, args.name)}", state
        if typ.startswith("gcp:compute/"):
            state["selfLink"] = f"https://www.googleapis.com/compute/v1/{live_id}"
        return live_id, state


def _live_id(typ: str, inputs: dict, project: str) -> str | None:
    make = LIVE_ID.get(typ)
    try:
        return make(inputs, project, inputs.get("region") or inputs.get("location") or "") if make else None
    except KeyError:  # an input the ID needs is not known yet
        return None


def _lookup_id(token: str, args: dict, project: str) -> str:
    """The resource ID a Terraform-bridged data source names in its not-found error."""
    collection = {"getService": "services", "getJob": "jobs"}.get(token.rsplit(":", 1)[-1])
    name = args.get("name", "")
    if collection:
        return f"projects/{args.get('project') or project}/locations/{args.get('location', '')}/{collection}/{name}"
    return str(name)


class RecordingMonitor(mocks.MockMonitor):
    """The mock monitor, plus a record of every registration as the engine would see it."""

    def __init__(self, platform_mocks: mocks.Mocks):
        super().__init__(platform_mocks)
        self.records: dict[str, dict[str, Any]] = {}
        self.stack_outputs: dict[str, Any] = {}

    def RegisterResource(self, request):  # noqa: N802 - gRPC method name
        response = super().RegisterResource(request)
        if request.type != STACK_TYPE:
            self.records[response.urn] = {
                "urn": response.urn,
                "type": request.type,
                "name": request.name,
                "parent": request.parent or None,
                "inputs": _plain(rpc.deserialize_properties(request.object, keep_unknowns=True)),
                "dependencies": sorted(set(request.dependencies)),
                "custom": bool(request.custom),
            }
        return response

    def Invoke(self, request):  # noqa: N802 - gRPC method name
        try:
            return super().Invoke(request)
        except Exception as error:  # noqa: BLE001 - every provider error reaches the SDK this way
            raise EngineInvokeError(request.tok, error) from error

    def RegisterResourceOutputs(self, request):  # noqa: N802 - gRPC method name
        if request.urn.split("::")[2] == STACK_TYPE:
            self.stack_outputs = _plain(rpc.deserialize_properties(request.outputs, keep_unknowns=True))
        return super().RegisterResourceOutputs(request)


def _plain(value: Any) -> Any:
    """JSON-ready data: secrets redacted, unknowns named, resource references by URN."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            return SECRET
        return {k: _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, pulumi.Resource):
        return getattr(value, "_urn_str", None) or repr(value)
    if value is rpc.UNKNOWN or type(value).__name__ == "Unknown":
        return "[unknown]"
    if isinstance(value, float) and value.is_integer():
        # The wire format (protobuf Struct) carries every number as a double; 80 reads
        # better than 80.0 and compares equal to the int a test or rule writes.
        return int(value)
    return value


class _LoopTrackingPolicy(asyncio.DefaultEventLoopPolicy):
    """Remembers every event loop made while a program runs. The mock monitor's calls run
    in executor threads, and pulumi gives each thread a loop of its own that nobody
    closes; left to the garbage collector at interpreter exit, closing them can fail with
    a traceback on stderr. They are closed once the threads are done."""

    def __init__(self) -> None:
        super().__init__()
        self.loops: list[asyncio.AbstractEventLoop] = []

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        self.loops.append(loop)
        return loop

    def close_all(self) -> None:
        for loop in self.loops:
            if not loop.is_closed() and not loop.is_running():
                loop.close()


def run_program(
    program: Callable[[], None],
    *,
    project: str,
    stack: str,
    config: Mapping[str, Any],
    live: Mapping[str, Callable[[dict], dict]] | None = None,
) -> Graph:
    """Run `program` as stack `stack` of `project` under the mocks and return its graph.

    `config` is the stack's config as `pulumi config` holds it: fully qualified keys
    (`brew:region`, `gcp:project`) to values; objects stay objects.
    """
    gcp_project = str(config.get("gcp:project", "mock-project"))
    monitor = RecordingMonitor(PlatformMocks(gcp_project, live))
    previous_policy = asyncio.get_event_loop_policy()
    policy = _LoopTrackingPolicy()
    asyncio.set_event_loop_policy(policy)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        mocks.set_mocks(monitor.mocks, project=project, stack=stack, preview=False, monitor=monitor)
        settings.set_root_resource(None)
        pulumi.runtime.set_all_config(
            {key: value if isinstance(value, str) else json.dumps(value) for key, value in config.items()}, []
        )
        loop.run_until_complete(runtime_stack.run_in_stack(program))
    finally:
        settings.set_root_resource(None)
        loop.run_until_complete(loop.shutdown_default_executor())
        policy.close_all()
        asyncio.set_event_loop_policy(previous_policy)
    resources = sorted(
        ({k: v for k, v in r.items() if k != "custom"} for r in monitor.records.values()),
        key=lambda r: r["urn"],
    )
    return Graph(project=project, stack=stack, resources=resources, outputs=monitor.stack_outputs)
