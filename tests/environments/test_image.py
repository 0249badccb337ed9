"""SPEC 3.7: CI decides the image. After the promote pipeline deployed a newer image,
Pulumi neither shows a diff on it nor puts the old one back, even when another field of
the same service changes."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
import yaml

from infra.synth.stacks import REPO_ROOT, read_stack, synthesize
from tests.graphs import env_of, service, template_container

PROMOTED = "asia-south1-docker.pkg.dev/squareup-brew/brew/brew@sha256:" + "c" * 64
CONFIG_IMAGE = read_stack("prod").values["brew:image"]


def live_cloud_run(images: dict[str, str]):
    """The provider's answer to `cloudrunv2.get_service` / `get_job` for live resources."""

    def get_service(args: dict) -> dict:
        if args["name"] not in images:
            raise LookupError(f"projects/{args['project']}/locations/{args['location']}/services/{args['name']} not found")
        return {"name": args["name"], "templates": [{"containers": [{"image": images[args["name"]]}]}]}

    def get_job(args: dict) -> dict:
        if args["name"] not in images:
            raise LookupError(f"projects/{args['project']}/locations/{args['location']}/jobs/{args['name']} not found")
        return {"name": args["name"], "templates": [{"templates": [{"containers": [{"image": images[args["name"]]}]}]}]}

    return {"gcp:cloudrunv2/getService:getService": get_service, "gcp:cloudrunv2/getJob:getJob": get_job}


PROMOTED_PROD = live_cloud_run({"brew-web": PROMOTED, "brew-worker": PROMOTED, "brew-ops": PROMOTED})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copytree(REPO_ROOT / "stacks", tmp_path / "stacks")
    return tmp_path


def image_of(graph: dict, name: str) -> str:
    return template_container(service(graph, name))["image"]


def test_first_deploy_declares_the_configured_image(graphs):
    assert image_of(graphs["prod"], "brew-web") == CONFIG_IMAGE
    assert image_of(graphs["prod"], "brew-worker") == CONFIG_IMAGE


def test_no_diff_after_a_promotion():
    after_promotion = synthesize("prod", live=PROMOTED_PROD).to_dict()
    for name in ("brew-web", "brew-worker"):
        assert image_of(after_promotion, name) == PROMOTED
    job = next(r for r in after_promotion["resources"] if r["type"] == "gcp:cloudrunv2/job:Job")
    assert job["inputs"]["template"]["template"]["containers"][0]["image"] == PROMOTED


def test_promotion_changes_nothing_but_the_image(graphs):
    # What Pulumi would diff against the live services: only the image differs from a
    # first deploy, and it equals what is serving, so the plan has nothing to change.
    after_promotion = synthesize("prod", live=PROMOTED_PROD).to_dict()
    expected = copy.deepcopy(graphs["prod"])
    for r in expected["resources"]:
        if r["type"] == "gcp:cloudrunv2/service:Service":
            r["inputs"]["template"]["containers"][0]["image"] = PROMOTED
        if r["type"] == "gcp:cloudrunv2/job:Job":
            r["inputs"]["template"]["template"]["containers"][0]["image"] = PROMOTED
    assert after_promotion["resources"] == expected["resources"]


def test_env_change_after_a_promotion_keeps_the_promoted_image(project):
    path = project / "stacks" / "Pulumi.prod.yaml"
    document = yaml.safe_load(path.read_text())
    document["config"]["brew:env"]["AI_PROVIDER"] = "anthropic"
    document["config"]["brew:services"][1]["memory"] = "8Gi"
    path.write_text(yaml.safe_dump(document))

    graph = synthesize("prod", root=project, live=PROMOTED_PROD).to_dict()
    worker = service(graph, "brew-worker")
    assert env_of(worker)["AI_PROVIDER"] == "anthropic"
    assert template_container(worker)["resources"]["limits"]["memory"] == "8Gi"
    assert image_of(graph, "brew-worker") == PROMOTED
    assert image_of(graph, "brew-web") == PROMOTED


def test_lookup_failure_other_than_not_found_stops_the_program():
    def forbidden(args: dict) -> dict:
        raise PermissionError("googleapi: Error 403: Permission 'run.services.get' denied")

    with pytest.raises(Exception, match="403"):
        synthesize("prod", live={"gcp:cloudrunv2/getService:getService": forbidden})


def test_pulumi_refreshes_before_every_update():
    # State then holds the live image too, so `pulumi preview` shows no image diff.
    project = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())
    assert project["options"]["refresh"] == "always"
