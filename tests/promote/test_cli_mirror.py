"""`brew-infra mirror status` against a sandbox, as a person runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from infra.synth.stacks import REPO_ROOT

CLI = [sys.executable, "-m", "infra.cli"]
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=120)


@pytest.fixture
def sandbox(tmp_path):
    started = []

    def up(*faults: str):
        directory = tmp_path / f"sandbox-{len(started)}"
        args = ["sandbox", "up", "--dir", str(directory)]
        for fault in faults:
            args += ["--inject", fault]
        result = cli(*args)
        assert result.returncode == 0, result.stderr
        started.append(directory)
        return directory

    yield up
    for directory in started:
        cli("sandbox", "down", "--dir", str(directory))


def test_mirror_status_is_ok_on_a_synced_mirror(sandbox):
    directory = sandbox()
    result = cli("mirror", "status", "--sandbox-dir", str(directory))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OBJECTS_MIRROR=1" in result.stdout and result.stdout.strip().endswith("ok")


def test_mirror_status_names_missing_and_stale_keys(sandbox):
    directory = sandbox("mirror-out-of-sync")
    result = cli("mirror", "status", "--sandbox-dir", str(directory), "--format", "json")
    assert result.returncode == 23, result.stdout + result.stderr
    status = json.loads(result.stdout)
    assert status["ok"] is False and status["problems"][0]["kind"] == "out-of-sync"
    message = status["problems"][0]["message"]
    assert "3 missing" in message and "2 stale" in message
    assert "brand-0003/doc" in message and "brand-0010/doc" in message
