"""Alerts: channels, metrics and policies, read from the synthesized graph."""

from __future__ import annotations

import dataclasses

import pulumi
import pytest

from infra.components.alerts import AlertPolicy, Alerts, AlertsArgs, Condition, CustomMetric, LogMetric
from infra.runbooks import render_runbook
from infra.synth.engine import run_program

CHANNEL = "gcp:monitoring/notificationChannel:NotificationChannel"
POLICY = "gcp:monitoring/alertPolicy:AlertPolicy"
LOG_METRIC = "gcp:logging/metric:Metric"
DESCRIPTOR = "gcp:monitoring/metricDescriptor:MetricDescriptor"

QUEUE_METRIC = "custom.googleapis.com/brew/queue/oldest_wait_seconds"
LEASE_DOC = render_runbook(
    "worker-lost-lease", worker_service="brew-worker", lease_key=727275, database="brew-prod",
    ops_job="brew-ops", region="asia-south1",
)
LABELS = {"environment": "prod", "service": "alerts"}


def alerts_args(**changes) -> AlertsArgs:
    args = AlertsArgs(
        project="p",
        notification_emails=("oncall@example.com", "lead@example.com"),
        log_metrics=(LogMetric("brew/worker_lease_lost", 'jsonPayload.event="lease_lost"', "lost leases"),),
        custom_metrics=(
            CustomMetric(QUEUE_METRIC, "Oldest queued job wait", "age of the oldest queued job", "s",
                         labels=(("queue", "interactive, slow or batch"),)),
        ),
        policies=(
            AlertPolicy(
                key="worker-lost-lease",
                display_name="worker lost its lease",
                conditions=(
                    Condition("lost lease logged", 'metric.type="logging.googleapis.com/user/brew/worker_lease_lost"',
                              threshold=0, duration_seconds=0, aligner="ALIGN_SUM"),
                    Condition("no running instance", 'metric.type="run.googleapis.com/container/instance_count"',
                              absent=True),
                ),
                documentation=LEASE_DOC,
            ),
            AlertPolicy(
                key="queue-wait",
                display_name="oldest queued job waits over 10 minutes",
                conditions=(Condition("oldest job older than 10 min", f'metric.type="{QUEUE_METRIC}"',
                                      threshold=600, reducer="REDUCE_MAX", group_by=("metric.labels.queue",)),),
                documentation=render_runbook("queue-wait", minutes=10),
                severity="WARNING",
            ),
        ),
        labels=LABELS,
    )
    return dataclasses.replace(args, **changes)


def synth(args: AlertsArgs):
    def program():
        alerts = Alerts("prod-alerts", args)
        pulumi.export("policies", alerts.policies)
        pulumi.export("channels", alerts.channels)

    return run_program(program, project="brew", stack="test", config={"gcp:project": "p"})


@pytest.fixture(scope="module")
def graph():
    return synth(alerts_args())


def policy(graph, key: str) -> dict:
    return graph.one(POLICY, f"prod-alerts-{key}")


def test_one_email_channel_per_address(graph):
    channels = graph.by_type(CHANNEL)
    assert sorted(c["inputs"]["labels"]["email_address"] for c in channels) == ["lead@example.com", "oncall@example.com"]
    assert all(c["inputs"]["type"] == "email" and c["inputs"]["userLabels"] == LABELS for c in channels)
    assert len(graph.outputs["channels"]) == 2


def test_policy_documentation_is_the_rendered_runbook(graph):
    doc = policy(graph, "worker-lost-lease")["inputs"]["documentation"]
    assert doc == {"content": LEASE_DOC, "mimeType": "text/markdown"}


def test_policies_notify_every_channel_and_carry_labels(graph):
    channel_ids = sorted(graph.outputs["channels"])
    for p in graph.by_type(POLICY):
        assert sorted(p["inputs"]["notificationChannels"]) == channel_ids
        assert p["inputs"]["userLabels"] == LABELS
    assert graph.outputs["policies"] == {
        "worker-lost-lease": "worker lost its lease",
        "queue-wait": "oldest queued job waits over 10 minutes",
    }


def test_policies_depend_on_the_metrics_they_name(graph):
    metric_urns = {graph.one(LOG_METRIC, "prod-alerts-log-brew-worker-lease-lost")["urn"],
                   graph.by_type(DESCRIPTOR)[0]["urn"]}
    for p in graph.by_type(POLICY):
        assert metric_urns <= set(p["dependencies"])


def test_threshold_and_absent_conditions(graph):
    lease = policy(graph, "worker-lost-lease")["inputs"]
    assert lease["combiner"] == "OR" and lease["severity"] == "CRITICAL"
    threshold, absent = lease["conditions"]
    assert threshold["conditionThreshold"]["comparison"] == "COMPARISON_GT"
    assert threshold["conditionThreshold"]["thresholdValue"] == 0
    assert threshold["conditionThreshold"]["duration"] == "0s"
    assert threshold["conditionThreshold"]["aggregations"] == [{"alignmentPeriod": "60s", "perSeriesAligner": "ALIGN_SUM"}]
    assert "conditionThreshold" not in absent
    assert absent["conditionAbsent"]["duration"] == "300s"
    queue = policy(graph, "queue-wait")["inputs"]
    assert queue["severity"] == "WARNING"
    assert queue["conditions"][0]["conditionThreshold"]["aggregations"] == [{
        "alignmentPeriod": "60s", "perSeriesAligner": "ALIGN_MAX",
        "crossSeriesReducer": "REDUCE_MAX", "groupByFields": ["metric.labels.queue"],
    }]


def test_log_metric_is_a_delta_int64_counter_and_descriptor_declares_labels(graph):
    log_metric = graph.by_type(LOG_METRIC)[0]["inputs"]
    assert log_metric["name"] == "brew/worker_lease_lost"
    assert log_metric["metricDescriptor"] == {"metricKind": "DELTA", "valueType": "INT64"}
    descriptor = graph.by_type(DESCRIPTOR)[0]["inputs"]
    assert (descriptor["type"], descriptor["metricKind"], descriptor["valueType"], descriptor["unit"]) == (
        QUEUE_METRIC, "GAUGE", "DOUBLE", "s")
    assert descriptor["labels"] == [{"key": "queue", "description": "interactive, slow or batch", "valueType": "STRING"}]


def test_all_children_are_parented_to_the_component(graph):
    component = graph.one("brew:gcp:Alerts", "prod-alerts")
    assert all(r["parent"] == component["urn"] for r in graph.resources if r is not component)


def _bad_policy(**changes) -> AlertPolicy:
    return dataclasses.replace(alerts_args().policies[1], **changes)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"notification_emails": ()}, "notification_emails: expected at least one"),
        ({"notification_emails": ("oncall.example.com",)}, "expected an email address, got 'oncall.example.com'"),
        ({"policies": (_bad_policy(), _bad_policy())}, "duplicate key 'queue-wait'"),
        ({"policies": (_bad_policy(conditions=()),)}, "policy 'queue-wait' has no conditions"),
        ({"policies": (_bad_policy(conditions=(Condition("c", "f", comparison="COMPARISON_EQ"),)),)},
         "Condition.comparison"),
        ({"policies": (_bad_policy(severity="PANIC"),)}, "AlertPolicy.severity"),
        ({"policies": (_bad_policy(conditions=(Condition("c", "f", duration_seconds=90),)),)},
         "Condition.duration_seconds: expected a multiple of 60"),
        ({"policies": (_bad_policy(conditions=(Condition("c", "f", duration_seconds=60, absent=True),)),)},
         "absent condition needs at least 120"),
    ],
)
def test_bad_args_raise_value_error(changes, message):
    with pytest.raises(ValueError, match=message):
        synth(alerts_args(**changes))
