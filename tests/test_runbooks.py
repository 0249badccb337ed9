"""Runbooks: the alert documentation rendered from templates/alerts."""

from __future__ import annotations

import jinja2
import pytest

from infra.runbooks import render_runbook, runbook_keys

LEASE_FACTS = dict(worker_service="brew-worker", lease_key=727275, database="brew-prod",
                   ops_job="brew-ops", region="asia-south1")
BUDGET = [{"service": "brew-web", "instances": 10, "pool": 5}, {"service": "brew-worker", "instances": 1, "pool": 10}]


def test_every_alert_has_a_template():
    assert runbook_keys() == ["brands-waiting", "postgres-connections", "queue-wait", "worker-lost-lease"]


def test_worker_lost_lease_names_the_pg_locks_identity_of_the_key():
    text = render_runbook("worker-lost-lease", **LEASE_FACTS)
    assert "gcloud run jobs execute brew-ops --region=asia-south1 --wait" in text
    assert "gcloud run services describe brew-worker" in text
    assert "l.locktype = 'advisory'" in text
    assert "l.classid = 0" in text and "l.objid = 727275" in text and "l.objsubid = 1" in text
    assert text.rstrip().splitlines()[-1].startswith("**Escalate:**")


def test_lease_key_above_32_bits_splits_into_classid_and_objid():
    key = (3 << 32) | 5
    text = render_runbook("worker-lost-lease", **{**LEASE_FACTS, "lease_key": key})
    assert "l.classid = 3" in text and "l.objid = 5" in text


def test_postgres_connections_renders_the_budget_and_its_total():
    text = render_runbook("postgres-connections", database="brew-prod", threshold=160, budget=BUDGET)
    assert "| brew-web | 10 | 5 | 50 |" in text
    assert "| brew-worker | 1 | 10 | 10 |" in text
    # 50 + 10 + the worker's lease connection + one ops job
    assert "**62**" in text
    assert "above 160" in text


def test_queue_wait_and_brands_waiting_render_their_thresholds():
    assert "over 10 minutes" in render_runbook("queue-wait", minutes=10)
    brands = render_runbook("brands-waiting", brands=3, minutes=30)
    assert "More than 3 brands waited over 30 minutes" in brands
    assert "per-brand leases" in brands


@pytest.mark.parametrize("key", ["worker-lost-lease", "queue-wait", "postgres-connections", "brands-waiting"])
def test_every_runbook_ends_with_an_escalate_line(key):
    facts = {"worker-lost-lease": LEASE_FACTS, "queue-wait": {"minutes": 10},
             "postgres-connections": {"database": "d", "threshold": 1, "budget": BUDGET},
             "brands-waiting": {"brands": 3, "minutes": 30}}[key]
    assert render_runbook(key, **facts).rstrip().splitlines()[-1].startswith("**Escalate:**")


def test_a_missing_fact_raises():
    facts = dict(LEASE_FACTS)
    del facts["lease_key"]
    with pytest.raises(jinja2.UndefinedError, match="lease_key"):
        render_runbook("worker-lost-lease", **facts)


def test_a_budget_row_without_pool_raises():
    with pytest.raises(jinja2.UndefinedError):
        render_runbook("postgres-connections", database="d", threshold=1, budget=[{"service": "s", "instances": 1}])


def test_an_unknown_key_raises_a_clear_error():
    with pytest.raises(ValueError, match=r"^no runbook template for key 'x' in templates/alerts$"):
        render_runbook("x")
