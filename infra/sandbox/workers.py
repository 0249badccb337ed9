"""Simulated Brew workers for the lease (SPEC 4), one OS process per worker revision.

A worker connects with `application_name=<revision>` (the real worker uses K_REVISION),
runs `SELECT pg_advisory_lock(727275)` on that connection of its own, blocking until it
is granted, then holds it, heartbeating (`SELECT 1`) every `--heartbeat` seconds:

- SIGTERM: unlocks (`pg_advisory_unlock`), closes and exits 0; while still waiting for
  the lock it just drops the connection (the session sets
  `client_connection_check_interval`, so the server abandons the wait) and exits 0.
- Its connection drops (e.g. `pg_terminate_backend`): exits 3, as the real worker does.
  Cloud Run would restart it; `WorkerSupervisor` does when `restart_on_exit` is set.

Faults, per start: `ignore_sigterm` (the old holder that is stuck: keeps the lock until
killed or its session is terminated), `never_take_lease` (connects, never locks),
`drop_lease_after=N` (unlocks after N s and sits idle, connected).

Each worker prints one line per event to stdout, `EVENT <unix time> <name> <detail>`
(connected, waiting, lease-acquired, lease-dropped, sigterm-ignored, lease-released,
connection-lost, exit); the supervisor keeps them in a log per revision.

    python -m infra.sandbox.workers --dsn postgresql://brew_app@127.0.0.1:5432/brew --revision w-0001
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

LEASE_KEY = 727275
EXIT_OK = 0
EXIT_CONNECTION_LOST = 3
REPO_ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------
# The worker process
# ---------------------------------------------------------------------------------------


class _Stop(BaseException):
    """Raised by the SIGTERM handler to break out of a blocking lock wait."""


def _event(name: str, detail: str = "") -> None:
    print(f"EVENT {time.time():.6f} {name} {detail}".rstrip(), flush=True)


def run_worker(
    dsn: str,
    revision: str,
    *,
    key: int = LEASE_KEY,
    ignore_sigterm: bool = False,
    never_take_lease: bool = False,
    drop_lease_after: float | None = None,
    heartbeat: float = 0.2,
) -> int:
    from infra.sandbox.postgres import connect_dsn

    phase = {"name": "connecting", "stop": False}

    def on_sigterm(signum, frame):  # noqa: ARG001
        if ignore_sigterm:
            _event("sigterm-ignored")
            return
        phase["stop"] = True
        if phase["name"] in ("connecting", "waiting"):
            raise _Stop

    signal.signal(signal.SIGTERM, on_sigterm)
    conn = None
    holding = False
    try:
        # No socket timeout: the lock wait may be long.
        conn = connect_dsn(dsn, application_name=revision, timeout=None)
        conn.run("SET client_connection_check_interval = '100ms'")
        (backend_pid,) = conn.run("SELECT pg_backend_pid()")[0]
        _event("connected", f"backend_pid={backend_pid}")
        acquired_at = 0.0
        if never_take_lease:
            phase["name"] = "idle"
        else:
            phase["name"] = "waiting"
            _event("waiting")
            if phase["stop"]:
                raise _Stop
            conn.run("SELECT pg_advisory_lock(:k)", k=key)
            phase["name"] = "holding"
            holding = True
            acquired_at = time.monotonic()
            _event("lease-acquired", f"backend_pid={backend_pid}")
        next_beat = time.monotonic() + heartbeat
        while not phase["stop"]:
            now = time.monotonic()
            if holding and drop_lease_after is not None and now - acquired_at >= drop_lease_after:
                conn.run("SELECT pg_advisory_unlock(:k)", k=key)
                holding = False
                phase["name"] = "idle"
                _event("lease-dropped")
            if now >= next_beat:
                conn.run("SELECT 1")
                next_beat = now + heartbeat
            time.sleep(0.02)
        if holding:
            conn.run("SELECT pg_advisory_unlock(:k)", k=key)
            holding = False
            _event("lease-released")
        conn.close()
        conn = None
        _event("exit", "code=0")
        return EXIT_OK
    except _Stop:
        _event("exit", "code=0 (sigterm before the lease)")
        return EXIT_OK
    except Exception as exc:  # the lease connection is gone: exit, to be restarted
        _event("connection-lost", f"{type(exc).__name__}: {exc}".replace("\n", " "))
        _event("exit", f"code={EXIT_CONNECTION_LOST}")
        return EXIT_CONNECTION_LOST
    finally:
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infra.sandbox.workers")
    p.add_argument("--dsn", required=True)
    p.add_argument("--revision", required=True)
    p.add_argument("--key", type=int, default=LEASE_KEY)
    p.add_argument("--ignore-sigterm", action="store_true")
    p.add_argument("--never-take-lease", action="store_true")
    p.add_argument("--drop-lease-after", type=float, default=None)
    p.add_argument("--heartbeat", type=float, default=0.2)
    a = p.parse_args(argv)
    return run_worker(
        a.dsn,
        a.revision,
        key=a.key,
        ignore_sigterm=a.ignore_sigterm,
        never_take_lease=a.never_take_lease,
        drop_lease_after=a.drop_lease_after,
        heartbeat=a.heartbeat,
    )


# ---------------------------------------------------------------------------------------
# The supervisor
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerEvent:
    at: float  # unix time
    name: str
    detail: str


@dataclass
class _Worker:
    revision: str
    argv: list[str]
    restart_on_exit: bool
    log_path: Path
    proc: subprocess.Popen | None = None
    stopping: bool = False
    restarts: int = 0
    exit_codes: list[int] = field(default_factory=list)


class WorkerSupervisor:
    """Runs one simulated worker process per revision against `dsn_for_app`.

    A background thread notices exits; a worker that exits on its own (not through
    `stop`/`kill`/`close`) is started again when it was started with
    `restart_on_exit=True`, as Cloud Run restarts a worker instance."""

    def __init__(
        self,
        dsn_for_app: str,
        *,
        key: int = LEASE_KEY,
        heartbeat: float = 0.2,
        log_dir: str | Path | None = None,
        restart_delay: float = 0.1,
        keep_logs: bool = False,
    ):
        self.dsn = dsn_for_app
        self.key = key
        self.heartbeat = heartbeat
        self.restart_delay = restart_delay
        # Logs go to `log_dir` (kept), or to a temporary folder removed by `close()`
        # unless `keep_logs`.
        self._own_log_dir = log_dir is None and not keep_logs
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="brew-workers-"))
        self._workers: dict[str, _Worker] = {}
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name="worker-supervisor", daemon=True)
        self._monitor.start()

    # -- processes -----------------------------------------------------------------------

    def _spawn(self, w: _Worker) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        with open(w.log_path, "ab") as log:
            w.proc = subprocess.Popen(
                w.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(REPO_ROOT),
            )
        w.stopping = False

    def _reap(self, w: _Worker) -> int | None:
        """Record the exit of `w`'s process if it has ended; its code, else None."""
        if w.proc is None:
            return w.exit_codes[-1] if w.exit_codes else None
        code = w.proc.poll()
        if code is None:
            return None
        w.exit_codes.append(code)
        w.proc = None
        return code

    def _watch(self) -> None:
        while not self._closed.wait(0.05):
            with self._lock:
                for w in list(self._workers.values()):
                    if w.proc is None or w.proc.poll() is None:
                        continue
                    stopping = w.stopping
                    self._reap(w)
                    if w.restart_on_exit and not stopping and not self._closed.is_set():
                        time.sleep(self.restart_delay)
                        w.restarts += 1
                        self._spawn(w)

    def start(
        self,
        revision: str,
        *,
        ignore_sigterm: bool = False,
        never_take_lease: bool = False,
        drop_lease_after: float | None = None,
        restart_on_exit: bool = False,
    ) -> int:
        """Start the worker of `revision`; its pid. One process per revision."""
        argv = [
            sys.executable, "-m", "infra.sandbox.workers",
            "--dsn", self.dsn,
            "--revision", revision,
            "--key", str(self.key),
            "--heartbeat", str(self.heartbeat),
        ]  # fmt: skip
        if ignore_sigterm:
            argv.append("--ignore-sigterm")
        if never_take_lease:
            argv.append("--never-take-lease")
        if drop_lease_after is not None:
            argv += ["--drop-lease-after", str(drop_lease_after)]
        with self._lock:
            if self._closed.is_set():
                raise RuntimeError("supervisor is closed")
            old = self._workers.get(revision)
            if old is not None and old.proc is not None and old.proc.poll() is None:
                raise ValueError(f"worker {revision!r} is already running (pid {old.proc.pid})")
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in revision)
            w = _Worker(
                revision=revision,
                argv=argv,
                restart_on_exit=restart_on_exit,
                log_path=self.log_dir / f"{safe}.log",
            )
            if old is not None:
                w.exit_codes, w.restarts = old.exit_codes, old.restarts
            self._spawn(w)
            self._workers[revision] = w
            assert w.proc is not None
            return w.proc.pid

    def stop(self, revision: str, timeout: float = 5.0) -> int | None:
        """SIGTERM the worker and wait up to `timeout` s: its exit code, or None if it is
        still running (it ignores SIGTERM). It is not restarted after this."""
        with self._lock:
            w = self._workers.get(revision)
            if w is None:
                raise KeyError(revision)
            w.stopping = True
            proc = w.proc
            if proc is None:
                return w.exit_codes[-1] if w.exit_codes else None
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        with self._lock:
            if w.proc is proc:
                self._reap(w)
            return proc.returncode

    def kill(self, revision: str) -> int | None:
        """SIGKILL the worker (no restart); its exit code."""
        with self._lock:
            w = self._workers.get(revision)
            if w is None:
                raise KeyError(revision)
            w.stopping = True
            proc = w.proc
            if proc is None:
                return w.exit_codes[-1] if w.exit_codes else None
            proc.kill()
        proc.wait()
        with self._lock:
            if w.proc is proc:
                self._reap(w)
        return proc.returncode

    def wait_exit(self, revision: str, timeout: float) -> int | None:
        """Wait for the current process of `revision` to end by itself; its exit code, or
        None on timeout."""
        with self._lock:
            w = self._workers[revision]
            proc = w.proc
            if proc is None:
                return w.exit_codes[-1] if w.exit_codes else None
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def running(self) -> dict[str, int]:
        with self._lock:
            return {
                r: w.proc.pid
                for r, w in self._workers.items()
                if w.proc is not None and w.proc.poll() is None
            }

    def exit_codes(self, revision: str) -> list[int]:
        with self._lock:
            w = self._workers[revision]
            self._reap(w) if w.proc is not None and w.proc.poll() is not None else None
            return list(w.exit_codes)

    def restarts(self, revision: str) -> int:
        with self._lock:
            return self._workers[revision].restarts

    # -- logs ----------------------------------------------------------------------------

    def log(self, revision: str) -> str:
        with self._lock:
            path = self._workers[revision].log_path
        return path.read_text(errors="replace") if path.exists() else ""

    def events(self, revision: str) -> list[WorkerEvent]:
        out = []
        for line in self.log(revision).splitlines():
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[0] == "EVENT":
                out.append(WorkerEvent(float(parts[1]), parts[2], parts[3] if len(parts) > 3 else ""))
        return out

    def wait_for_event(
        self, revision: str, name: str, timeout: float, after: float = 0.0
    ) -> WorkerEvent:
        """The first `name` event of `revision` at or after unix time `after`."""
        deadline = time.monotonic() + timeout
        while True:
            for ev in self.events(revision):
                if ev.name == name and ev.at >= after:
                    return ev
            if time.monotonic() >= deadline:
                raise TimeoutError(f"worker {revision!r}: no {name!r} within {timeout}s")
            time.sleep(0.02)

    # -- shutdown ------------------------------------------------------------------------

    def close(self, timeout: float = 3.0) -> None:
        """Stop every worker: SIGTERM, then SIGKILL whatever is left after `timeout`."""
        self._closed.set()
        self._monitor.join(timeout=2)
        with self._lock:
            workers = list(self._workers.values())
            for w in workers:
                w.stopping = True
                if w.proc is not None and w.proc.poll() is None:
                    try:
                        w.proc.send_signal(signal.SIGTERM)
                    except ProcessLookupError:
                        pass
        deadline = time.monotonic() + timeout
        for w in workers:
            if w.proc is None:
                continue
            try:
                w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            with self._lock:
                self._reap(w)
        if self._own_log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self) -> WorkerSupervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(main())
