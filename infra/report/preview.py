"""`pulumi preview --json` as a diff report: the steps Pulumi plans, read into the same
model `brew-infra diff` builds from two graphs, so reviewers see one format.

The document: `{"steps": [{"op", "urn", "oldState": {"type", "inputs", ...},
"newState": {...}, "diffReasons", "replaceReasons", "detailedDiff"}, ...],
"changeSummary": {...}}`. Ops: create, update, delete, replace, create-replacement,
delete-replaced, same, read, refresh, import, discard... Replacement shows as up to three
steps for one URN; they become one "replace".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infra.report.diff import DiffReport, StackDiff, dangers, property_changes, PropertyChange, ResourceChange
from infra.policy.engine import evaluate
from infra.policy.model import Resource

ACTIONS = {"create": "add", "delete": "remove", "update": "update", "replace": "replace",
           "create-replacement": "replace", "delete-replaced": "replace", "import": "add"}
UNCHANGED = {"same", "read", "refresh", "discard", "import-replacement"}


class PreviewError(ValueError):
    """Not a `pulumi preview --json` document."""


def _stack_of(urn: str) -> str:
    return urn.removeprefix("urn:pulumi:").split("::", 1)[0]


def _resource(urn: str, state: Mapping[str, Any] | None) -> Resource | None:
    if not isinstance(state, Mapping):
        return None
    name = urn.rsplit("::", 1)[-1]
    return Resource(str(state.get("type", "")), name, state.get("inputs") or {}, urn, state.get("parent"))


def read_preview(path: Path) -> DiffReport:
    try:
        document = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise PreviewError(f"{path}: no such file") from None
    except json.JSONDecodeError as error:
        raise PreviewError(f"{path}: not JSON: line {error.lineno} column {error.colno}: {error.msg}") from None
    steps = document.get("steps") if isinstance(document, dict) else None
    if not isinstance(steps, list):
        raise PreviewError(f"{path}: not `pulumi preview --json` output: expected an object with a \"steps\" list")
    stacks: dict[str, StackDiff] = {}
    before: dict[str, dict[str, Any]] = {}
    after: dict[str, dict[str, Any]] = {}
    planned: dict[str, tuple[str, Resource | None, Resource | None]] = {}
    for i, step in enumerate(steps):
        if not isinstance(step, dict) or not isinstance(step.get("urn"), str) or not isinstance(step.get("op"), str):
            raise PreviewError(f"{path}: steps[{i}]: expected an object with string \"op\" and \"urn\"")
        urn, op = step["urn"], step["op"]
        if op not in ACTIONS and op not in UNCHANGED:
            raise PreviewError(f"{path}: steps[{i}].op: unknown operation {op!r}")
        old, new = _resource(urn, step.get("oldState")), _resource(urn, step.get("newState"))
        stack = _stack_of(urn)
        for side, res in ((before, old), (after, new)):
            if res is not None and res.type:
                side.setdefault(stack, {"stack": stack, "resources": {}})["resources"][urn] = {
                    "type": res.type, "name": res.name, "urn": urn, "inputs": dict(res.inputs)}
        if op in UNCHANGED:
            continue
        action = ACTIONS[op]
        previous = planned.get(urn)
        if previous is not None:  # the steps of one replacement
            old, new = old or previous[1], new or previous[2]
            action = "replace"
        planned[urn] = (action, old, new)
    for urn, (action, old, new) in planned.items():
        subject = new or old
        if subject is None:
            continue
        stack = _stack_of(urn)
        changes: tuple[PropertyChange, ...] = ()
        if old is not None and new is not None:
            changes = property_changes(subject.type, old.inputs, new.inputs)
        stacks.setdefault(stack, StackDiff(stack, "changed")).changes.append(ResourceChange(
            stack, urn, subject.type, subject.physical_name, action, changes, dangers(action, subject, changes)))
    for stack in set(before) | set(after):
        diff = stacks.setdefault(stack, StackDiff(stack, "same"))
        old_graph = {"stack": stack, "resources": list(before.get(stack, {}).get("resources", {}).values())}
        new_graph = {"stack": stack, "resources": list(after.get(stack, {}).get("resources", {}).values())}
        old_findings = {f.key: f for f in evaluate(old_graph)}
        new_findings = {f.key: f for f in evaluate(new_graph)}
        diff.new_findings = [f for k, f in new_findings.items() if k not in old_findings]
        diff.fixed_findings = [f for k, f in old_findings.items() if k not in new_findings]
        diff.changes.sort(key=lambda c: c.urn)
    return DiffReport("live (pulumi preview)", str(path), [stacks[s] for s in sorted(stacks)])
