"""A real, throwaway PostgreSQL for the sandbox.

`LocalPostgres` runs the distribution's server binaries (no Docker) in a temporary folder:
`initdb` without fsync, a postmaster listening on 127.0.0.1 only at a free port, trust
authentication on loopback (sandbox only). It creates what SPEC 4 relies on:

- database `brew` with the app's `jobs` table;
- role `brew_app` (login): the worker; it owns nothing but may read and write `jobs`;
- role `brew_deployer` (login): the promote pipeline's checking role, member of
  `pg_read_all_stats` (sees other sessions' pg_stat_activity rows in full) and
  `pg_signal_backend` (may end another non-superuser session) and nothing else.

PostgreSQL refuses to run as root. When this process is root, `initdb` and the
postmaster run as the unprivileged `postgres` system user (created with `useradd
--system` when missing) and the temporary folder is handed to that user; otherwise they
run as the current user.

    with LocalPostgres() as pg:
        conn = pg.connect("brew_deployer")          # pg8000.native.Connection
        dsn = pg.dsn("brew_app")                    # postgresql://brew_app@127.0.0.1:PORT/brew
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

SUPERUSER = "postgres"
DATABASE = "brew"
APP_ROLE = "brew_app"
DEPLOYER_ROLE = "brew_deployer"
QUEUES = ("interactive", "slow", "batch")

NOT_FOUND = "PostgreSQL server binaries not found; install the Debian package postgresql"

SCHEMA_SQL = [
    f"CREATE ROLE {APP_ROLE} LOGIN",
    f"CREATE ROLE {DEPLOYER_ROLE} LOGIN",
    f"GRANT pg_read_all_stats TO {DEPLOYER_ROLE}",
    f"GRANT pg_signal_backend TO {DEPLOYER_ROLE}",
]

BREW_SQL = [
    """
    CREATE TABLE jobs (
        id           bigserial PRIMARY KEY,
        queue        text NOT NULL CHECK (queue IN ('interactive', 'slow', 'batch')),
        key          text,
        payload      jsonb NOT NULL DEFAULT '{}'::jsonb,
        status       text NOT NULL DEFAULT 'queued',
        run_after    timestamptz NOT NULL DEFAULT now(),
        leased_until timestamptz,
        attempts     int NOT NULL DEFAULT 0,
        created_at   timestamptz NOT NULL DEFAULT now(),
        updated_at   timestamptz NOT NULL DEFAULT now()
    )
    """,
    "CREATE UNIQUE INDEX jobs_key ON jobs (key) WHERE key IS NOT NULL",
    "CREATE INDEX jobs_claim ON jobs (queue, status, run_after)",
    f"GRANT SELECT, INSERT, UPDATE, DELETE ON jobs TO {APP_ROLE}",
    f"GRANT USAGE, SELECT ON SEQUENCE jobs_id_seq TO {APP_ROLE}",
]


class PostgresNotFound(RuntimeError):
    pass


class PostgresStartError(RuntimeError):
    pass


def find_bindir() -> Path:
    """The newest server binaries: `pg_config --bindir` if it has `postgres`, else the
    highest /usr/lib/postgresql/<version>/bin."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            if out:
                candidates.append(Path(out))
        except (OSError, subprocess.SubprocessError):
            pass

    def version(path: str) -> tuple[int, ...]:
        m = re.search(r"postgresql/([\d.]+)/bin", path)
        return tuple(int(p) for p in m.group(1).split(".") if p) if m else ()

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    newest = [Path(p) for p in found]
    # pg_config may belong to an older server than the newest installed one.
    if candidates and newest and version(str(candidates[0])) < version(str(newest[0])):
        candidates = newest + candidates
    else:
        candidates += newest
    for c in candidates:
        if (c / "postgres").is_file() and (c / "initdb").is_file():
            return c
    raise PostgresNotFound(NOT_FOUND)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_pids(pid: int) -> set[int]:
    """Direct children of `pid` (Linux /proc); empty where /proc is unavailable."""
    out: set[int] = set()
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # fields after "(comm)": state, ppid, ...
            out.add(int(stat.split("/")[2]))
    return out


def parse_dsn(dsn: str) -> dict[str, Any]:
    """`postgresql://user[:password]@host[:port]/database` as pg8000 connect kwargs."""
    parts = urlsplit(dsn)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"not a postgresql:// DSN: {dsn!r}")
    kwargs: dict[str, Any] = {
        "user": unquote(parts.username or SUPERUSER),
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 5432,
        "database": unquote(parts.path.lstrip("/")) or DATABASE,
    }
    if parts.password is not None:
        kwargs["password"] = unquote(parts.password)
    return kwargs


def connect_dsn(dsn: str, application_name: str | None = None, timeout: float | None = 10):
    """A pg8000.native.Connection for a DSN from `LocalPostgres.dsn`."""
    import pg8000.native

    return pg8000.native.Connection(
        **parse_dsn(dsn), application_name=application_name, timeout=timeout
    )


def _run_as_user() -> pwd.struct_passwd | None:
    """The unprivileged account to run the server as, or None to run as ourselves."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "postgres"],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam("postgres")


class LocalPostgres:
    """A real PostgreSQL on 127.0.0.1 in a temporary folder; `start()`/`stop()` or `with`."""

    def __init__(self, bindir: str | Path | None = None, base_dir: str | Path | None = None):
        self._bindir = Path(bindir) if bindir else None
        self._base_dir = Path(base_dir) if base_dir else None
        self.port: int | None = None
        self.host = "127.0.0.1"
        self.root: Path | None = None
        self._proc: subprocess.Popen | None = None
        self._user: pwd.struct_passwd | None = None
        self.startup_seconds: float | None = None

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def data_dir(self) -> Path:
        assert self.root is not None, "not started"
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        assert self.root is not None, "not started"
        return self.root / "postgres.log"

    def _popen_kwargs(self) -> dict[str, Any]:
        if self._user is None:
            return {}
        env = dict(os.environ, HOME=str(self.root), USER="postgres", LOGNAME="postgres")
        return {
            "user": self._user.pw_uid,
            "group": self._user.pw_gid,
            "extra_groups": [],
            "env": env,
            "cwd": str(self.root),
        }

    def start(self) -> LocalPostgres:
        if self.running:
            return self
        t0 = time.monotonic()
        bindir = self._bindir or find_bindir()
        self._user = _run_as_user()
        self.root = Path(tempfile.mkdtemp(prefix="brew-pg-", dir=self._base_dir))
        try:
            if self._user is not None:
                os.chown(self.root, self._user.pw_uid, self._user.pw_gid)
            self._initdb(bindir)
            self._launch(bindir)
            self._provision()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _initdb(self, bindir: Path) -> None:
        cmd = [
            str(bindir / "initdb"),
            "-D", str(self.data_dir),
            "-U", SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
            "--no-instructions",
        ]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True, **self._popen_kwargs())
        if res.returncode != 0:
            raise PostgresStartError(f"initdb failed ({res.returncode}):\n{res.stderr}{res.stdout}")

    def _launch(self, bindir: Path) -> None:
        last_error = ""
        for _attempt in range(3):  # the free port may be taken between probe and bind
            self.port = free_port()
            settings = {
                "listen_addresses": "127.0.0.1",
                "port": str(self.port),
                "unix_socket_directories": str(self.root),
                "fsync": "off",
                "synchronous_commit": "off",
                "full_page_writes": "off",
                "max_connections": "60",
                "shared_buffers": "16MB",
                "logging_collector": "off",
                "log_min_messages": "warning",
                "log_connections": "off",
            }
            cmd = [str(bindir / "postgres"), "-D", str(self.data_dir)]
            for k, v in settings.items():
                cmd += ["-c", f"{k}={v}"]
            log = open(self.log_path, "ab")
            try:
                self._proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    **self._popen_kwargs(),
                )
            finally:
                log.close()
            if self._wait_ready(timeout=10):
                return
            last_error = self.log_path.read_text(errors="replace")[-2000:]
            self._shutdown()
        raise PostgresStartError(f"postgres did not start:\n{last_error}")

    def _wait_ready(self, timeout: float) -> bool:
        import pg8000.native

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            try:
                conn = pg8000.native.Connection(
                    SUPERUSER, host=self.host, port=self.port, database="postgres", timeout=2
                )
            except Exception:
                time.sleep(0.02)
                continue
            conn.close()
            return True
        return False

    def _provision(self) -> None:
        conn = self.connect(SUPERUSER, "postgres")
        try:
            for sql in SCHEMA_SQL:
                conn.run(sql)
            conn.run(f"CREATE DATABASE {DATABASE} OWNER {SUPERUSER}")
        finally:
            conn.close()
        conn = self.connect(SUPERUSER, DATABASE)
        try:
            for sql in BREW_SQL:
                conn.run(sql)
        finally:
            conn.close()

    def _shutdown(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            # SIGINT is "fast shutdown": ends sessions, checkpoints, exits.
            for sig, wait in ((signal.SIGINT, 5.0), (signal.SIGQUIT, 2.0)):
                try:
                    proc.send_signal(sig)
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
                except ProcessLookupError:
                    break
        if proc.poll() is None:
            # A hung postmaster: its children first (backends call setsid(), so they are
            # found by parent pid, not process group; while unreaped they keep that pid).
            for pid in child_pids(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            proc.kill()
        proc.wait()

    def stop(self) -> None:
        self._shutdown()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- connecting ----------------------------------------------------------------------

    def dsn(self, user: str = SUPERUSER, database: str = DATABASE) -> str:
        """`postgresql://user@127.0.0.1:PORT/database` (trust auth, no password)."""
        if self.port is None:
            raise RuntimeError("LocalPostgres is not started")
        return f"postgresql://{user}@{self.host}:{self.port}/{database}"

    def connect(
        self,
        user: str = SUPERUSER,
        database: str = DATABASE,
        application_name: str | None = None,
    ):
        """A pg8000.native.Connection (autocommit: each `run` is its own transaction)."""
        return connect_dsn(self.dsn(user, database), application_name=application_name)

    def connect_dbapi(
        self,
        user: str = SUPERUSER,
        database: str = DATABASE,
        application_name: str | None = None,
    ):
        """A pg8000.dbapi.Connection, the type the Cloud SQL Python Connector returns."""
        import pg8000.dbapi

        return pg8000.dbapi.connect(
            **parse_dsn(self.dsn(user, database)), application_name=application_name, timeout=10
        )
