"""The bucket drift check behind gate 2's `MirrorSyncCheck`: is the bucket mirror in sync
with the database?

While OBJECTS_MIRROR is on, staging writes every database row to the bucket as one
object `<prefix><key>` carrying custom metadata `version`. The check streams both sides
sorted by key in byte order (Postgres `COLLATE "C"` through a server-side cursor; the
GCS listing, which is in byte order already) and merges them with two pointers, so its
memory does not grow with the number of rows: only the first few offending keys of each
kind are kept, for the report.

A row must have its object at a version >= the row's. Rows changed within the last
`lag_seconds` are not judged (the mirror writer may not have caught up): they are
counted in `within_lag`.

Known limit: the database side is one snapshot (the cursor's transaction) while the
listing runs over time, so a row inserted or deleted while the check runs can show up
as one `extra` or one `missing` object. Such transients vanish on the next run; real
drift does not.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from infra.promote.mirror import Finding, MirrorVerdict

_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(frozen=True)
class MirrorSource:
    """Where the mirror lives and which table it mirrors."""

    bucket: str
    table: str = "objects"
    key_column: str = "key"
    version_column: str = "version"
    updated_at_column: str = "updated_at"
    prefix: str = "rows/"
    lag_seconds: float = 60.0

    def __post_init__(self) -> None:
        for name in ("table", "key_column", "version_column", "updated_at_column"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _IDENT.match(value):
                raise ValueError(f"MirrorSource.{name} must match {_IDENT.pattern}, got {value!r}")
        if not self.bucket:
            raise ValueError("MirrorSource.bucket must not be empty")
        if self.lag_seconds < 0:
            raise ValueError(f"MirrorSource.lag_seconds must be >= 0, got {self.lag_seconds}")

    def query(self) -> str:
        """The rows in byte order of their keys (identifiers validated, then quoted)."""
        return (f'SELECT "{self.key_column}", "{self.version_column}", "{self.updated_at_column}" '
                f'FROM "{self.table}" ORDER BY "{self.key_column}" COLLATE "C"')


@dataclass
class DriftReport:
    rows: int = 0
    objects: int = 0
    missing: int = 0
    stale: int = 0
    extra: int = 0
    within_lag: int = 0
    first_missing: list[str] = field(default_factory=list)
    first_stale: list[str] = field(default_factory=list)
    first_extra: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.stale or self.extra)

    def describe(self) -> str:
        """One line: the counts, then the first keys of each kind of drift."""
        text = (f"{self.rows} row(s), {self.objects} object(s): {self.missing} missing, {self.stale} stale, "
                f"{self.extra} extra, {self.within_lag} within the lag window (not judged)")
        for label, count, keys in (("missing", self.missing, self.first_missing),
                                   ("stale", self.stale, self.first_stale),
                                   ("extra", self.extra, self.first_extra)):
            if keys:
                more = ", ..." if count > len(keys) else ""
                text += f"; {label}: {', '.join(repr(k) for k in keys)}{more}"
        return text


def _ordered(items: Iterable[tuple], side: str) -> Iterator[tuple]:
    """Pass `items` through, refusing any key out of strictly increasing order: a merge
    over unsorted input (a locale collation, say) would report drift that isn't there."""
    previous: str | None = None
    for item in items:
        key = item[0]
        if previous is not None and not key > previous:
            raise ValueError(f"{side} not in strictly increasing byte order of keys: {previous!r} then {key!r}")
        previous = key
        yield item


def merge(rows: Iterable[tuple[str, int, dt.datetime]], objects: Iterable[tuple[str, int | None]],
          lag_cutoff: dt.datetime, sample: int = 5) -> DriftReport:
    """Two-pointer merge of the rows (key, version, updated_at) and the mirror's objects
    (key, version or None), both sorted by key in byte order (Python's str order is code
    point order, which is UTF-8 byte order). Rows with updated_at after `lag_cutoff` are
    counted in `within_lag` and not judged. Memory: O(1) besides the `sample` first keys
    of each kind of drift."""
    report = DriftReport()

    def note(kind: str, key: str) -> None:
        setattr(report, kind, getattr(report, kind) + 1)
        keys = getattr(report, f"first_{kind}")
        if len(keys) < sample:
            keys.append(key)

    row_iter = _ordered(rows, "rows")
    obj_iter = _ordered(objects, "objects")
    end = object()
    row: Any = next(row_iter, end)
    obj: Any = next(obj_iter, end)
    while row is not end or obj is not end:
        if obj is end or (row is not end and row[0] < obj[0]):
            key, version, updated_at = row
            report.rows += 1
            if updated_at > lag_cutoff:
                report.within_lag += 1
            else:
                note("missing", key)
            row = next(row_iter, end)
        elif row is end or obj[0] < row[0]:
            report.objects += 1
            note("extra", obj[0])
            obj = next(obj_iter, end)
        else:
            key, version, updated_at = row
            report.rows += 1
            report.objects += 1
            if updated_at > lag_cutoff:
                report.within_lag += 1
            elif obj[1] is None or obj[1] < version:
                note("stale", key)
            row = next(row_iter, end)
            obj = next(obj_iter, end)
    return report


def database_rows(connect: Callable[[], Any], source: MirrorSource,
                  batch: int = 1000) -> Iterator[tuple[str, int, dt.datetime]]:
    """The table's rows in byte order of their keys, through a SQL-level server-side
    cursor in one read-only repeatable-read transaction, `batch` rows per round trip.
    `connect()` gives a DB-API connection (autocommit off); it is closed at the end."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    conn = connect()
    try:
        cur = conn.cursor()
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cur.execute(f"DECLARE brew_mirror_rows NO SCROLL CURSOR FOR {source.query()}")
        while True:
            cur.execute(f"FETCH FORWARD {int(batch)} FROM brew_mirror_rows")
            fetched = cur.fetchall()
            if not fetched:
                break
            for key, version, updated_at in fetched:
                if updated_at is not None and updated_at.tzinfo is None:  # timestamp without time zone: UTC
                    updated_at = updated_at.replace(tzinfo=dt.UTC)
                elif updated_at is None:  # never stamped: judge it
                    updated_at = dt.datetime.min.replace(tzinfo=dt.UTC)
                yield key, int(version or 0), updated_at
        cur.execute("CLOSE brew_mirror_rows")
        cur.close()
    finally:
        try:
            conn.rollback()
        except Exception:
            pass
        conn.close()


def _version(metadata: dict[str, str] | None) -> int | None:
    raw = (metadata or {}).get("version")
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def bucket_objects(client: Any, source: MirrorSource, page_size: int = 1000) -> Iterator[tuple[str, int | None]]:
    """The mirror's objects under `source.prefix` as (key without the prefix, version or
    None), in the listing's byte order; pages stream, one page in memory at a time."""
    skip = len(source.prefix)
    blobs = client.list_blobs(source.bucket, prefix=source.prefix or None, page_size=page_size,
                              fields="items(name,metadata),nextPageToken")
    for blob in blobs:
        yield blob.name[skip:], _version(blob.metadata)


class BucketMirrorCheck:
    """`MirrorSyncCheck`: the drift between the mirrored table and the bucket mirror."""

    def __init__(self, connect: Callable[[], Any], storage_client: Any, source: MirrorSource,
                 now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC), *,
                 batch: int = 1000, sample: int = 5):
        self.connect = connect
        self.storage_client = storage_client
        self.source = source
        self.now = now
        self.batch = batch
        self.sample = sample

    def drift(self) -> DriftReport:
        cutoff = self.now() - dt.timedelta(seconds=self.source.lag_seconds)
        return merge(database_rows(self.connect, self.source, self.batch),
                     bucket_objects(self.storage_client, self.source), cutoff, self.sample)

    def check(self) -> MirrorVerdict:
        report = self.drift()
        if not report.ok:
            return MirrorVerdict(problems=(Finding("out-of-sync", f"bucket mirror out of sync: {report.describe()}"),))
        return MirrorVerdict()
