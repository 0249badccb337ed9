"""Findings for machines: JSON, and SARIF 2.1.0 for code-scanning annotations.

SARIF wants a file and a line for each result. A finding is about a declared resource,
and what declares it is the stack file: the result points at the first line of
`stacks/Pulumi.<stack>.yaml` that names the resource's physical name (the line to edit
more often than not), else at the file's first line. A checked graph file is its own
location.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from infra.policy.engine import Finding
from infra.policy.model import Rule, Severity

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/joinsquareup/brew-infra#guardrails"


KIND = {"S": "security", "I": "invariant", "B": "budget"}  # the letter after BREW-


def summary(findings: Sequence[Finding]) -> dict[str, int]:
    errors = sum(1 for f in findings if f.severity is Severity.ERROR)
    return {"errors": errors, "warnings": len(findings) - errors}


def rule_dict(rule: Rule) -> dict[str, Any]:
    return {"id": rule.id, "severity": rule.severity.value, "title": rule.title, "description": rule.description,
            "remediation": rule.remediation, "scope": rule.scope, "types": list(rule.types),
            "references": list(rule.references)}


def to_json(findings: Sequence[Finding], stacks: Iterable[str], rules: Sequence[Rule]) -> dict[str, Any]:
    return {"stacks": list(stacks), "rules": len(rules), **summary(findings),
            "findings": [f.to_dict() for f in findings]}


def _line_naming(path: Path, name: str) -> int:
    try:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if name and name in line:
                return number
    except OSError:
        pass
    return 1


def _fingerprint(finding: Finding) -> str:
    return hashlib.sha256("|".join(finding.key).encode()).hexdigest()[:32]


def to_sarif(findings: Sequence[Finding], rules: Sequence[Rule], sources: Mapping[str, Path],
             root: Path) -> dict[str, Any]:
    """`sources`: stack -> the file that declares it (stack file or graph file); URIs are
    made relative to `root` (the repository) so annotations land on the right file."""
    index = {rule.id: i for i, rule in enumerate(rules)}
    results = []
    for finding in findings:
        source = sources.get(finding.stack)
        location: dict[str, Any] = {"logicalLocations": [
            {"name": finding.resource, "fullyQualifiedName": finding.urn or finding.resource, "kind": "resource"}]}
        if source is not None:
            try:
                uri = source.resolve().relative_to(root.resolve()).as_posix()
            except ValueError:
                uri = source.resolve().as_uri()
            location["physicalLocation"] = {
                "artifactLocation": {"uri": uri},
                "region": {"startLine": _line_naming(source, finding.resource)},
            }
        result = {
            "ruleId": finding.rule,
            "level": "error" if finding.severity is Severity.ERROR else "warning",
            "message": {"text": f"{finding.message} (stack {finding.stack}, property {finding.property})"},
            "locations": [location],
            "partialFingerprints": {"brewFinding/v1": _fingerprint(finding)},
            "properties": {"stack": finding.stack, "type": finding.type, "property": finding.property},
        }
        if finding.rule in index:
            result["ruleIndex"] = index[finding.rule]
        results.append(result)
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "brew-infra",
                "informationUri": INFORMATION_URI,
                "rules": [_sarif_rule(rule) for rule in rules],
            }},
            "results": results,
        }],
    }


def _sarif_rule(rule: Rule) -> dict[str, Any]:
    level = "error" if rule.severity is Severity.ERROR else "warning"
    return {
        "id": rule.id,
        "name": rule.title,
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": rule.description},
        "help": {"text": f"Remediation: {rule.remediation}",
                 "markdown": f"**Remediation.** {rule.remediation}"},
        "defaultConfiguration": {"level": level},
        "properties": {"tags": [KIND[rule.id[5]], *rule.references]},
    }
