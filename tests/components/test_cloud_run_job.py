"""CloudRunJob: every arg reaches the engine, bad args fail, and the live image wins."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pulumi
import pytest

from infra.components.cloud_run_job import JOB_IGNORE_CHANGES, CloudRunJob, CloudRunJobArgs
from infra.components.live_image import is_not_found
from infra.synth import engine
from infra.synth.engine import InvokeNotFound, run_program

JOB = "gcp:cloudrunv2/job:Job"
GET_JOB = "gcp:cloudrunv2/getJob:getJob"
CONFIG_IMAGE = "europe-docker.pkg.dev/p/brew/app:v1"
LIVE_IMAGE = "europe-docker.pkg.dev/p/brew/app@sha256:" + "c" * 64


def make_args(**overrides: Any) -> CloudRunJobArgs:
    base = CloudRunJobArgs(
        job_name="brew-migrate",
        project="p",
        region="europe-west1",
        image=CONFIG_IMAGE,
        service_account_email="jobs@p.iam.gserviceaccount.com",
    )
    return dataclasses.replace(base, **overrides)


def run(args: CloudRunJobArgs | Callable[[], CloudRunJobArgs], live: dict | None = None) -> engine.Graph:
    """Run the component as a stack; pass a factory when the args hold Outputs (they need the loop)."""

    def program() -> None:
        job = CloudRunJob("migrate", args() if callable(args) else args)
        pulumi.export("image", job.image)
        pulumi.export("name", job.name)
        pulumi.export("id", job.id)

    return run_program(program, project="brew", stack="test", config={"gcp:project": "p"}, live=live)


def job_inputs(graph: engine.Graph) -> dict[str, Any]:
    return graph.one(JOB, "migrate-job")["inputs"]


def container(graph: engine.Graph) -> dict[str, Any]:
    (only,) = job_inputs(graph)["template"]["template"]["containers"]
    return only


def live_job(image: str = LIVE_IMAGE, calls: list | None = None):
    def answer(args: dict) -> dict:
        if calls is not None:
            calls.append(args)
        return {"name": args["name"], "templates": [{"templates": [{"containers": [{"image": image}]}]}]}

    return {GET_JOB: answer}


# --- args reach their inputs -------------------------------------------------------------


def test_every_arg_reaches_its_input():
    graph = run(
        lambda: make_args(
            job_name="brew-reindex",
            project="proj-a",
            region="europe-west4",
            image="img:v9",
            service_account_email=pulumi.Output.from_input("jobs@proj-a.iam.gserviceaccount.com"),
            command=("python", "-m"),
            args=("brew.reindex", "--all"),
            env={"LOG_LEVEL": "debug", "APP_ENV": "staging"},
            secret_env={"DATABASE_URL": "projects/proj-a/secrets/db-url"},
            cpu="2",
            memory="4Gi",
            timeout_seconds=7200,
            max_retries=3,
            task_count=5,
            network="projects/proj-a/global/networks/brew",
            subnetwork="projects/proj-a/regions/europe-west4/subnetworks/brew-run",
            labels={"environment": "staging", "service": "reindex", "managed-by": "pulumi"},
            deletion_protection=False,
            follow_live_image=False,
        )
    )

    assert job_inputs(graph) == {
        "name": "brew-reindex",
        "project": "proj-a",
        "location": "europe-west4",
        "labels": {"environment": "staging", "managed-by": "pulumi", "service": "reindex"},
        "deletionProtection": False,
        "template": {
            "taskCount": 5,
            "template": {
                "serviceAccount": "jobs@proj-a.iam.gserviceaccount.com",
                "timeout": "7200s",
                "maxRetries": 3,
                "containers": [
                    {
                        "image": "img:v9",
                        "commands": ["python", "-m"],
                        "args": ["brew.reindex", "--all"],
                        "envs": [
                            {"name": "APP_ENV", "value": "staging"},
                            {
                                "name": "DATABASE_URL",
                                "valueSource": {
                                    "secretKeyRef": {"secret": "projects/proj-a/secrets/db-url", "version": "latest"}
                                },
                            },
                            {"name": "LOG_LEVEL", "value": "debug"},
                        ],
                        "resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
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
        },
    }
    assert graph.outputs["image"] == "img:v9"
    assert graph.outputs["name"] == "brew-reindex"
    assert graph.outputs["id"]


def test_defaults():
    graph = run(make_args(follow_live_image=False))
    inputs = job_inputs(graph)
    assert inputs["deletionProtection"] is True
    assert inputs["labels"] == {}
    assert inputs["template"]["taskCount"] == 1
    task = inputs["template"]["template"]
    assert task["timeout"] == "600s"
    assert task["maxRetries"] == 0
    assert "vpcAccess" not in task
    # No command/args: the image's own ENTRYPOINT/CMD run.
    assert container(graph) == {
        "image": CONFIG_IMAGE,
        "envs": [],
        "resources": {"limits": {"cpu": "1", "memory": "512Mi"}},
    }


def test_component_is_the_jobs_parent():
    graph = run(make_args(follow_live_image=False))
    (component,) = graph.by_type("brew:gcp:CloudRunJob")
    assert component["name"] == "migrate"
    assert graph.one(JOB, "migrate-job")["parent"] == component["urn"]


def test_env_is_sorted_by_name_whatever_the_mapping_order():
    a = run(make_args(env={"B": "1", "A": "2"}, secret_env={"C": "s"}, follow_live_image=False))
    b = run(make_args(env={"A": "2", "B": "1"}, secret_env={"C": "s"}, follow_live_image=False))
    assert [e["name"] for e in container(a)["envs"]] == ["A", "B", "C"]
    assert container(a)["envs"] == container(b)["envs"]


# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field_and_value"),
    [
        ({"job_name": ""}, "job_name: ''"),
        ({"image": ""}, "image: ''"),
        ({"timeout_seconds": 0}, "timeout_seconds: 0"),
        ({"timeout_seconds": -5}, "timeout_seconds: -5"),
        ({"max_retries": -1}, "max_retries: -1"),
        ({"task_count": 0}, "task_count: 0"),
        ({"command": "python -m x"}, "command/args: 'python -m x'"),
        ({"env": {"DB": "x"}, "secret_env": {"DB": "s"}}, "env: ['DB']"),
        ({"network": "n"}, "network/subnetwork: 'n'/None"),
        ({"subnetwork": "s"}, "network/subnetwork: None/'s'"),
    ],
)
def test_invalid_args_raise_one_line_value_error(overrides, field_and_value):
    with pytest.raises(ValueError) as raised:
        run(make_args(**overrides))
    message = str(raised.value)
    assert message.startswith(field_and_value)
    assert "\n" not in message


def test_smallest_valid_values_are_accepted():
    graph = run(make_args(timeout_seconds=1, max_retries=0, task_count=1, follow_live_image=False))
    assert job_inputs(graph)["template"]["template"]["timeout"] == "1s"


# --- ignore_changes ------------------------------------------------------------------------


def test_job_ignores_only_what_gcloud_writes(ignore_changes):
    run(make_args(follow_live_image=False))
    assert ignore_changes["migrate-job"] == [
        "client",
        "clientVersion",
        'template.annotations["run.googleapis.com/operation-id"]',
    ]
    assert list(JOB_IGNORE_CHANGES) == ignore_changes["migrate-job"]


# --- the image rule ------------------------------------------------------------------------


def test_live_promoted_image_is_declared_so_a_promotion_shows_no_diff():
    calls: list[dict] = []
    graph = run(make_args(), live=live_job(calls=calls))
    assert container(graph)["image"] == LIVE_IMAGE
    assert graph.outputs["image"] == LIVE_IMAGE
    assert calls == [{"name": "brew-migrate", "location": "europe-west1", "project": "p"}]


def test_config_change_after_a_promotion_keeps_the_live_image():
    graph = run(make_args(env={"BATCH": "500"}, max_retries=2), live=live_job())
    assert container(graph)["image"] == LIVE_IMAGE
    assert container(graph)["envs"] == [{"name": "BATCH", "value": "500"}]
    assert job_inputs(graph)["template"]["template"]["maxRetries"] == 2


def test_first_deploy_uses_the_config_image_when_the_job_does_not_exist():
    graph = run(make_args(), live={})
    assert container(graph)["image"] == CONFIG_IMAGE
    assert graph.outputs["image"] == CONFIG_IMAGE


def test_any_other_lookup_error_fails_the_program():
    def forbidden(args: dict) -> dict:
        raise Exception("googleapi: Error 403: permission denied")

    with pytest.raises(Exception, match="Error 403: permission denied"):
        run(make_args(), live={GET_JOB: forbidden})


@pytest.mark.parametrize(
    "answer",
    [
        {"templates": [{"templates": [{"containers": None}]}]},
        {"templates": [{"templates": []}]},
        {"templates": []},
    ],
)
def test_live_job_without_a_container_image_falls_back(answer):
    graph = run(make_args(), live={GET_JOB: lambda args: answer})
    assert container(graph)["image"] == CONFIG_IMAGE


def test_follow_live_image_off_declares_the_config_image_without_a_lookup():
    calls: list[dict] = []
    graph = run(make_args(follow_live_image=False), live=live_job(calls=calls))
    assert container(graph)["image"] == CONFIG_IMAGE
    assert calls == []


def test_job_not_found_messages_are_recognised():
    assert is_not_found(Exception("projects/p/locations/europe-west1/jobs/brew-migrate not found"), "job", "brew-migrate")
    assert is_not_found(InvokeNotFound(f"{GET_JOB}: brew-migrate not found"), "job", "brew-migrate")
    assert not is_not_found(
        Exception("projects/p/locations/europe-west1/services/brew-migrate not found"), "job", "brew-migrate"
    )
