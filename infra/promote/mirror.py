"""Gate 2: staging's mirror flags, read from the live staging service.

Staging keeps a mirror of every database row in its bucket while OBJECTS_MIRROR and
OBJECTS_READTHROUGH are on: that mirror is the way back to bucket storage, so a
promotion must not go ahead on a way back that is broken. The flag rules are a pure
function of the live env, the declared settings and today's date; the bucket drift
check plugs in behind `MirrorSyncCheck` (its own issue).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Protocol

from infra.settings import MirrorFlags


@dataclass(frozen=True)
class MirrorVerdict:
    problems: tuple[str, ...] = ()  # refuse the promotion
    warnings: tuple[str, ...] = ()  # report, go ahead
    flags: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def _on(env: dict[str, str], name: str) -> bool:
    return env.get(name, "0").strip().lower() in ("1", "true", "on", "yes")


def check_mirror_flags(live_env: dict[str, str], declared: MirrorFlags | None, prod_storage: str,
                       today: dt.date) -> MirrorVerdict:
    mirror, readthrough = _on(live_env, "OBJECTS_MIRROR"), _on(live_env, "OBJECTS_READTHROUGH")
    flags = {k: live_env.get(k, "unset") for k in ("STORAGE", "OBJECTS_MIRROR", "OBJECTS_READTHROUGH")}
    problems, warnings = [], []
    if readthrough and not mirror:
        problems.append("OBJECTS_READTHROUGH is on without OBJECTS_MIRROR: reads would fall through to a bucket "
                        "nobody writes")
    if declared is not None:
        for name, live, want in (("OBJECTS_MIRROR", mirror, declared.objects_mirror),
                                 ("OBJECTS_READTHROUGH", readthrough, declared.objects_readthrough)):
            if live != want:
                problems.append(f"{name} is {'on' if live else 'off'} on the live staging service but declared "
                                f"{'on' if want else 'off'} (drift: run pulumi up -s staging or fix the stack)")
        if (mirror or readthrough) and today > declared.sunset:
            warnings.append(f"mirror flags still on {(today - declared.sunset).days} day(s) after their sunset "
                            f"{declared.sunset.isoformat()}: overdue")
    storage = live_env.get("STORAGE")
    if storage != prod_storage:
        problems.append(f"staging STORAGE is {storage!r}, production's is {prod_storage!r}: staging would not "
                        f"test what production runs")
    return MirrorVerdict(tuple(problems), tuple(warnings), flags)


class MirrorSyncCheck(Protocol):
    """The bucket drift check: is the mirror in sync with the database?"""

    def check(self) -> MirrorVerdict: ...


class NoSyncCheck:
    """The seam's default until the drift check exists: says so in the report."""

    def check(self) -> MirrorVerdict:
        return MirrorVerdict(warnings=("bucket mirror drift check not configured",))
