"""Platform invariants (SPEC 3, 4): one worker holds the background lease, production web
survives an instance loss, and staging's bucket mirror is consistent and retired on time.

A Cloud Run service's role is its ROLE env var; a service belongs to the database it
depends on (the environments make every revision wait for its Cloud SQL instance). The
lease is Brew's: Penpot's processes (PENPOT_* env) have no ROLE and no lease, and
infra/policy/rules/penpot.py holds their invariants.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence

from infra.policy.model import Context, Resource, Severity, Violation, is_production, resource_rule, stack_rule
from infra.policy.rules._graph import (
    DEFAULT_MAX_INSTANCES,
    JOB,
    SERVICE,
    databases,
    env,
    is_penpot,
    label,
    number,
    roles,
)

MIRROR = "OBJECTS_MIRROR"
READTHROUGH = "OBJECTS_READTHROUGH"
SUNSET_LABEL = "mirror-sunset"  # written by infra/environments/staging.py from brew:mirror.sunset
MIN_PRODUCTION_WEB = 2
# The revision template's scaling, with what Cloud Run does when it is silent.
TEMPLATE_SCALING = (("template.scaling.minInstanceCount", 0),
                    ("template.scaling.maxInstanceCount", DEFAULT_MAX_INSTANCES))
# Service-level scaling, when declared, overrides the revision's.
SERVICE_SCALING = ("scaling.minInstanceCount", "scaling.maxInstanceCount", "scaling.manualInstanceCount")


def _on(workload: Resource, flag: str) -> bool:
    var = env(workload).get(flag)
    return var is not None and var.value.strip().lower() in ("1", "true")


@resource_rule(
    "BREW-I001", Severity.ERROR, "A worker runs exactly one instance", types=[SERVICE],
    description="Only the holder of the Postgres advisory lease (key 727275) runs timers, resumes builds and pays "
                "for work (SPEC 4). A second worker instance only waits while holding connections, and with "
                "minimum 0 no instance holds the lease at all. None of Checkov, KICS or Trivy has this invariant.",
    remediation="Set minInstances: 1 and maxInstances: 1 on the service whose role includes worker (brew:services "
                "in the stack file).",
    references=(),
)
def worker_single_instance(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if "worker" not in roles(res):
        return
    for path, default in TEMPLATE_SCALING:
        if number(res.get(path, default)) != 1:
            yield path, f"worker {res.physical_name} has {path} {res.get(path, default)}, not exactly 1"
    for path in SERVICE_SCALING:
        if res.get(path) is not None and number(res.get(path)) != 1:
            yield path, f"worker {res.physical_name} has {path} {res.get(path)}, not exactly 1"


@stack_rule(
    "BREW-I002", Severity.ERROR, "Exactly one service per database runs the worker role",
    description="The lease is per database: two worker services on one database race for it and the loser idles "
                "in the connection budget; none leaves timers and queued jobs unserved. Staging's shopos-feed "
                "(ROLE=web,worker) is brew-staging's one worker. Only Brew's services count: a Penpot process "
                "(PENPOT_* env) holds no lease (BREW-I103 judges Penpot's workers). None of Checkov, KICS or Trivy "
                "has this invariant.",
    remediation="Give exactly one service per database a role that includes worker (brew:services in the stack "
                "file).",
    references=(),
)
def one_worker_per_database(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    for instance, workloads in databases(resources):
        services = [w for w in workloads if w.type == SERVICE and not is_penpot(w)]
        workers = [s for s in services if "worker" in roles(s)]
        if services and not workers:
            yield Violation(instance, "name", f"no service connected to database {instance.physical_name} runs the "
                                              "worker role, so nothing holds the lease (name)")
        if len(workers) > 1:
            names = ", ".join(w.physical_name for w in workers)
            for worker in workers:
                path = env(worker)["ROLE"].path
                yield Violation(worker, path, f"database {instance.physical_name} has {len(workers)} worker "
                                              f"services ({names}); {worker.physical_name} is one ({path})")


@resource_rule(
    "BREW-I003", Severity.ERROR, "Production web keeps at least two instances", types=[SERVICE],
    description="With one warm instance, its restart or its zone's outage takes the site down and every scale-up "
                "starts cold (SPEC 3.1: min 2). None of Checkov, KICS or Trivy checks Cloud Run v2 scaling.",
    remediation="Set minInstances: 2 or more on the web service in stacks/Pulumi.prod.yaml.",
    references=(),
)
def production_web_redundant(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if not is_production(res, ctx) or roles(res) != {"web"}:
        return
    path = "template.scaling.minInstanceCount"
    minimum = number(res.get(path, 0))
    if minimum is None or minimum < MIN_PRODUCTION_WEB:
        yield path, (f"production web {res.physical_name} keeps {res.get(path, 0)} warm instances ({path}); "
                     f"it needs at least {MIN_PRODUCTION_WEB}")


@resource_rule(
    "BREW-I004", Severity.ERROR, "Mirror read-through needs the mirror", types=[SERVICE, JOB],
    description="OBJECTS_READTHROUGH=1 falls back to the bucket for objects missing from Postgres; without "
                "OBJECTS_MIRROR=1 nothing writes the bucket, so reads fall through to stale or missing objects "
                "(SPEC 3.2, promote gate 2). None of Checkov, KICS or Trivy knows these flags.",
    remediation="Turn brew:mirror.objectsMirror on, or objectsReadthrough off, in stacks/Pulumi.staging.yaml.",
    references=(),
)
def readthrough_needs_mirror(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if _on(res, READTHROUGH) and not _on(res, MIRROR):
        variables = env(res)
        path = (variables.get(MIRROR) or variables[READTHROUGH]).path
        shown = variables[MIRROR].value if MIRROR in variables else "unset"
        yield path, f"{res.physical_name} reads through to the bucket with {MIRROR}={shown} ({path})"


@resource_rule(
    "BREW-I005", Severity.WARNING, "Mirror flags are off after their sunset", types=[SERVICE, JOB],
    description="The bucket mirror is staging's temporary way back to bucket storage; the plan turns both flags "
                "off on the sunset date (brew:mirror.sunset) if no rollback happened. Flags on past it cost a "
                "bucket write per row and hold up the promote pipeline's gate 2. A warning: overdue, not unsafe. "
                "None of Checkov, KICS or Trivy knows these flags.",
    remediation="Set brew:mirror.objectsMirror and objectsReadthrough to false in stacks/Pulumi.staging.yaml, or "
                "move brew:mirror.sunset if the rollback window is extended on purpose.",
    references=(),
)
def mirror_sunset(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    flags = [flag for flag in (MIRROR, READTHROUGH) if _on(res, flag)]
    if not flags:
        return
    path = f"labels.{SUNSET_LABEL}"
    declared = label(res, SUNSET_LABEL)
    try:
        sunset = dt.date.fromisoformat(declared or "")
    except ValueError:
        yield path, f"{res.physical_name} has {', '.join(flags)} on without a {SUNSET_LABEL} date ({path})"
        return
    if ctx.today > sunset:
        days = (ctx.today - sunset).days
        yield path, (f"{res.physical_name} still has {', '.join(flags)} on, {days} days past the mirror sunset "
                     f"{sunset.isoformat()} ({path})")
