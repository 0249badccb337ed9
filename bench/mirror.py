"""Benchmark: the bucket mirror drift check (`BucketMirrorCheck.drift()`) over a real
PostgreSQL table and a fake-gcs-server bucket holding one object per row.

The check is run at 10,000 rows and at `--rows` (default 100,000), the larger set grown
from the smaller (same table, same bucket). At each size:
- throughput: `drift()` timed on its own, without tracing (rows per second, median of
  `--runs`);
- peak memory: one more `drift()` under tracemalloc (Python heap allocations of the check
  itself, started and stopped around the call: the pg8000 cursor batches, the listing
  pages, the merge). Target: the peak grows by less than 20 MB between the two sizes.

Seeding the bucket: uploading objects with custom metadata `version` is how the sandbox
does it, but fake-gcs-server slows down as a bucket fills (~430 uploads/s empty, ~80/s
on average over the first 10,000): 100,000 would take most of an hour. So by default the
bucket is preloaded from files (`-data`), which carry no custom metadata: every object is
then judged stale, and the check does exactly the same work — both streams read to the
end, every key compared — while the drift counts differ. `--upload` seeds with metadata
instead (the objects are then in sync). The table is seeded by one INSERT ...
generate_series. Seeding is timed and reported separately. Reports, never asserts.

    uv run python bench/mirror.py [--rows 100000] [--runs 3] [--upload]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infra.promote.mirror_sync import BucketMirrorCheck, MirrorSource  # noqa: E402
from infra.sandbox.gcs import LocalGcs, seed_mirror  # noqa: E402
from infra.sandbox.postgres import LocalPostgres  # noqa: E402

SMALL = 10_000
MEMORY_GROWTH_TARGET_MB = 20
TABLE = "bench_objects"
BUCKET = "bench-mirror"


def key(i: int) -> str:
    return f"row-{i:08d}"


def grow(pg: LocalPostgres, gcs: LocalGcs, start: int, stop: int, workers: int) -> tuple[float, float]:
    """Rows and objects [start, stop): seconds for the table, seconds for the bucket."""
    t0 = time.perf_counter()
    conn = pg.connect()
    try:
        conn.run(f"INSERT INTO {TABLE} (key, version, updated_at) SELECT 'row-' || lpad(i::text, 8, '0'), "
                 f"i % 7 + 1, now() - interval '1 hour' FROM generate_series(CAST(:a AS int), CAST(:b AS int)) AS i", a=start, b=stop - 1)
    finally:
        conn.close()
    t1 = time.perf_counter()
    seed_mirror(gcs.client(), BUCKET, "rows/", ((key(i), i % 7 + 1) for i in range(start, stop)), workers=workers)
    return t1 - t0, time.perf_counter() - t1


def preload(data: Path, start: int, stop: int) -> None:
    """Objects [start, stop) as files fake-gcs-server loads at start (no custom metadata)."""
    folder = data / BUCKET / "rows"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(start, stop):
        (folder / key(i)).write_bytes(b"x")


def measure(check: BucketMirrorCheck, n: int, runs: int, in_sync: bool) -> tuple[float, float]:
    """Median rows per second over `runs`, and the tracemalloc peak (MB) of one more run."""
    seconds = []
    for _ in range(runs):
        t = time.perf_counter()
        report = check.drift()
        seconds.append(time.perf_counter() - t)
        expected = (report.rows == report.objects == n and not report.missing and not report.extra
                    and report.stale == (0 if in_sync else n))
        if not expected:
            sys.exit(f"unexpected drift at {n} rows: {report.describe()}")
    tracemalloc.start()
    tracemalloc.reset_peak()
    check.drift()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return n / statistics.median(seconds), peak / 2**20


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
        data, have = Path(tmp) / "data", 0
        uploaded = LocalGcs().start() if args.upload else None
        if uploaded:
            uploaded.create_bucket(BUCKET)
        try:
            for n in sizes:
                added = n - have
                if uploaded:
                    table_s, bucket_s = grow(pg, uploaded, have, n, args.workers)
                    gcs, how = uploaded, f"{added / bucket_s:,.0f} uploads/s"
                else:
                    t0 = time.perf_counter()
                    conn = pg.connect()
                    conn.run(f"INSERT INTO {TABLE} (key, version, updated_at) SELECT 'row-' || lpad(i::text, 8, '0'), "
                             f"i % 7 + 1, now() - interval '1 hour' FROM generate_series({have}, {n - 1}) AS i")
                    conn.close()
                    t1 = time.perf_counter()
                    preload(data, have, n)
                    gcs = LocalGcs(data_dir=data).start(timeout=900)
                    table_s, bucket_s, how = t1 - t0, time.perf_counter() - t1, "files preloaded, no metadata"
                have = n
                print(f"seeding {added:,} more rows/objects ({n:,} in all): table {table_s:.1f} s, "
                      f"bucket {bucket_s:.1f} s ({how})", flush=True)
                try:
                    check = BucketMirrorCheck(pg.connect_dbapi, gcs.client(), MirrorSource(BUCKET, table=TABLE),
                                              now=lambda: dt.datetime.now(dt.UTC))
                    results[n] = measure(check, n, args.runs, in_sync=bool(uploaded))
                finally:
                    if not uploaded:
                        gcs.stop()
                rate, peak = results[n]
                print(f"drift check at {n:>7} rows: {rate:,.0f} rows/s (median of {args.runs}), "
                      f"peak traced memory {peak:.2f} MB", flush=True)
        finally:
            if uploaded:
                uploaded.stop()
    if len(sizes) == 2:
        growth = results[sizes[1]][1] - results[sizes[0]][1]
        print(f"peak memory growth {sizes[0]} -> {sizes[1]} rows: {growth:+.2f} MB "
              f"(target < {MEMORY_GROWTH_TARGET_MB} MB)  {'OK' if growth < MEMORY_GROWTH_TARGET_MB else 'OVER TARGET'}")


if __name__ == "__main__":
    main()
