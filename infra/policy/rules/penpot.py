"""Penpot blueprint rules (SPEC 6; seeds penpot-prod-infra.md, penpot-exporter.md):
invariants BREW-I101..I104 and budgets BREW-B101..B103.

They judge Penpot's processes only, known by what they read: a Penpot process declares
PENPOT_* env (Brew's app never does); a backend connects to Postgres
(PENPOT_DATABASE_URI); the exporter reads its configuration table
(PENPOT_EXPORTER_WORKER_CONCURRENCY, PENPOT_WASM_WORKER_*). What Penpot does when a
variable is unset is its own default, stated here: a database pool of 60, K = 2, a warm
render-worker pool of 1, 128 MiB of image cache per render worker, and the backend worker
enabled unless PENPOT_FLAGS says disable-backend-worker.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from infra.policy.model import Context, Resource, Severity, Violation, resource_rule, stack_rule
from infra.policy.rules._graph import (
    DEFAULT_MAX_INSTANCES,
    SERVICE,
    EnvVar,
    databases,
    env,
    env_names,
    is_penpot,
    number,
)
from infra.policy.rules.budgets import Term, alert_levels, over_max_connections, working

FLAGS = "PENPOT_FLAGS"
DATABASE_URI = "PENPOT_DATABASE_URI"
POOL_MAX = "PENPOT_DATABASE_MAX_POOL_SIZE"
POOL_MIN = "PENPOT_DATABASE_MIN_POOL_SIZE"
K = "PENPOT_EXPORTER_WORKER_CONCURRENCY"
WASM_POOL_MIN = "PENPOT_WASM_WORKER_POOL_MIN"
WASM_POOL_MAX = "PENPOT_WASM_WORKER_POOL_MAX"
BROWSER_POOL_MIN = "PENPOT_BROWSER_POOL_MIN"
BROWSER_POOL_MAX = "PENPOT_BROWSER_POOL_MAX"
IMAGE_CACHE = "PENPOT_WASM_WORKER_IMAGE_CACHE_SIZE"
EXPORTER_VARS = (K, "PENPOT_EXPORTER_JOB_TTL", "PENPOT_EXPORTER_SHARED_KEY", WASM_POOL_MIN, WASM_POOL_MAX,
                 "PENPOT_WASM_WORKER_IDLE_TIMEOUT", IMAGE_CACHE)

# Penpot's own defaults for what a stack leaves unset (app.config, the exporter's config).
DEFAULT_POOL_MAX = 60
DEFAULT_POOL_MIN = 0
DEFAULT_K = 2
DEFAULT_WASM_POOL_MIN = 1
DEFAULT_IMAGE_CACHE = 128 * 1024 * 1024
# Half an exporter instance's memory for the render workers' image caches: the rest holds the
# Node main thread, each worker's own wasm heap, the browser pool and the job's temp files
# (Cloud Run's file system is memory).
IMAGE_CACHE_SHARE = 0.5

# Cron tasks that are not idempotent (penpot-prod-infra.md, "Cross-backend safety"): two
# backends firing the same instant run them twice. Each with the flag that turns it on or
# off and whether Penpot runs it when PENPOT_FLAGS is silent.
NON_IDEMPOTENT_CRON = (
    ("telemetry", "telemetry", True, "it would report twice"),
    ("audit-log-archive", "audit-log-archive", False, "it depends on the archive target's idempotency"),
)

_FLAG_SPLIT = re.compile(r"[\s,]+")
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_UNITS = {None: 1, "k": 1000, "M": 1000 ** 2, "G": 1000 ** 3, "T": 1000 ** 4,
          "Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3, "Ti": 1024 ** 4}
_STACK_FILE = "penpot/stacks/Pulumi.<stack>.yaml"


# --- reading Penpot processes -------------------------------------------------------------

def is_backend(workload: Resource) -> bool:
    """A Penpot backend (web or worker-enabled): the one process that talks to Postgres."""
    return workload.type == SERVICE and is_penpot(workload) and DATABASE_URI in env_names(workload)


def is_exporter(workload: Resource) -> bool:
    return workload.type == SERVICE and is_penpot(workload) and bool(env_names(workload) & set(EXPORTER_VARS))


def flags(workload: Resource) -> list[str]:
    var = env(workload).get(FLAGS)
    return [flag for flag in _FLAG_SPLIT.split(var.value) if flag] if var else []


def flag_on(workload: Resource, name: str, default: bool) -> bool:
    """enable-<name> / disable-<name> in PENPOT_FLAGS; the last one wins, as Penpot parses them."""
    state = default
    for flag in flags(workload):
        if flag == f"enable-{name}":
            state = True
        elif flag == f"disable-{name}":
            state = False
    return state


def worker_enabled(backend: Resource) -> bool:
    # Penpot's default flags enable the worker: a web backend must say disable-backend-worker.
    return flag_on(backend, "backend-worker", True)


def _flags_path(workload: Resource) -> str:
    var = env(workload).get(FLAGS)
    return var.path if var else "template.containers[0].envs"


def _max_instances(service: Resource) -> float:
    return number(service.get("template.scaling.maxInstanceCount", DEFAULT_MAX_INSTANCES)) or 0


@dataclass(frozen=True)
class Setting:
    """An integer setting of a process: its env var, or Penpot's default when unset."""

    value: float | None  # None: declared but not a number
    var: EnvVar | None  # None: unset, so the default

    @property
    def path(self) -> str:
        return self.var.path if self.var else "template.containers[0].envs"

    def shown(self, name: str) -> str:
        return f"{name}={self.var.value}" if self.var else f"{name} unset ({self.value:g}, the default)"


def setting(workload: Resource, name: str, default: float) -> Setting:
    var = env(workload).get(name)
    return Setting(number(var.value) if var else default, var)


def concurrency(exporter: Resource) -> Setting:
    return setting(exporter, K, DEFAULT_K)


def memory_bytes(limit: object) -> float | None:
    match = _MEMORY.match(str(limit or ""))
    return float(match.group(1)) * _UNITS[match.group(2)] if match else None


# --- invariants -----------------------------------------------------------------------------

@resource_rule(
    "BREW-I101", Severity.ERROR, "Penpot pool minimums are not above their maximums", types=[SERVICE],
    description="Penpot clamps a pool's minimum to its maximum rather than refuse to boot: the exporter's warm "
                "render workers (PENPOT_WASM_WORKER_POOL_MIN, and the browser pool's minimum) to the pool size K, "
                "the backend's idle connections (PENPOT_DATABASE_MIN_POOL_SIZE) to its pool maximum. A minimum "
                "above the maximum is a warm capacity the stack declares and never gets (penpot-exporter.md: "
                "'clamped to the max'). None of Checkov, KICS or Trivy knows Penpot's settings.",
    remediation=f"Lower the minimum or raise the maximum: penpot:exporter.wasmWorkerPoolMin / workerConcurrency, "
                f"or the backend's pool, in {_STACK_FILE}.",
    references=(),
)
def pool_minimum_within_maximum(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    pairs: list[tuple[str, Setting, str, Setting]] = []  # (minimum's name, minimum, maximum's name, maximum)
    if is_exporter(res):
        k = concurrency(res)
        for low_name, high_name, low_default in ((WASM_POOL_MIN, WASM_POOL_MAX, DEFAULT_WASM_POOL_MIN),
                                                 (BROWSER_POOL_MIN, BROWSER_POOL_MAX, 0)):
            # A pool's maximum is K unless the stack declares one (BREW-I102 judges that).
            high = (high_name, setting(res, high_name, DEFAULT_K)) if high_name in env(res) else (K, k)
            pairs.append((low_name, setting(res, low_name, low_default), *high))
    if is_backend(res):
        pairs.append((POOL_MIN, setting(res, POOL_MIN, DEFAULT_POOL_MIN), POOL_MAX,
                      setting(res, POOL_MAX, DEFAULT_POOL_MAX)))
    for low_name, low, high_name, high in pairs:
        # A maximum below 1 is not a pool size at all: BREW-I102 reports K.
        if low.value is not None and high.value is not None and high.value >= 1 and low.value > high.value:
            yield low.path, (f"{res.physical_name}: {low.shown(low_name)} is above the pool's maximum "
                             f"{high.shown(high_name)}; Penpot clamps it to {high.value:g} ({low.path})")


@resource_rule(
    "BREW-I102", Severity.ERROR, "The exporter's pools are sized to K", types=[SERVICE],
    description="K (PENPOT_EXPORTER_WORKER_CONCURRENCY) is the number of pollers, so of exports running at once, "
                "and the browser and render-worker pools size themselves to the same figure (penpot-exporter.md). "
                "A pool maximum declared apart from K either makes running exports wait for a worker (below K) or "
                "keeps workers and their memory for exports that can never run (above K); a K below 1 is raised "
                "to 1 by the exporter, a misconfiguration rather than a rest. None of Checkov, KICS or Trivy knows "
                "Penpot's settings.",
    remediation=f"Set penpot:exporter.workerConcurrency only, in {_STACK_FILE}: infra/penpot_settings.py derives "
                "both pool maximums from it.",
    references=(),
)
def exporter_pools_sized_to_k(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if not is_exporter(res):
        return
    k = concurrency(res)
    if k.value is None or k.value < 1 or k.value != int(k.value):
        yield k.path, (f"exporter {res.physical_name}: {k.shown(K)} is not a whole number of pollers of at "
                       f"least 1 ({k.path})")
        return
    for name in (WASM_POOL_MAX, BROWSER_POOL_MAX):
        pool = setting(res, name, k.value)
        if pool.var is not None and pool.value != k.value:
            yield pool.path, (f"exporter {res.physical_name}: {pool.shown(name)} but {k.shown(K)}; the pool runs "
                              f"one export per poller, so it is sized to K ({pool.path})")


@stack_rule(
    "BREW-I103", Severity.ERROR, "Penpot's non-idempotent cron tasks have one worker instance",
    description="Every worker-enabled backend (PENPOT_FLAGS without disable-backend-worker) fires Penpot's cron "
                "entries; the lock on the scheduled_task row only holds while a body runs, so two instances "
                "firing the same instant can both run it (penpot-prod-infra.md, 'Cross-backend safety'). The "
                "other entries are idempotent; telemetry (on unless disable-telemetry) would report twice and "
                "audit-log-archive (on with enable-audit-log-archive) depends on its target's idempotency. So "
                "while either is on, the worker-enabled backends running it may add up to one instance at most "
                "(their maxInstanceCount summed). None of Checkov, KICS or Trivy knows Penpot's cron.",
    remediation=f"Keep the worker-enabled backends at maxInstances 1 in total (penpot:worker, and "
                f"disable-backend-worker on the web backends), or turn the task off in penpot:flags "
                f"(disable-telemetry; no enable-audit-log-archive), in {_STACK_FILE}.",
    references=(),
)
def non_idempotent_cron_single_instance(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    workers = [r for r in resources if is_backend(r) and worker_enabled(r)]
    for task, flag, default, why in NON_IDEMPOTENT_CRON:
        running = [w for w in workers if flag_on(w, flag, default)]
        total = sum(_max_instances(w) for w in running)
        if total <= 1:
            continue
        shares = " + ".join(f"{w.physical_name} {_max_instances(w):g}" for w in running)
        for worker in running:
            path = "template.scaling.maxInstanceCount"
            yield Violation(worker, path, f"cron task {task} is not idempotent ({why}) and {shares} = {total:g} "
                                          f"worker-enabled backend instances can fire it; {worker.physical_name} "
                                          f"runs it ({path}, {FLAGS})")


@stack_rule(
    "BREW-I104", Severity.ERROR, "Penpot's queue consumers always run",
    description="Nothing calls the worker-enabled backends or the exporter: the dispatcher polls Postgres, the "
                "runners and the exporter's K pollers block on Redis. With minimum 0 instances nobody polls, and "
                "with CPU allocated only during requests (cpuIdle) they stall between requests, so tasks and "
                "exports wait until some request happens to arrive. None of Checkov, KICS or Trivy knows which "
                "services poll.",
    remediation=f"Give penpot:worker and penpot:exporter minInstances 1 or more, in {_STACK_FILE}; "
                "infra/environments/penpot.py keeps their CPU always allocated.",
    references=(),
)
def queue_consumers_always_run(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    backends = [r for r in resources if is_backend(r)]
    consumers = [r for r in backends if worker_enabled(r)] + [r for r in resources if is_exporter(r)]
    for consumer in consumers:
        what = "exporter" if is_exporter(consumer) else "worker-enabled backend"
        path = "template.scaling.minInstanceCount"
        if (number(consumer.get(path, 0)) or 0) < 1:
            yield Violation(consumer, path, f"{what} {consumer.physical_name} keeps {consumer.get(path, 0)} instances "
                                            f"({path}): at zero nothing polls its queue")
        idle = "template.containers[0].resources.cpuIdle"
        if consumer.get(idle, True) is not False:
            yield Violation(consumer, idle, f"{what} {consumer.physical_name} has CPU only during requests ({idle}); "
                                            "its polling stalls between them")
    if backends and not any(worker_enabled(b) for b in backends):
        for backend in backends:
            path = _flags_path(backend)
            yield Violation(backend, path, f"no Penpot backend runs the worker (every one says disable-backend-"
                                           f"worker); {backend.physical_name} is one, so queued tasks never run "
                                           f"({path})")


# --- budgets --------------------------------------------------------------------------------

def _term(backend: Resource) -> Term:
    pool = setting(backend, POOL_MAX, DEFAULT_POOL_MAX)
    return Term(backend.physical_name, _max_instances(backend), pool.value if pool.value is not None else
                DEFAULT_POOL_MAX)


def penpot_budgets(resources: Sequence[Resource]) -> list[tuple[Resource, list[Term]]]:
    """Each Cloud SQL instance Penpot backends connect to, with a term per backend:
    max instances x its pool (Penpot's default 60 when unset). Workers hold no lease
    connection: their claims go through the same pool."""
    found = []
    for instance, workloads in databases(resources):
        terms = [_term(w) for w in workloads if is_backend(w)]
        if terms:
            found.append((instance, terms))
    return found


def _arithmetic(terms: list[Term]) -> tuple[float, str]:
    total = sum(t.connections for t in terms)
    return total, f"{' + '.join(map(str, terms))} = {total:g}"


_BUDGET_REMEDIATION = (f"Lower maxInstances or dbPool of penpot:backend and penpot:worker, or raise the database's "
                       f"max_connections flag or tier (penpot:database) and penpot:alerts.connectionThreshold, in "
                       f"{_STACK_FILE}.")


@stack_rule(
    "BREW-B101", Severity.ERROR, "Penpot's connection budget stays under max_connections",
    description="Every Penpot backend, web and worker-enabled, opens up to its pool (PENPOT_DATABASE_MAX_POOL_SIZE, "
                "Penpot's default 60 when unset) per instance; at full scale-out the sum must stay under the "
                "instance's max_connections (the flag, else Cloud SQL's default for the tier's memory) or Postgres "
                "refuses connections, and a backend that cannot connect fails its requests and its tasks. None of "
                "Checkov, KICS or Trivy computes connection budgets.",
    remediation=_BUDGET_REMEDIATION,
    references=("https://cloud.google.com/sql/docs/postgres/quotas",),
)
def penpot_budget_under_max_connections(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    for instance, terms in penpot_budgets(resources):
        total, arithmetic = _arithmetic(terms)
        yield from over_max_connections(instance, total, f"Penpot backends {arithmetic}")


@stack_rule(
    "BREW-B102", Severity.ERROR, "Penpot's connection budget stays under the alert level",
    description="If the Penpot backends at full scale with full pools can open more connections than the "
                "connections alert level on their database, the alert fires on normal peak load and stops meaning "
                "anything. None of Checkov, KICS or Trivy computes connection budgets.",
    remediation=_BUDGET_REMEDIATION,
    references=(),
)
def penpot_budget_under_alert_level(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    for instance, terms in penpot_budgets(resources):
        total, arithmetic = _arithmetic(terms)
        for level in working(alert_levels(resources, instance)):
            if total >= level.value:
                yield Violation(level.policy, level.path,
                                f"database {instance.physical_name}: Penpot backends {arithmetic} connections, not "
                                f"under the alert level {level.value:g} of {level.policy.physical_name} "
                                f"({level.path})")


@resource_rule(
    "BREW-B103", Severity.WARNING, "The exporter's render workers fit in its memory", types=[SERVICE],
    description="Each of the K render workers keeps an image cache of PENPOT_WASM_WORKER_IMAGE_CACHE_SIZE (128 MiB "
                "by default); K of them should take at most half the exporter's memory limit, the rest being the "
                "Node main thread, each worker's wasm heap, the browser pool and the jobs' temp files (Cloud Run's "
                "file system is memory). Past the limit Cloud Run kills the instance mid-export. A warning: the "
                "share is a rule of thumb. None of Checkov, KICS or Trivy knows Penpot's settings.",
    remediation=f"Raise penpot:exporter.memory, or lower workerConcurrency or wasmWorkerImageCacheSize, in "
                f"{_STACK_FILE}.",
    references=(),
)
def exporter_caches_fit_memory(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if not is_exporter(res):
        return
    k, cache = concurrency(res), setting(res, IMAGE_CACHE, DEFAULT_IMAGE_CACHE)
    path = "template.containers[0].resources.limits.memory"
    memory = memory_bytes(res.get(path))
    if k.value is None or cache.value is None or memory is None:
        return
    need = k.value * cache.value
    if need > memory * IMAGE_CACHE_SHARE:
        yield path, (f"exporter {res.physical_name}: {k.value:g} render workers x {cache.value / 2 ** 20:g} MiB of "
                     f"image cache = {need / 2 ** 20:g} MiB, more than half its memory {res.get(path)} ({path})")

