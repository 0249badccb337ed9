"""Alerting for one environment: who is told, what is measured, and when to tell them.

Generic over what the policies watch: email notification channels, log-based counter
metrics, custom metric descriptors the app writes to, and alert policies whose
documentation is the runbook an on-call engineer reads in the incident.

Stages: validate args -> notification channels -> log metrics and metric descriptors ->
alert policies (after the metrics, since the API rejects a filter naming a metric that
does not exist yet) -> outputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_gcp import logging, monitoring

COMPARISONS = ("COMPARISON_GT", "COMPARISON_GE", "COMPARISON_LT", "COMPARISON_LE")
COMBINERS = ("OR", "AND", "AND_WITH_MATCHING_RESOURCE")
SEVERITIES = ("CRITICAL", "ERROR", "WARNING")
METRIC_KINDS = ("GAUGE", "DELTA", "CUMULATIVE")
VALUE_TYPES = ("BOOL", "INT64", "DOUBLE", "STRING", "DISTRIBUTION")


@dataclass(frozen=True)
class LogMetric:
    """A counter of log entries matching `filter` (logging.googleapis.com/user/<name>)."""

    name: str
    filter: str
    description: str


@dataclass(frozen=True)
class CustomMetric:
    """A metric the application writes itself, e.g. custom.googleapis.com/brew/queue/oldest_wait_seconds."""

    metric_type: str
    display_name: str
    description: str
    unit: str
    value_type: str = "DOUBLE"
    metric_kind: str = "GAUGE"
    labels: Sequence[tuple[str, str]] = ()  # (label key, description); string labels


@dataclass(frozen=True)
class Condition:
    """A threshold on a time series, or (absent=True) the series going silent."""

    display_name: str
    filter: str
    comparison: str = "COMPARISON_GT"
    threshold: float = 0.0
    duration_seconds: int = 300
    aligner: str = "ALIGN_MAX"
    alignment_seconds: int = 60
    reducer: str | None = None
    group_by: Sequence[str] = ()
    absent: bool = False


@dataclass(frozen=True)
class AlertPolicy:
    key: str  # stable identifier: names the child resource and the runbook
    display_name: str
    conditions: Sequence[Condition]
    documentation: str  # markdown, shown in the incident and the notification
    combiner: str = "OR"
    severity: str = "CRITICAL"


@dataclass(frozen=True)
class AlertsArgs:
    project: pulumi.Input[str]
    notification_emails: Sequence[str]
    log_metrics: Sequence[LogMetric] = ()
    custom_metrics: Sequence[CustomMetric] = ()
    policies: Sequence[AlertPolicy] = ()
    labels: Mapping[str, str] = field(default_factory=dict)


def _validate(args: AlertsArgs) -> None:
    if not args.notification_emails:
        raise ValueError("AlertsArgs.notification_emails: expected at least one address, got none")
    for email in args.notification_emails:
        if "@" not in email:
            raise ValueError(f"AlertsArgs.notification_emails: expected an email address, got {email!r}")
    if len(set(args.notification_emails)) != len(args.notification_emails):
        raise ValueError(f"AlertsArgs.notification_emails: duplicate address in {list(args.notification_emails)!r}")
    _unique("AlertsArgs.log_metrics", [m.name for m in args.log_metrics])
    _unique("AlertsArgs.custom_metrics", [m.metric_type for m in args.custom_metrics])
    _unique("AlertsArgs.policies", [p.key for p in args.policies])
    for m in args.custom_metrics:
        if m.metric_kind not in METRIC_KINDS:
            raise ValueError(f"CustomMetric.metric_kind: expected one of {', '.join(METRIC_KINDS)}, got {m.metric_kind!r}")
        if m.value_type not in VALUE_TYPES:
            raise ValueError(f"CustomMetric.value_type: expected one of {', '.join(VALUE_TYPES)}, got {m.value_type!r}")
    for p in args.policies:
        if not p.conditions:
            raise ValueError(f"AlertPolicy.conditions: policy {p.key!r} has no conditions")
        if p.combiner not in COMBINERS:
            raise ValueError(f"AlertPolicy.combiner: expected one of {', '.join(COMBINERS)}, got {p.combiner!r}")
        if p.severity not in SEVERITIES:
            raise ValueError(f"AlertPolicy.severity: expected one of {', '.join(SEVERITIES)}, got {p.severity!r}")
        for c in p.conditions:
            if c.comparison not in COMPARISONS:
                raise ValueError(f"Condition.comparison: expected one of {', '.join(COMPARISONS)}, "
                                 f"got {c.comparison!r} in policy {p.key!r}")
            # Monitoring only takes whole minutes, and an absence needs at least two of them.
            if c.duration_seconds < 0 or c.duration_seconds % 60:
                raise ValueError(f"Condition.duration_seconds: expected a multiple of 60, "
                                 f"got {c.duration_seconds} in policy {p.key!r}")
            if c.absent and c.duration_seconds < 120:
                raise ValueError(f"Condition.duration_seconds: an absent condition needs at least 120, "
                                 f"got {c.duration_seconds} in policy {p.key!r}")


def _unique(what: str, keys: list[str]) -> None:
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            raise ValueError(f"{what}: duplicate key {key!r}")
        seen.add(key)


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")


def _condition(c: Condition) -> dict:
    aggregation: dict = {"alignment_period": f"{c.alignment_seconds}s", "per_series_aligner": c.aligner}
    if c.reducer is not None:
        aggregation["cross_series_reducer"] = c.reducer
    if c.group_by:
        aggregation["group_by_fields"] = list(c.group_by)
    body: dict = {"filter": c.filter, "duration": f"{c.duration_seconds}s", "aggregations": [aggregation]}
    if c.absent:
        return {"display_name": c.display_name, "condition_absent": body}
    return {
        "display_name": c.display_name,
        "condition_threshold": {**body, "comparison": c.comparison, "threshold_value": float(c.threshold)},
    }


class Alerts(pulumi.ComponentResource):
    """Notification channels, metrics and alert policies for one environment."""

    policies: dict[str, str]
    channels: list[pulumi.Output[str]]

    def __init__(self, name: str, args: AlertsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("brew:gcp:Alerts", name, None, opts)
        _validate(args)
        child = pulumi.ResourceOptions(parent=self)
        labels = dict(args.labels)

        channels = [
            monitoring.NotificationChannel(
                f"{name}-email-{_slug(email)}",
                project=args.project,
                type="email",
                display_name=f"email {email}",
                labels={"email_address": email},
                user_labels=labels,
                opts=child,
            )
            for email in args.notification_emails
        ]

        metrics: list[pulumi.Resource] = [
            logging.Metric(
                f"{name}-log-{_slug(m.name)}",
                project=args.project,
                name=m.name,
                filter=m.filter,
                description=m.description,
                metric_descriptor={"metric_kind": "DELTA", "value_type": "INT64"},
                opts=child,
            )
            for m in args.log_metrics
        ]
        metrics += [
            monitoring.MetricDescriptor(
                f"{name}-metric-{_slug(m.metric_type.removeprefix('custom.googleapis.com/'))}",
                project=args.project,
                type=m.metric_type,
                display_name=m.display_name,
                description=m.description,
                unit=m.unit,
                metric_kind=m.metric_kind,
                value_type=m.value_type,
                labels=[{"key": key, "description": text, "value_type": "STRING"} for key, text in m.labels],
                opts=child,
            )
            for m in args.custom_metrics
        ]

        channel_ids = [c.id for c in channels]
        for p in args.policies:
            monitoring.AlertPolicy(
                f"{name}-{p.key}",
                project=args.project,
                display_name=p.display_name,
                combiner=p.combiner,
                severity=p.severity,
                conditions=[_condition(c) for c in p.conditions],
                documentation={"content": p.documentation, "mime_type": "text/markdown"},
                notification_channels=channel_ids,
                user_labels=labels,
                # A filter naming a metric that does not exist yet is rejected by the API.
                opts=pulumi.ResourceOptions(parent=self, depends_on=metrics),
            )

        self.policies = {p.key: p.display_name for p in args.policies}
        self.channels = channel_ids
        self.register_outputs({"policies": self.policies, "channels": self.channels})
