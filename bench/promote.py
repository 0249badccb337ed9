"""Benchmark: the promote pipeline in the sandbox.

1. Hand-over detection latency. On a real PostgreSQL (`LocalPostgres`) with simulated
   workers (`WorkerSupervisor`), 20 hand-overs A -> B: B is started and queues on the
   advisory lock, `WorkerLease.wait_for_holder(B)` polls as the pipeline does (0.1 s),
   and after a random 0-0.3 s A gets SIGTERM (`supervisor.stop`), so the grant falls at
   a random phase of the poll. Latency = `HandOver.observed_at` - the time B's own
   process logged `lease-acquired` (right after `pg_advisory_lock` returned to it).
   Targets: median < 0.5 s, max < 1 s.

2. Pipeline overhead of a clean promotion (as tests/promote/test_faults.py `rehearse`
   runs it: `runner.promote` with `target_of(..., PROMOTE_OVERRIDES)`) in a fresh
   `Sandbox`. Wall = the `promote(...)` call only (not the sandbox start). Necessary
   waits, from a timeline of the stand-ins' requests (`SandboxServer.dispatch` is
   wrapped to timestamp them), the gate boundaries (`Pipeline._step` is wrapped to
   timestamp them) and the workers' event logs:
     - each Cloud Run update: `operation_delay`, or max(operation_delay, ready_delay)
       when it creates a revision;
     - the worker deploy instead: from the deploy request reaching the stand-in to the
       new worker logging `lease-acquired` (ready_delay + the old worker's SIGTERM +
       the new worker process starting, connecting and being granted the lock);
     - the on-demand backup: `backup_delay`;
     - each traffic step: `bake_seconds`, plus the pipeline's own inconclusive pauses
       (pause rule of `Pipeline._bake_and_judge`, counted from the Monitoring queries);
     - settle: `settle_seconds`.
   Overhead = wall - necessary: the pipeline's API and database round trips, its
   polling granularity (operations, backup, lease), client set-up and the report.
   The same promotion is then run with every simulated delay at zero (stand-ins'
   ready/operation/backup delay 0, bake 0, settle 0, min_requests 1 so no step waits
   for traffic): what remains is overhead plus the worker process start-up, which
   cannot be zeroed and is subtracted the same way. Target: overhead < 2 s.

`--runs N`: N sets of hand-overs (pooled for the median and max) and N promotions per
configuration (medians).

It reports, it does not assert: exit status 0 whatever the numbers.

    uv run python bench/promote.py [--runs 3] [--hand-overs 20]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from infra.promote import pipeline as pipeline_module  # noqa: E402
from infra.promote.clients import Endpoints  # noqa: E402
from infra.promote.database import plain  # noqa: E402
from infra.promote.lease import WorkerLease  # noqa: E402
from infra.promote.runner import promote, target_of  # noqa: E402
from infra.sandbox.postgres import APP_ROLE, DEPLOYER_ROLE, LocalPostgres  # noqa: E402
from infra.sandbox.sandbox import PROMOTE_OVERRIDES, Sandbox, topology_from_stacks  # noqa: E402
from infra.sandbox.workers import WorkerSupervisor  # noqa: E402
from infra.synth.stacks import read_stack, settings_of  # noqa: E402

MEDIAN_TARGET = 0.5  # s, hand-over detection
MAX_TARGET = 1.0  # s, hand-over detection
OVERHEAD_TARGET = 2.0  # s, pipeline over the sandbox's simulated delays
POLL = 0.1  # WorkerLease.wait_for_holder's default, which the pipeline uses
ZERO_OVERRIDES = {"bake_seconds": 0.0, "settle_seconds": 0.0, "min_requests": 1}
ZERO_DELAYS = {"ready_delay": 0.0, "operation_delay": 0.0, "backup_delay": 0.0}


def verdict(ok: bool) -> str:
    return "OK" if ok else "OVER TARGET"


# ---------------------------------------------------------------------------------------
# 1. hand-over detection latency
# ---------------------------------------------------------------------------------------


def hand_overs(count: int, rng: random.Random) -> list[float]:
    """Detection latencies (s) of `count` hand-overs on one fresh PostgreSQL."""
    latencies = []
    with LocalPostgres() as pg:
        supervisor = WorkerSupervisor(pg.dsn(APP_ROLE))
        lease = WorkerLease(plain(pg.dsn(DEPLOYER_ROLE)))
        try:
            holder = "bench-worker-000"
            supervisor.start(holder)
            supervisor.wait_for_event(holder, "lease-acquired", timeout=15)
            for i in range(1, count + 1):
                new = f"bench-worker-{i:03d}"
                supervisor.start(new)
                supervisor.wait_for_event(new, "waiting", timeout=15)  # queued on the lock
                # SIGTERM the holder at a random phase of the poll, while the reader polls.
                stopper = threading.Timer(rng.uniform(0.0, 3 * POLL), supervisor.stop, args=(holder,))
                stopper.start()
                try:
                    seen = lease.wait_for_holder(new, timeout=15, poll=POLL)
                finally:
                    stopper.join()
                granted = supervisor.wait_for_event(new, "lease-acquired", timeout=5)
                latencies.append(seen.observed_at.timestamp() - granted.at)
                holder = new
        finally:
            lease.close()
            supervisor.close()
    return latencies


# ---------------------------------------------------------------------------------------
# 2. pipeline overhead of a clean promotion
# ---------------------------------------------------------------------------------------


@dataclass
class Call:
    start: float  # unix time the stand-in got the request
    end: float
    method: str
    path: str
    new_revision: str | None = None  # a Cloud Run update that created this revision


@dataclass
class Gate:
    name: str
    start: float  # unix time
    end: float
    status: str


@dataclass
class Run:
    zero: bool
    result: str
    exit_code: int
    wall: float
    gates: list[Gate]
    calls: list[Call]
    waits: dict[str, float] = field(default_factory=dict)  # what -> necessary seconds
    by_gate: dict[str, float] = field(default_factory=dict)  # gate -> necessary seconds
    counts: dict[str, int] = field(default_factory=dict)
    detect_after_grant: float | None = None  # worker gate end - new worker's lease-acquired
    poll_lag: float = 0.0  # operations done (by the stand-in's delay) -> the poll that saw it
    operations: int = 0
    log: str = ""

    @property
    def necessary(self) -> float:
        return sum(self.waits.values())

    @property
    def overhead(self) -> float:
        return self.wall - self.necessary


@contextmanager
def gate_marks(gates: list[Gate]):
    """Timestamp each gate as the pipeline records it (measurement only, restored after)."""
    original = pipeline_module.Pipeline._step

    def _step(self, gate, status, start, detail):
        now_clock, now = self.clock(), time.time()
        gates.append(Gate(gate, now - (now_clock - start), now, status))
        return original(self, gate, status, start, detail)

    pipeline_module.Pipeline._step = _step
    try:
        yield
    finally:
        pipeline_module.Pipeline._step = original


def record_calls(box: Sandbox, calls: list[Call]) -> None:
    """Wrap the server's dispatch: every request with its time and any revision it created."""
    server, cloudrun = box.server, box.cloudrun
    original = server.dispatch
    lock = threading.Lock()

    def created(path: str) -> str | None:
        try:
            return cloudrun.service(path.removeprefix("/v2/")).latest_created_revision
        except Exception:  # noqa: BLE001 - not a service path
            return None

    def dispatch(request):
        service_update = request.method == "PATCH" and "/services/" in request.path
        before = created(request.path) if service_update else None
        start = time.time()
        response = original(request)
        end = time.time()
        after = created(request.path) if service_update else None
        call = Call(start, end, request.method, request.path,
                    after.rsplit("/", 1)[-1] if after and after != before else None)
        with lock:
            calls.append(call)
        return response

    server.dispatch = dispatch


@contextmanager
def stderr_to(path: Path):
    """Send fd 2 to a file (the pipeline's progress lines; it also makes them plain lines)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "wb") as out:
        os.dup2(out.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def gate_of(gates: list[Gate], at: float) -> str:
    for g in gates:
        if g.start <= at <= g.end:
            return g.name
    return "(outside gates)"


def promotion(zero: bool) -> Run:
    topology = topology_from_stacks()
    overrides = {**PROMOTE_OVERRIDES, **(ZERO_OVERRIDES if zero else {})}
    target = target_of(settings_of(read_stack("prod")), settings_of(read_stack("staging")), overrides)
    s = target.settings
    delays = ZERO_DELAYS if zero else {}
    gates: list[Gate] = []
    calls: list[Call] = []
    with tempfile.TemporaryDirectory(prefix="bench-promote-") as tmp, Sandbox(topology, **delays) as box:
        record_calls(box, calls)
        e = box.endpoints()
        log = Path(tmp) / "progress.log"
        with gate_marks(gates), stderr_to(log):
            start = time.monotonic()
            report = promote(target, Endpoints(e["run"], e["sqladmin"], e["monitoring"]), plain(e["database"]),
                             run_id="bench", image=None, dry_run=False, report_path=Path(tmp) / "report.json")
            wall = time.monotonic() - start
        run = Run(zero, report.result, report.exit_code, wall, gates, sorted(calls, key=lambda c: c.start),
                  log=log.read_text(errors="replace"))
        if report.result != "promoted":
            return run
        assert box.workers is not None
        new_worker = next(c.new_revision for c in run.calls
                          if c.new_revision and f"/services/{topology.worker_service}" in c.path)
        granted = box.workers.wait_for_event(new_worker, "lease-acquired", timeout=5)
        account(run, box, s, topology.web_service, new_worker, granted.at)
    return run


def account(run: Run, box: Sandbox, s, web_service: str, new_worker: str, granted_at: float) -> None:
    """Fill in the necessary waits of a finished promotion, by kind and by gate."""
    waits: dict[str, float] = {}
    by_gate: dict[str, float] = {}
    counts: dict[str, int] = {}

    def add(kind: str, gate: str, seconds: float, n: int = 1) -> None:
        waits[kind] = waits.get(kind, 0.0) + seconds
        by_gate[gate] = by_gate.get(gate, 0.0) + seconds
        counts[kind] = counts.get(kind, 0) + n

    op, ready, backup = box.operation_delay, box.ready_delay, box.backup_delay
    steps: list[int] = []  # monitoring queries per traffic step
    in_web_steps = False
    for call in run.calls:
        gate = gate_of(run.gates, call.start)
        if call.method == "PATCH" and "/services/" in call.path:
            if call.new_revision == new_worker:
                add("worker deploy -> new worker holds the lease", gate, granted_at - call.start)
            elif call.new_revision:
                add("deploy creating a revision (max(operation, ready) delay)", gate, max(op, ready))
                in_web_steps = f"/services/{web_service}" in call.path
            else:
                add("Cloud Run update (operation delay)", gate, op)
                if in_web_steps and f"/services/{web_service}" in call.path:
                    steps.append(0)  # a traffic step starts
        elif call.method == "POST" and call.path.endswith("/backupRuns"):
            add("on-demand backup (backup delay)", gate, backup)
        elif "/timeSeries" in call.path and steps:
            steps[-1] += 1
    run.poll_lag, run.operations = poll_lag(run.calls, op, ready, backup)
    web_gate = "web"
    for _ in steps:
        add("bake", web_gate, s.bake_seconds)
    for queries in steps:
        waited = 0.0
        for _ in range(queries - 1):  # the pause rule of Pipeline._bake_and_judge
            pause = max(1.0, min(s.bake_seconds, s.inconclusive_wait_seconds - waited) or 1.0)
            add("inconclusive pauses (too few requests)", web_gate, pause)
            waited += pause
    add("settle", "settle", s.settle_seconds)
    run.waits, run.by_gate, run.counts = waits, by_gate, counts
    worker_end = next((g.end for g in run.gates if g.name == "worker"), None)
    run.detect_after_grant = worker_end - granted_at if worker_end else None


def poll_lag(calls: list[Call], op: float, ready: float, backup: float) -> tuple[float, int]:
    """Sum over long-running operations of (the end of the last poll of it) - (its request +
    its simulated delay): how late the pipeline's polling saw operations finish."""
    total, count = 0.0, 0
    due: float | None = None  # when the pending operation is done at the earliest
    last: float | None = None
    for call in calls + [Call(float("inf"), float("inf"), "END", "")]:
        if "/operations/" in call.path and call.method == "GET":
            last = call.end
            continue
        if due is not None and last is not None:
            total += max(0.0, last - due)
            count += 1
        due = last = None
        if call.method == "PATCH" and "/services/" in call.path:
            due = call.start + (max(op, ready) if call.new_revision else op)
        elif call.method == "POST" and call.path.endswith("/backupRuns"):
            due = call.start + backup
    return total, count


# ---------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------


def show_run(run: Run, label: str) -> None:
    print(f"  {label}: wall {run.wall:.3f} s, necessary waits {run.necessary:.3f} s, "
          f"overhead {run.overhead:.3f} s")
    for kind, seconds in run.waits.items():
        print(f"      {seconds:7.3f} s  {kind} (x{run.counts[kind]})")
    print("    per gate: seconds / necessary / overhead")
    total_gates = 0.0
    for g in run.gates:
        seconds = g.end - g.start
        total_gates += seconds
        need = run.by_gate.get(g.name, 0.0)
        print(f"      {g.name:<13} {seconds:6.3f} / {need:6.3f} / {seconds - need:6.3f}")
    outside = run.wall - total_gates
    need = run.by_gate.get("(outside gates)", 0.0)
    print(f"      {'outside gates':<13} {outside:6.3f} / {need:6.3f} / {outside - need:6.3f}"
          "   (client set-up, releasing the promotion lock, last lease read, report)")
    requests = len(run.calls)
    handler = sum(c.end - c.start for c in run.calls)
    print(f"    {requests} API requests; {handler:.3f} s of it inside the stand-ins' handlers (counted as overhead)")
    print(f"    of the overhead: {run.poll_lag:.3f} s from {run.operations} long-running operations being done "
          "to the pipeline's poll seeing it (Cloud Run: 0.1 s backing off x1.5; Cloud SQL: every 0.2 s)")
    if run.detect_after_grant is not None:
        print(f"    worker gate ended {run.detect_after_grant:.3f} s after the new worker logged lease-acquired")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3,
                        help="sets of hand-overs, and clean promotions per configuration (default 3)")
    parser.add_argument("--hand-overs", type=int, default=20, help="hand-overs per set (default 20)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("-v", "--verbose", action="store_true", help="print every run's breakdown")
    args = parser.parse_args()
    rng = random.Random(args.seed)

    print(f"1. hand-over detection latency (poll {POLL} s, {args.runs} x {args.hand_overs} hand-overs)")
    sets = []
    for i in range(args.runs):
        latencies = hand_overs(args.hand_overs, rng)
        sets.append(latencies)
        print(f"   set {i + 1}: median {statistics.median(latencies):.3f} s, max {max(latencies):.3f} s, "
              f"min {min(latencies):.3f} s")
    pooled = [x for latencies in sets for x in latencies]
    median, worst = statistics.median(pooled), max(pooled)
    print(f"   all {len(pooled)}: median {median:.3f} s (target < {MEDIAN_TARGET} s)  "
          f"{verdict(median < MEDIAN_TARGET)}")
    print(f"   all {len(pooled)}: max    {worst:.3f} s (target < {MAX_TARGET} s)  {verdict(worst < MAX_TARGET)}")
    worst_median = max(statistics.median(x) for x in sets)
    print(f"   worst set of {args.hand_overs}: median {worst_median:.3f} s  {verdict(worst_median < MEDIAN_TARGET)}")

    print()
    print(f"2. pipeline overhead of a clean promotion ({args.runs} runs per configuration)")
    summary: dict[bool, tuple[float, float, float, float]] = {}
    for zero in (False, True):
        label = ("zero delays (ready/operation/backup 0, bake 0, settle 0, min_requests 1)" if zero else
                 "sandbox delays (ready 0.3, operation 0.1, backup 0.3; PROMOTE_OVERRIDES)")
        print(f" {label}")
        runs = []
        for i in range(args.runs):
            run = promotion(zero)
            if run.result != "promoted":
                print(f"  run {i + 1}: NOT PROMOTED (result {run.result}, exit {run.exit_code}); progress:")
                print("    " + "\n    ".join(run.log.splitlines()[-15:]))
                continue
            runs.append(run)
            if args.verbose or i == 0:
                show_run(run, f"run {i + 1}")
            else:
                print(f"  run {i + 1}: wall {run.wall:.3f} s, necessary {run.necessary:.3f} s, "
                      f"overhead {run.overhead:.3f} s")
        if runs:
            wall = statistics.median(r.wall for r in runs)
            necessary = statistics.median(r.necessary for r in runs)
            overhead = statistics.median(r.overhead for r in runs)
            top = max(r.overhead for r in runs)
            summary[zero] = (wall, necessary, overhead, top)
            print(f"  median wall {wall:.3f} s, necessary {necessary:.3f} s; overhead median {overhead:.3f} s, "
                  f"max {top:.3f} s (target < {OVERHEAD_TARGET} s)  {verdict(overhead < OVERHEAD_TARGET)}")
        print()
    print("summary")
    print(f"  hand-over detection over {len(pooled)}: median {median:.3f} s (target < {MEDIAN_TARGET} s)  "
          f"{verdict(median < MEDIAN_TARGET)}; max {worst:.3f} s (target < {MAX_TARGET} s)  "
          f"{verdict(worst < MAX_TARGET)}")
    for zero in (False, True):
        name = "zero delays:    wall - worker start-up" if zero else "sandbox delays: wall - necessary waits"
        if zero in summary:
            wall, _, overhead, top = summary[zero]
            print(f"  overhead, {name}: median {overhead:.3f} s (max {top:.3f} s, wall {wall:.3f} s) "
                  f"(target < {OVERHEAD_TARGET} s)  {verdict(overhead < OVERHEAD_TARGET)}")
        else:
            print(f"  overhead, {name}: no promotion succeeded")


if __name__ == "__main__":
    main()
