"""One real PostgreSQL for the whole test session, shared by tests/sandbox and
tests/promote: both conftest files import these fixtures. Each conftest gets its own
session fixture definition, so the server itself is reference-counted here and started
once, then stopped when the last user finalizes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from infra.sandbox.postgres import LocalPostgres

LEASE_KEY = 727275

_lock = threading.Lock()
_server: LocalPostgres | None = None
_users = 0


def acquire() -> LocalPostgres:
    global _server, _users
    with _lock:
        if _server is None:
            _server = LocalPostgres().start()
        _users += 1
        return _server


def release() -> None:
    global _server, _users
    with _lock:
        _users -= 1
        if _users == 0 and _server is not None:
            _server.stop()
            _server = None


def wait_lease_free(pg: LocalPostgres, key: int = LEASE_KEY, timeout: float = 5.0) -> None:
    """Until no session holds or waits for the advisory `key` (backends of killed
    workers end asynchronously), so one test's workers never leak into the next."""
    conn = pg.connect()
    try:
        deadline = time.monotonic() + timeout
        while True:
            rows = conn.run(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                " AND classid::bigint = :c AND objid::bigint = :o AND objsubid = 1",
                c=key >> 32,
                o=key & 0xFFFFFFFF,
            )
            if rows[0][0] == 0:
                return
            if time.monotonic() >= deadline:
                raise AssertionError(f"advisory lease {key} still taken after {timeout}s")
            time.sleep(0.02)
    finally:
        conn.close()


@pytest.fixture(scope="session")
def local_pg() -> Iterator[LocalPostgres]:
    server = acquire()
    try:
        yield server
    finally:
        release()


@pytest.fixture
def pg(local_pg: LocalPostgres) -> Iterator[LocalPostgres]:
    """The shared server, with the lease key free before and after the test."""
    wait_lease_free(local_pg)
    yield local_pg
    wait_lease_free(local_pg)


@pytest.fixture
def supervisor(pg: LocalPostgres):
    from infra.sandbox.workers import WorkerSupervisor

    sup = WorkerSupervisor(pg.dsn("brew_app"))
    try:
        yield sup
    finally:
        sup.close()
        wait_lease_free(pg)


def wait_until(predicate, timeout: float = 5.0, step: float = 0.02):
    """Poll `predicate` until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError("condition not met in time")
        time.sleep(step)
