"""Building graphs for rule tests: crafted resources, or a shipped stack's graph with one
property changed."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from infra.policy.engine import Finding, evaluate
from infra.policy.model import Rule


def resource(type_token: str, name: str, inputs: dict[str, Any], stack: str = "prod",
             parent: str | None = None, dependencies: tuple[str, ...] = ()) -> dict[str, Any]:
    """One resource as `brew-infra synth` writes it."""
    return {"type": type_token, "name": name, "inputs": inputs, "parent": parent,
            "urn": f"urn:pulumi:{stack}::brew::{type_token}::{name}", "dependencies": list(dependencies)}


def graph(stack: str, *resources: dict[str, Any]) -> dict[str, Any]:
    return {"stack": stack, "project": "brew", "resources": list(resources), "outputs": {}}


def findings(rule: Rule, data: dict[str, Any], today: dt.date | None = None) -> list[Finding]:
    """The findings of one rule over one graph."""
    return evaluate(data, [rule], today=today)


def find(data: dict[str, Any], type_token: str, physical_name: str | None = None) -> dict[str, Any]:
    """The one resource of a type (by its cloud name, or the only one) in a graph."""
    found = [r for r in data["resources"] if r["type"] == type_token
             and (physical_name is None or (r["inputs"].get("name") or r["inputs"].get("accountId")) == physical_name)]
    assert len(found) == 1, f"expected one {type_token} {physical_name!r}, found {len(found)}"
    return found[0]


def changed(data: dict[str, Any], type_token: str, physical_name: str | None, path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `data` with one input set (dotted camelCase path; `x[0]` indexes a
    list; missing mappings are created). `value=DELETE` removes the key."""
    data = copy.deepcopy(data)
    target = find(data, type_token, physical_name)["inputs"]
    *parents, last = path.split(".")
    for part in parents:
        if part.endswith("]"):
            key, index = part[:-1].split("[")
            target = target[key][int(index)]
        else:
            target = target.setdefault(part, {})
    if value is DELETE:
        target.pop(last, None)
    else:
        target[last] = value
    return data


DELETE = object()
