"""Benchmark: the bucket mirror drift check (`BucketMirrorCheck.drift()`) over a real
PostgreSQL table and a fake-gcs-server bucket holding one object per row.

The check is run at 10,000 rows and at `--rows` (default 100,000), the larger set grown
from the smaller (same table, same bucket). At each size:
- throughput: `drift()` timed on its own, without tracing (rows per second, median of
  `--runs`);
- peak memory: one more `drift()` under tracemalloc (Python heap allocations of the check
  itself, started and stopped around the call: the pg8000 cursor batches, the listing
  pages, the merge). Target: the peak grows by less than 20 MB between the two sizes.

Seeding the bucket: fake-gcs-server slows down as a bucket fills (~430 uploads/s empty,
~80/s on average over the first 10,000), so 100,000 uploads would take most of an hour.
By default the objects are instead written straight into the server's filesystem backend
— `<root>/<bucket>/<name>`, attributes with the custom metadata `version` as JSON in the
`user.metadata` extended attribute, the layout the server itself writes — and the server
is (re)started on that root. Every object then carries its version and the mirror is in
sync, exactly as after uploads. `--upload` seeds through the JSON API instead (slow). The
table is seeded by one INSERT ... generate_series. Seeding is timed and reported
separately. Reports, never asserts.

    uv run python bench/mirror.py [--rows 100000] [--runs 3] [--upload]
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infra.promote.mirror_sync import BucketMirrorCheck, MirrorSource, bucket_objects  # noqa: E402
from infra.sandbox.gcs import LocalGcs, seed_mirror  # noqa: E402
from infra.sandbox.postgres import LocalPostgres  # noqa: E402

SMALL = 10_000
MEMORY_GROWTH_TARGET_MB = 20
TABLE = "bench_objects"
BUCKET = "bench-mirror"


def key(i: int) -> str:
    return f"row-{i:08d}"


def insert_rows(pg: LocalPostgres, start: int, stop: int) -> None:
    conn = pg.connect()
    try:
        conn.run(f"INSERT INTO {TABLE} (key, version, updated_at) SELECT 'row-' || lpad(i::text, 8, '0'), "
                 f"i % 7 + 1, now() - interval '1 hour' FROM generate_series(CAST(:a AS int), CAST(:b AS int)) AS i",
                 a=start, b=stop - 1)
    finally:
        conn.close()


def upload(gcs: LocalGcs, start: int, stop: int, workers: int) -> None:
    seed_mirror(gcs.client(), BUCKET, "rows/", ((key(i), version(i)) for i in range(start, stop)), workers=workers)


def write_objects(root: Path, start: int, stop: int) -> None:
    """Objects [start, stop) in fake-gcs-server's filesystem-backend layout, with metadata."""
    folder = root / BUCKET / "rows"
    folder.mkdir(parents=True, exist_ok=True)
    (root / f"{BUCKET}.bucketMetadata").touch()
    md5 = base64.b64encode(hashlib.md5(b"x").digest()).decode()
    for i in range(start, stop):
        path = folder / key(i)
        path.write_bytes(b"x")
        attrs = {"StorageClass": "STANDARD", "ContentType": "application/octet-stream", "Md5Hash": md5,
                 "Etag": md5, "Metadata": {"version": str(version(i))}, "Generation": i + 1,
                 "Created": "2026-01-01T00:00:00Z", "Updated": "2026-01-01T00:00:00Z"}
        os.setxattr(path, "user.metadata", json.dumps(attrs).encode())


def version(i: int) -> int:
    return i % 7 + 1


def listing_seconds(gcs: LocalGcs) -> float:
    """One pass over the check's own bucket listing (same pages, same fields), alone: the
    emulator's share of a drift check. The filesystem backend rereads the whole folder for
    every page, so its cost grows with the square of the object count; GCS's does not."""
    t = time.perf_counter()
    for _ in bucket_objects(gcs.client(), MirrorSource(BUCKET, table=TABLE)):
        pass
    return time.perf_counter() - t


def measure(check: BucketMirrorCheck, n: int, runs: int) -> tuple[float, float, float]:
    """Median seconds over `runs`, rows per second, and the tracemalloc peak (MB) of one more run."""
    seconds = []
    for _ in range(runs):
        t = time.perf_counter()
        report = check.drift()
        seconds.append(time.perf_counter() - t)
        if not (report.rows == report.objects == n and report.ok and not report.extra):
            sys.exit(f"unexpected drift at {n} rows: {report.describe()}")
    tracemalloc.start()
    tracemalloc.reset_peak()
    check.drift()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    median = statistics.median(seconds)
    return median, n / median, peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--upload", action="store_true", help="seed by uploads with metadata (slow)")
    parser.add_argument("--workers", type=int, default=1, help="parallel uploads with --upload")
    args = parser.parse_args()
    sizes = sorted({min(SMALL, args.rows), args.rows})
    results = {}
    with LocalPostgres() as pg, tempfile.TemporaryDirectory(prefix="bench-mirror-") as tmp:
        conn = pg.connect()
        conn.run(f"CREATE TABLE {TABLE} (key text PRIMARY KEY, version bigint NOT NULL, updated_at timestamptz NOT NULL)")
        conn.close()
        root, have = Path(tmp) / "gcs", 0
        gcs = LocalGcs(filesystem_root=root)
        try:
            for n in sizes:
                t0 = time.perf_counter()
                insert_rows(pg, have, n)
                t1 = time.perf_counter()
                if args.upload:
                    gcs.start()
                    if not have:
                        gcs.create_bucket(BUCKET)
                    upload(gcs, have, n, args.workers)
                    how = f"{(n - have) / (time.perf_counter() - t1):,.0f} uploads/s"
                else:
                    gcs.stop()  # the server reads its root as it lists; restarted to be safe
                    write_objects(root, have, n)
                    gcs.start()
                    how = "written to the filesystem backend"
                print(f"seeding {n - have:,} more rows/objects ({n:,} in all): table {t1 - t0:.1f} s, "
                      f"bucket {time.perf_counter() - t1:.1f} s ({how})", flush=True)
                have = n
                check = BucketMirrorCheck(pg.connect_dbapi, gcs.client(), MirrorSource(BUCKET, table=TABLE),
                                          now=lambda: dt.datetime.now(dt.UTC))
                seconds, rate, peak = measure(check, n, args.runs)
                results[n] = peak
                listing = listing_seconds(gcs)
                print(f"drift check at {n:>7} rows: {seconds:.1f} s, {rate:,.0f} rows/s (median of {args.runs}), "
                      f"peak traced memory {peak:.2f} MB; the listing alone takes {listing:.1f} s, so the "
                      f"check's own work (cursor, merge) runs at {n / max(seconds - listing, 1e-3):,.0f} rows/s",
                      flush=True)
        finally:
            gcs.stop()
    if len(sizes) == 2:
        growth = results[sizes[1]] - results[sizes[0]]
        print(f"peak memory growth {sizes[0]} -> {sizes[1]} rows: {growth:+.2f} MB "
              f"(target < {MEMORY_GROWTH_TARGET_MB} MB)  {'OK' if growth < MEMORY_GROWTH_TARGET_MB else 'OVER TARGET'}")


if __name__ == "__main__":
    main()
