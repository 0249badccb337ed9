"""The pipeline's view of the worker lease, on a real PostgreSQL (tests/pg.py)."""

from __future__ import annotations

import threading
import time
from datetime import datetime

import pg8000.native
import pytest

from infra.promote.lease import (
    LEASE_KEY,
    HandOver,
    LeaseHolder,
    LeaseState,
    LeaseTimeout,
    TwoHolders,
    WorkerLease,
    advisory_ids,
)
from tests.pg import wait_until


def _close(*conns) -> None:
    for conn in conns:
        try:
            conn.close()
        except Exception:  # a terminated session cannot say goodbye
            pass


@pytest.fixture
def deployer_lease(pg):
    """A WorkerLease reading as brew_deployer over pg8000.dbapi; `.conns` are its
    connections, so a test can find the reader's backend pid."""
    conns = []

    def factory():
        conn = pg.connect_dbapi("brew_deployer", application_name="promote")
        conns.append(conn)
        return conn

    lease = WorkerLease(factory)
    lease.conns = conns  # type: ignore[attr-defined]
    yield lease
    lease.close()


# -- key arithmetic ----------------------------------------------------------------------


def test_advisory_ids_arithmetic():
    assert LEASE_KEY == 727275
    assert advisory_ids(727275) == (0, 727275)
    assert advisory_ids((5 << 32) | 9) == (5, 9)
    assert advisory_ids(-1) == (0xFFFFFFFF, 0xFFFFFFFF)


@pytest.mark.parametrize("key", [LEASE_KEY, (7 << 32) | 0xFFFFFFF0, -2])
def test_key_arithmetic_matches_pg_locks(pg, key):
    conn = pg.connect("brew_app", application_name="key-check")
    try:
        conn.run("SELECT pg_advisory_lock(:k)", k=key)
        rows = conn.run(
            "SELECT classid::bigint, objid::bigint, objsubid, granted FROM pg_locks"
            " WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        )
        classid, objid = advisory_ids(key)
        assert rows == [[classid, objid, 1, True]]
        # and the reader finds it by those ids
        reader = WorkerLease(lambda: pg.connect_dbapi("brew_deployer"), key=key)
        try:
            assert reader.read().revision == "key-check"
        finally:
            reader.close()
        conn.run("SELECT pg_advisory_unlock(:k)", k=key)
    finally:
        conn.close()


# -- reading -----------------------------------------------------------------------------


def test_reads_holder_and_waiters_as_deployer(pg, deployer_lease):
    holder = pg.connect("brew_app", application_name="worker-00001-abc")
    waiter = pg.connect("brew_app", application_name="worker-00002-def")
    try:
        assert deployer_lease.read() == LeaseState(holders=(), waiters=())
        holder.run("SELECT pg_advisory_lock(:k)", k=LEASE_KEY)
        holder_pid = holder.run("SELECT pg_backend_pid()")[0][0]
        waiter_pid = waiter.run("SELECT pg_backend_pid()")[0][0]
        # the waiter blocks in pg_advisory_lock, on a thread of its own
        t = threading.Thread(
            target=lambda: waiter.run("SELECT pg_advisory_lock(:k)", k=LEASE_KEY), daemon=True
        )
        t.start()
        state = wait_until(lambda: (s := deployer_lease.read()).waiters and s)
        assert state.holder is not None
        assert state.holder.pid == holder_pid
        assert state.revision == "worker-00001-abc"
        assert isinstance(state.holder.since, datetime)  # pg_read_all_stats shows it
        assert [(w.pid, w.revision) for w in state.waiters] == [(waiter_pid, "worker-00002-def")]
        assert state.waiters[0].since is not None
        assert state.to_dict()["holders"][0]["revision"] == "worker-00001-abc"
        holder.run("SELECT pg_advisory_unlock(:k)", k=LEASE_KEY)
        t.join(5)
        state = deployer_lease.read()
        assert (state.revision, state.waiters) == ("worker-00002-def", ())
        waiter.run("SELECT pg_advisory_unlock(:k)", k=LEASE_KEY)
    finally:
        holder.close()
        waiter.close()


def test_reader_never_takes_a_lock(pg, deployer_lease):
    holder = pg.connect("brew_app", application_name="worker-a")
    admin = pg.connect()
    try:
        holder.run("SELECT pg_advisory_lock(:k)", k=LEASE_KEY)
        for _ in range(3):
            assert deployer_lease.read().revision == "worker-a"
        cur = deployer_lease.conns[0].cursor()
        cur.execute("SELECT pg_backend_pid()")
        reader_pid = cur.fetchone()[0]
        deployer_lease.conns[0].rollback()
        assert admin.run("SELECT count(*) FROM pg_locks WHERE pid = :p", p=reader_pid) == [[0]]
        # and the one session it read from is not in a transaction left open
        assert admin.run("SELECT state FROM pg_stat_activity WHERE pid = :p", p=reader_pid) == [
            ["idle"]
        ]
    finally:
        holder.close()
        admin.close()


def test_without_pg_read_all_stats_other_sessions_are_hidden(pg):
    """The deployer needs pg_read_all_stats: a role without it gets NULL backend_start
    and '<insufficient privilege>' for other roles' sessions. (PostgreSQL 15 still shows
    application_name to everyone; what the role loses is the rest of the row.)"""
    admin = pg.connect()
    holder = pg.connect("brew_app", application_name="worker-a")
    admin.run("DROP ROLE IF EXISTS brew_nostats")
    admin.run("CREATE ROLE brew_nostats LOGIN")
    try:
        holder.run("SELECT pg_advisory_lock(:k)", k=LEASE_KEY)
        plain = pg.connect("brew_nostats")
        try:
            rows = plain.run(
                "SELECT a.application_name, a.backend_start, a.query, a.state FROM pg_locks l"
                " JOIN pg_stat_activity a ON a.pid = l.pid"
                " WHERE l.locktype = 'advisory' AND l.objid::bigint = :o",
                o=LEASE_KEY,
            )
            assert rows == [["worker-a", None, "<insufficient privilege>", None]]
        finally:
            plain.close()
        nostats = WorkerLease(lambda: pg.connect_dbapi("brew_nostats"))
        deployer = WorkerLease(lambda: pg.connect_dbapi("brew_deployer"))
        try:
            assert nostats.read().holder.since is None
            assert deployer.read().holder.since is not None
        finally:
            nostats.close()
            deployer.close()
    finally:
        holder.close()
        admin.run("DROP ROLE brew_nostats")
        admin.close()


# -- terminate ---------------------------------------------------------------------------


def test_terminate_only_ends_lease_sessions(pg, deployer_lease):
    holder = pg.connect("brew_app", application_name="worker-stuck")
    bystander = pg.connect("brew_app", application_name="web")
    try:
        holder.run("SELECT pg_advisory_lock(:k)", k=LEASE_KEY)
        bystander_pid = bystander.run("SELECT pg_backend_pid()")[0][0]
        assert deployer_lease.terminate(bystander_pid) is False
        assert bystander.run("SELECT 1") == [[1]]
        pid = deployer_lease.read().holder.pid
        assert deployer_lease.terminate(pid) is True
        wait_until(lambda: deployer_lease.read().holder is None)
        # pg8000 reports the dropped session as the server's FATAL, a network error or a reset
        with pytest.raises((pg8000.native.DatabaseError, pg8000.native.InterfaceError, OSError)):
            holder.run("SELECT 1")
    finally:
        _close(holder, bystander)


def test_terminate_needs_pg_signal_backend(pg):
    admin = pg.connect()
    holder = pg.connect("brew_app", application_name="worker-a")
    admin.run("DROP ROLE IF EXISTS brew_nosignal")
    admin.run("CREATE ROLE brew_nosignal LOGIN IN ROLE pg_read_all_stats")
    try:
        holder.run("SELECT pg_advisory_lock(:k)", k=LEASE_KEY)
        lease = WorkerLease(lambda: pg.connect_dbapi("brew_nosignal"))
        try:
            with pytest.raises(Exception, match="pg_signal_backend"):
                lease.terminate(lease.read().holder.pid)
            assert lease.read().revision == "worker-a"  # reconnects after the error
        finally:
            lease.close()
    finally:
        holder.close()
        admin.run("DROP ROLE brew_nosignal")
        admin.close()


# -- wait_for_holder, on scripted states (clock and sleep injected) ----------------------


class ScriptedLease(WorkerLease):
    def __init__(self, states):
        super().__init__(lambda: None)
        self.states = list(states)

    def read(self):
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def _st(*holders, waiters=()):
    mk = lambda r, i: LeaseHolder(pid=1000 + i, revision=r, since=None)  # noqa: E731
    return LeaseState(
        holders=tuple(mk(r, i) for i, r in enumerate(holders)),
        waiters=tuple(mk(r, 10 + i) for i, r in enumerate(waiters)),
    )


def test_wait_measures_the_gap():
    clock = FakeClock()
    lease = ScriptedLease([_st("A", waiters=["B"]), _st("A"), _st(), _st(), _st(), _st("B")])
    h = lease.wait_for_holder("B", timeout=5, poll=0.1, clock=clock, sleep=clock.sleep)
    assert isinstance(h, HandOver)
    assert h.new_holder.revision == "B"
    assert h.polls == 6
    assert h.gap_seconds == pytest.approx(0.3)  # polls 3..6 saw no holder
    assert h.waited_seconds == pytest.approx(0.5)
    assert h.previous_holder is not None and h.previous_holder.revision == "A"


def test_wait_immediate_holder_has_no_gap():
    clock = FakeClock()
    h = ScriptedLease([_st("B")]).wait_for_holder(
        "B", timeout=1, clock=clock, sleep=clock.sleep
    )
    assert (h.gap_seconds, h.polls, h.previous_holder) == (0.0, 1, None)


def test_wait_sums_gaps_and_ignores_other_holders():
    clock = FakeClock()
    states = [_st(), _st("A"), _st(), _st(), _st("C"), _st("B")]
    h = ScriptedLease(states).wait_for_holder("B", 5, 0.1, clock=clock, sleep=clock.sleep)
    assert h.gap_seconds == pytest.approx(0.1 + 0.2)
    assert h.previous_holder.revision == "C"


def test_two_holders_fail_at_once():
    clock = FakeClock()
    lease = ScriptedLease([_st("A"), _st("A", "B"), _st("B")])
    with pytest.raises(TwoHolders, match="2 holders") as exc:
        lease.wait_for_holder("B", 5, clock=clock, sleep=clock.sleep)
    assert exc.value.polls == 2
    assert len(exc.value.state.holders) == 2
    assert exc.value.state.holder is None and exc.value.state.revision is None


def test_timeout_reports_state_and_gap():
    clock = FakeClock()
    lease = ScriptedLease([_st("A"), _st()])
    with pytest.raises(LeaseTimeout) as exc:
        lease.wait_for_holder("B", timeout=1.0, poll=0.1, clock=clock, sleep=clock.sleep)
    err = exc.value
    assert err.revision == "B" and err.state.holder is None
    assert err.gap_seconds == pytest.approx(0.9)
    assert err.polls in (11, 12)  # 0.1 s steps, float rounding may add a last tiny one
    assert clock.t == pytest.approx(101.0)  # never sleeps past the deadline


# -- hand-over between simulated worker revisions (gates 5 and 7) -------------------------


def test_hand_over_from_a_to_b_is_observed_within_a_second(supervisor, deployer_lease):
    supervisor.start("worker-a")
    before = deployer_lease.wait_for_holder("worker-a", timeout=5)
    supervisor.start("worker-b")
    wait_until(lambda: [w.revision for w in deployer_lease.read().waiters] == ["worker-b"])
    assert deployer_lease.read().revision == "worker-a"  # gate 3: exactly one holder

    assert supervisor.stop("worker-a", timeout=0) is None  # SIGTERM sent, not waited for
    handover = deployer_lease.wait_for_holder("worker-b", timeout=5, poll=0.1)
    granted = supervisor.wait_for_event("worker-b", "lease-acquired", timeout=2)

    assert handover.new_holder.revision == "worker-b"
    assert handover.new_holder.pid != before.new_holder.pid
    # B was waiting, so the lock passed straight on: at most a poll without a holder
    assert handover.gap_seconds <= 0.25
    # observed within 1 s of the grant (the worker logs the grant after it returns, so
    # the observation may precede the log line by a little)
    lag = handover.observed_at.timestamp() - granted.at
    assert -0.5 < lag < 1.0, lag
    assert supervisor.wait_exit("worker-a", timeout=3) == 0
    # gate 7: the new holder stays for a settle period
    for _ in range(5):
        assert deployer_lease.read().revision == "worker-b"
        time.sleep(0.1)


def test_hand_over_with_a_gap_is_measured(supervisor, deployer_lease):
    supervisor.start("worker-a")
    deployer_lease.wait_for_holder("worker-a", timeout=5)
    assert supervisor.stop("worker-a") == 0  # released; nobody waiting
    t0 = time.monotonic()
    supervisor.start("worker-b")  # takes a python start-up to connect and lock
    handover = deployer_lease.wait_for_holder("worker-b", timeout=5, poll=0.1)
    elapsed = time.monotonic() - t0
    assert handover.previous_holder is None
    assert 0.1 <= handover.gap_seconds <= elapsed + 0.05
    assert handover.polls >= 2


def test_old_holder_stuck_is_ended_and_the_lease_passes(supervisor, deployer_lease):
    """Gate 5's remedy: only after the new revision is up, end the stuck old session."""
    supervisor.start("worker-a", ignore_sigterm=True)
    old = deployer_lease.wait_for_holder("worker-a", timeout=5).new_holder
    supervisor.start("worker-b")
    wait_until(lambda: deployer_lease.read().waiters)
    supervisor.stop("worker-a", timeout=0)
    with pytest.raises(LeaseTimeout) as exc:
        deployer_lease.wait_for_holder("worker-b", timeout=0.6)
    assert exc.value.state.revision == "worker-a" and exc.value.gap_seconds == 0
    assert deployer_lease.terminate(old.pid)
    handover = deployer_lease.wait_for_holder("worker-b", timeout=2)
    assert handover.gap_seconds <= 0.25
