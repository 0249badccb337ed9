"""The bucket drift check: the pure merge on crafted data, then end to end through a real
PostgreSQL table and a real fake-gcs-server bucket."""

from __future__ import annotations

import datetime as dt
import os
import uuid

import pytest

from infra.promote.mirror import MirrorSyncCheck
from infra.promote.mirror_sync import (
    BucketMirrorCheck,
    DriftReport,
    MirrorSource,
    bucket_objects,
    database_rows,
    merge,
)
from infra.sandbox.gcs import LocalGcs, seed_mirror

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
OLD = NOW - dt.timedelta(hours=1)
CUTOFF = NOW - dt.timedelta(seconds=60)

# Byte order: 'B' (0x42) < '_' (0x5f) < 'b' (0x62) < 'é' (0xc3 0xa9 in UTF-8). A locale-aware
# order would put these differently (case- and punctuation-insensitive first).
ODD_KEYS = ["aB", "a_b", "ab", "zz", "é-clé"]


def rows(*items: tuple[str, int] | tuple[str, int, dt.datetime]):
    return [(i[0], i[1], i[2] if len(i) > 2 else OLD) for i in items]


# --- the pure merge ---------------------------------------------------------------------

def test_merge_in_sync():
    report = merge(rows(("a", 1), ("b", 2)), [("a", 1), ("b", 3)], CUTOFF)
    assert report.ok
    assert (report.rows, report.objects, report.missing, report.stale, report.extra) == (2, 2, 0, 0, 0)
    assert "2 row(s), 2 object(s): 0 missing" in report.describe()


def test_merge_missing():
    report = merge(rows(("a", 1), ("b", 1), ("c", 1)), [("b", 1)], CUTOFF)
    assert not report.ok
    assert (report.missing, report.first_missing) == (2, ["a", "c"])


def test_merge_stale_and_no_version_metadata():
    report = merge(rows(("a", 5), ("b", 2), ("c", 1)), [("a", 4), ("b", None), ("c", 1)], CUTOFF)
    assert (report.stale, report.first_stale, report.missing, report.extra) == (2, ["a", "b"], 0, 0)
    assert "stale: 'a', 'b'" in report.describe()


def test_merge_extra():
    report = merge(rows(("b", 1)), [("a", 1), ("b", 1), ("c", 1)], CUTOFF)
    assert (report.extra, report.first_extra, report.rows, report.objects) == (2, ["a", "c"], 1, 3)
    assert not report.ok


def test_merge_inside_lag_window_not_judged():
    recent = NOW - dt.timedelta(seconds=10)
    report = merge(rows(("a", 1, recent), ("b", 9, recent), ("c", 1)), [("b", 1), ("c", 1)], CUTOFF)
    assert report.ok  # 'a' missing and 'b' stale, but both changed within the lag window
    assert (report.within_lag, report.rows, report.objects, report.extra) == (2, 3, 2, 0)
    exactly_at_cutoff = merge(rows(("a", 1, CUTOFF)), [], CUTOFF)
    assert exactly_at_cutoff.missing == 1


def test_merge_sample_limited_to_first_keys():
    keys = [f"k{i:03d}" for i in range(50)]
    report = merge(rows(*[(k, 1) for k in keys]), iter([]), CUTOFF, sample=3)
    assert report.missing == 50 and report.first_missing == keys[:3]
    assert "'k000', 'k001', 'k002', ..." in report.describe()


def test_merge_streams_and_empty_sides():
    assert merge(iter([]), iter([]), CUTOFF).ok
    gen = ((f"k{i:07d}", 1, OLD) for i in range(20000))  # generators in, nothing held
    objs = ((f"k{i:07d}", 1) for i in range(20000))
    assert merge(gen, objs, CUTOFF).rows == 20000


def test_merge_refuses_unsorted_input():
    with pytest.raises(ValueError, match="byte order"):
        merge(rows(("b", 1), ("a", 1)), [], CUTOFF)
    with pytest.raises(ValueError, match="byte order"):
        merge([], [("a", 1), ("a", 1)], CUTOFF)


def test_source_validates_identifiers():
    with pytest.raises(ValueError):
        MirrorSource("bkt", table='objects"; DROP TABLE x; --')
    with pytest.raises(ValueError):
        MirrorSource("bkt", key_column="Key")
    assert 'ORDER BY "key" COLLATE "C"' in MirrorSource("bkt").query()


def test_describe_report_all_kinds():
    report = DriftReport(3, 3, 1, 1, 1, 0, ["m"], ["s"], ["x"])
    assert report.describe().endswith("missing: 'm'; stale: 's'; extra: 'x'")


# --- end to end: PostgreSQL + fake-gcs-server --------------------------------------------

@pytest.fixture(scope="module")
def gcs():
    before = os.environ.get("STORAGE_EMULATOR_HOST")
    with LocalGcs() as server:
        yield server
    assert os.environ.get("STORAGE_EMULATOR_HOST") == before  # no global env change


@pytest.fixture
def table(local_pg):
    name = f"mirror_{uuid.uuid4().hex[:10]}"
    conn = local_pg.connect()
    conn.run(f'CREATE TABLE "{name}" (key text PRIMARY KEY, version bigint NOT NULL, '
             f"updated_at timestamptz NOT NULL DEFAULT now())")
    try:
        yield name, conn
    finally:
        conn.run(f'DROP TABLE IF EXISTS "{name}"')
        conn.close()


@pytest.fixture
def bucket(gcs):
    name = f"mirror-{uuid.uuid4().hex[:10]}"
    gcs.create_bucket(name)
    return name


def fill(conn, name: str, items: list[tuple[str, int]], updated_at: dt.datetime = OLD) -> None:
    for key, version in items:
        conn.run(f'INSERT INTO "{name}" (key, version, updated_at) VALUES (:k, :v, :u)', k=key, v=version, u=updated_at)


def test_python_order_equals_postgres_c_order(local_pg, table):
    name, conn = table
    fill(conn, name, [(k, 1) for k in reversed(ODD_KEYS)])
    c_order = [r[0] for r in conn.run(f'SELECT key FROM "{name}" ORDER BY key COLLATE "C"')]
    assert c_order == sorted(ODD_KEYS) == ODD_KEYS
    assert sorted(ODD_KEYS, key=str.casefold) != c_order  # a case-insensitive order differs
    icu = conn.run("SELECT count(*) FROM pg_collation WHERE collname = 'und-x-icu'")[0][0]
    if icu:  # a locale-aware collation really orders them differently
        locale_order = [r[0] for r in conn.run(f'SELECT key FROM "{name}" ORDER BY key COLLATE "und-x-icu"')]
        assert locale_order != c_order


def test_database_rows_uses_a_cursor(local_pg, table):
    name, conn = table
    fill(conn, name, [("e", 5), ("a", 1), ("c", 3), ("b", 2), ("d", 4)])
    source = MirrorSource("unused", table=name)
    opened = []

    def connect():
        c = local_pg.connect_dbapi()
        opened.append(c)
        return c

    seen = []
    gen = database_rows(connect, source, batch=2)
    try:
        for row in gen:
            seen.append(row)
            if len(seen) != 1:
                continue  # mid-stream: the cursor is open on the server, in a read-only transaction
            assert conn.run("SELECT name FROM pg_cursors") == []  # this session only: none
            probe = opened[0].cursor()
            probe.execute("SELECT name, is_scrollable FROM pg_cursors")
            assert [list(r) for r in probe.fetchall()] == [["brew_mirror_rows", False]]
            probe.execute("SELECT current_setting('transaction_read_only')")
            assert probe.fetchone()[0] == "on"
    finally:
        gen.close()  # on failure, release the transaction so the table can be dropped
    assert [(k, v) for k, v, _ in seen] == [("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5)]
    assert all(u == OLD for _, _, u in seen)
    assert len(opened) == 1
    with pytest.raises(Exception):  # closed after the last batch
        opened[0].cursor().execute("SELECT 1")


def test_odd_keys_end_to_end(local_pg, table, gcs, bucket):
    name, conn = table
    items = [(k, i + 1) for i, k in enumerate(ODD_KEYS)]
    fill(conn, name, items)
    client = gcs.client()
    seed_mirror(client, bucket, "rows/", list(reversed(items)))
    client.bucket(bucket).blob("other/not-a-row").upload_from_string(b"x")  # outside the prefix
    source = MirrorSource(bucket, table=name)
    assert [k for k, _ in bucket_objects(client, source)] == ODD_KEYS
    assert [k for k, _, _ in database_rows(local_pg.connect_dbapi, source, batch=2)] == ODD_KEYS
    report = BucketMirrorCheck(local_pg.connect_dbapi, client, source, now=lambda: NOW).drift()
    assert report.ok, report.describe()
    assert (report.rows, report.objects) == (5, 5)


def test_check_in_sync_then_broken(local_pg, table, gcs, bucket):
    name, conn = table
    items = [(f"row-{i:02d}", 3) for i in range(10)]
    fill(conn, name, items)
    client = gcs.client()
    seed_mirror(client, bucket, "rows/", items, workers=4)
    check = BucketMirrorCheck(local_pg.connect_dbapi, client, MirrorSource(bucket, table=name), now=lambda: NOW)
    plugged: MirrorSyncCheck = check  # what gate 2 takes
    verdict = plugged.check()
    assert verdict.ok and verdict.problems == () and verdict.flags == {}

    client.bucket(bucket).blob("rows/row-03").delete()                              # missing
    seed_mirror(client, bucket, "rows/", [("row-07", 2)])                          # stale
    client.bucket(bucket).blob("rows/row-08").upload_from_string(b"{}")            # no version: stale
    seed_mirror(client, bucket, "rows/", [("row-99", 1)])                          # extra
    fill(conn, name, [("row-50", 1)], updated_at=NOW - dt.timedelta(seconds=5))    # within the lag: not judged
    verdict = check.check()
    assert not verdict.ok and verdict.exit_code == 23
    (finding,) = verdict.problems
    assert finding.kind == "out-of-sync"
    assert finding.message.startswith("bucket mirror out of sync: 11 row(s), 10 object(s): 1 missing, 2 stale, "
                                      "1 extra, 1 within the lag window")
    assert "missing: 'row-03'" in finding.message
    assert "stale: 'row-07', 'row-08'" in finding.message
    assert "extra: 'row-99'" in finding.message


def test_rows_changed_now_wait_for_the_lag(local_pg, table, gcs, bucket):
    name, conn = table
    conn.run(f'INSERT INTO "{name}" (key, version) VALUES (\'fresh\', 1)')  # updated_at = now()
    check = BucketMirrorCheck(local_pg.connect_dbapi, gcs.client(), MirrorSource(bucket, table=name))
    report = check.drift()
    assert report.ok and report.within_lag == 1
    later = BucketMirrorCheck(local_pg.connect_dbapi, gcs.client(), MirrorSource(bucket, table=name),
                              now=lambda: dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5))
    assert later.drift().first_missing == ["fresh"]
