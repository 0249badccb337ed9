"""Simulated workers (SPEC 4) against the real PostgreSQL: they take, hold, release and
lose the lease as the real worker does, and show each fault on demand."""

from __future__ import annotations

import os
import time

import pytest

from infra.promote.lease import LeaseTimeout, WorkerLease
from infra.sandbox.workers import EXIT_CONNECTION_LOST
from tests.pg import wait_until


@pytest.fixture
def lease(pg):
    reader = WorkerLease(lambda: pg.connect_dbapi("brew_deployer", application_name="test"))
    yield reader
    reader.close()


def test_worker_takes_and_holds_the_lease(supervisor, lease, pg):
    pid = supervisor.start("worker-00001-a")
    assert supervisor.running() == {"worker-00001-a": pid}
    handover = lease.wait_for_holder("worker-00001-a", timeout=5)
    ev = supervisor.wait_for_event("worker-00001-a", "lease-acquired", timeout=2)
    assert f"backend_pid={handover.new_holder.pid}" in ev.detail
    # it holds on its own session, as brew_app, and stays holder while heartbeating
    admin = pg.connect()
    try:
        rows = admin.run(
            "SELECT usename, application_name FROM pg_stat_activity WHERE pid = :p",
            p=handover.new_holder.pid,
        )
        assert rows == [["brew_app", "worker-00001-a"]]
    finally:
        admin.close()
    time.sleep(0.5)
    assert lease.read().revision == "worker-00001-a"
    with pytest.raises(ValueError, match="already running"):
        supervisor.start("worker-00001-a")


def test_sigterm_releases_and_exits_zero(supervisor, lease):
    supervisor.start("a")
    lease.wait_for_holder("a", timeout=5)
    assert supervisor.stop("a") == 0
    assert supervisor.running() == {}
    assert lease.read().holders == ()
    names = [e.name for e in supervisor.events("a")]
    assert names[-2:] == ["lease-released", "exit"]


def test_sigterm_while_waiting_leaves_no_waiter(supervisor, lease):
    supervisor.start("a")
    lease.wait_for_holder("a", timeout=5)
    supervisor.start("b")
    wait_until(lambda: lease.read().waiters)
    assert supervisor.stop("b") == 0
    wait_until(lambda: lease.read().waiters == (), timeout=2)  # the server abandons the wait
    assert lease.read().revision == "a"


def test_ignore_sigterm_then_terminate(supervisor, lease):
    supervisor.start("old", ignore_sigterm=True)
    old = lease.wait_for_holder("old", timeout=5).new_holder
    supervisor.start("new")
    wait_until(lambda: lease.read().waiters)
    assert supervisor.stop("old", timeout=0.5) is None  # stuck: still running, still holder
    assert "old" in supervisor.running()
    assert lease.read().revision == "old"
    assert "sigterm-ignored" in [e.name for e in supervisor.events("old")]
    assert lease.terminate(old.pid) is True
    assert supervisor.wait_exit("old", timeout=3) == EXIT_CONNECTION_LOST
    handover = lease.wait_for_holder("new", timeout=2)
    assert handover.new_holder.revision == "new"
    assert list(supervisor.running()) == ["new"]


def test_never_take_lease_times_out(supervisor, lease, pg):
    supervisor.start("lazy", never_take_lease=True)
    supervisor.wait_for_event("lazy", "connected", timeout=5)
    with pytest.raises(LeaseTimeout) as exc:
        lease.wait_for_holder("lazy", timeout=1.0, poll=0.1)
    assert exc.value.state.holders == () and exc.value.polls >= 10
    admin = pg.connect()
    try:  # connected and visible, just never locking
        assert admin.run(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'lazy'"
        ) == [[1]]
    finally:
        admin.close()
    assert supervisor.stop("lazy") == 0


def test_drop_lease_after(supervisor, lease):
    supervisor.start("flaky", drop_lease_after=0.5)
    lease.wait_for_holder("flaky", timeout=5)
    supervisor.wait_for_event("flaky", "lease-dropped", timeout=3)
    assert lease.read().holders == ()
    assert "flaky" in supervisor.running()  # still up, still connected, idle
    time.sleep(0.3)
    assert "flaky" in supervisor.running()
    assert supervisor.stop("flaky") == 0


def test_dropped_connection_makes_the_worker_exit(supervisor, lease):
    supervisor.start("a")
    holder = lease.wait_for_holder("a", timeout=5).new_holder
    assert lease.terminate(holder.pid)
    assert supervisor.wait_exit("a", timeout=3) == EXIT_CONNECTION_LOST
    assert supervisor.running() == {}
    assert supervisor.restarts("a") == 0  # restart_on_exit is off
    assert "connection-lost" in [e.name for e in supervisor.events("a")]


def test_restart_on_exit_takes_the_lease_again(supervisor, lease):
    first = supervisor.start("a", restart_on_exit=True)
    holder = lease.wait_for_holder("a", timeout=5).new_holder
    assert lease.terminate(holder.pid)
    again = lease.wait_for_holder("a", timeout=5)
    assert again.new_holder.pid != holder.pid
    assert supervisor.restarts("a") == 1
    assert supervisor.exit_codes("a") == [EXIT_CONNECTION_LOST]
    assert supervisor.running()["a"] != first
    # a deliberate stop is not restarted
    assert supervisor.stop("a") == 0
    time.sleep(0.3)
    assert supervisor.running() == {} and supervisor.restarts("a") == 1


def test_killed_worker_frees_the_lease_and_close_stops_all(supervisor, lease):
    supervisor.start("a", ignore_sigterm=True)
    lease.wait_for_holder("a", timeout=5)
    supervisor.start("b")
    supervisor.start("c", never_take_lease=True)
    wait_until(lambda: lease.read().waiters)
    assert supervisor.kill("a") == -9
    lease.wait_for_holder("b", timeout=2)
    pids = list(supervisor.running().values())
    assert len(pids) == 2
    supervisor.close()
    assert supervisor.running() == {}
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
