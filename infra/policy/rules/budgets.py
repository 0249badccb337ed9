"""The Postgres connection budget (SPEC 4), per Cloud SQL instance: what every service and
job connected to it may open at once must stay under the connections alert level, and
that level under the instance's max_connections, so the alert fires while there is
still room.

A service may open max instances x its pool (PG_POOL_MAX, which the environments set),
plus one lease connection per instance when it runs the worker role; a job opens its
concurrent tasks x its pool, or one connection per task without a pool. These are Brew's
terms: Penpot's processes (PENPOT_* env) size their pool differently and are budgeted by
BREW-B101/B102 (infra/policy/rules/penpot.py), which reuse the helpers here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from infra.policy.model import Context, Resource, Severity, Violation, is_production, stack_rule
from infra.policy.rules._graph import (
    DEFAULT_MAX_INSTANCES,
    DEFAULT_TASK_COUNT,
    INSTANCE,
    JOB,
    SERVICE,
    at,
    databases,
    env,
    is_penpot,
    items,
    number,
    roles,
)

ALERT_POLICY = "gcp:monitoring/alertPolicy:AlertPolicy"
POOL_VAR = "PG_POOL_MAX"
BACKENDS_METRIC = "cloudsql.googleapis.com/database/postgresql/num_backends"
ALERTING_COMPARISONS = ("COMPARISON_GT", "COMPARISON_GE")
SHARED_CORE_MEMORY_GB = {"db-f1-micro": 0.6, "db-g1-small": 1.7}
# Cloud SQL for PostgreSQL's default max_connections by instance memory (GB, from):
# reference/security-rules.md section B. Memory between two rows takes the lower row.
DEFAULT_MAX_CONNECTIONS = ((120, 1000), (60, 800), (30, 600), (15, 500), (7.5, 400), (6, 200), (3.75, 100),
                           (1.7, 50), (0, 25))

_CUSTOM_TIER = re.compile(r"^db-custom-(\d+)-(\d+)$")
_N1_TIER = re.compile(r"^db-n1-(standard|highmem)-(\d+)$")
_N1_MEMORY_PER_CPU = {"standard": 3.75, "highmem": 6.5}
_DATABASE_ID = re.compile(r'resource\.labels\.database_id\s*=\s*"([^"]+)"')


def _fmt(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class Term:
    """One workload's share: count (instances or concurrent tasks) x (pool + lease)."""

    workload: str
    count: float
    pool: float
    lease: int = 0

    @property
    def connections(self) -> float:
        return self.count * (self.pool + self.lease)

    def __str__(self) -> str:
        each = f"({_fmt(self.pool)} + {self.lease} lease)" if self.lease else _fmt(self.pool)
        return f"{self.workload} {_fmt(self.count)} x {each}"


@dataclass(frozen=True)
class Budget:
    instance: Resource
    terms: tuple[Term, ...]
    unpooled: tuple[Resource, ...]  # services with no readable pool size: no bound at all

    @property
    def total(self) -> float:
        return sum(term.connections for term in self.terms)

    def arithmetic(self) -> str:
        return f"{' + '.join(map(str, self.terms))} = {_fmt(self.total)}"


def _service_term(service: Resource) -> Term | None:
    pool = env(service).get(POOL_VAR)
    size = number(pool.value) if pool else None
    instances = number(service.get("template.scaling.maxInstanceCount", DEFAULT_MAX_INSTANCES))
    if size is None or instances is None:
        return None
    return Term(service.physical_name, instances, size, 1 if "worker" in roles(service) else 0)


def _job_term(job: Resource) -> Term:
    pool = env(job).get(POOL_VAR)
    size = (number(pool.value) if pool else None) or 1
    # Cloud Run runs every task at once when parallelism is 0 or unset.
    parallel = number(job.get("template.parallelism")) or number(job.get("template.taskCount", DEFAULT_TASK_COUNT))
    return Term(job.physical_name, parallel or DEFAULT_TASK_COUNT, size)


def budgets(resources: Sequence[Resource]) -> list[Budget]:
    """The budget of each declared instance some of Brew's services or jobs connect to."""
    found = []
    for instance, connected in databases(resources):
        workloads = [w for w in connected if not is_penpot(w)]
        if not workloads:
            continue
        services = [(s, _service_term(s)) for s in workloads if s.type == SERVICE]
        terms = [t for _, t in services if t is not None] + [_job_term(w) for w in workloads if w.type == JOB]
        found.append(Budget(instance, tuple(terms), tuple(s for s, t in services if t is None)))
    return found


def memory_gb(tier: str) -> float | None:
    """Instance memory of a Cloud SQL tier name; None for a tier this table does not know."""
    if tier in SHARED_CORE_MEMORY_GB:
        return SHARED_CORE_MEMORY_GB[tier]
    custom = _CUSTOM_TIER.match(tier)
    if custom:
        return int(custom.group(2)) / 1024
    n1 = _N1_TIER.match(tier)
    return _N1_MEMORY_PER_CPU[n1.group(1)] * int(n1.group(2)) if n1 else None


@dataclass(frozen=True)
class Limit:
    value: int
    path: str  # where it comes from: the max_connections flag, or the tier
    source: str  # for messages: "flag max_connections", "tier db-custom-2-7680 (7.5 GB)"


def max_connections(instance: Resource) -> Limit | None:
    """The instance's max_connections: its database flag, else Cloud SQL's default for the tier."""
    for i, flag in enumerate(items(instance.get("settings.databaseFlags"))):
        value = number(at(flag, "value")) if at(flag, "name") == "max_connections" else None
        if value is not None:
            return Limit(int(value), f"settings.databaseFlags[{i}].value", "flag max_connections")
    tier = str(instance.get("settings.tier") or "")
    memory = memory_gb(tier)
    if memory is None:
        return None
    default = next(connections for floor, connections in DEFAULT_MAX_CONNECTIONS if memory >= floor)
    return Limit(default, "settings.tier", f"tier {tier} ({memory:g} GB)")


@dataclass(frozen=True)
class AlertLevel:
    policy: Resource
    path: str  # the condition's thresholdValue
    value: float | None
    comparison: str


def _names(instance: Resource, database_id: str) -> bool:
    """Whether a monitoring database_id (`project:instance`) is this instance."""
    project = instance.get("project")
    name = instance.physical_name
    return database_id == f"{project}:{name}" if project else database_id.endswith(f":{name}")


def alert_levels(resources: Sequence[Resource], instance: Resource) -> list[AlertLevel]:
    """Enabled alert conditions on the instance's num_backends metric."""
    found = []
    for policy in resources:
        if policy.type != ALERT_POLICY or policy.get("enabled") is False:
            continue
        for i, condition in enumerate(items(policy.get("conditions"))):
            query = str(at(condition, "conditionThreshold.filter") or "")
            if BACKENDS_METRIC in query and any(_names(instance, d) for d in _DATABASE_ID.findall(query)):
                found.append(AlertLevel(policy, f"conditions[{i}].conditionThreshold.thresholdValue",
                                        number(at(condition, "conditionThreshold.thresholdValue")),
                                        str(at(condition, "conditionThreshold.comparison") or "COMPARISON_GT")))
    return found


def working(levels: list[AlertLevel]) -> list[AlertLevel]:
    return [level for level in levels if level.value is not None and level.comparison in ALERTING_COMPARISONS]


_BUDGET_REMEDIATION = ("Lower maxInstances or pgPool of the services (brew:services), or raise "
                       "brew:alerts.connectionThreshold and the database's max_connections flag or tier "
                       "(brew:database), in the stack file.")


@stack_rule(
    "BREW-B001", Severity.ERROR, "Connection budget stays under the alert level",
    description="If every service at max scale with full pools (plus the worker's lease connection and the jobs) "
                "can open more connections than the alert level, the alert fires on normal peak load and stops "
                "meaning anything (SPEC 4: under 160). None of Checkov, KICS or Trivy computes connection budgets.",
    remediation=_BUDGET_REMEDIATION,
    references=(),
)
def budget_under_alert_level(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    for budget in budgets(resources):
        for level in working(alert_levels(resources, budget.instance)):
            if budget.total >= level.value:
                yield Violation(level.policy, level.path,
                                f"database {budget.instance.physical_name}: {budget.arithmetic()} connections, "
                                f"not under the alert level {_fmt(level.value)} of {level.policy.physical_name} "
                                f"({level.path})")


@stack_rule(
    "BREW-B002", Severity.ERROR, "Connection budget stays under max_connections",
    description="Past max_connections Postgres refuses new connections: a scale-out then fails requests, and a "
                "restarting worker cannot take the lease back (SPEC 4). max_connections is the database flag, else "
                "Cloud SQL's default for the tier's memory (f1-micro 25, g1-small 50, 7.5 GB 400...). None of Checkov, "
                "KICS or Trivy computes connection budgets.",
    remediation=_BUDGET_REMEDIATION,
    references=("https://cloud.google.com/sql/docs/postgres/quotas",),
)
def budget_under_max_connections(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    for budget in budgets(resources):
        yield from over_max_connections(budget.instance, budget.total, budget.arithmetic())


def over_max_connections(instance: Resource, total: int, arithmetic: str) -> Iterator[Violation]:
    """The budget `total` (shown as `arithmetic`) against the instance's max_connections, or
    the tier whose limit is unknown."""
    limit = max_connections(instance)
    if limit is None:
        yield Violation(instance, "settings.tier", f"database {instance.physical_name}: max_connections of tier "
                                                   f"{instance.get('settings.tier')} is unknown; set the "
                                                   "max_connections flag (settings.tier)")
    elif total >= limit.value:
        yield Violation(instance, limit.path, f"database {instance.physical_name}: {arithmetic} connections, "
                                              f"not under max_connections {limit.value} ({limit.source}, {limit.path})")


@stack_rule(
    "BREW-B003", Severity.ERROR, "Alert level stays under max_connections",
    description="An alert level at or above max_connections can never fire: Postgres refuses connections first. "
                "None of Checkov, KICS or Trivy checks it.",
    remediation="Lower brew:alerts.connectionThreshold, or raise the max_connections flag or tier (brew:database), "
                "in the stack file.",
    references=("https://cloud.google.com/sql/docs/postgres/quotas",),
)
def alert_level_under_max_connections(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    for instance in (r for r in resources if r.type == INSTANCE):
        limit = max_connections(instance)
        if limit is None:
            continue  # BREW-B002 reports the unknown limit
        for level in working(alert_levels(resources, instance)):
            if level.value >= limit.value:
                yield Violation(level.policy, level.path,
                                f"{level.policy.physical_name}: alert level {_fmt(level.value)} on database "
                                f"{instance.physical_name} is not under its max_connections {limit.value} "
                                f"({limit.source}; {level.path})")


@stack_rule(
    "BREW-B004", Severity.ERROR, "Production databases alert on connections",
    description="Connections creeping towards max_connections (a pool leak, a runaway scale-out) show only as "
                "refused connections unless an alert on num_backends for that database fires first (SPEC 3.1: "
                "above 160). None of Checkov, KICS or Trivy checks alert policies.",
    remediation="Set brew:alerts (connectionThreshold) in the production stack file; infra/environments/prod.py "
                "declares the postgres-connections policy from it.",
    references=("https://cloud.google.com/monitoring/api/metrics_gcp#gcp-cloudsql",),
)
def production_connections_alert(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    for instance in (r for r in resources if r.type == INSTANCE):
        if not is_production(instance, ctx):
            continue
        levels = alert_levels(resources, instance)
        if not levels:
            yield Violation(instance, "name", f"production database {instance.physical_name} has no alert policy on "
                                              f"{BACKENDS_METRIC} (name)")
        for level in levels:
            if level not in working(levels):
                yield Violation(level.policy, level.path,
                                f"{level.policy.physical_name}: connections alert on {instance.physical_name} "
                                f"never fires: threshold {level.value} with {level.comparison} ({level.path})")


@stack_rule(
    "BREW-B005", Severity.ERROR, "Every service on a database declares its pool size",
    description="A service without PG_POOL_MAX opens as many connections as its driver's default allows, so no "
                "budget holds. None of Checkov, KICS or Trivy computes connection budgets.",
    remediation="Set pgPool on the service (brew:services in the stack file); infra/environments/app.py passes it "
                "as PG_POOL_MAX.",
    references=(),
)
def services_declare_pool(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    for budget in budgets(resources):
        for service in budget.unpooled:
            pool = env(service).get(POOL_VAR)
            if pool is None:
                path, what = "template.containers[0].envs", f"no {POOL_VAR}"
            elif number(pool.value) is None:
                path, what = pool.path, f"{POOL_VAR}={pool.value}"
            else:
                path = "template.scaling.maxInstanceCount"
                what = f"maxInstanceCount {service.get(path)}"
            yield Violation(service, path, f"service {service.physical_name} connects to "
                                           f"{budget.instance.physical_name} with {what}, so its connections have "
                                           f"no bound ({path})")
