"""Small readers over synthesized graph data, shared by the tests."""

from __future__ import annotations

from typing import Any


def one(graph: dict, type_token: str, physical_name: str | None) -> dict[str, Any]:
    """The one resource of a type, by its physical (cloud) name; None: the only one."""
    found = [r for r in graph["resources"] if r["type"] == type_token
             and (physical_name is None or r["inputs"].get("name") == physical_name)]
    assert len(found) == 1, f"expected one {type_token} {physical_name!r}, found {len(found)}"
    return found[0]


def service(graph: dict, name: str) -> dict[str, Any]:
    return one(graph, "gcp:cloudrunv2/service:Service", name)


def template_container(resource: dict) -> dict[str, Any]:
    return resource["inputs"]["template"]["containers"][0]


def env_of(resource: dict) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueSource")) for e in template_container(resource).get("envs", [])}


def physical(graph: dict, type_token: str) -> set[str]:
    return {r["inputs"].get("accountId") or r["inputs"].get("name") for r in graph["resources"]
            if r["type"] == type_token}
