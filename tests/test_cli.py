"""`brew-infra synth` and `import-plan` as a user runs them: outputs, files, exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.synth.stacks import REPO_ROOT

CLI = [sys.executable, "-m", "infra.cli"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project's Pulumi.yaml and stacks, to break on purpose."""
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copytree(REPO_ROOT / "stacks", tmp_path / "stacks")
    return tmp_path


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin", "COLUMNS": "200"})


def edit_stack(project: Path, stack: str, change) -> None:
    path = project / "stacks" / f"Pulumi.{stack}.yaml"
    document = yaml.safe_load(path.read_text())
    change(document["config"])
    path.write_text(yaml.safe_dump(document))


def test_synth_all_writes_one_graph_per_stack_and_a_summary(project):
    result = run(["synth", "--all", "--out", "graphs"], project)
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in (project / "graphs").iterdir())
    assert written == ["demo.json", "edge.json", "prod.json", "staging.json"]
    prod = json.loads((project / "graphs" / "prod.json").read_text())
    assert set(prod) == {"project", "stack", "resources", "outputs"}
    assert (prod["project"], prod["stack"]) == ("brew", "prod")
    assert set(prod["resources"][0]) == {"urn", "type", "name", "parent", "inputs", "dependencies"}
    for name in ("brew-web", "brew-worker", "brew-ops", "brew-prod", "squareup-urlmap", "shopos-feed",
                 "brew-demo", "brew-prototype-demo", "brew-prod-armor", "brew-runtime"):
        assert name in result.stdout, name
    assert "ROLE=worker, instances 1..1" in result.stdout


def test_synth_json_prints_the_graph(project):
    result = run(["synth", "prod", "--format", "json"], project)
    assert result.returncode == 0, result.stderr
    graph = json.loads(result.stdout)
    assert graph["stack"] == "prod"
    assert any(r["type"] == "gcp:cloudrunv2/service:Service" for r in graph["resources"])


def test_unknown_stack_is_bad_input(project):
    result = run(["synth", "prodd"], project)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: unknown stack 'prodd': no stacks/Pulumi.prodd.yaml (stacks: demo, edge, prod, staging)"]
    assert "Traceback" not in result.stderr


def test_bad_setting_is_one_line_exit_2_and_writes_nothing(project):
    def two_workers(config):
        config["brew:services"][1]["maxInstances"] = 2

    edit_stack(project, "prod", two_workers)
    result = run(["synth", "--all", "--out", "graphs"], project)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: stacks/Pulumi.prod.yaml: brew:services[1].maxInstances:")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
    assert not (project / "graphs").exists()


def test_invalid_yaml_names_the_line(project):
    (project / "stacks" / "Pulumi.demo.yaml").write_text("config:\n  brew:environment: demo\n   bad: [\n")
    result = run(["synth", "demo"], project)
    assert result.returncode == 2
    assert result.stderr.startswith("error: stacks/Pulumi.demo.yaml:3: not valid YAML")


def test_missing_project_id_is_bad_input(project):
    edit_stack(project, "demo", lambda config: config.pop("gcp:project"))
    result = run(["synth", "demo"], project)
    assert result.returncode == 2
    assert "stacks/Pulumi.demo.yaml: gcp:project: required setting is missing" in result.stderr


def test_no_stack_named_is_bad_input(project):
    result = run(["synth"], project)
    assert result.returncode == 2
    assert "name a stack" in result.stderr


def test_import_plan_maps_declared_resources_to_live_ids(project):
    result = run(["import-plan", "prod", "--out", "import.json"], project)
    assert result.returncode == 0, result.stderr
    plan = json.loads((project / "import.json").read_text())
    ids = {r["logicalName"]: r.get("id") for r in plan["resources"]}
    entries = {r["name"]: r for r in plan["resources"]}
    assert "projects/squareup-brew/locations/asia-south1/services/brew-web" in ids.values()
    assert "projects/squareup-brew/instances/brew-prod" in ids.values()
    assert "squareup-brew/brew-prod" in ids.values()  # the bucket
    assert ("projects/squareup-brew/serviceAccounts/brew-prod-runtime@squareup-brew.iam.gserviceaccount.com"
            in ids.values())
    # Components are created empty so imported resources keep the program's parents (URNs).
    components = [r for r in plan["resources"] if r.get("component")]
    assert components and all("id" not in r for r in components)
    for r in plan["resources"]:
        if "parent" in r:
            assert entries[r["parent"]].get("component") is True
    # Google-generated IDs cannot be imported: listed for the person, not in the file.
    assert "not imported (created by pulumi up): gcp:monitoring/alertPolicy:AlertPolicy" in result.stderr
    assert not [r for r in plan["resources"] if r["type"] == "gcp:monitoring/alertPolicy:AlertPolicy"]


def test_import_plan_for_edge_covers_the_load_balancer(project):
    result = run(["import-plan", "edge", "--out", "import.json"], project)
    assert result.returncode == 0, result.stderr
    ids = {r.get("id") for r in json.loads((project / "import.json").read_text())["resources"]}
    assert "projects/squareup-brew/global/urlMaps/squareup-urlmap" in ids
    assert "projects/squareup-brew/global/addresses/squareup-ip" in ids
    assert "projects/squareup-brew/global/securityPolicies/brew-prod-armor" in ids


def test_help_teaches(project):
    result = run(["synth", "--help"], project)
    assert result.returncode == 0
    assert "--all" in result.stdout and "OUT/<stack>.json" in result.stdout
