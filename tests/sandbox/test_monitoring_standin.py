"""The Cloud Monitoring stand-in (timeSeries.list) over its TrafficModel.

google-cloud-monitoring 2.32.0 has no REST transport (the first test pins that down), so the
REST callers here are googleapiclient's discovery client for `monitoring v3` (enums as
names) and plain HTTP with `$alt=json;enum-encoding=int`, read back with the library's own
`monitoring_v3.ListTimeSeriesResponse`. Every body is checked against the discovery schema.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import httplib2
import pytest
from google.cloud import monitoring_v3
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError

from infra.sandbox.monitoring import MonitoringApi, TrafficModel, parse_filter
from infra.sandbox.server import ApiError, SandboxServer
from tests.sandbox.discovery import RPC_CODES, validate

PROJECT, SERVICE, REV, OLD = "brew-prod", "web", "web-00002-abc", "web-00001-xyz"
T0 = 1_800_000_000.0  # a multiple of 300 s
QUERY = ('metric.type = "run.googleapis.com/request_count" AND resource.type = "cloud_run_revision" '
         'AND resource.labels.service_name = "{service}" AND resource.labels.revision_name = "{revision}"')


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z")


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


class Env:
    def __init__(self, server: SandboxServer, traffic: TrafficModel, clock: Clock):
        self.server, self.traffic, self.clock = server, traffic, clock
        self.client = build("monitoring", "v3", http=httplib2.Http(), static_discovery=True,
                            client_options={"api_endpoint": server.endpoint + "/"})

    def list(self, start: float, end: float, filter: str | None = None, **params: Any) -> dict[str, Any]:
        """timeSeries.list through the discovery client; the body is schema-checked."""
        body = self.client.projects().timeSeries().list(
            name=f"projects/{PROJECT}", filter=filter or QUERY.format(service=SERVICE, revision=REV),
            interval_startTime=iso(start), interval_endTime=iso(end), **params).execute()
        validate("monitoring.v3", "ListTimeSeriesResponse", body)
        return body

    def grouped(self, start: float, end: float, period: int = 300, aligner: str = "ALIGN_DELTA",
                **params: Any) -> dict[str, list[int]]:
        """The pipeline's query: {response_code_class: [point values, newest first]}."""
        body = self.list(start, end, aggregation_alignmentPeriod=f"{period}s", aggregation_perSeriesAligner=aligner,
                         aggregation_crossSeriesReducer="REDUCE_SUM",
                         aggregation_groupByFields=["metric.labels.response_code_class"], **params)
        return {s["metric"]["labels"]["response_code_class"]: [int(p["value"]["int64Value"]) for p in s["points"]]
                for s in body.get("timeSeries", [])}

    def raw(self, query: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        url = f"{self.server.endpoint}/v3/projects/{PROJECT}/timeSeries?{urllib.parse.urlencode(query, doseq=True)}"
        try:
            with urllib.request.urlopen(url) as answer:
                return answer.status, json.load(answer)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[SandboxServer, MonitoringApi]]:
    api = MonitoringApi()
    with SandboxServer([api]) as served:  # one server: stopping one takes half a second
        yield served, api


@pytest.fixture
def env(server: tuple[SandboxServer, MonitoringApi]) -> Env:
    served, api = server
    clock = Clock()
    api.traffic = TrafficModel(now=clock)
    return Env(served, api.traffic, clock)


def check_error(status: int, body: Any) -> None:
    assert set(body) == {"error"}
    error = body["error"]
    assert error["code"] == status and error["message"] and error["status"] in RPC_CODES.values()
    validate("monitoring.v3", "Status", {k: v for k, v in error.items() if k != "status"})


def test_monitoring_v3_library_is_grpc_only() -> None:
    assert "rest" not in monitoring_v3.MetricServiceClient._transport_registry


def test_pipeline_query_groups_by_response_code_class(env: Env) -> None:
    env.traffic.set_rate(SERVICE, REV, 2.0, 0.1)
    env.clock.t = T0 + 600
    assert env.grouped(T0, T0 + 600) == {"2xx": [540, 540], "5xx": [60, 60]}
    body = env.list(T0, T0 + 600, aggregation_alignmentPeriod="300s", aggregation_perSeriesAligner="ALIGN_DELTA",
                    aggregation_crossSeriesReducer="REDUCE_SUM",
                    aggregation_groupByFields="metric.labels.response_code_class")
    first = body["timeSeries"][0]
    assert first["metric"] == {"type": "run.googleapis.com/request_count", "labels": {"response_code_class": "2xx"}}
    assert first["resource"] == {"type": "cloud_run_revision", "labels": {"project_id": PROJECT}}
    assert (first["metricKind"], first["valueType"]) == ("DELTA", "INT64")
    assert [p["interval"] for p in first["points"]] == [  # newest first, aligned on the end time
        {"startTime": iso(T0 + 300), "endTime": iso(T0 + 600)}, {"startTime": iso(T0), "endTime": iso(T0 + 300)}]
    # ALIGN_SUM over one period spanning the interval: one point per class
    assert env.grouped(T0, T0 + 600, period=600, aligner="ALIGN_SUM") == {"2xx": [1080], "5xx": [120]}


def test_counts_are_rate_times_overlap_since_set_rate(env: Env) -> None:
    env.clock.t = T0 + 100
    env.traffic.set_rate(SERVICE, REV, 1.0, 0.0)
    env.clock.t = T0 + 300
    env.traffic.web_errors(SERVICE, REV, error_ratio=0.5)  # same rate, half of it 5xx from now on
    env.clock.t = T0 + 600
    assert env.traffic.current(SERVICE, REV) == (1.0, 0.5)
    assert env.grouped(T0, T0 + 600) == {"2xx": [150, 200], "5xx": [150]}
    env.traffic.stop(SERVICE, REV)
    env.clock.t = T0 + 1200
    assert env.grouped(T0 + 600, T0 + 1200) == {}  # no traffic since: nothing at all
    assert env.grouped(T0, T0 + 1200, period=1200) == {"2xx": [350], "5xx": [150]}


def test_no_traffic_no_errors_no_series(env: Env) -> None:
    env.clock.t = T0 + 600
    assert env.list(T0, T0 + 600) == {}  # a revision with no rate: Cloud Monitoring answers nothing
    env.traffic.set_rate(SERVICE, OLD, 3.0)
    assert env.grouped(T0, T0 + 600) == {}  # only the other revision has traffic
    env.clock.t = T0
    env.traffic.set_rate(SERVICE, REV, 1.0, 0.0)
    env.clock.t = T0 + 600
    assert env.grouped(T0, T0 + 600) == {"2xx": [300, 300]}  # no 5xx series when there were none


def test_4xx_is_its_own_class(env: Env) -> None:
    env.traffic.set_rate(SERVICE, REV, 1.0, 0.1, client_error_ratio=0.2)
    env.clock.t = T0 + 300
    assert env.grouped(T0, T0 + 300) == {"2xx": [210], "4xx": [60], "5xx": [30]}
    with pytest.raises(ValueError):
        env.traffic.set_rate(SERVICE, REV, 1.0, 0.7, client_error_ratio=0.7)


def test_low_traffic_fault(env: Env) -> None:
    env.traffic.set_rate(SERVICE, REV, 10.0, 0.02)
    env.traffic.low_traffic(SERVICE, REV)  # 0.01 rps from the same instant
    env.clock.t = T0 + 600
    assert env.traffic.current(SERVICE, REV) == (0.01, 0.02)
    assert env.grouped(T0, T0 + 600, period=600) == {"2xx": [6]}


def test_ungrouped_series_carry_the_revision_labels(env: Env) -> None:
    env.traffic.set_rate(SERVICE, REV, 0.5, 0.5, location="europe-west4")
    env.traffic.set_rate(SERVICE, OLD, 1.0)
    env.clock.t = T0 + 180
    body = env.list(T0, T0 + 180)  # no aggregation: one raw point a minute
    (ok, errors) = body["timeSeries"]
    assert ok["resource"] == {"type": "cloud_run_revision", "labels": {
        "service_name": SERVICE, "revision_name": REV, "location": "europe-west4", "project_id": PROJECT,
        "configuration_name": SERVICE}}
    assert ok["metric"]["labels"] == {"response_code_class": "2xx", "response_code": "200"}
    assert errors["metric"]["labels"]["response_code_class"] == "5xx"
    assert [p["value"]["int64Value"] for p in ok["points"]] == ["15", "15", "15"]
    # a service-wide filter, summed per class over both revisions
    service_wide = ('metric.type = "run.googleapis.com/request_count" AND resource.type = "cloud_run_revision" '
                    f'AND resource.labels.service_name = "{SERVICE}"')
    body = env.list(T0, T0 + 180, filter=service_wide, aggregation_alignmentPeriod="180s",
                    aggregation_perSeriesAligner="ALIGN_SUM", aggregation_crossSeriesReducer="REDUCE_SUM",
                    aggregation_groupByFields=["metric.labels.response_code_class"])
    assert {s["metric"]["labels"]["response_code_class"]: s["points"][0]["value"]["int64Value"]
            for s in body["timeSeries"]} == {"2xx": "225", "5xx": "45"}
    # REDUCE_SUM without group-by: one series, no labels left
    body = env.list(T0, T0 + 180, filter=service_wide, aggregation_alignmentPeriod="180s",
                    aggregation_perSeriesAligner="ALIGN_DELTA", aggregation_crossSeriesReducer="REDUCE_SUM")
    (total,) = body["timeSeries"]
    assert "labels" not in total["metric"] and total["points"][0]["value"]["int64Value"] == "270"
    # a filter on a metric label, and one on another project's traffic
    only_5xx = QUERY.format(service=SERVICE, revision=REV) + ' AND metric.labels.response_code_class = "5xx"'
    assert [s["metric"]["labels"]["response_code_class"] for s in env.list(T0, T0 + 180, filter=only_5xx)[
        "timeSeries"]] == ["5xx"]
    env.traffic.set_rate("api", "api-00001-aaa", 1.0, project="other-project")
    assert env.list(T0, T0 + 180, filter=QUERY.format(service="api", revision="api-00001-aaa")) == {}


def test_headers_view_and_paging(env: Env) -> None:
    env.traffic.set_rate(SERVICE, REV, 1.0, 0.5)
    env.clock.t = T0 + 300
    body = env.list(T0, T0 + 300, view="HEADERS")
    assert len(body["timeSeries"]) == 2 and all("points" not in s for s in body["timeSeries"])
    page = env.list(T0, T0 + 300, pageSize=1)
    assert len(page["timeSeries"]) == 1 and page["nextPageToken"]
    rest = env.list(T0, T0 + 300, pageSize=1, pageToken=page["nextPageToken"])
    assert len(rest["timeSeries"]) == 1 and "nextPageToken" not in rest
    assert rest["timeSeries"][0]["metric"]["labels"] != page["timeSeries"][0]["metric"]["labels"]


def test_enums_as_ints_and_names(env: Env) -> None:
    env.traffic.set_rate(SERVICE, REV, 1.0, 0.1)
    env.clock.t = T0 + 300
    query = {"filter": QUERY.format(service=SERVICE, revision=REV), "interval.startTime": iso(T0),
             "interval.endTime": iso(T0 + 300), "aggregation.alignmentPeriod": "300s",
             "aggregation.groupByFields": "metric.labels.response_code_class"}
    names = {**query, "aggregation.perSeriesAligner": "ALIGN_DELTA", "aggregation.crossSeriesReducer": "REDUCE_SUM"}
    # a REST transport sends enum query parameters as numbers and asks for numbers back
    ints = {**query, "aggregation.perSeriesAligner": "1", "aggregation.crossSeriesReducer": "4",
            "$alt": "json;enum-encoding=int"}
    (status_n, by_name), (status_i, by_int) = env.raw(names), env.raw(ints)
    assert status_n == status_i == 200
    validate("monitoring.v3", "ListTimeSeriesResponse", by_name)
    validate("monitoring.v3", "ListTimeSeriesResponse", by_int, int_enums=True)
    assert by_name["timeSeries"][0]["metricKind"] == "DELTA" and by_int["timeSeries"][0]["metricKind"] == 2
    assert by_int["timeSeries"][0]["valueType"] == 2  # INT64
    parsed_n = monitoring_v3.ListTimeSeriesResponse.from_json(json.dumps(by_name))
    parsed_i = monitoring_v3.ListTimeSeriesResponse.from_json(json.dumps(by_int))
    assert parsed_n == parsed_i
    assert {s.metric.labels["response_code_class"]: s.points[0].value.int64_value for s in parsed_i.time_series} == \
        {"2xx": 270, "5xx": 30}


@pytest.mark.parametrize("text", [
    'metric.type = "run.googleapis.com/request_count" OR resource.type = "cloud_run_revision"',
    'metric.type != "run.googleapis.com/request_count"',
    'metric.type = run.googleapis.com/request_count',
    'metric.type = starts_with("run.googleapis.com/")',
    'resource.type = "cloud_run_revision"',  # no metric type
    'project = "brew-prod" AND metric.type = "run.googleapis.com/request_count"',
    '',
])
def test_unparseable_filters_are_400(env: Env, text: str) -> None:
    with pytest.raises(HttpError) as caught:
        env.list(T0, T0 + 60, filter=text or " ")
    assert caught.value.resp.status == 400
    check_error(400, json.loads(caught.value.content))


def test_parse_filter() -> None:
    assert parse_filter(QUERY.format(service="a", revision="b")) == {
        "metric.type": "run.googleapis.com/request_count", "resource.type": "cloud_run_revision",
        "resource.labels.service_name": "a", "resource.labels.revision_name": "b"}
    with pytest.raises(ApiError):
        parse_filter('metric.type = "x" AND')


def test_other_metric_types_have_no_data(env: Env) -> None:
    env.traffic.set_rate(SERVICE, REV, 1.0)
    env.clock.t = T0 + 60
    assert env.list(T0, T0 + 60, filter='metric.type = "run.googleapis.com/request_latencies"') == {}


@pytest.mark.parametrize("params", [
    {"aggregation_crossSeriesReducer": "REDUCE_SUM"},  # a reducer needs an aligner
    {"aggregation_perSeriesAligner": "ALIGN_DELTA"},  # an aligner needs a period
    {"aggregation_perSeriesAligner": "ALIGN_DELTA", "aggregation_alignmentPeriod": "10s"},
    {"aggregation_perSeriesAligner": "ALIGN_RATE", "aggregation_alignmentPeriod": "60s"},
    {"aggregation_groupByFields": "metric.labels.response_code_class"},  # group-by without reducer
])
def test_bad_aggregations_are_400(env: Env, params: dict[str, str]) -> None:
    with pytest.raises(HttpError) as caught:
        env.list(T0, T0 + 60, **params)
    assert caught.value.resp.status == 400
    check_error(400, json.loads(caught.value.content))


def test_bad_interval_and_unknown_path(env: Env) -> None:
    status, body = env.raw({"filter": QUERY.format(service=SERVICE, revision=REV)})  # no interval.endTime
    assert status == 400
    check_error(400, body)
    status, body = env.raw({"filter": QUERY.format(service=SERVICE, revision=REV), "interval.endTime": "yesterday"})
    assert status == 400
    status, body = env.raw({"filter": QUERY.format(service=SERVICE, revision=REV), "interval.endTime": iso(T0),
                            "interval.startTime": iso(T0 + 60)})
    assert status == 400
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{env.server.endpoint}/v3/projects/{PROJECT}/metricDescriptors")
    assert caught.value.code == 404
