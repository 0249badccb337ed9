"""Is a new web revision healthy? A pure decision over measured request counts.

Healthy, unhealthy or inconclusive, as cloud-run-release-manager and Argo Rollouts
decide it: too few requests to judge is inconclusive, never a pass; a 5xx ratio above
the limit is unhealthy even with few requests once any 5xx is seen past the limit
(enough errors to matter outweigh a small sample).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Verdict(str, Enum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Health:
    verdict: Verdict
    requests: int
    errors: int

    @property
    def error_ratio(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def describe(self) -> str:
        return f"{self.verdict.value}: {self.errors} 5xx of {self.requests} requests ({self.error_ratio:.2%})"


def judge(requests: int, errors: int, min_requests: int, max_error_ratio: float) -> Health:
    if requests < 0 or errors < 0 or errors > requests:
        raise ValueError(f"impossible counts: {errors} errors of {requests} requests")
    if requests < min_requests:
        # A handful of requests can neither prove nor (unless already over the limit
        # against the whole minimum sample) disprove health.
        if errors > max_error_ratio * min_requests:
            return Health(Verdict.UNHEALTHY, requests, errors)
        return Health(Verdict.INCONCLUSIVE, requests, errors)
    if errors / requests > max_error_ratio:
        return Health(Verdict.UNHEALTHY, requests, errors)
    return Health(Verdict.HEALTHY, requests, errors)
