"""Promote the image verified on staging to production, or roll back by itself.

Gates, in order (SPEC 5); any failure stops the run and undoes what was changed:
  1. preflight     staging serves the image by digest; prod services Ready; Cloud SQL
                   RUNNABLE; the promotion lock (one pipeline at a time)
  2. mirror        staging's mirror flags (and, behind a seam, the bucket drift check)
  3. lease_before  exactly one lease holder, and it is the worker revision that serves
  4. backup        an on-demand Cloud SQL backup, waited for (reused for the same image)
  5. worker        new worker revision; once Ready the lease passes to it (the old
                   holder's session may be ended, never before Ready); gap measured
  6. web           new web revision, traffic in steps with a bake and a health check
  7. settle        the new worker revision keeps the lease for the settle period

Safe to run again: the lock remembers the run, the image and the rollback targets on
the production worker service, so the same run resumes, and nothing is done twice (a
backup for the same image within the window is reused; a revision already serving the
image is not rolled out again). The pipeline only reads the database; it never takes
the lease.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from google.api_core import exceptions

from infra.promote.clients import CloudRun, CloudSql, Metrics, ServiceView
from infra.promote.health import Verdict, judge
from infra.promote.mirror import MirrorSyncCheck, NoSyncCheck, mirror_verdict
from infra.settings import MirrorFlags, PromoteSettings

GATES = ("preflight", "mirror", "lease_before", "backup", "worker", "web", "settle")
# One exit code per failing gate (README, "Promote"); 2 stays bad input.
EXIT_CODES = {
    "preflight": 10, "lock": 11, "mirror": 20, "lease_before": 30, "backup": 40,
    "worker": 50, "web": 60, "settle": 70,
}
EXIT_HELD = 61
EXIT_ROLLBACK_FAILED = 80
LOCK_ANNOTATION = "brew.joinsquareup.com/promotion"
# Set by the sandbox's crash-after-worker fault: the process dies right after the gate.
CRASH_AFTER_ENV = "BREW_PROMOTE_CRASH_AFTER"


class Lease(Protocol):
    """What the pipeline needs of infra.promote.lease.WorkerLease."""

    def read(self): ...

    def wait_for_holder(self, revision: str, timeout: float, poll: float = 0.1): ...

    def terminate(self, pid: int) -> bool: ...


class Progress(Protocol):
    def gate(self, gate: str, waiting_for: str) -> None: ...

    def note(self, gate: str, text: str) -> None: ...

    def done(self, step: Step) -> None: ...


@dataclass(frozen=True)
class Target:
    """Where to promote from and to; every name comes from the stacks' settings."""

    project: str
    region: str
    staging_service: str
    web_service: str
    worker_service: str
    database_instance: str
    prod_storage: str
    staging_mirror: MirrorFlags | None
    settings: PromoteSettings


@dataclass
class Step:
    gate: str
    status: str  # passed | failed | skipped | refused | rolled_back | held | warning
    seconds: float
    detail: str


@dataclass
class Report:
    result: str = "refused"  # promoted | rolled_back | refused | held
    failed_gate: str | None = None
    image: str | None = None
    lease: dict[str, Any] = field(default_factory=lambda: {"before": None, "after": None, "gap_seconds": None})
    backup_id: str | None = None
    steps: list[Step] = field(default_factory=list)
    run_id: str = ""
    dry_run: bool = False
    plan: list[str] = field(default_factory=list)
    exit_code: int = 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("exit_code")
        return data


class GateFailed(Exception):
    def __init__(self, gate: str, detail: str, code: int | None = None, refused: bool = False):
        super().__init__(detail)
        self.gate, self.detail, self.refused = gate, detail, refused
        self.code = code if code is not None else EXIT_CODES[gate]


class Held(Exception):
    """Inconclusive health with on_inconclusive: hold — a person decides."""


@dataclass
class RunState:
    """What a run remembers on the production worker service (the lock annotation)."""

    run: str
    image: str
    expires: str
    worker_before: str | None = None
    web_before: dict[str, int] | None = None
    backup_id: str | None = None

    def dump(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def load(cls, text: str | None) -> RunState | None:
        if not text:
            return None
        try:
            return cls(**json.loads(text))
        except (ValueError, TypeError):
            return None


def is_digest(image: str) -> bool:
    return "@sha256:" in image


def split_traffic(new: str, percent: int, before: dict[str, int]) -> dict[str, int]:
    """`percent` to the new revision, the rest over the revisions that served before, in
    their old proportions, summing to exactly 100."""
    rest = 100 - percent
    total = sum(before.values()) or 1
    shares = {rev: rest * pct // total for rev, pct in before.items()}
    if shares:
        largest = max(before, key=lambda r: (before[r], r))
        shares[largest] += rest - sum(shares.values())
    traffic = {rev: pct for rev, pct in shares.items() if pct > 0 and rev != new}
    traffic[new] = traffic.get(new, 0) + percent
    return {rev: pct for rev, pct in traffic.items() if pct > 0}


class Pipeline:
    def __init__(self, target: Target, run: CloudRun, sql: CloudSql, metrics: Metrics, lease: Lease,
                 progress: Progress, run_id: str, image: str | None = None, dry_run: bool = False,
                 mirror_sync: MirrorSyncCheck | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 today: Callable[[], dt.date] = lambda: dt.datetime.now(dt.timezone.utc).date()):
        self.t, self.s = target, target.settings
        self.run, self.sql, self.metrics, self.lease = run, sql, metrics, lease
        self.progress, self.clock, self.sleep, self.today = progress, clock, sleep, today
        self.mirror_sync = mirror_sync or NoSyncCheck()
        self.report = Report(run_id=run_id, dry_run=dry_run, image=image)
        self.requested_image = image
        self.state: RunState | None = None
        self.changed: list[str] = []  # what to undo, in the order it was done
        self.new_worker: str | None = None
        self.new_web: str | None = None

    # --- the run ----------------------------------------------------------------------

    def execute(self) -> Report:
        gates: list[tuple[str, Callable[[], str]]] = [
            ("preflight", self.preflight), ("mirror", self.mirror), ("lease_before", self.lease_before)]
        if not self.report.dry_run:
            gates += [("backup", self.backup), ("worker", self.worker), ("web", self.web), ("settle", self.settle)]
        try:
            for name, gate in gates:
                self._gate(name, gate)
                if os.environ.get(CRASH_AFTER_ENV) == name and not self.report.dry_run:
                    os._exit(137)  # the sandbox's crash fault: die without cleaning up
            self.report.result = "planned" if self.report.dry_run else "promoted"
            if self.report.dry_run:
                self.report.plan = self._plan()
        except GateFailed as failure:
            self.report.failed_gate = failure.gate if failure.gate != "lock" else "preflight"
            self.report.exit_code = failure.code
            if self.changed:
                self._roll_back(failure.gate)
            else:
                self.report.result = "refused"
        except Held as held:
            self.report.result, self.report.failed_gate, self.report.exit_code = "held", "web", EXIT_HELD
            self.progress.note("web", str(held))
        finally:
            if self.state is not None and self.report.result != "held":
                self._release_lock()
        self.report.lease["after"] = self._holder_revision()
        return self.report

    def _gate(self, name: str, gate: Callable[[], str]) -> None:
        start = self.clock()
        try:
            detail = gate()
        except GateFailed as failure:
            status = "refused" if failure.refused or not self.changed else "failed"
            self._step(name, status, start, failure.detail)
            raise
        except Held as held:
            self._step(name, "held", start, str(held))
            raise
        except Exception as error:  # noqa: BLE001 - an API, database or lease error fails the gate, then rolls back
            detail = f"{type(error).__name__}: {_message(error)}"
            self._step(name, "refused" if not self.changed else "failed", start, detail)
            raise GateFailed(name, detail, refused=not self.changed) from error
        status, _, rest = detail.partition(": ")
        if status in ("skipped", "warning"):
            detail = rest
        else:
            status = "passed"
        self._step(name, status, start, detail)

    def _step(self, gate: str, status: str, start: float, detail: str) -> None:
        step = Step(gate, status, round(self.clock() - start, 3), detail)
        self.report.steps.append(step)
        self.progress.done(step)

    # --- 1. preflight -----------------------------------------------------------------

    def preflight(self) -> str:
        self.progress.gate("preflight", f"reading {self.t.staging_service}, the production services and Cloud SQL")
        staging = self.run.get_service(self.t.staging_service)
        image = self.requested_image or staging.image
        if not is_digest(image):
            raise GateFailed("preflight", f"{image!r} is not an image digest (…@sha256:…): promote by digest",
                             refused=True)
        if staging.image != image:
            raise GateFailed("preflight", f"staging {self.t.staging_service} serves {staging.image}, not {image}",
                             refused=True)
        self.report.image = image
        for name in (self.t.web_service, self.t.worker_service):
            svc = self.run.get_service(name)
            if not svc.ready or not svc.serving:
                raise GateFailed("preflight", f"production service {name} is not Ready", refused=True)
        state = self.sql.state()
        if state != "RUNNABLE":
            raise GateFailed("preflight", f"Cloud SQL {self.t.database_instance} is {state}, not RUNNABLE",
                             refused=True)
        if self.report.dry_run:
            return f"staging serves {image}; prod services Ready; {self.t.database_instance} RUNNABLE"
        resumed = self._take_lock(image)
        return (f"staging serves {image}; prod services Ready; {self.t.database_instance} RUNNABLE; "
                f"promotion lock {'resumed' if resumed else 'taken'} by run {self.report.run_id}")

    def _take_lock(self, image: str) -> bool:
        worker = self.run.get_service(self.t.worker_service)
        held = RunState.load(worker.annotations.get(LOCK_ANNOTATION))
        now = dt.datetime.now(dt.timezone.utc)
        if held is not None and held.run != self.report.run_id and dt.datetime.fromisoformat(held.expires) > now:
            raise GateFailed("lock", f"another promotion (run {held.run}, image {held.image}) holds the lock "
                                     f"until {held.expires}", refused=True)
        resumed = held is not None and held.run == self.report.run_id and held.image == image
        state = held if resumed else RunState(run=self.report.run_id, image=image, expires="")
        state.expires = (now + dt.timedelta(seconds=self.s.lock_ttl_seconds)).isoformat()
        try:
            # The etag makes this a compare-and-set: of two pipelines racing, one fails here.
            self.run.update_annotations(self.t.worker_service, {LOCK_ANNOTATION: state.dump()}, etag=worker.etag)
        except (exceptions.Aborted, exceptions.Conflict, exceptions.FailedPrecondition) as error:
            raise GateFailed("lock", f"another promotion took the lock first ({error.message})", refused=True) \
                from error
        self.state = state
        return resumed

    def _save_state(self) -> None:
        assert self.state is not None
        self.run.update_annotations(self.t.worker_service, {LOCK_ANNOTATION: self.state.dump()})

    def _release_lock(self) -> None:
        try:
            worker = self.run.get_service(self.t.worker_service)
            held = RunState.load(worker.annotations.get(LOCK_ANNOTATION))
            if held is not None and held.run == self.report.run_id:
                self.run.update_annotations(self.t.worker_service, {LOCK_ANNOTATION: None})
        except exceptions.GoogleAPICallError as error:
            self.progress.note("settle", f"could not release the promotion lock: {error.message}")

    # --- 2. mirror flags --------------------------------------------------------------

    def mirror(self) -> str:
        self.progress.gate("mirror", f"reading {self.t.staging_service}'s mirror flags")
        staging = self.run.get_service(self.t.staging_service)
        verdict = mirror_verdict(staging.env, self.t.staging_mirror, self.t.prod_storage, self.today(),
                                 self.mirror_sync)
        if verdict.problems:
            raise GateFailed("mirror", "; ".join(p.message for p in verdict.problems), refused=True)
        flags = ", ".join(f"{k}={v}" for k, v in verdict.flags.items())
        detail = "; ".join([flags, *(w.message for w in verdict.warnings)])
        return f"warning: {detail}" if any(w.kind == "overdue" for w in verdict.warnings) else detail

    # --- 3. lease before --------------------------------------------------------------

    def lease_before(self) -> str:
        self.progress.gate("lease_before", "reading the lease holder from pg_locks")
        worker = self.run.get_service(self.t.worker_service)
        state = self.lease.read()
        if len(state.holders) != 1:
            raise GateFailed("lease_before", f"expected exactly one lease holder, found {len(state.holders)}",
                             refused=True)
        holder = state.holders[0]
        self.report.lease["before"] = holder.revision
        if worker.traffic.get(holder.revision, 0) != 100:
            raise GateFailed("lease_before", f"the lease holder {holder.revision} is not the revision "
                                             f"{self.t.worker_service} serves ({_fmt(worker.traffic)})",
                             refused=True)
        return f"{holder.revision} holds the lease (pid {holder.pid}); {len(state.waiters)} waiting"

    # --- 4. backup --------------------------------------------------------------------

    def backup(self) -> str:
        assert self.state is not None and self.report.image is not None
        description = f"brew-promote {self.report.image.rsplit('@', 1)[-1]}"
        window = dt.timedelta(hours=self.s.backup_window_hours)
        now = dt.datetime.now(dt.timezone.utc)
        self.progress.gate("backup", f"looking for a backup of {self.t.database_instance} for this image")
        for run in self.sql.backups():
            if run.description == description and run.status == "SUCCESSFUL" and run.started and \
                    now - run.started <= window:
                self._record_backup(run.id)
                return f"skipped: backup {run.id} already taken for this image at {run.started.isoformat()}"
        self.progress.gate("backup", f"on-demand backup of {self.t.database_instance}")
        try:
            backup_id = self.sql.backup(description, timeout=self.s.ready_timeout_seconds)
        except Exception as error:  # noqa: BLE001 - any failure of the backup refuses the promotion
            raise GateFailed("backup", f"backup of {self.t.database_instance} failed: {error}", refused=True) \
                from error
        self._record_backup(backup_id)
        return f"backup {backup_id} of {self.t.database_instance}"

    def _record_backup(self, backup_id: str) -> None:
        self.report.backup_id = backup_id
        assert self.state is not None
        if self.state.backup_id != backup_id:
            self.state.backup_id = backup_id
            self._save_state()

    # --- 5. worker and the lease hand-over --------------------------------------------

    def worker(self) -> str:
        assert self.state is not None and self.report.image is not None
        image, s = self.report.image, self.s
        worker = self.run.get_service(self.t.worker_service)
        serving = _only(worker)
        if self.state.worker_before is None:
            self.state.worker_before = serving
            self._save_state()
        self.changed.append("worker")
        if serving and serving != self.state.worker_before and \
                self._revision_image(self.t.worker_service, serving) == image:
            # An earlier attempt of this run rolled the worker out already: never twice.
            self.new_worker = serving
            if self._holder_revision() == serving:
                return f"skipped: {serving} already serves {image} and holds the lease"
        else:
            self.progress.gate("worker", f"deploying {image} to {self.t.worker_service}")
            try:
                self.new_worker = self.run.deploy(self.t.worker_service, image, traffic=None,
                                                  timeout=s.ready_timeout_seconds)
            except Exception as error:  # noqa: BLE001 - any failure here is the gate's, and is undone
                raise GateFailed("worker", f"the new {self.t.worker_service} revision did not become Ready: "
                                           f"{_message(error)}") from error
        revision = self.run.get_revision(self.t.worker_service, self.new_worker)
        if not revision.ready:
            raise GateFailed("worker", f"{self.new_worker} is not Ready ({revision.state} {revision.reason})")
        self.progress.gate("worker", f"waiting for {self.new_worker} to take the lease")
        hand_over = self._wait_for_lease(self.new_worker, s.release_grace_seconds)
        if hand_over is None:
            stuck = self.lease.read()
            old = [h for h in stuck.holders if h.revision != self.new_worker]
            for holder in old:
                # Only now, with the new revision Ready, may the old holder's session end.
                self.progress.note("worker", f"{holder.revision} keeps the lease; ending its session (pid {holder.pid})")
                self.lease.terminate(holder.pid)
            remaining = max(1.0, s.hand_over_timeout_seconds - s.release_grace_seconds)
            hand_over = self._wait_for_lease(self.new_worker, remaining)
        if hand_over is None:
            raise GateFailed("worker", f"{self.new_worker} did not take the lease within "
                                       f"{s.hand_over_timeout_seconds:.0f} s")
        self.report.lease["gap_seconds"] = round(hand_over.gap_seconds, 3)
        return (f"{self.new_worker} serves {image} and holds the lease; "
                f"gap without a holder {hand_over.gap_seconds:.2f} s")

    def _wait_for_lease(self, revision: str, timeout: float):
        from infra.promote.lease import LeaseTimeout

        try:
            return self.lease.wait_for_holder(revision, timeout=timeout)
        except LeaseTimeout:
            return None

    def _revision_image(self, service: str, revision: str) -> str:
        return self.run.get_revision(service, revision).image

    # --- 6. web -----------------------------------------------------------------------

    def web(self) -> str:
        assert self.state is not None and self.report.image is not None
        image, s = self.report.image, self.s
        web = self.run.get_service(self.t.web_service)
        if self.state.web_before is None:
            self.state.web_before = dict(web.traffic)
            self._save_state()
        before = self.state.web_before
        if web.traffic and all(self._revision_image(self.t.web_service, r) == image for r in web.serving) \
                and set(web.serving) != set(before):
            return f"skipped: {', '.join(web.serving)} already serve {image}"
        self.progress.gate("web", f"deploying {image} to {self.t.web_service} with no traffic")
        self.changed.append("web")
        try:
            self.new_web = self.run.deploy(self.t.web_service, image, traffic=before, timeout=s.ready_timeout_seconds)
        except Exception as error:  # noqa: BLE001
            raise GateFailed("web", f"the new {self.t.web_service} revision did not become Ready: "
                                    f"{_message(error)}") from error
        revision = self.run.get_revision(self.t.web_service, self.new_web)
        # Deployed with no traffic: Ready may come with reason RETIRED; it must not be FAILED.
        if revision.state != "CONDITION_SUCCEEDED":
            raise GateFailed("web", f"{self.new_web} is not Ready ({revision.state} {revision.reason})")
        for percent in s.steps:
            traffic = split_traffic(self.new_web, percent, before)
            self.progress.gate("web", f"{percent}% to {self.new_web}")
            self.run.set_traffic(self.t.web_service, traffic, timeout=s.ready_timeout_seconds)
            self._check_lease_kept("web")
            self._bake_and_judge(percent)
        return f"{self.new_web} serves 100% after steps {', '.join(f'{p}%' for p in s.steps)}"

    def _bake_and_judge(self, percent: int) -> None:
        s = self.s
        self.progress.gate("web", f"baking {s.bake_seconds:g} s at {percent}%")
        self.sleep(s.bake_seconds)
        waited, window = 0.0, max(s.bake_seconds, 1.0)
        while True:
            counts = self.metrics.request_counts(self.t.web_service, self.new_web, window)
            health = judge(counts.total, counts.errors, s.min_requests, s.max_error_ratio)
            self.progress.note("web", f"{self.new_web} at {percent}%: {health.describe()}")
            if health.verdict is Verdict.HEALTHY:
                return
            if health.verdict is Verdict.UNHEALTHY:
                raise GateFailed("web", f"{self.new_web} at {percent}%: {health.describe()} "
                                        f"(limit {s.max_error_ratio:.2%})")
            if waited >= s.inconclusive_wait_seconds:
                message = (f"{self.new_web} at {percent}%: {health.describe()} after waiting "
                           f"{waited:.0f} s (need {s.min_requests} requests)")
                if s.on_inconclusive == "hold":
                    raise Held(message + "; traffic held where it is for a person to decide")
                raise GateFailed("web", message)
            pause = max(1.0, min(s.bake_seconds, s.inconclusive_wait_seconds - waited) or 1.0)
            self.progress.gate("web", f"too few requests to judge; waiting {pause:.0f} s more")
            self.sleep(pause)
            waited += pause
            window += pause

    def _check_lease_kept(self, gate: str) -> None:
        holder = self._holder_revision()
        if self.new_worker and holder != self.new_worker:
            raise GateFailed(gate, f"the lease moved away from {self.new_worker} (holder: {holder or 'none'})")

    # --- 7. settle --------------------------------------------------------------------

    def settle(self) -> str:
        deadline = self.clock() + self.s.settle_seconds
        self.progress.gate("settle", f"{self.new_worker} must keep the lease for {self.s.settle_seconds:.0f} s")
        while True:
            self._check_lease_kept("settle")
            if self.clock() >= deadline:
                return f"{self.new_worker} kept the lease for {self.s.settle_seconds:.0f} s"
            self.sleep(min(1.0, max(0.0, deadline - self.clock())))

    # --- rollback ---------------------------------------------------------------------

    def _roll_back(self, gate: str) -> None:
        start = self.clock()
        assert self.state is not None
        done = []
        try:
            if "web" in self.changed and self.state.web_before:
                self.progress.gate("rollback", f"traffic of {self.t.web_service} back to {_fmt(self.state.web_before)}")
                self.run.set_traffic(self.t.web_service, self.state.web_before, timeout=self.s.ready_timeout_seconds)
                done.append(f"{self.t.web_service} back to {_fmt(self.state.web_before)}")
            if "worker" in self.changed and self.state.worker_before:
                old = self.state.worker_before
                self.progress.gate("rollback", f"traffic of {self.t.worker_service} back to {old}")
                self.run.set_traffic(self.t.worker_service, {old: 100}, timeout=self.s.ready_timeout_seconds)
                self.progress.gate("rollback", f"waiting for {old} to hold the lease again")
                if self._wait_for_lease(old, self.s.release_grace_seconds) is None:
                    for holder in self.lease.read().holders:
                        if holder.revision != old:
                            self.lease.terminate(holder.pid)
                    if self._wait_for_lease(old, self.s.hand_over_timeout_seconds) is None:
                        raise RuntimeError(f"{old} did not take the lease back")
                done.append(f"{self.t.worker_service} back to {old}, which holds the lease")
        except Exception as error:  # noqa: BLE001 - a failed rollback needs a person, loudly
            self.report.result = "rollback_failed"
            self.report.exit_code = EXIT_ROLLBACK_FAILED
            self._step("rollback", "failed", start, f"rollback after {gate} failed: {_message(error)}")
            return
        self.report.result = "rolled_back"
        self._step("rollback", "rolled_back", start, "; ".join(done) or "nothing to undo")

    # --- reading ----------------------------------------------------------------------

    def _holder_revision(self) -> str | None:
        try:
            state = self.lease.read()
        except Exception:  # noqa: BLE001 - the report says unknown rather than failing at the end
            return None
        return state.holders[0].revision if len(state.holders) == 1 else None

    def _plan(self) -> list[str]:
        s, image = self.s, self.report.image
        return [
            f"back up Cloud SQL {self.t.database_instance} (reused if one exists for this image within "
            f"{s.backup_window_hours:.0f} h)",
            f"deploy {image} to {self.t.worker_service}; wait for Ready, then for the lease "
            f"(end the old holder's session after {s.release_grace_seconds:.0f} s; fail after "
            f"{s.hand_over_timeout_seconds:.0f} s)",
            f"deploy {image} to {self.t.web_service} with no traffic, then "
            + " -> ".join(f"{p}%" for p in s.steps)
            + f", baking {s.bake_seconds:g} s and requiring <= {s.max_error_ratio:.2%} 5xx over at least "
              f"{s.min_requests} requests at each step",
            f"settle: the new worker revision keeps the lease for {s.settle_seconds:.0f} s",
        ]


def _only(service: ServiceView) -> str | None:
    return service.serving[0] if len(service.serving) == 1 else None


def _fmt(traffic: dict[str, int]) -> str:
    return ", ".join(f"{rev} {pct}%" for rev, pct in sorted(traffic.items())) or "no traffic"


def _message(error: BaseException) -> str:
    return getattr(error, "message", None) or str(error) or type(error).__name__
