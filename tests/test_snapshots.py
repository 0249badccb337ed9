"""Reviewed snapshots of each stack's graph: any change to what a stack declares fails
here until the snapshot is regenerated and its diff reviewed with the change.

    BREW_UPDATE_SNAPSHOTS=1 uv run pytest tests/test_snapshots.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from infra.synth.stacks import available_stacks, dumps

SNAPSHOTS = Path(__file__).parent / "snapshots"


def _differences(expected: dict, actual: dict) -> list[str]:
    before = {r["urn"]: r for r in expected["resources"]}
    after = {r["urn"]: r for r in actual["resources"]}
    lines = [f"added   {urn}" for urn in sorted(after.keys() - before.keys())]
    lines += [f"removed {urn}" for urn in sorted(before.keys() - after.keys())]
    lines += [f"changed {urn}" for urn in sorted(before.keys() & after.keys()) if before[urn] != after[urn]]
    if expected["outputs"] != actual["outputs"]:
        lines.append("changed stack outputs")
    return lines


@pytest.mark.parametrize("stack", available_stacks())
def test_graph_matches_reviewed_snapshot(graphs, stack):
    path = SNAPSHOTS / f"{stack}.json"
    actual = graphs[stack]
    if os.environ.get("BREW_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(dumps(actual))
        pytest.skip(f"rewrote {path.name}: review its diff")
    assert path.exists(), f"no snapshot for {stack}: run BREW_UPDATE_SNAPSHOTS=1 uv run pytest {__file__}"
    expected = json.loads(path.read_text())
    differences = _differences(expected, actual)
    assert expected == actual, (
        f"stack {stack} declares something the reviewed snapshot does not:\n  "
        + "\n  ".join(differences or ["(resource order or inputs)"])
        + "\nIf intended: BREW_UPDATE_SNAPSHOTS=1 uv run pytest tests/test_snapshots.py, and commit the diff."
    )


def test_two_runs_are_identical():
    from infra.synth.stacks import synthesize

    assert dumps(synthesize("prod").to_dict()) == dumps(synthesize("prod").to_dict())
