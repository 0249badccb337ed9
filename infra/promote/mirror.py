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


# What can be wrong with the way back, each with its exit code of `brew-infra mirror status`
# (a promotion refuses at gate 2 with its own code, 20, whichever it is).
EXIT_CODES = {
    "readthrough-without-mirror": 20,
    "flags-drift": 21,
    "storage-mismatch": 22,
    "out-of-sync": 23,
    "overdue": 24,  # only with --strict; otherwise a warning
}


@dataclass(frozen=True)
class Finding:
    kind: str  # a key of EXIT_CODES
    message: str


@dataclass(frozen=True)
class MirrorVerdict:
    problems: tuple[Finding, ...] = ()  # refuse the promotion
    warnings: tuple[Finding, ...] = ()  # report, go ahead
    flags: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.problems[0].kind] if self.problems else 0

    def merged(self, other: MirrorVerdict) -> MirrorVerdict:
        return MirrorVerdict(self.problems + other.problems, self.warnings + other.warnings,
                             {**self.flags, **other.flags})


def _on(env: dict[str, str], name: str) -> bool:
    return env.get(name, "0").strip().lower() in ("1", "true", "on", "yes")


def check_mirror_flags(live_env: dict[str, str], declared: MirrorFlags | None, prod_storage: str,
                       today: dt.date, strict: bool = False) -> MirrorVerdict:
    """The flag rules; dates compare as UTC calendar days (the caller passes UTC today)."""
    mirror, readthrough = _on(live_env, "OBJECTS_MIRROR"), _on(live_env, "OBJECTS_READTHROUGH")
    flags = {k: live_env.get(k, "unset") for k in ("STORAGE", "OBJECTS_MIRROR", "OBJECTS_READTHROUGH")}
    problems, warnings = [], []
    if readthrough and not mirror:
        problems.append(Finding("readthrough-without-mirror", "OBJECTS_READTHROUGH is on without OBJECTS_MIRROR: "
                                "reads would fall through to a bucket nobody writes"))
    if declared is not None:
        for name, live, want in (("OBJECTS_MIRROR", mirror, declared.objects_mirror),
                                 ("OBJECTS_READTHROUGH", readthrough, declared.objects_readthrough)):
            if live != want:
                problems.append(Finding("flags-drift", f"{name} is {'on' if live else 'off'} on the live staging "
                                        f"service but declared {'on' if want else 'off'} (drift: run pulumi up -s "
                                        f"staging or fix the stack)"))
        if (mirror or readthrough) and today > declared.sunset:
            overdue = Finding("overdue", f"mirror flags still on {(today - declared.sunset).days} day(s) after their "
                                         f"sunset {declared.sunset.isoformat()}: overdue")
            (problems if strict else warnings).append(overdue)
    storage = live_env.get("STORAGE")
    if storage != prod_storage:
        problems.append(Finding("storage-mismatch", f"staging STORAGE is {storage!r}, production's is "
                                f"{prod_storage!r}: staging would not test what production runs"))
    return MirrorVerdict(tuple(problems), tuple(warnings), flags)


def mirror_verdict(live_env: dict[str, str], declared: MirrorFlags | None, prod_storage: str, today: dt.date,
                   sync: MirrorSyncCheck, strict: bool = False) -> MirrorVerdict:
    """Gate 2 and `brew-infra mirror status`: the flag rules, then, while the mirror is on
    and the flags are sound, the bucket drift check."""
    verdict = check_mirror_flags(live_env, declared, prod_storage, today, strict)
    if verdict.ok and _on(live_env, "OBJECTS_MIRROR"):
        verdict = verdict.merged(sync.check())
    return verdict


class MirrorSyncCheck(Protocol):
    """The bucket drift check: is the mirror in sync with the database?"""

    def check(self) -> MirrorVerdict: ...


class NoSyncCheck:
    """Where the mirror cannot be read (no staging database given): says so in the report."""

    def check(self) -> MirrorVerdict:
        return MirrorVerdict(warnings=(Finding("not-checked", "bucket mirror drift check not configured"),))
