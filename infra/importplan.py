"""The file `pulumi import --file` takes to adopt what production's shell scripts created.

Each declared cloud resource is mapped to the live ID Google Cloud knows it by, built
from the stack's project, region and the physical names (the same names the stacks
declare, so adoption recreates nothing). Components come first as `component: true`
entries so the imported resources land under the same parents, and so the same URNs,
as the program declares them. Resources whose IDs Google generates (alert policies,
notification channels) or that production does not have yet (the workload identity
pool) cannot be imported: they are listed apart and created by the first `pulumi up`.

Works on plain graph data only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infra.gcp_ids import LIVE_ID


@dataclass
class ImportPlan:
    resources: list[dict[str, Any]] = field(default_factory=list)
    created: list[dict[str, str]] = field(default_factory=list)  # what `pulumi up` creates instead

    def to_file(self) -> dict[str, Any]:
        return {"nameTable": {}, "resources": self.resources}


def build_import_plan(graph: dict, project: str, region: str) -> ImportPlan:
    by_urn = {r["urn"]: r for r in graph["resources"]}
    keys = _unique_keys(graph["resources"])
    plan = ImportPlan()
    for r in graph["resources"]:
        entry: dict[str, Any] = {"type": r["type"], "name": keys[r["urn"]], "logicalName": r["name"]}
        parent = r.get("parent")
        if parent in by_urn:
            entry["parent"] = keys[parent]
        if not r["type"].startswith("gcp:"):
            entry["component"] = True
            plan.resources.append(entry)
            continue
        make_id = LIVE_ID.get(r["type"])
        if make_id is None:
            plan.created.append({"type": r["type"], "name": r["name"],
                                 "why": "Google generates its ID, or production does not have it yet"})
            continue
        entry["id"] = make_id(r["inputs"], project, region)
        plan.resources.append(entry)
    return plan


def _unique_keys(resources: list[dict]) -> dict[str, str]:
    # Pulumi names are unique per type, not across types: qualify only where they clash.
    counts: dict[str, int] = {}
    for r in resources:
        counts[r["name"]] = counts.get(r["name"], 0) + 1
    return {
        r["urn"]: r["name"] if counts[r["name"]] == 1 else f"{r['name']}:{r['type'].split(':')[-1]}"
        for r in resources
    }
