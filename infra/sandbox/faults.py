"""The sandbox's faults and rehearsal timings: plain data, importable without the
sandbox's servers and client libraries, so the CLI can check arguments instantly."""

from __future__ import annotations

FAULTS: dict[str, str] = {
    "db-down": "the production Cloud SQL instance is not RUNNABLE",
    "no-lease-holder": "no worker holds the lease before the promotion",
    "holder-not-serving": "the lease is held by a worker whose revision does not serve",
    "worker-never-ready": "the new worker revision never becomes Ready",
    "lease-never-taken": "the new worker revision never takes the lease",
    "old-holder-stuck": "the old worker ignores SIGTERM and keeps the lease",
    "api-flaky": "the Google APIs answer bursts of 429 and 503",
    "lease-lost-during-web": "the new worker drops the lease during the web rollout",
    "web-errors": "the new web revision answers 5xx above the threshold",
    "low-traffic": "too few requests reach the new web revision to judge it",
    "concurrent-promote": "another promotion holds the promotion lock",
    "crash-after-worker": "the pipeline process dies right after the worker rollout",
    "readthrough-without-mirror": "staging reads through to the bucket with the mirror off",
    "flags-drift": "staging's live mirror flags differ from the declared ones",
    "mirror-out-of-sync": "rows missing and stale in staging's bucket mirror",
    "past-sunset": "the mirror flags are still on after their sunset date",
}

# Short pipeline timings for rehearsals: each a promote setting (infra.settings.PromoteSettings).
PROMOTE_OVERRIDES = {
    "bake_seconds": 0.3, "min_requests": 50, "inconclusive_wait_seconds": 0.5, "ready_timeout_seconds": 10.0,
    "hand_over_timeout_seconds": 3.0, "release_grace_seconds": 0.8, "settle_seconds": 0.5,
}
