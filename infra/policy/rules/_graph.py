"""What several rule modules read from one stack's graph: Cloud Run workloads (their env,
role, identity and database), IAM members, and whether a referenced resource is
production.

Inputs may arrive as pulumi-policy proxies (a `Mapping` / `Sequence`, never a dict or a
list), so nothing here tests for dict or list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infra.policy.model import Context, Resource, is_production

SERVICE = "gcp:cloudrunv2/service:Service"
JOB = "gcp:cloudrunv2/job:Job"
INSTANCE = "gcp:sql/databaseInstance:DatabaseInstance"
ACCOUNT = "gcp:serviceaccount/account:Account"

# Cloud Run's own defaults when scaling or a job's task count is not declared.
DEFAULT_MAX_INSTANCES = 100
DEFAULT_TASK_COUNT = 1

# A resource another stack declares is known here only by name; the platform names
# production resources with a `prod` word (brew-prod, brew-prod-<secret>, brew-prod-armor).
_PRODUCTION_WORD = re.compile(r"(?:^|[-_.])prod(?:$|[-_.])")
_SERVICE_ACCOUNT = re.compile(r"^(?:serviceAccount:)?([a-z][-a-z0-9]*)@[-a-z0-9.]+\.gserviceaccount\.com$")


def items(value: Any) -> list[Any]:
    """A list input as a list; an absent or malformed one as empty."""
    return list(value) if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else []


def last_segment(reference: Any) -> str:
    """`projects/p/secrets/brew-prod-x` -> `brew-prod-x`; a bare name stays itself."""
    return str(reference or "").rstrip("/").rsplit("/", 1)[-1]


def number(value: Any) -> float | None:
    """A numeric input (the CLI may hand numbers over as strings); None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    try:
        return float(str(value))
    except ValueError:
        return None


def at(mapping: Any, path: str, default: Any = None) -> Any:
    """A nested value of a plain mapping (an Armor rule, an alert condition) by dotted path."""
    return Resource("", "", mapping if isinstance(mapping, Mapping) else {}).get(path, default)


def named(resources: Iterable[Resource], type_token: str) -> dict[str, Resource]:
    """Declared resources of one type by physical name."""
    return {r.physical_name: r for r in resources if r.type == type_token}


def label(resource: Resource, key: str) -> str | None:
    labels = resource.labels
    value = labels.get(key) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) else None


def production_named(name: str, declared: Mapping[str, Resource], ctx: Context) -> bool:
    """Declared here: its labels or the stack decide; declared elsewhere: its name does."""
    if name in declared:
        return is_production(declared[name], ctx)
    return production_word(name)


def production_word(name: str) -> bool:
    return bool(_PRODUCTION_WORD.search(name))


# --- IAM ------------------------------------------------------------------------------

def members(resource: Resource) -> list[tuple[str, str]]:
    """(property path, member) of an IAM member (`member`) or binding (`members`)."""
    single = resource.get("member")
    if isinstance(single, str):
        return [("member", single)]
    return [(f"members[{i}]", m) for i, m in enumerate(items(resource.get("members"))) if isinstance(m, str)]


def account_id(member_or_email: str) -> str | None:
    """`serviceAccount:brew-runtime@p.iam.gserviceaccount.com` -> `brew-runtime`."""
    match = _SERVICE_ACCOUNT.match(member_or_email)
    return match.group(1) if match else None


def production_identities(resources: Iterable[Resource], ctx: Context) -> set[str]:
    """Account ids of the service accounts a production stack creates. An identity belongs
    to the environment of the stack that creates it: brew-runtime, created by staging, is
    a stranger in the prod graph even where the ops job runs as it."""
    return {str(r.get("accountId")) for r in resources
            if r.type == ACCOUNT and r.get("accountId") and is_production(r, ctx)}


# --- Cloud Run workloads --------------------------------------------------------------

@dataclass(frozen=True)
class EnvVar:
    value: str
    path: str  # e.g. template.containers[0].envs[3].value


def _template(workload: Resource) -> str:
    return "template.template" if workload.type == JOB else "template"


def env(workload: Resource) -> dict[str, EnvVar]:
    """Plain (non-secret) env vars of a service or job, first container first."""
    base = _template(workload)
    found: dict[str, EnvVar] = {}
    for c, container in enumerate(items(workload.get(f"{base}.containers"))):
        if not isinstance(container, Mapping):
            continue
        for e, var in enumerate(items(container.get("envs"))):
            if not isinstance(var, Mapping) or not isinstance(var.get("name"), str):
                continue
            value = var.get("value")
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                found.setdefault(var["name"], EnvVar(str(value), f"{base}.containers[{c}].envs[{e}].value"))
    return found


def env_names(workload: Resource) -> set[str]:
    """Every env var a service or job declares, plain or from Secret Manager."""
    base = _template(workload)
    return {str(var.get("name")) for container in items(workload.get(f"{base}.containers"))
            if isinstance(container, Mapping) for var in items(container.get("envs"))
            if isinstance(var, Mapping) and isinstance(var.get("name"), str)}


def is_penpot(workload: Resource) -> bool:
    """A Penpot process (the blueprint of SPEC 6): it reads PENPOT_* variables, which Brew's
    app never does. Brew's invariants and budgets (ROLE, the lease, PG_POOL_MAX) are not
    Penpot's; infra/policy/rules/penpot.py judges these."""
    return any(name.startswith("PENPOT_") for name in env_names(workload))


def roles(workload: Resource) -> set[str]:
    """What the app process does, from its ROLE env var (`web`, `worker`, `web,worker`)."""
    role = env(workload).get("ROLE")
    return {part.strip() for part in role.value.split(",") if part.strip()} if role else set()


def service_account(workload: Resource) -> str:
    return str(workload.get(f"{_template(workload)}.serviceAccount") or "")


def databases(resources: Sequence[Resource]) -> list[tuple[Resource, list[Resource]]]:
    """Each declared Cloud SQL instance with the services and jobs that connect to it.

    A workload is linked to the instances it depends on: the environments make every
    revision wait for its database, so the dependency is the declared connection.
    """
    instances = {r.urn: r for r in resources if r.type == INSTANCE and r.urn}
    linked: dict[str, list[Resource]] = {urn: [] for urn in instances}
    for workload in resources:
        if workload.type in (SERVICE, JOB):
            for urn in dict.fromkeys(workload.dependencies):
                if urn in linked:
                    linked[urn].append(workload)
    return [(instances[urn], workloads) for urn, workloads in linked.items()]
