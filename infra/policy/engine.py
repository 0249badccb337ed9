"""Run the rules over a synthesized graph (plain data, `out/<stack>.json`) and return
findings, most severe first. `brew-infra check`, `diff` (new findings) and the tests use
this; the policy pack runs the same `Rule` objects through pulumi-policy."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from infra.policy.model import Context, Resource, Rule, Severity


class GraphFileError(ValueError):
    """A graph file that is missing, not JSON, or not a synthesized graph."""


@dataclass(frozen=True)
class Finding:
    rule: str  # BREW-Snnn / Innn / Bnnn
    severity: Severity
    stack: str
    resource: str  # physical name (what the console shows)
    type: str  # the Pulumi type token
    urn: str
    property: str
    message: str
    remediation: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        """Identity across two versions of a stack (the diff's "new finding")."""
        return (self.rule, self.stack, self.urn, self.property)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        return data


def resources_of(graph: Mapping[str, Any]) -> list[Resource]:
    return [Resource(type=r["type"], name=r["name"], inputs=r.get("inputs") or {}, urn=r.get("urn", ""),
                     parent=r.get("parent"), dependencies=tuple(r.get("dependencies") or ()))
            for r in graph.get("resources", [])]


def evaluate(graph: Mapping[str, Any], rules: Sequence[Rule] | None = None,
             today: dt.date | None = None) -> list[Finding]:
    """Every rule over one stack's graph; errors first, then by rule, resource, property."""
    if rules is None:
        from infra.policy.rules import ALL_RULES

        rules = ALL_RULES
    ctx = Context(graph.get("stack", ""), today) if today else Context(graph.get("stack", ""))
    resources = resources_of(graph)
    findings = {}
    for rule in rules:
        for v in rule.violations(resources, ctx):
            finding = Finding(rule.id, rule.severity, ctx.stack, v.resource.physical_name, v.resource.type,
                              v.resource.urn, v.property, v.message, rule.remediation)
            findings.setdefault((finding.key, finding.message), finding)
    return sorted(findings.values(), key=lambda f: (f.severity != Severity.ERROR, f.rule, f.stack, f.resource,
                                                    f.property, f.message))


def load_graph(path: Path) -> dict[str, Any]:
    """A graph file written by `brew-infra synth` (or any tool writing the same shape)."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise GraphFileError(f"{path}: no such graph file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise GraphFileError(f"{path}: cannot read: {error}") from None
    except json.JSONDecodeError as error:
        raise GraphFileError(f"{path}: not JSON: line {error.lineno} column {error.colno}: {error.msg}") from None
    if not isinstance(data, dict) or not isinstance(data.get("resources"), list):
        raise GraphFileError(f"{path}: not a synthesized graph: expected an object with a \"resources\" list")
    for i, resource in enumerate(data["resources"]):
        if not isinstance(resource, dict) or not isinstance(resource.get("type"), str) \
                or not isinstance(resource.get("name"), str):
            raise GraphFileError(f"{path}: resources[{i}]: expected an object with string \"type\" and \"name\"")
        if not isinstance(resource.get("inputs", {}), dict):
            raise GraphFileError(f"{path}: resources[{i}].inputs: expected an object")
    data.setdefault("stack", Path(path).stem)
    return data
