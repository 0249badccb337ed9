"""Penpot blueprint rules (BREW-I101..I104, BREW-B101..B103), each both ways on penpot-prod
with one thing changed; Brew's lease and budget rules stay Brew's."""

from __future__ import annotations

import pytest

from infra.policy.model import Rule, Severity
from infra.policy.rules import budgets, penpot, platform
from tests.policy.helpers import changed, find, findings, graph, resource

SERVICE = "gcp:cloudrunv2/service:Service"
SQL = "gcp:sql/databaseInstance:DatabaseInstance"
RULES = [value for value in vars(penpot).values() if isinstance(value, Rule)]
STACK = "penpot-prod"
SCALING = "template.scaling.maxInstanceCount"


@pytest.fixture(scope="module")
def prod(graphs) -> dict:
    return graphs[STACK]


def with_env(data: dict, service: str, name: str, value) -> dict:
    """`data` with one plain env var of a service set (added when absent)."""
    envs = find(data, SERVICE, service)["inputs"]["template"]["containers"][0]["envs"]
    index = next((i for i, e in enumerate(envs) if e["name"] == name), len(envs))
    if index == len(envs):
        data = changed(data, SERVICE, service, "template.containers[0].envs", [*envs, {"name": name}])
    return changed(data, SERVICE, service, f"template.containers[0].envs[{index}].value", value)


def where(rule: Rule, data: dict) -> list[tuple[str, str, str]]:
    found = findings(rule, data)
    for f in found:
        assert f.resource in f.message and f.property in f.message and f.severity is rule.severity, f
    return [(f.rule, f.resource, f.property) for f in found]


def env_path(data: dict, service: str, name: str) -> str:
    envs = find(data, SERVICE, service)["inputs"]["template"]["containers"][0]["envs"]
    [index] = [i for i, e in enumerate(envs) if e["name"] == name]
    return f"template.containers[0].envs[{index}].value"


def test_ids_and_severities():
    assert {r.id: r.severity for r in RULES} == {
        "BREW-I101": Severity.ERROR, "BREW-I102": Severity.ERROR, "BREW-I103": Severity.ERROR,
        "BREW-I104": Severity.ERROR, "BREW-B101": Severity.ERROR, "BREW-B102": Severity.ERROR,
        "BREW-B103": Severity.WARNING}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_penpot_prod_passes(prod, rule):
    assert where(rule, prod) == []


# --- BREW-I101 pool minimum within its maximum ----------------------------------------------

def test_a_warm_render_pool_above_k_is_a_finding(prod):
    data = with_env(prod, "penpot-exporter", "PENPOT_WASM_WORKER_POOL_MIN", "3")
    path = env_path(data, "penpot-exporter", "PENPOT_WASM_WORKER_POOL_MIN")
    assert where(penpot.pool_minimum_within_maximum, data) == [("BREW-I101", "penpot-exporter", path)]
    [finding] = findings(penpot.pool_minimum_within_maximum, data)
    assert "PENPOT_WASM_WORKER_POOL_MIN=3 is above the pool's maximum PENPOT_WASM_WORKER_POOL_MAX=2" in finding.message


def test_without_a_declared_pool_maximum_k_is_the_maximum(prod):
    envs = find(prod, SERVICE, "penpot-exporter")["inputs"]["template"]["containers"][0]["envs"]
    data = changed(prod, SERVICE, "penpot-exporter", "template.containers[0].envs",
                   [e for e in envs if not e["name"].endswith("_POOL_MAX")])
    assert where(penpot.pool_minimum_within_maximum, data) == []  # minimum 1, K 2
    data = with_env(data, "penpot-exporter", "PENPOT_BROWSER_POOL_MIN", "3")
    path = env_path(data, "penpot-exporter", "PENPOT_BROWSER_POOL_MIN")
    assert where(penpot.pool_minimum_within_maximum, data) == [("BREW-I101", "penpot-exporter", path)]
    assert "above the pool's maximum PENPOT_EXPORTER_WORKER_CONCURRENCY=2" in findings(
        penpot.pool_minimum_within_maximum, data)[0].message


def test_a_database_pool_minimum_above_its_maximum_is_a_finding(prod):
    data = with_env(prod, "penpot-worker", "PENPOT_DATABASE_MIN_POOL_SIZE", "11")
    assert where(penpot.pool_minimum_within_maximum, data) == [
        ("BREW-I101", "penpot-worker", env_path(data, "penpot-worker", "PENPOT_DATABASE_MIN_POOL_SIZE"))]
    assert where(penpot.pool_minimum_within_maximum, with_env(prod, "penpot-worker",
                                                              "PENPOT_DATABASE_MIN_POOL_SIZE", "10")) == []


# --- BREW-I102 pools sized to K --------------------------------------------------------------

@pytest.mark.parametrize("pool", ["PENPOT_WASM_WORKER_POOL_MAX", "PENPOT_BROWSER_POOL_MAX"])
def test_a_pool_sized_apart_from_k_is_a_finding(prod, pool):
    data = with_env(prod, "penpot-exporter", pool, "4")
    assert where(penpot.exporter_pools_sized_to_k, data) == [
        ("BREW-I102", "penpot-exporter", env_path(data, "penpot-exporter", pool))]


def test_k_must_be_a_whole_number_of_pollers(prod):
    data = with_env(prod, "penpot-exporter", "PENPOT_EXPORTER_WORKER_CONCURRENCY", "0")
    path = env_path(data, "penpot-exporter", "PENPOT_EXPORTER_WORKER_CONCURRENCY")
    assert where(penpot.exporter_pools_sized_to_k, data) == [("BREW-I102", "penpot-exporter", path)]
    # Raising K alone moves the declared pools away from it.
    data = with_env(prod, "penpot-exporter", "PENPOT_EXPORTER_WORKER_CONCURRENCY", "3")
    assert len(where(penpot.exporter_pools_sized_to_k, data)) == 2


# --- BREW-I103 non-idempotent cron -----------------------------------------------------------

def test_telemetry_on_with_two_worker_instances_is_a_finding(prod):
    data = with_env(prod, "penpot-worker", "PENPOT_FLAGS", "enable-backend-worker enable-smtp")
    assert where(penpot.non_idempotent_cron_single_instance, data) == [("BREW-I103", "penpot-worker", SCALING)]
    [finding] = findings(penpot.non_idempotent_cron_single_instance, data)
    assert "cron task telemetry is not idempotent (it would report twice) and penpot-worker 2 = 2" in finding.message


def test_telemetry_on_with_one_worker_instance_passes(prod):
    data = with_env(prod, "penpot-worker", "PENPOT_FLAGS", "enable-backend-worker")
    assert where(penpot.non_idempotent_cron_single_instance, changed(data, SERVICE, "penpot-worker", SCALING, 1)) == []


def test_audit_log_archive_counts_only_when_enabled(prod):
    data = with_env(prod, "penpot-worker", "PENPOT_FLAGS",
                    "enable-backend-worker disable-telemetry enable-audit-log-archive")
    assert where(penpot.non_idempotent_cron_single_instance, data) == [("BREW-I103", "penpot-worker", SCALING)]
    assert "audit-log-archive" in findings(penpot.non_idempotent_cron_single_instance, data)[0].message


def test_web_backends_that_keep_the_default_worker_add_their_instances(prod):
    # Without disable-backend-worker Penpot runs the worker (and its cron) on the web backends too.
    data = with_env(prod, "penpot-worker", "PENPOT_FLAGS", "enable-backend-worker")
    data = changed(data, SERVICE, "penpot-worker", SCALING, 1)
    data = with_env(data, "penpot-backend", "PENPOT_FLAGS", "enable-smtp")
    assert where(penpot.non_idempotent_cron_single_instance, data) == [
        ("BREW-I103", "penpot-backend", SCALING), ("BREW-I103", "penpot-worker", SCALING)]
    assert "penpot-backend 4 + penpot-worker 1 = 5" in findings(penpot.non_idempotent_cron_single_instance,
                                                                  data)[0].message


# --- BREW-I104 queue consumers always run ----------------------------------------------------

@pytest.mark.parametrize(("service", "path", "value"), [
    ("penpot-worker", "template.scaling.minInstanceCount", 0),
    ("penpot-exporter", "template.scaling.minInstanceCount", 0),
    ("penpot-exporter", "template.containers[0].resources.cpuIdle", True),
])
def test_a_consumer_that_can_stop_polling_is_a_finding(prod, service, path, value):
    data = changed(prod, SERVICE, service, path, value)
    assert where(penpot.queue_consumers_always_run, data) == [("BREW-I104", service, path)]


def test_no_backend_running_the_worker_is_a_finding(prod):
    data = with_env(prod, "penpot-worker", "PENPOT_FLAGS", "disable-backend-worker")
    assert where(penpot.queue_consumers_always_run, data) == [
        ("BREW-I104", name, env_path(data, name, "PENPOT_FLAGS")) for name in ("penpot-backend", "penpot-worker")]


# --- BREW-B101 / B102 the connection budget --------------------------------------------------

def test_budget_under_max_connections_both_ways(prod):
    # 4 x 20 + 2 x 10 = 100 against max_connections 200: 45 x 4 + 20 = 200 is not under it.
    data = with_env(prod, "penpot-backend", "PENPOT_DATABASE_MAX_POOL_SIZE", "45")
    flags = find(prod, SQL, "penpot-prod")["inputs"]["settings"]["databaseFlags"]
    [index] = [i for i, flag in enumerate(flags) if flag["name"] == "max_connections"]
    assert where(penpot.penpot_budget_under_max_connections, data) == [
        ("BREW-B101", "penpot-prod", f"settings.databaseFlags[{index}].value")]
    [finding] = findings(penpot.penpot_budget_under_max_connections, data)
    assert "penpot-backend 4 x 45 + penpot-worker 2 x 10 = 200" in finding.message
    assert where(penpot.penpot_budget_under_max_connections,
                 with_env(prod, "penpot-backend", "PENPOT_DATABASE_MAX_POOL_SIZE", "44")) == []


def test_an_unset_pool_is_penpot_s_default_sixty(prod):
    envs = find(prod, SERVICE, "penpot-backend")["inputs"]["template"]["containers"][0]["envs"]
    data = changed(prod, SERVICE, "penpot-backend", "template.containers[0].envs",
                   [e for e in envs if e["name"] != "PENPOT_DATABASE_MAX_POOL_SIZE"])
    [finding] = findings(penpot.penpot_budget_under_max_connections, data)
    assert "penpot-backend 4 x 60 + penpot-worker 2 x 10 = 260" in finding.message


def test_budget_against_the_tier_when_no_flag(prod):
    db = find(prod, SQL, "penpot-prod")["inputs"]["settings"]
    flags = [f for f in db["databaseFlags"] if f["name"] != "max_connections"]
    data = changed(prod, SQL, "penpot-prod", "settings.databaseFlags", flags)
    assert where(penpot.penpot_budget_under_max_connections, data) == []  # 7.5 GB: 400
    data = changed(data, SQL, "penpot-prod", "settings.tier", "db-perf-optimized-N-8")
    assert where(penpot.penpot_budget_under_max_connections, data) == [
        ("BREW-B101", "penpot-prod", "settings.tier")]


def test_budget_under_the_alert_level_both_ways(prod):
    data = with_env(prod, "penpot-worker", "PENPOT_DATABASE_MAX_POOL_SIZE", "40")  # 80 + 80 = 160
    policy = "penpot-prod-alerts-postgres-connections"
    assert where(penpot.penpot_budget_under_alert_level, data) == [
        ("BREW-B102", policy, "conditions[0].conditionThreshold.thresholdValue")]
    assert where(penpot.penpot_budget_under_alert_level,
                 with_env(prod, "penpot-worker", "PENPOT_DATABASE_MAX_POOL_SIZE", "39")) == []


# --- BREW-B103 exporter memory ---------------------------------------------------------------

def test_render_workers_past_half_the_exporter_memory_warn(prod):
    path = "template.containers[0].resources.limits.memory"
    data = changed(prod, SERVICE, "penpot-exporter", path, "512Mi")  # 2 x 128 MiB = 256 MiB: half, passes
    assert where(penpot.exporter_caches_fit_memory, data) == []
    data = with_env(data, "penpot-exporter", "PENPOT_WASM_WORKER_IMAGE_CACHE_SIZE", str(256 * 2 ** 20))
    assert where(penpot.exporter_caches_fit_memory, data) == [("BREW-B103", "penpot-exporter", path)]


# --- scope: Penpot rules ignore Brew, Brew's lease and budget rules ignore Penpot -------------

def test_brew_s_lease_and_pool_rules_do_not_judge_penpot(prod):
    assert findings(platform.one_worker_per_database, prod) == []
    assert findings(budgets.services_declare_pool, prod) == []


def test_brew_s_lease_rule_still_judges_brew_next_to_penpot():
    db = resource(SQL, "db", {"name": "db", "settings": {"tier": "db-custom-1-3840"}})
    web = resource(SERVICE, "web", {"name": "web", "template": {"containers": [
        {"envs": [{"name": "ROLE", "value": "web"}, {"name": "PG_POOL_MAX", "value": "5"}]}]}},
        dependencies=(db["urn"],))
    penpot_worker = resource(SERVICE, "pw", {"name": "pw", "template": {"containers": [
        {"envs": [{"name": "PENPOT_FLAGS", "value": "enable-backend-worker"},
                  {"name": "PENPOT_DATABASE_URI", "value": "postgresql://127.0.0.1/penpot"}]}]}},
        dependencies=(db["urn"],))
    data = graph("prod", db, web, penpot_worker)
    # A Penpot worker is no holder of Brew's lease: the Brew web still has no worker.
    assert [f.resource for f in findings(platform.one_worker_per_database, data)] == ["db"]
    assert [f.rule for f in findings(penpot.non_idempotent_cron_single_instance, data)] == ["BREW-I103"]


def test_penpot_rules_ignore_brew_services(graphs):
    # A Brew worker scaled out, idle and unpooled breaks Brew's rules, never Penpot's.
    data = changed(graphs["prod"], SERVICE, "brew-worker", "template.scaling.minInstanceCount", 0)
    data = changed(data, SERVICE, "brew-worker", SCALING, 5)
    data = changed(data, SERVICE, "brew-worker", "template.containers[0].resources.cpuIdle", True)
    data = with_env(data, "brew-worker", "PG_POOL_MAX", "500")
    for rule in RULES:
        assert findings(rule, data) == [], rule.id
    assert findings(platform.worker_single_instance, data)
