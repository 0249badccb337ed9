"""The two sides of `brew-infra diff`: graph files, folders of graph files, or git refs.

A git ref is synthesized with that tree's own code — the base's components may differ
from today's — by exporting it (`git archive`) to a temporary folder and running its
`brew-infra synth --all` there with this interpreter (the same locked environment).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from infra.policy.engine import GraphFileError, load_graph

WORKING_TREE = "working tree"


class SideError(ValueError):
    """A side that cannot be read: unknown ref, not a repository, bad graph file."""


def is_graph_path(spec: str) -> bool:
    return spec.endswith(".json") or Path(spec).is_dir()


def load_files(spec: str) -> dict[str, dict[str, Any]]:
    """One graph file, or every graph file (`*.json` with a "resources" list) in a folder."""
    path = Path(spec)
    try:
        if path.is_dir():
            graphs = {}
            for file in sorted(path.glob("*.json")):
                try:
                    document = json.loads(file.read_text())
                except (OSError, json.JSONDecodeError):
                    continue
                if isinstance(document, dict) and isinstance(document.get("resources"), list):
                    graph = load_graph(file)
                    graphs[graph["stack"]] = graph
            if not graphs:
                raise SideError(f"{path}: no graph files (out/<stack>.json from brew-infra synth) in this folder")
            return graphs
        graph = load_graph(path)
        return {graph["stack"]: graph}
    except GraphFileError as error:
        raise SideError(str(error)) from None


def _git(root: Path, *args: str, text: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=text, timeout=60, check=False)


def resolve_ref(root: Path, ref: str) -> str:
    inside = _git(root, "rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0:
        raise SideError(f"{root} is not a git repository: give two graph files instead of git refs")
    resolved = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if resolved.returncode != 0:
        raise SideError(f"unknown git ref {ref!r} (not a branch, tag or commit in {root})")
    return resolved.stdout.strip()


def synthesize_ref(root: Path, ref: str) -> dict[str, dict[str, Any]]:
    """Every stack as the commit `ref` declares it, synthesized by that commit's code."""
    commit = resolve_ref(root, ref)
    archive = _git(root, "archive", "--format=tar", commit, text=False)
    if archive.returncode != 0:
        raise SideError(f"git archive {ref}: {archive.stderr.decode(errors='replace').strip()}")
    with tempfile.TemporaryDirectory(prefix="brew-diff-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tree, filter="data")
        out = Path(tmp) / "graphs"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        result = subprocess.run([sys.executable, "-m", "infra.cli", "synth", "--all", "--out", str(out)],
                                cwd=tree, env=env, capture_output=True, text=True, timeout=600, check=False)
        if result.returncode != 0:
            reason = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
            raise SideError(f"cannot synthesize {ref} ({commit[:12]}): {reason}")
        return load_files(str(out))


def synthesize_working_tree() -> dict[str, dict[str, Any]]:
    from infra.synth.stacks import available_stacks, synthesize

    return {stack: synthesize(stack).to_dict() for stack in available_stacks()}


def load_side(spec: str | None, root: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    """(label, graphs by stack) for a graph file, a folder, a git ref, or None: the working tree."""
    if spec is None:
        return WORKING_TREE, synthesize_working_tree()
    if is_graph_path(spec):
        return spec, load_files(spec)
    return spec, synthesize_ref(root, spec)
