"""`brew-infra diff` and `brew-infra report --preview` as a reviewer runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.synth.stacks import REPO_ROOT
from tests.policy.helpers import changed

SERVICE = "gcp:cloudrunv2/service:Service"


def run(args: list[str], cwd: Path = REPO_ROOT, pythonpath: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "infra.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=180)


@pytest.fixture
def files(graphs, tmp_path) -> dict[str, Path]:
    base = tmp_path / "base"
    head = tmp_path / "head"
    base.mkdir()
    head.mkdir()
    (base / "prod.json").write_text(json.dumps(graphs["prod"]))
    (head / "prod.json").write_text(json.dumps(changed(graphs["prod"], SERVICE, "brew-worker", "ingress",
                                                       "INGRESS_TRAFFIC_ALL")))
    same = tmp_path / "same.json"
    same.write_text(json.dumps(graphs["prod"]))
    return {"base": base / "prod.json", "head": head / "prod.json", "same": same, "base_dir": base,
            "head_dir": head}


def test_same_graphs_exit_0(files):
    result = run(["diff", str(files["base"]), str(files["same"])])
    assert result.returncode == 0, result.stderr
    assert "No changes" in result.stdout


def test_dangerous_change_exits_1_with_the_report(files, tmp_path):
    out = tmp_path / "diff.md"
    result = run(["diff", str(files["base_dir"]), str(files["head_dir"]), "-o", str(out)])
    assert result.returncode == 1, result.stderr
    assert "1 dangerous change(s)" in result.stderr
    text = out.read_text()
    assert "ingress of brew-worker changes" in text and "BREW-S030" in text


def test_json_format(files):
    result = run(["diff", str(files["base"]), str(files["head"]), "--format", "json"])
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["dangerous"][0]["name"] == "brew-worker"
    assert {f["rule"] for f in data["stacks"][0]["new_findings"]} >= {"BREW-S030", "BREW-S031"}


@pytest.mark.parametrize("args, message", [
    (["missing.json", "other.json"], "missing.json: no such graph file"),
    (["HEAD", "{file}"], "not 'HEAD' with"),
    (["{file}"], "give the graph file to compare it with as HEAD"),
    (["no-such-ref"], "unknown git ref 'no-such-ref'"),
    (["HEAD", "no-such-ref"], "unknown git ref 'no-such-ref'"),
])
def test_bad_input_exit_2(files, args, message):
    args = [a.replace("{file}", str(files["base"])) for a in args]
    result = run(["diff", *args])
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_git_ref_outside_a_repository(tmp_path):
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    result = run(["diff", "HEAD~1"], cwd=tmp_path)
    assert result.returncode == 2 and "is not a git repository" in result.stderr


def test_diff_of_a_git_ref_against_the_working_tree(tmp_path):
    """A clone whose prod stack is edited: the base ref is synthesized with its own code."""
    clone = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", "--local", str(REPO_ROOT), str(clone)], check=True, timeout=60)
    stack = clone / "stacks" / "Pulumi.prod.yaml"
    stack.write_text(stack.read_text().replace("maxInstances: 10", "maxInstances: 12", 1))
    result = run(["diff", "HEAD", "--format", "json"], cwd=clone, pythonpath=clone)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["base"] == "HEAD" and data["head"] == "working tree" and not data["dangerous"]
    (prod,) = [s for s in data["stacks"] if s["status"] == "changed"]
    by_name = {r["name"]: r for r in prod["resources"]}
    assert set(by_name) == {"brew-web", "prod-alerts-postgres-connections"}  # the runbook's budget table too
    assert by_name["brew-web"]["changes"] == [
        {"path": "template.scaling.maxInstanceCount", "old": 10, "new": 12, "replaces": False}]


def test_report_preview(tmp_path):
    preview = tmp_path / "preview.json"
    urn = "urn:pulumi:prod::brew::gcp:storage/bucket:Bucket::b"
    preview.write_text(json.dumps({"steps": [{"op": "delete", "urn": urn, "oldState": {
        "type": "gcp:storage/bucket:Bucket", "inputs": {"name": "brew-prod"}}}]}))
    result = run(["report", "--preview", str(preview)])
    assert result.returncode == 1 and "deletes a bucket (its objects): brew-prod" in result.stdout
    preview.write_text("{}")
    bad = run(["report", "--preview", str(preview)])
    assert bad.returncode == 2 and "not `pulumi preview --json` output" in bad.stderr
