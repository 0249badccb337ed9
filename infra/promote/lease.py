"""The pipeline's read-only view of the worker lease (SPEC 4; gates 3, 5 and 7).

One worker holds the background lease: a session-level advisory lock on the single bigint
key `LEASE_KEY`, on a connection of its own. In `pg_locks` such a key k shows as
locktype 'advisory', classid = k >> 32, objid = k & 0xffffffff, objsubid = 1, in the
database the worker is connected to; `granted` tells the holder from the waiters, and
`pg_stat_activity.application_name` of the holder's pid names the worker revision
(`K_REVISION`).

Connections: `WorkerLease` takes a factory returning a **DB-API 2.0 (PEP 249)
connection**, e.g. `pg8000.dbapi.connect(...)` or what the Cloud SQL Python Connector's
`connector.connect(..., "pg8000", ...)` returns. It must be connected to the database
the workers use (advisory locks are per database). The SQL carries no bind parameters
(keys and pids are integers, formatted in), so the driver's paramstyle does not matter.
Every statement is followed by `rollback()` (or `commit()` for `terminate`), so no
transaction, and no stale pg_stat_activity snapshot, outlives a call.

The checking role should be a member of `pg_read_all_stats` (to see other sessions'
`backend_start`; without it that column is NULL and `query` reads
'<insufficient privilege>') and of `pg_signal_backend` for `terminate`.

The reader never takes the lock: it only selects from pg_locks and pg_stat_activity.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

LEASE_KEY = 727275


def advisory_ids(key: int) -> tuple[int, int]:
    """(classid, objid) of a single-bigint advisory key in pg_locks; objsubid is 1."""
    key &= 0xFFFFFFFFFFFFFFFF  # a negative bigint shows as its two's complement halves
    return key >> 32, key & 0xFFFFFFFF


@dataclass(frozen=True)
class LeaseHolder:
    pid: int
    revision: str  # pg_stat_activity.application_name ("" when unset)
    since: datetime | None  # backend_start; None when the role may not see it


@dataclass(frozen=True)
class LeaseState:
    holders: tuple[LeaseHolder, ...]
    waiters: tuple[LeaseHolder, ...]

    @property
    def holder(self) -> LeaseHolder | None:
        """The one holder, or None when there is none (or, impossibly, several)."""
        return self.holders[0] if len(self.holders) == 1 else None

    @property
    def revision(self) -> str | None:
        holder = self.holder
        return holder.revision if holder else None

    def to_dict(self) -> dict[str, Any]:
        def row(h: LeaseHolder) -> dict[str, Any]:
            return {
                "pid": h.pid,
                "revision": h.revision,
                "since": h.since.isoformat() if h.since else None,
            }

        return {
            "holders": [row(h) for h in self.holders],
            "waiters": [row(h) for h in self.waiters],
        }


@dataclass(frozen=True)
class HandOver:
    new_holder: LeaseHolder
    gap_seconds: float  # time observed with no holder at all (poll resolution)
    observed_at: datetime  # wall clock (UTC) when the new holder was first seen
    polls: int
    waited_seconds: float = 0.0  # from the call to the observation, on `clock`
    previous_holder: LeaseHolder | None = None  # the last other holder seen, if any


class LeaseError(RuntimeError):
    pass


class LeaseTimeout(LeaseError):
    def __init__(
        self, revision: str, timeout: float, state: LeaseState, gap_seconds: float, polls: int
    ):
        self.revision = revision
        self.timeout = timeout
        self.state = state
        self.gap_seconds = gap_seconds
        self.polls = polls
        now = state.revision if state.holder else "no holder"
        super().__init__(
            f"lease not held by {revision!r} after {timeout:.1f}s ({polls} polls); "
            f"last seen: {now}, {len(state.waiters)} waiting"
        )


class TwoHolders(LeaseError):
    def __init__(self, state: LeaseState, polls: int):
        self.state = state
        self.polls = polls
        who = ", ".join(f"{h.revision or '?'} (pid {h.pid})" for h in state.holders)
        super().__init__(f"{len(state.holders)} holders of one advisory lease: {who}")


@dataclass
class WorkerLease:
    """Reads (never takes) the lease; see the module docstring for the connection type."""

    connect: Callable[[], Any]
    key: int = LEASE_KEY
    _conn: Any = field(default=None, init=False, repr=False)

    # -- connection ----------------------------------------------------------------------

    def _connection(self) -> Any:
        if self._conn is None:
            self._conn = self.connect()
        return self._conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def __enter__(self) -> WorkerLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _query(self, sql: str, commit: bool = False) -> list[tuple]:
        conn = self._connection()
        try:
            cur = conn.cursor()
            try:
                cur.execute(sql)
                rows = [tuple(r) for r in cur.fetchall()]
            finally:
                cur.close()
            conn.commit() if commit else conn.rollback()
            return rows
        except Exception:
            self.close()  # a broken or aborted connection is replaced on the next call
            raise

    def _where(self) -> str:
        classid, objid = advisory_ids(self.key)
        return (
            "l.locktype = 'advisory'"
            " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            f" AND l.classid::bigint = {classid} AND l.objid::bigint = {objid}"
            " AND l.objsubid = 1 AND l.pid IS NOT NULL"
        )

    # -- reading -------------------------------------------------------------------------

    def read(self) -> LeaseState:
        rows = self._query(
            "SELECT l.pid, l.granted, a.application_name, a.backend_start"
            " FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
            f" WHERE {self._where()}"
            " ORDER BY l.granted DESC, l.pid"
        )
        holders, waiters = [], []
        for pid, granted, app, since in rows:
            h = LeaseHolder(pid=int(pid), revision=app or "", since=since)
            (holders if granted else waiters).append(h)
        return LeaseState(holders=tuple(holders), waiters=tuple(waiters))

    def wait_for_holder(
        self,
        revision: str,
        timeout: float,
        poll: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> HandOver:
        """Poll until `revision` holds the lease.

        `gap_seconds` sums the stretches observed without any holder, each from the first
        poll that saw none to the first poll that saw a holder again, so it is measured
        to within one `poll`. Two holders at any poll raise `TwoHolders` at once; no
        hand-over within `timeout` raises `LeaseTimeout` (with the last state and the gap
        so far)."""
        start = clock()
        deadline = start + timeout
        gap = 0.0
        empty_since: float | None = None
        previous: LeaseHolder | None = None
        polls = 0
        while True:
            state = self.read()
            now = clock()
            polls += 1
            if len(state.holders) > 1:
                raise TwoHolders(state, polls)
            holder = state.holder
            if holder is None:
                if empty_since is None:
                    empty_since = now
            else:
                if empty_since is not None:
                    gap += now - empty_since
                    empty_since = None
                if holder.revision == revision:
                    return HandOver(
                        new_holder=holder,
                        gap_seconds=gap,
                        observed_at=datetime.now(UTC),
                        polls=polls,
                        waited_seconds=now - start,
                        previous_holder=previous,
                    )
                previous = holder
            if now >= deadline:
                open_gap = now - empty_since if empty_since is not None else 0.0
                raise LeaseTimeout(revision, timeout, state, gap + open_gap, polls)
            sleep(max(0.0, min(poll, deadline - now)))

    # -- acting --------------------------------------------------------------------------

    def terminate(self, pid: int) -> bool:
        """End the database session `pid` (pg_terminate_backend), but only if it holds or
        waits for this lease; False when it does not, or could not be signalled. The
        worker then exits (its lease connection dropped) and the lock is released."""
        rows = self._query(
            f"SELECT pg_terminate_backend(l.pid) FROM pg_locks l"
            f" WHERE {self._where()} AND l.pid = {int(pid)}",
            commit=True,
        )
        return bool(rows) and bool(rows[0][0])
