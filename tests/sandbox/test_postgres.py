"""LocalPostgres: a real server, started fast, provisioned as SPEC 4 needs, gone on stop."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pg8000.native
import pytest

from infra.sandbox import postgres as pgmod
from infra.sandbox.postgres import (
    LocalPostgres,
    PostgresNotFound,
    child_pids,
    find_bindir,
    parse_dsn,
)


def _alive(pids: set[int]) -> set[int]:
    return {p for p in pids if Path(f"/proc/{p}").exists()}


def test_binaries_are_found():
    bindir = find_bindir()
    assert (bindir / "postgres").is_file() and (bindir / "initdb").is_file()


def test_missing_binaries_give_a_clear_error(monkeypatch):
    monkeypatch.setattr(pgmod.shutil, "which", lambda name: None)
    monkeypatch.setattr(pgmod.glob, "glob", lambda pattern: [])
    with pytest.raises(PostgresNotFound, match="install the Debian package postgresql"):
        find_bindir()
    with pytest.raises(PostgresNotFound):
        LocalPostgres().start()


def test_starts_runs_unprivileged_and_stop_leaves_nothing():
    # How fast it starts is for a benchmark, not a test: the test proves what it does.
    server = LocalPostgres().start()
    try:
        pid = server.pid
        assert pid is not None and server.running
        if os.geteuid() == 0:
            assert os.stat(f"/proc/{pid}").st_uid != 0, "postgres must not run as root"
            assert server.data_dir.stat().st_uid != 0
        conn = server.connect("brew_app")
        assert conn.run("SELECT current_database(), current_user") == [["brew", "brew_app"]]
        conn.close()
        children = child_pids(pid)
        assert len(children) >= 3  # checkpointer, background writer, walwriter, ...
        root = server.root
    finally:
        server.stop()
    assert not server.running
    assert _alive({pid} | children) == set()
    assert root is not None and not root.exists()
    with pytest.raises(Exception):
        pg8000.native.Connection("postgres", host="127.0.0.1", port=server.port, timeout=1)


def test_context_manager_and_dsn():
    with LocalPostgres() as server:
        dsn = server.dsn("brew_deployer", "brew")
        assert dsn == f"postgresql://brew_deployer@127.0.0.1:{server.port}/brew"
        assert parse_dsn(dsn) == {
            "user": "brew_deployer",
            "host": "127.0.0.1",
            "port": server.port,
            "database": "brew",
        }
        pid = server.pid
        assert pid is not None
        everything = {pid} | child_pids(pid)
    assert _alive(everything) == set()


def test_listens_on_loopback_only(pg):
    conn = pg.connect()
    try:
        assert conn.run("SHOW listen_addresses") == [["127.0.0.1"]]
    finally:
        conn.close()


def test_roles(pg):
    conn = pg.connect()
    try:
        rows = conn.run(
            "SELECT rolname, rolcanlogin, rolsuper, rolcreatedb, rolcreaterole, rolbypassrls"
            " FROM pg_roles WHERE rolname IN ('brew_app', 'brew_deployer') ORDER BY rolname"
        )
        assert rows == [
            ["brew_app", True, False, False, False, False],
            ["brew_deployer", True, False, False, False, False],
        ]
        memberships = conn.run(
            "SELECT r.rolname, g.rolname FROM pg_auth_members m"
            " JOIN pg_roles r ON r.oid = m.member JOIN pg_roles g ON g.oid = m.roleid"
            " WHERE r.rolname IN ('brew_app', 'brew_deployer') ORDER BY 1, 2"
        )
        assert memberships == [
            ["brew_deployer", "pg_read_all_stats"],
            ["brew_deployer", "pg_signal_backend"],
        ]
    finally:
        conn.close()


def test_jobs_table(pg):
    app = pg.connect("brew_app")
    try:
        cols = dict(
            app.run(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_name = 'jobs'"
            )
        )
        assert cols == {
            "id": "bigint",
            "queue": "text",
            "key": "text",
            "payload": "jsonb",
            "status": "text",
            "run_after": "timestamp with time zone",
            "leased_until": "timestamp with time zone",
            "attempts": "integer",
            "created_at": "timestamp with time zone",
            "updated_at": "timestamp with time zone",
        }
        for queue in ("interactive", "slow", "batch"):
            app.run(
                "INSERT INTO jobs (queue, key, payload) VALUES (:q, :k, '{\"a\": 1}')",
                q=queue,
                k=f"test-{queue}-{time.time_ns()}",
            )
        with pytest.raises(pg8000.native.DatabaseError, match="check"):
            app.run("INSERT INTO jobs (queue) VALUES ('urgent')")
        # claimed as the worker does
        claimed = app.run(
            "UPDATE jobs SET status = 'running', attempts = attempts + 1,"
            " leased_until = now() + interval '120 seconds', updated_at = now()"
            " WHERE id = (SELECT id FROM jobs WHERE status = 'queued' AND run_after <= now()"
            " ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING attempts"
        )
        assert claimed == [[1]]
    finally:
        app.close()


def test_deployer_may_not_touch_app_data(pg):
    dep = pg.connect("brew_deployer")
    try:
        with pytest.raises(pg8000.native.DatabaseError, match="permission denied"):
            dep.run("SELECT count(*) FROM jobs")
        with pytest.raises(pg8000.native.DatabaseError, match="permission denied"):
            dep.run("CREATE TABLE t (x int)")
    finally:
        dep.close()
