"""`brew-infra promote` refuses bad arguments in one line, exit 2, before touching anything."""

from __future__ import annotations

import subprocess
import sys

import pytest

from infra.synth.stacks import REPO_ROOT


def promote(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infra.cli", "promote", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--inject", "web-errors"], "--inject needs --sandbox"),
        (["--sandbox", "--inject", "gremlins"], "unknown fault 'gremlins'; choose from db-down"),
        (["--sandbox", "--inject", "crash-after-worker"], "crash-after-worker needs a sandbox that outlives the run"),
        (["--sandbox", "--sandbox-dir", ".sandbox"], "give --sandbox or --sandbox-dir, not both"),
        (["--sandbox-dir", "/nonexistent/sandbox"], "no sandbox up in /nonexistent/sandbox"),
        (["--stack", "prodd"], "unknown stack 'prodd'"),
    ],
)
def test_bad_arguments(args, message):
    result = promote(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
