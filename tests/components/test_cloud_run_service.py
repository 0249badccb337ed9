"""CloudRunService: every arg reaches the engine, bad args fail, and the live image wins."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pulumi
import pytest

from infra.components.cloud_run_service import (
    SERVICE_IGNORE_CHANGES,
    CloudRunService,
    CloudRunServiceArgs,
    Ingress,
    Role,
    Sidecar,
)
from infra.components.live_image import is_not_found
from infra.synth import engine
from infra.synth.engine import InvokeNotFound, run_program

SERVICE = "gcp:cloudrunv2/service:Service"
GET_SERVICE = "gcp:cloudrunv2/getService:getService"
CONFIG_IMAGE = "europe-docker.pkg.dev/p/brew/app:v1"
LIVE_IMAGE = "europe-docker.pkg.dev/p/brew/app@sha256:" + "b" * 64


def make_args(**overrides: Any) -> CloudRunServiceArgs:
    base = CloudRunServiceArgs(
        service_name="brew-web",
        project="p",
        region="europe-west1",
        role=Role.WEB,
        image=CONFIG_IMAGE,
        service_account_email="web@p.iam.gserviceaccount.com",
    )
    return dataclasses.replace(base, **overrides)


def run(args: CloudRunServiceArgs | Callable[[], CloudRunServiceArgs], live: dict | None = None) -> engine.Graph:
    """Run the component as a stack; pass a factory when the args hold Outputs (they need the loop)."""

    def program() -> None:
        svc = CloudRunService("web", args() if callable(args) else args)
        pulumi.export("image", svc.image)
        pulumi.export("uri", svc.uri)
        pulumi.export("name", svc.name)

    return run_program(program, project="brew", stack="test", config={"gcp:project": "p"}, live=live)


def service_inputs(graph: engine.Graph) -> dict[str, Any]:
    return graph.one(SERVICE, "web-service")["inputs"]


def container(graph: engine.Graph) -> dict[str, Any]:
    (only,) = service_inputs(graph)["template"]["containers"]
    return only


def live_service(image: str = LIVE_IMAGE, calls: list | None = None):
    def answer(args: dict) -> dict:
        if calls is not None:
            calls.append(args)
        return {"name": args["name"], "templates": [{"containers": [{"image": image}]}]}

    return {GET_SERVICE: answer}


# --- args reach their inputs -------------------------------------------------------------


def test_every_arg_reaches_its_input():
    args = lambda: make_args(  # noqa: E731 - Outputs must be made inside the program
        service_name="brew-worker",
        project="proj-a",
        region="europe-west4",
        role=Role.WEB_AND_WORKER,
        image="img:v9",
        service_account_email=pulumi.Output.from_input("worker@proj-a.iam.gserviceaccount.com"),
        min_instances=2,
        max_instances=7,
        cpu="2",
        memory="2Gi",
        concurrency=40,
        timeout_seconds=900,
        ingress=Ingress.INTERNAL_AND_LOAD_BALANCER,
        cpu_always_allocated=True,
        session_affinity=True,
        env={"LOG_LEVEL": "debug", "APP_ENV": "staging"},
        secret_env={"DATABASE_URL": "projects/proj-a/secrets/db-url"},
        network="projects/proj-a/global/networks/brew",
        subnetwork="projects/proj-a/regions/europe-west4/subnetworks/brew-run",
        labels={"environment": "staging", "service": "worker", "managed-by": "pulumi"},
        deletion_protection=False,
        invoker_iam_disabled=True,
        default_uri_disabled=True,
        follow_live_image=False,
    )
    graph = run(args)

    assert service_inputs(graph) == {
        "name": "brew-worker",
        "project": "proj-a",
        "location": "europe-west4",
        "ingress": "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER",
        "labels": {"environment": "staging", "managed-by": "pulumi", "service": "worker"},
        "deletionProtection": False,
        "invokerIamDisabled": True,
        "defaultUriDisabled": True,
        "template": {
            "serviceAccount": "worker@proj-a.iam.gserviceaccount.com",
            "timeout": "900s",
            "maxInstanceRequestConcurrency": 40,
            "sessionAffinity": True,
            "scaling": {"minInstanceCount": 2, "maxInstanceCount": 7},
            "containers": [
                {
                    "image": "img:v9",
                    "envs": [
                        {"name": "APP_ENV", "value": "staging"},
                        {
                            "name": "DATABASE_URL",
                            "valueSource": {
                                "secretKeyRef": {"secret": "projects/proj-a/secrets/db-url", "version": "latest"}
                            },
                        },
                        {"name": "LOG_LEVEL", "value": "debug"},
                        {"name": "ROLE", "value": "web,worker"},
                    ],
                    "resources": {
                        "limits": {"cpu": "2", "memory": "2Gi"},
                        "cpuIdle": False,
                        "startupCpuBoost": True,
                    },
                }
            ],
            "vpcAccess": {
                "egress": "PRIVATE_RANGES_ONLY",
                "networkInterfaces": [
                    {
                        "network": "projects/proj-a/global/networks/brew",
                        "subnetwork": "projects/proj-a/regions/europe-west4/subnetworks/brew-run",
                    }
                ],
            },
        },
        "traffics": [{"type": "TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST", "percent": 100}],
    }
    assert graph.outputs["image"] == "img:v9"
    assert graph.outputs["name"] == "brew-worker"
    assert graph.outputs["uri"].startswith("https://brew-worker-")


def test_defaults():
    graph = run(make_args(follow_live_image=False))
    inputs = service_inputs(graph)
    assert inputs["ingress"] == "INGRESS_TRAFFIC_INTERNAL_ONLY"
    assert inputs["deletionProtection"] is True
    assert inputs["invokerIamDisabled"] is False
    assert inputs["defaultUriDisabled"] is False
    assert inputs["labels"] == {}
    template = inputs["template"]
    assert template["scaling"] == {"minInstanceCount": 0, "maxInstanceCount": 1}
    assert template["maxInstanceRequestConcurrency"] == 80
    assert template["timeout"] == "300s"
    assert template["sessionAffinity"] is False
    assert "vpcAccess" not in template
    assert container(graph)["envs"] == [{"name": "ROLE", "value": "web"}]
    # Request-based CPU: idle between requests, no startup boost.
    assert container(graph)["resources"] == {
        "limits": {"cpu": "1", "memory": "512Mi"},
        "cpuIdle": True,
        "startupCpuBoost": False,
    }


def test_component_is_the_services_parent():
    graph = run(make_args(follow_live_image=False))
    (component,) = graph.by_type("brew:gcp:CloudRunService")
    assert component["name"] == "web"
    assert graph.one(SERVICE, "web-service")["parent"] == component["urn"]


@pytest.mark.parametrize("role", list(Role))
def test_role_sets_the_role_env(role):
    envs = container(run(make_args(role=role, follow_live_image=False)))["envs"]
    assert {"name": "ROLE", "value": role.value} in envs


def test_an_app_with_its_own_roles_gets_no_role_variable():
    # Penpot says what a process does in PENPOT_FLAGS: its roles map to no env.
    roles = {"frontend": {}, "backend": {}, "exporter": {}}
    envs = container(run(make_args(role="exporter", roles=roles, env={"PENPOT_FLAGS": "x"},
                                   follow_live_image=False)))["envs"]
    assert envs == [{"name": "PENPOT_FLAGS", "value": "x"}]


def test_a_role_mapping_names_the_variable_its_app_reads():
    roles = {"api": {"APP_ROLE": "api"}, "jobs": {"APP_ROLE": "jobs"}}
    envs = container(run(make_args(role="jobs", roles=roles, follow_live_image=False)))["envs"]
    assert envs == [{"name": "APP_ROLE", "value": "jobs"}]
    with pytest.raises(ValueError, match=r"^env: 'APP_ROLE' is set from role"):
        run(make_args(role="jobs", roles=roles, env={"APP_ROLE": "api"}))
    with pytest.raises(ValueError, match=r"^role: 'web' is not one of \['api', 'jobs'\]"):
        run(make_args(role="web", roles=roles))


def proxy(**overrides: Any) -> Sidecar:
    base = Sidecar(name="cloud-sql-proxy", image="gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.18.2",
                   args=("--auto-iam-authn", "p:r:db"), port=5432)
    return dataclasses.replace(base, **overrides)


def test_sidecars_run_next_to_the_app_which_starts_once_they_listen():
    graph = run(lambda: make_args(
        port=6060, cpu_always_allocated=True, follow_live_image=False,
        sidecars=(proxy(args=("--auto-iam-authn", pulumi.Output.from_input("p:r:db"))),
                  Sidecar(name="logger", image="logger:1", cpu="1", memory="256Mi"))))
    app, sidecar, logger = service_inputs(graph)["template"]["containers"]
    # The app first (the live image and the rules read it), named, on its port, after the proxy.
    assert (app["name"], app["image"], app["ports"], app["dependsOns"]) == (
        "app", CONFIG_IMAGE, {"containerPort": 6060}, ["cloud-sql-proxy"])
    assert sidecar == {
        "name": "cloud-sql-proxy",
        "image": "gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.18.2",
        "args": ["--auto-iam-authn", "p:r:db"],
        "resources": {"limits": {"cpu": "1", "memory": "512Mi"}, "cpuIdle": False},
        "startupProbe": {"tcpSocket": {"port": 5432}, "periodSeconds": 1, "failureThreshold": 30},
    }
    assert "startupProbe" not in logger and logger["resources"]["limits"] == {"cpu": "1", "memory": "256Mi"}


def test_without_sidecars_the_single_container_stays_unnamed():
    app = container(run(make_args(port=9000, follow_live_image=False)))
    assert app["ports"] == {"containerPort": 9000}
    assert "name" not in app and "dependsOns" not in app


def test_env_is_sorted_by_name_whatever_the_mapping_order():
    a = run(make_args(env={"B": "1", "A": "2"}, secret_env={"C": "s"}, follow_live_image=False))
    b = run(make_args(env={"A": "2", "B": "1"}, secret_env={"C": "s"}, follow_live_image=False))
    assert [e["name"] for e in container(a)["envs"]] == ["A", "B", "C", "ROLE"]
    assert container(a)["envs"] == container(b)["envs"]


@pytest.mark.parametrize(
    "overrides",
    [
        {"concurrency": 1},
        {"concurrency": 1000},
        {"timeout_seconds": 1},
        {"timeout_seconds": 3600},
        {"min_instances": 3, "max_instances": 3},
        {"invoker_iam_disabled": True, "ingress": Ingress.INTERNAL},
        {"invoker_iam_disabled": True, "ingress": Ingress.INTERNAL_AND_LOAD_BALANCER},
        {"role": "worker", "ingress": "INGRESS_TRAFFIC_ALL"},
    ],
)
def test_boundary_values_are_accepted(overrides):
    run(make_args(follow_live_image=False, **overrides))


# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field_and_value"),
    [
        ({"role": "admin"}, "role: 'admin'"),
        ({"ingress": "PUBLIC"}, "ingress: 'PUBLIC'"),
        ({"service_name": ""}, "service_name: ''"),
        ({"image": ""}, "image: ''"),
        ({"min_instances": -1}, "min_instances: -1"),
        ({"min_instances": 3, "max_instances": 2}, "min_instances: 3"),
        ({"concurrency": 0}, "concurrency: 0"),
        ({"concurrency": 1001}, "concurrency: 1001"),
        ({"timeout_seconds": 0}, "timeout_seconds: 0"),
        ({"timeout_seconds": 3601}, "timeout_seconds: 3601"),
        ({"env": {"ROLE": "web"}}, "env: 'ROLE'"),
        ({"secret_env": {"ROLE": "s"}}, "env: 'ROLE'"),
        ({"env": {"DB": "x"}, "secret_env": {"DB": "s"}}, "env: ['DB']"),
        ({"network": "n"}, "network/subnetwork: 'n'/None"),
        ({"subnetwork": "s"}, "network/subnetwork: None/'s'"),
        ({"invoker_iam_disabled": True, "ingress": Ingress.ALL}, "invoker_iam_disabled: True"),
        ({"port": 0}, "port: 0"),
        ({"sidecars": (proxy(),)}, "port: a service with sidecars"),
        ({"port": 6060, "sidecars": (proxy(), proxy())}, "sidecars: names"),
        ({"port": 6060, "sidecars": (proxy(name="app"),)}, "sidecars: names"),
        ({"port": 5432, "sidecars": (proxy(),)}, "sidecars: 'cloud-sql-proxy' listens on the app's port"),
        ({"port": 6060, "sidecars": (proxy(image=""),)}, "sidecars: 'cloud-sql-proxy' has no image"),
        ({"port": 6060, "sidecars": (proxy(args="--private-ip"),)}, "sidecars: 'cloud-sql-proxy' args"),
    ],
)
def test_invalid_args_raise_one_line_value_error(overrides, field_and_value):
    with pytest.raises(ValueError) as raised:
        run(make_args(**overrides))
    message = str(raised.value)
    assert message.startswith(field_and_value)
    assert "\n" not in message


# --- ignore_changes ------------------------------------------------------------------------


def test_service_ignores_only_what_cloud_run_and_the_pipeline_own(ignore_changes):
    run(make_args(follow_live_image=False))
    assert ignore_changes["web-service"] == [
        "client",
        "clientVersion",
        "template.revision",
        'template.annotations["run.googleapis.com/operation-id"]',
        "traffics",
    ]
    assert list(SERVICE_IGNORE_CHANGES) == ignore_changes["web-service"]
    # Ignoring the image would make Pulumi resend its stored image and undo promotions.
    assert not any("containers" in path or path == "template" for path in ignore_changes["web-service"])


# --- the image rule ------------------------------------------------------------------------


def test_live_promoted_image_is_declared_so_a_promotion_shows_no_diff():
    calls: list[dict] = []
    graph = run(make_args(), live=live_service(calls=calls))
    assert container(graph)["image"] == LIVE_IMAGE
    assert graph.outputs["image"] == LIVE_IMAGE
    assert calls == [{"name": "brew-web", "location": "europe-west1", "project": "p"}]


def test_config_change_after_a_promotion_keeps_the_live_image():
    graph = run(make_args(env={"FEATURE_X": "on"}, min_instances=1), live=live_service())
    assert container(graph)["image"] == LIVE_IMAGE
    assert {"name": "FEATURE_X", "value": "on"} in container(graph)["envs"]
    assert service_inputs(graph)["template"]["scaling"]["minInstanceCount"] == 1


def test_first_deploy_uses_the_config_image_when_the_service_does_not_exist():
    graph = run(make_args(), live={})
    assert container(graph)["image"] == CONFIG_IMAGE
    assert graph.outputs["image"] == CONFIG_IMAGE


def test_any_other_lookup_error_fails_the_program():
    def forbidden(args: dict) -> dict:
        raise Exception("googleapi: Error 403: permission denied")

    with pytest.raises(Exception, match="Error 403: permission denied"):
        run(make_args(), live={GET_SERVICE: forbidden})


def test_not_found_of_another_service_is_not_taken_for_ours():
    def other_missing(args: dict) -> dict:
        raise Exception("projects/p/locations/europe-west1/services/brew-web-canary not found")

    with pytest.raises(Exception, match="brew-web-canary not found"):
        run(make_args(), live={GET_SERVICE: other_missing})


@pytest.mark.parametrize(
    "answer",
    [
        {"templates": [{"containers": None}]},
        {"templates": [{"containers": []}]},
        {"templates": []},
        {"templates": [{"containers": [{"image": ""}]}]},
    ],
)
def test_live_service_without_a_container_image_falls_back(answer):
    graph = run(make_args(), live={GET_SERVICE: lambda args: answer})
    assert container(graph)["image"] == CONFIG_IMAGE


def test_follow_live_image_off_declares_the_config_image_without_a_lookup():
    calls: list[dict] = []
    graph = run(make_args(follow_live_image=False), live=live_service(calls=calls))
    assert container(graph)["image"] == CONFIG_IMAGE
    assert calls == []


@pytest.mark.parametrize(
    "message",
    [
        # The Terraform-bridged data source, as pulumi's python invoke surfaces it.
        "invoke of gcp:cloudrunv2/getService:getService failed: invocation of "
        "gcp:cloudrunv2/getService:getService returned an error: invoking "
        "gcp:cloudrunv2/getService:getService: 1 error occurred:\n"
        "\t* projects/p/locations/europe-west1/services/brew-web not found\n\n",
        "projects/p/locations/europe-west1/services/brew-web not found",
    ],
)
def test_not_found_messages_are_recognised(message):
    assert is_not_found(Exception(message), "service", "brew-web")


def test_the_harness_not_found_is_recognised():
    assert is_not_found(InvokeNotFound(f"{GET_SERVICE}: brew-web not found"), "service", "brew-web")


@pytest.mark.parametrize(
    "message",
    [
        "googleapi: Error 403: permission denied",
        'Error when reading or editing CloudRunV2Service "projects/p/locations/europe-west1/services/brew-web": '
        "googleapi: Error 429: quota exceeded",
        "projects/p/locations/europe-west1/services/brew-web-2 not found",
        "projects/p/locations/europe-west1/jobs/brew-web not found",
        "projects/p/locations/europe-west1/services/brew-web not foundation",
    ],
)
def test_other_errors_are_not_taken_for_not_found(message):
    assert not is_not_found(Exception(message), "service", "brew-web")
