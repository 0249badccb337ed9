"""The promote pipeline against the sandbox: a clean promotion and one run per injected
fault, each checking the exit code, the report, which revision serves each service
afterwards, and who holds the lease afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


from infra.promote.clients import Endpoints
from infra.promote.database import plain
from infra.promote.lease import WorkerLease
from infra.promote.runner import mirror_check, promote, target_of
from infra.sandbox.sandbox import PROD_IMAGE, PROMOTE_OVERRIDES, STAGING_IMAGE, Sandbox, topology_from_stacks
from infra.synth.stacks import REPO_ROOT, read_stack, settings_of

TOPOLOGY = topology_from_stacks()
TARGET = target_of(settings_of(read_stack("prod")), settings_of(read_stack("staging")), PROMOTE_OVERRIDES)


class Outcome:
    def __init__(self, box: Sandbox, report, tmp: Path):
        self.report = report
        self.code = report.exit_code
        self.data = json.loads((tmp / "report.json").read_text())
        run = box.cloudrun
        full = lambda name: f"projects/{TOPOLOGY.project}/locations/{TOPOLOGY.region}/services/{name}"  # noqa: E731
        self.web = run.traffic(full(TOPOLOGY.web_service))
        self.worker = run.traffic(full(TOPOLOGY.worker_service))
        self.seeded = box.seeded
        lease = WorkerLease(plain(box.endpoints()["database"]))
        try:
            self.holder = lease.read().revision
        finally:
            lease.close()
        self.backups = box.cloudsql.backups(TOPOLOGY.project, TOPOLOGY.database_instance)

    def serving_seeded(self) -> bool:
        return set(self.web) <= self.seeded and set(self.worker) <= self.seeded and \
            list(self.web.values()) == [100] and list(self.worker.values()) == [100]

    def step(self, gate: str) -> dict:
        return next(s for s in self.data["steps"] if s["gate"] == gate)


@pytest.fixture
def rehearse(tmp_path: Path, pg):
    """Run one promotion in a sandbox with `faults`, on the session's PostgreSQL."""

    def run(*faults: str) -> Outcome:
        return _rehearse(tmp_path, pg, *faults)

    return run


def _rehearse(tmp_path: Path, pg, *faults: str) -> Outcome:
    with Sandbox(TOPOLOGY, faults, pg=pg) as box:
        e = box.endpoints()
        staging_connect = plain(e["staging_database"])
        report = promote(TARGET, Endpoints(e["run"], e["sqladmin"], e["monitoring"]), plain(e["database"]),
                         run_id="test", image=None, dry_run=False, report_path=tmp_path / "report.json",
                         mirror_sync=mirror_check(TOPOLOGY.mirror, staging_connect, e["storage"], TOPOLOGY.project),
                         today=box.today)
        return Outcome(box, report, tmp_path)


def assert_report_shape(data: dict) -> None:
    assert set(data) >= {"result", "failed_gate", "image", "lease", "backup_id", "steps"}
    assert set(data["lease"]) == {"before", "after", "gap_seconds"}
    for step in data["steps"]:
        assert set(step) == {"gate", "status", "seconds", "detail"}


def test_clean_promotion(rehearse):
    out = rehearse()
    assert out.code == 0
    assert_report_shape(out.data)
    assert out.data["result"] == "promoted" and out.data["failed_gate"] is None
    assert out.data["image"] == STAGING_IMAGE
    assert [s["gate"] for s in out.data["steps"]] == ["preflight", "mirror", "lease_before", "backup", "worker",
                                                      "web", "settle"]
    new_worker, = out.worker
    new_web, = out.web
    assert new_worker not in out.seeded and new_web not in out.seeded
    assert out.holder == new_worker == out.data["lease"]["after"]
    assert out.data["lease"]["before"] in out.seeded
    assert out.data["lease"]["gap_seconds"] is not None and out.data["lease"]["gap_seconds"] < 3
    assert out.data["backup_id"] and [b["id"] for b in out.backups] == [out.data["backup_id"]]


def test_db_down_refuses_at_preflight(rehearse):
    out = rehearse("db-down")
    assert out.code == 10
    assert (out.data["result"], out.data["failed_gate"]) == ("refused", "preflight")
    assert "MAINTENANCE, not RUNNABLE" in out.step("preflight")["detail"]
    assert out.serving_seeded() and out.holder in out.seeded and not out.backups


def test_concurrent_promote_refuses_on_the_lock(rehearse):
    out = rehearse("concurrent-promote")
    assert out.code == 11
    assert (out.data["result"], out.data["failed_gate"]) == ("refused", "preflight")
    assert "another promotion (run another-pipeline" in out.step("preflight")["detail"]
    assert out.serving_seeded() and out.holder in out.seeded


def test_no_lease_holder_refuses(rehearse):
    out = rehearse("no-lease-holder")
    assert out.code == 30
    assert (out.data["result"], out.data["failed_gate"]) == ("refused", "lease_before")
    assert "found 0" in out.step("lease_before")["detail"]
    assert out.serving_seeded() and out.holder is None and not out.backups


def test_holder_not_serving_refuses(rehearse):
    out = rehearse("holder-not-serving")
    assert out.code == 30
    assert out.data["failed_gate"] == "lease_before"
    assert "is not the revision brew-worker serves" in out.step("lease_before")["detail"]
    assert out.serving_seeded()


def test_worker_never_ready_rolls_back(rehearse):
    out = rehearse("worker-never-ready")
    assert out.code == 50
    assert (out.data["result"], out.data["failed_gate"]) == ("rolled_back", "worker")
    assert out.step("rollback")["status"] == "rolled_back"
    assert out.serving_seeded() and out.holder in out.seeded


def test_lease_never_taken_rolls_back_and_the_old_revision_holds_again(rehearse):
    out = rehearse("lease-never-taken")
    assert out.code == 50
    assert (out.data["result"], out.data["failed_gate"]) == ("rolled_back", "worker")
    assert "did not take the lease" in out.step("worker")["detail"]
    assert out.serving_seeded() and out.holder == next(iter(out.worker))


def test_old_holder_stuck_is_ended_after_the_new_revision_is_ready(rehearse):
    out = rehearse("old-holder-stuck")
    assert out.code == 0
    assert out.data["result"] == "promoted"
    new_worker, = out.worker
    assert out.holder == new_worker not in out.seeded


def test_api_flaky_still_promotes(rehearse):
    out = rehearse("api-flaky")
    assert out.code == 0 and out.data["result"] == "promoted"
    assert out.holder == next(iter(out.worker)) not in out.seeded


def test_lease_lost_during_web_rolls_everything_back(rehearse):
    out = rehearse("lease-lost-during-web")
    assert out.code in (60, 70)
    assert out.data["result"] == "rolled_back"
    assert "lease moved away" in out.step(out.data["failed_gate"])["detail"]
    assert out.serving_seeded() and out.holder == next(iter(out.worker))


def test_web_errors_roll_back(rehearse):
    out = rehearse("web-errors")
    assert out.code == 60
    assert (out.data["result"], out.data["failed_gate"]) == ("rolled_back", "web")
    assert "unhealthy" in out.step("web")["detail"]
    assert out.serving_seeded() and out.holder == next(iter(out.worker))


def test_low_traffic_is_inconclusive_never_a_pass(rehearse):
    out = rehearse("low-traffic")
    assert out.code == 60
    assert (out.data["result"], out.data["failed_gate"]) == ("rolled_back", "web")
    assert "inconclusive" in out.step("web")["detail"]
    assert out.serving_seeded() and out.holder == next(iter(out.worker))


def test_crash_after_worker_then_the_same_command_finishes_it(tmp_path):
    state = tmp_path / "sandbox"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("GITHUB_RUN_ID", None)
    cli = [sys.executable, "-m", "infra.cli"]
    up = subprocess.run([*cli, "sandbox", "up", "--dir", str(state), "--inject", "crash-after-worker"],
                        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    try:
        command = [*cli, "promote", "--sandbox-dir", str(state), "--run-id", "ci-42",
                   "--report", str(tmp_path / "report.json")]
        first = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert first.returncode == 137, first.stderr  # died after the worker gate
        assert not (tmp_path / "report.json").exists()
        second = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 0, second.stderr
        data = json.loads((tmp_path / "report.json").read_text())
        steps = {s["gate"]: s for s in data["steps"]}
        assert data["result"] == "promoted"
        assert steps["backup"]["status"] == "skipped"  # no second backup for the same image
        assert steps["worker"]["status"] == "skipped"  # no second rollout of a serving revision
        status = subprocess.run([*cli, "sandbox", "status", "--dir", str(state), "--format", "json"],
                                cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
        live = json.loads(status.stdout)
        worker, = live["services"][TOPOLOGY.worker_service]
        assert live["lease_holder"] == worker == data["lease"]["after"]
    finally:
        subprocess.run([*cli, "sandbox", "down", "--dir", str(state)], cwd=REPO_ROOT, env=env, timeout=60)


def test_dry_run_changes_nothing_and_prints_the_plan(tmp_path, pg):
    with Sandbox(TOPOLOGY, pg=pg) as box:
        e = box.endpoints()
        report = promote(TARGET, Endpoints(e["run"], e["sqladmin"], e["monitoring"]), plain(e["database"]),
                         run_id="dry", image=None, dry_run=True, report_path=tmp_path / "report.json")
        assert report.exit_code == 0 and report.result == "planned"
        assert [s.gate for s in report.steps] == ["preflight", "mirror", "lease_before"]
        assert any("10% -> 50% -> 100%" in line for line in report.plan)
        assert box.cloudrun.traffic(f"projects/{TOPOLOGY.project}/locations/{TOPOLOGY.region}/services/"
                                    f"{TOPOLOGY.worker_service}") == {next(iter(box.seeded & {
                                        r for r in box.seeded if r.startswith(TOPOLOGY.worker_service)})): 100}
        assert not box.cloudsql.backups(TOPOLOGY.project, TOPOLOGY.database_instance)


def test_image_must_be_a_digest_staging_serves(pg):
    with Sandbox(TOPOLOGY, pg=pg) as box:
        e = box.endpoints()
        endpoints = Endpoints(e["run"], e["sqladmin"], e["monitoring"])
        tag = promote(TARGET, endpoints, plain(e["database"]), run_id="t", image="brew:latest", dry_run=True,
                      report_path=None)
        assert tag.exit_code == 10 and "is not an image digest" in tag.steps[0].detail
        other = promote(TARGET, endpoints, plain(e["database"]), run_id="t", image=PROD_IMAGE, dry_run=True,
                        report_path=None)
        assert other.exit_code == 10 and "serves" in other.steps[0].detail and "not" in other.steps[0].detail


def test_low_traffic_with_hold_leaves_traffic_for_a_person(tmp_path, pg):
    import dataclasses

    held_target = dataclasses.replace(TARGET, settings=dataclasses.replace(TARGET.settings, on_inconclusive="hold"))
    with Sandbox(TOPOLOGY, ["low-traffic"], pg=pg) as box:
        e = box.endpoints()
        report = promote(held_target, Endpoints(e["run"], e["sqladmin"], e["monitoring"]), plain(e["database"]),
                         run_id="hold", image=None, dry_run=False, report_path=tmp_path / "report.json")
        web = box.cloudrun.traffic(f"projects/{TOPOLOGY.project}/locations/{TOPOLOGY.region}/services/"
                                   f"{TOPOLOGY.web_service}")
    assert report.exit_code == 61
    assert (report.result, report.failed_gate) == ("held", "web")
    assert "held where it is for a person" in report.steps[-1].detail
    new = [rev for rev in web if rev not in box.seeded]
    assert len(new) == 1 and web[new[0]] == 10 and sum(web.values()) == 100


# --- gate 2: the way back to bucket storage (the staging mirror) ------------------------

@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ("readthrough-without-mirror", "OBJECTS_READTHROUGH is on without OBJECTS_MIRROR"),
        ("flags-drift", "OBJECTS_READTHROUGH is off on the live staging service but declared on"),
        ("mirror-out-of-sync", "bucket mirror out of sync"),
    ],
)
def test_a_broken_way_back_refuses_at_the_mirror_gate(rehearse, fault, says):
    out = rehearse(fault)
    assert out.code == 20
    assert (out.data["result"], out.data["failed_gate"]) == ("refused", "mirror")
    assert says in out.step("mirror")["detail"]
    assert out.serving_seeded() and out.holder in out.seeded and not out.backups


def test_the_mirror_gate_names_the_missing_and_stale_keys(rehearse):
    out = rehearse("mirror-out-of-sync")
    detail = out.step("mirror")["detail"]
    for key in ("brand-0003/doc", "brand-0004/doc", "brand-0005/doc", "brand-0010/doc", "brand-0011/doc"):
        assert key in detail


def test_past_the_sunset_goes_ahead_with_a_warning(rehearse):
    out = rehearse("past-sunset")
    assert out.code == 0 and out.data["result"] == "promoted"
    mirror = out.step("mirror")
    assert mirror["status"] == "warning" and "overdue" in mirror["detail"]


def test_before_the_sunset_the_mirror_gate_passes_clean(rehearse):
    out = rehearse()
    assert out.step("mirror")["status"] == "passed"
    assert "overdue" not in out.step("mirror")["detail"]
