"""The labels every Brew resource carries, so cost reports and audits can group by them."""

from __future__ import annotations

MANAGED_BY = "pulumi"


def standard_labels(environment: str, service: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Labels for environment, service and `managed-by`, plus any extra ones.

    GCP label values allow lowercase letters, digits, `-` and `_` only, which every
    name we pass already satisfies; the environment and service come first so an
    extra label can never overwrite them silently.
    """
    labels = dict(extra or {})
    labels.update({"environment": environment, "service": service, "managed-by": MANAGED_BY})
    return labels
