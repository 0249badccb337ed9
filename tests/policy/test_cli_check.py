"""`brew-infra check` and `brew-infra rules` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from infra.policy.engine import evaluate
from infra.policy.output import to_sarif
from infra.policy.rules import ALL_RULES
from infra.synth.stacks import REPO_ROOT
from tests.policy.helpers import changed
from tests.test_cli import edit_stack, project, run  # noqa: F401 - fixture

SARIF_SCHEMA = json.loads((Path(__file__).parent / "sarif-2.1.0-required.schema.json").read_text())
SERVICE = "gcp:cloudrunv2/service:Service"
BUCKET = "gcp:storage/bucket:Bucket"


def write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def public_bucket(graphs, tmp_path) -> Path:
    data = changed(graphs["prod"], BUCKET, "brew-prod", "publicAccessPrevention", "inherited")
    return write(tmp_path / "prod.json", data)


def test_check_all_passes_on_the_shipped_stacks():
    result = run(["check", "--all"], REPO_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed: 0 error(s)" in result.stdout
    assert f"from {len(ALL_RULES)} rules over demo, edge, penpot-prod, prod, staging" in result.stdout


def test_web_ingress_all_fails_with_the_rules_id(project):  # noqa: F811
    """brew-web taken off the load balancer and opened to all traffic."""
    def break_it(config):
        config["brew:services"][0].update(ingress="all", public=False)

    edit_stack(project, "prod", break_it)
    result = run(["check", "prod", "--format", "json"], project)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["stacks"] == ["prod"] and report["errors"] >= 1
    errors = {(f["rule"], f["resource"], f["property"]) for f in report["findings"] if f["severity"] == "error"}
    assert ("BREW-S030", "brew-web", "ingress") in errors
    assert all(f["remediation"] for f in report["findings"])


@pytest.mark.parametrize("index, change, key, rule", [
    (1, {"maxInstances": 2}, "brew:services[1].maxInstances", "BREW-I001"),
    (0, {"ingress": "all"}, "brew:services[0].ingress", "BREW-S033"),
])
def test_settings_refuse_what_pulumi_up_must_not_ship_naming_the_rule(project, index, change, key, rule):  # noqa: F811
    """Refused before anything is declared (so `pulumi up` cannot ship it without the pack
    either): exit 2, the key, and the rule that judges the same in graphs."""
    edit_stack(project, "prod", lambda config: config["brew:services"][index].update(change))
    result = run(["check", "prod"], project)
    assert result.returncode == 2
    assert key in result.stderr and rule in result.stderr and "Traceback" not in result.stderr


def test_a_worker_graph_with_two_instances_fails_the_rule(graphs, tmp_path):
    path = write(tmp_path / "prod.json",
                 changed(graphs["prod"], SERVICE, "brew-worker", "template.scaling.maxInstanceCount", 2))
    result = run(["check", "--graph", str(path), "--format", "json"], REPO_ROOT)
    assert result.returncode == 1
    errors = {(f["rule"], f["resource"]) for f in json.loads(result.stdout)["findings"]}
    assert ("BREW-I001", "brew-worker") in errors


def test_public_bucket_graph_fails_in_the_table(public_bucket):
    result = run(["check", "--graph", str(public_bucket)], REPO_ROOT)
    assert result.returncode == 1
    expected = {f.rule for f in evaluate(json.loads(public_bucket.read_text()))}
    assert expected and all(rule in result.stdout for rule in expected)
    assert "brew-prod" in result.stdout and "publicAccessPrevention" in result.stdout
    assert "How to fix:" in result.stdout and result.stdout.rstrip().splitlines()[-1].startswith("FAILED: ")


def test_sarif_output_is_valid_and_points_at_the_file(public_bucket, tmp_path):
    out = tmp_path / "check.sarif"
    result = run(["check", "--graph", str(public_bucket), "--format", "sarif", "-o", str(out)], REPO_ROOT)
    assert result.returncode == 1 and "wrote" in result.stderr
    sarif = json.loads(out.read_text())
    jsonschema.validate(sarif, SARIF_SCHEMA)
    run_ = sarif["runs"][0]
    assert [r["id"] for r in run_["tool"]["driver"]["rules"]] == [rule.id for rule in ALL_RULES]
    assert run_["results"] and all(r["level"] == "error" for r in run_["results"]
                                   if r["ruleId"] in {x.id for x in ALL_RULES if x.severity.value == "error"})
    for r in run_["results"]:
        assert run_["tool"]["driver"]["rules"][r["ruleIndex"]]["id"] == r["ruleId"]
        assert r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == public_bucket.resolve().as_uri()


def test_sarif_locates_the_stack_file_line_naming_the_resource(graphs):
    data = changed(graphs["prod"], SERVICE, "brew-worker", "template.scaling.maxInstanceCount", 3)
    stack_file = REPO_ROOT / "stacks" / "Pulumi.prod.yaml"
    sarif = to_sarif(evaluate(data), ALL_RULES, {"prod": stack_file}, REPO_ROOT)
    jsonschema.validate(sarif, SARIF_SCHEMA)
    worker = [r for r in sarif["runs"][0]["results"] if r["properties"]["property"] == "template.scaling.maxInstanceCount"]
    assert worker
    location = worker[0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "stacks/Pulumi.prod.yaml"
    line = stack_file.read_text().splitlines()[location["region"]["startLine"] - 1]
    assert "brew-worker" in line


def test_json_output_of_a_clean_graph(graphs, tmp_path):
    path = write(tmp_path / "edge.json", graphs["edge"])
    result = run(["check", "--graph", str(path), "--format", "json"], REPO_ROOT)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["stacks"] == ["edge"] and report["errors"] == 0 and report["rules"] == len(ALL_RULES)


@pytest.mark.parametrize("args, message", [
    (["--graph", "missing.json"], "missing.json: no such graph file"),
    (["--graph", "{bad}"], "not JSON"),
    (["prod", "--graph", "x.json"], "not both"),
    (["nope"], "unknown stack 'nope'"),
    ([], "name a stack"),
    (["--format", "xml", "--all"], "'xml' is not one of"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    (tmp_path / "{bad}").write_text("{")
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "stacks").symlink_to(REPO_ROOT / "stacks")
    result = run(["check", *args], tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_rules_lists_every_rule():
    result = run(["rules", "--format", "json"], REPO_ROOT)
    assert result.returncode == 0
    listed = json.loads(result.stdout)
    assert [r["id"] for r in listed] == [rule.id for rule in ALL_RULES]
    assert len(listed) >= 30
    assert all(r["description"] and r["remediation"] and r["severity"] in ("error", "warning") for r in listed)
