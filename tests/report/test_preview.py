"""`brew-infra report --preview`: a `pulumi preview --json` document through the diff report."""

from __future__ import annotations

import json

import pytest

from infra.report.diff import render_markdown
from infra.report.preview import PreviewError, read_preview

PREFIX = "urn:pulumi:prod::brew::"
SERVICE = "gcp:cloudrunv2/service:Service"
BUCKET = "gcp:storage/bucket:Bucket"


def state(type_token: str, **inputs) -> dict:
    return {"type": type_token, "inputs": inputs, "outputs": {}}


def write(tmp_path, steps) -> object:
    path = tmp_path / "preview.json"
    path.write_text(json.dumps({"steps": steps, "changeSummary": {}}))
    return path


STEPS = [
    {"op": "same", "urn": PREFIX + SERVICE + "::web", "oldState": state(SERVICE, name="brew-web"),
     "newState": state(SERVICE, name="brew-web")},
    {"op": "create", "urn": PREFIX + BUCKET + "::logs", "newState": state(
        BUCKET, name="brew-logs", uniformBucketLevelAccess=True, publicAccessPrevention="enforced")},
    {"op": "update", "urn": PREFIX + SERVICE + "::worker", "diffReasons": ["ingress"],
     "oldState": state(SERVICE, name="brew-worker", ingress="INGRESS_TRAFFIC_INTERNAL_ONLY", labels={"role": "worker"}),
     "newState": state(SERVICE, name="brew-worker", ingress="INGRESS_TRAFFIC_ALL", labels={"role": "worker"})},
    {"op": "create-replacement", "urn": PREFIX + BUCKET + "::assets", "replaceReasons": ["location"],
     "oldState": state(BUCKET, name="brew-assets", location="US"), "newState": state(BUCKET, name="brew-assets",
                                                                                   location="EU")},
    {"op": "replace", "urn": PREFIX + BUCKET + "::assets", "oldState": state(BUCKET, name="brew-assets", location="US"),
     "newState": state(BUCKET, name="brew-assets", location="EU")},
    {"op": "delete-replaced", "urn": PREFIX + BUCKET + "::assets",
     "oldState": state(BUCKET, name="brew-assets", location="US")},
    {"op": "delete", "urn": PREFIX + "gcp:sql/databaseInstance:DatabaseInstance::db",
     "oldState": state("gcp:sql/databaseInstance:DatabaseInstance", name="brew-prod")},
]


def test_steps_become_one_change_each(tmp_path):
    report = read_preview(write(tmp_path, STEPS))
    (stack,) = report.stacks
    assert stack.stack == "prod"
    assert {(c.name, c.action) for c in stack.changes} == {
        ("brew-logs", "add"), ("brew-worker", "update"), ("brew-assets", "replace"), ("brew-prod", "remove")}
    why = [w for _, w in report.dangerous]
    assert any("deletes a Cloud SQL instance" in w for w in why)
    assert any("replaces" in w and "bucket" in w for w in why)
    assert any("ingress of brew-worker" in w for w in why)


def test_new_findings_and_the_markdown(tmp_path):
    report = read_preview(write(tmp_path, STEPS))
    rules = {f.rule for f in report.new_findings}
    assert "BREW-S031" in rules  # the worker opened to all traffic
    text = render_markdown(report)
    assert "### Dangerous changes" in text and "### Stack `prod`" in text and "BREW-S031" in text


@pytest.mark.parametrize("content, message", [
    ("{", "not JSON"),
    ("[]", "expected an object with a \"steps\" list"),
    ('{"steps": [{"op": "create"}]}', "steps[0]"),
    ('{"steps": [{"op": "explode", "urn": "urn:pulumi:prod::brew::t::n"}]}', "unknown operation 'explode'"),
])
def test_bad_documents(tmp_path, content, message):
    path = tmp_path / "preview.json"
    path.write_text(content)
    with pytest.raises(PreviewError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_preview(path)
