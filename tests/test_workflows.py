"""The GitHub workflows call commands and options that exist: a renamed option must not
break CI on the first pull request after it."""

from __future__ import annotations

import re
import shlex

import yaml
from typer.testing import CliRunner

from infra.cli import app
from infra.synth.stacks import REPO_ROOT

REVIEW = REPO_ROOT / ".github" / "workflows" / "review.yml"


def brew_infra_calls(path) -> list[list[str]]:
    calls = []
    for job in yaml.safe_load(path.read_text())["jobs"].values():
        for step in job["steps"]:
            for line in str(step.get("run", "")).splitlines():
                match = re.search(r"uv run brew-infra (.*?)(?:\|\||$)", line)
                if match:
                    calls.append(shlex.split(match.group(1).replace("${{", "X").replace("}}", "X")))
    return calls


def test_workflow_commands_and_options_exist():
    runner, path = CliRunner(), REVIEW
    calls = brew_infra_calls(path)
    assert calls
    for argv in calls:
        words = [w for w in argv if not w.startswith("-")]
        command = [w for w in words[:2] if w in ("synth", "check", "diff", "diagram", "report", "sandbox", "mirror",
                                                   "promote", "storage", "status", "check")]
        help_text = runner.invoke(app, [*command, "--help"], terminal_width=200).output
        assert "Usage:" in help_text, (path.name, argv)
        for option in (w.split("=")[0] for w in argv if w.startswith("--")):
            assert option in help_text, f"{path.name}: brew-infra {' '.join(argv)}: no option {option}"


def test_review_workflow_runs_the_review_commands():
    calls = {tuple(c[:1]) for c in brew_infra_calls(REVIEW)}
    assert {("synth",), ("check",), ("diff",), ("diagram",)} <= calls
