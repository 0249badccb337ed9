"""A stand-in for Cloud Monitoring's timeSeries.list, fed by a traffic model the sandbox sets.

    GET /v3/projects/{project}/timeSeries     (monitoring.v3.json: projects.timeSeries.list)

It answers the query a promote pipeline makes to judge a Cloud Run revision:

    filter  = metric.type = "run.googleapis.com/request_count" AND resource.type = "cloud_run_revision"
              AND resource.labels.service_name = "web" AND resource.labels.revision_name = "web-00002-abc"
    interval.startTime / interval.endTime (RFC 3339)
    aggregation.alignmentPeriod = "300s", perSeriesAligner = ALIGN_DELTA | ALIGN_SUM,
    crossSeriesReducer = REDUCE_SUM, groupByFields = metric.labels.response_code_class

The filter is read as `key = "value"` terms joined by AND (anything else: 400). Counts come
from `TrafficModel`: a revision's requests in an interval are rate x seconds of overlap
with the time its rate was in force, 5xx by the error ratio (4xx by an optional client
error ratio), the rest 2xx. As Cloud
Monitoring does, a revision with no traffic yields no series, and a response class with no
requests (no 5xx at all, say) yields no series either; an alignment period without
requests has no point. Points come newest first, one per alignment period ending at
`interval.endTime`; without an aligner, one raw point per minute of Cloud Run's sampling.

Answers are `monitoring_v3.ListTimeSeriesResponse` serialized with the library's JSON
mapping (enums as numbers with `$alt=json;enum-encoding=int`, else names).

Note: the pinned google-cloud-monitoring 2.32.0 has no REST transport (gRPC only); REST
callers are discovery clients (googleapiclient `build("monitoring", "v3")`) or plain HTTP.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from google.cloud import monitoring_v3
from google.protobuf import json_format

from infra.sandbox.server import ApiError, Request, Response

REQUEST_COUNT = "run.googleapis.com/request_count"
REVISION = "cloud_run_revision"
RAW_SAMPLE_SECONDS = 60  # Cloud Run writes request_count once a minute
Aligner = monitoring_v3.Aggregation.Aligner
Reducer = monitoring_v3.Aggregation.Reducer


@dataclass(frozen=True)
class _Segment:
    start: float
    rate: float  # requests per second
    error_ratio: float  # share answered 5xx
    client_error_ratio: float = 0.0  # share answered 4xx


@dataclass
class _Revision:
    service: str
    revision: str
    location: str
    project: str | None
    segments: list[_Segment]

    def integral(self, t: float) -> tuple[float, float, float]:
        """Requests, 5xx and 4xx requests from the first set_rate up to time t."""
        total = errors = client = 0.0
        for index, seg in enumerate(self.segments):
            end = self.segments[index + 1].start if index + 1 < len(self.segments) else math.inf
            seconds = max(0.0, min(t, end) - seg.start)
            total += seg.rate * seconds
            errors += seg.rate * seg.error_ratio * seconds
            client += seg.rate * seg.client_error_ratio * seconds
        return total, errors, client

    def counts(self, start: float, end: float) -> dict[str, int]:
        """Requests by response class in (start, end]; rounded on the running sums, so the
        counts of adjacent windows add up to the count of their union."""
        (t0, e0, c0), (t1, e1, c1) = self.integral(start), self.integral(end)
        total = round(t1) - round(t0)
        errors = min(total, round(e1) - round(e0))
        client = min(total - errors, round(c1) - round(c0))
        return {"2xx": total - errors - client, "4xx": client, "5xx": errors}


class TrafficModel:
    """Request rates per Cloud Run revision over time; the sandbox and its faults set them."""

    def __init__(self, now: Callable[[], float] = time.time, location: str = "europe-west1"):
        self.now = now
        self.location = location
        self._revisions: dict[tuple[str, str], _Revision] = {}
        self._lock = threading.Lock()

    def set_rate(self, service: str, revision: str, requests_per_second: float, error_ratio: float = 0.0, *,
                 client_error_ratio: float = 0.0, location: str | None = None, project: str | None = None) -> None:
        """From now on the revision serves `requests_per_second`, `error_ratio` of them 5xx,
        `client_error_ratio` of them 4xx, the rest 2xx.

        `project` limits the series to that project (None: whichever project is asked)."""
        if requests_per_second < 0 or not 0.0 <= error_ratio <= error_ratio + client_error_ratio <= 1.0 \
                or client_error_ratio < 0:
            raise ValueError("requests_per_second must be >= 0, the ratios >= 0 and their sum <= 1")
        with self._lock:
            key = (service, revision)
            record = self._revisions.get(key)
            if record is None:
                record = self._revisions[key] = _Revision(service, revision, location or self.location, project, [])
            else:
                record.location = location or record.location
                record.project = project if project is not None else record.project
            record.segments.append(_Segment(self.now(), requests_per_second, error_ratio, client_error_ratio))

    def current(self, service: str, revision: str) -> tuple[float, float] | None:
        """(requests_per_second, error_ratio) in force now, or None if never set."""
        with self._lock:
            record = self._revisions.get((service, revision))
            return (record.segments[-1].rate, record.segments[-1].error_ratio) if record else None

    def stop(self, service: str, revision: str) -> None:
        """The revision stops receiving requests (its past traffic stays in the history)."""
        current = self.current(service, revision)
        self.set_rate(service, revision, 0.0, current[1] if current else 0.0)

    # faults: plain traffic settings
    def web_errors(self, service: str, revision: str, error_ratio: float = 0.5,
                   requests_per_second: float | None = None) -> None:
        """Fault `web-errors`: the revision answers `error_ratio` of its requests with 5xx."""
        current = self.current(service, revision)
        rate = requests_per_second if requests_per_second is not None else (current[0] if current else 5.0)
        self.set_rate(service, revision, rate, error_ratio)

    def low_traffic(self, service: str, revision: str, requests_per_second: float = 0.01) -> None:
        """Fault `low-traffic`: the revision gets almost no requests (too few to judge)."""
        current = self.current(service, revision)
        self.set_rate(service, revision, requests_per_second, current[1] if current else 0.0)

    def revisions(self) -> list[_Revision]:
        with self._lock:
            return list(self._revisions.values())


# ---- the filter ------------------------------------------------------------------------

_TERM = re.compile(r'\s*([A-Za-z_][\w.]*)\s*=\s*"([^"\\]*)"\s*')
_KEYS = re.compile(r"^(metric\.type|resource\.type|metric\.labels\.\w+|resource\.labels\.\w+)$")


def parse_filter(text: str) -> dict[str, str]:
    """`a = "x" AND b = "y"` -> {"a": "x", "b": "y"}; ApiError(400) for anything else."""
    terms: dict[str, str] = {}
    for part in re.split(r"\s+AND\s+", text.strip()):
        match = _TERM.fullmatch(part)
        if not match or not _KEYS.match(match[1]):
            raise ApiError(400, f'Field filter had an invalid value of "{text}": cannot parse "{part.strip()}"')
        if match[1] in terms and terms[match[1]] != match[2]:
            return {**terms, match[1]: "\0"}  # contradictory: matches nothing
        terms[match[1]] = match[2]
    if "metric.type" not in terms:
        raise ApiError(400, f'Field filter had an invalid value of "{text}": a metric type is required')
    return terms


def _timestamp(text: str | None, name: str) -> float:
    if not text:
        raise ApiError(400, f"Field {name} had an invalid value: a time is required")
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ApiError(400, f'Field {name} had an invalid value of "{text}"') from None


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z")


def _enum(enum: Any, text: str | None, name: str, default: Any) -> Any:
    if text is None:
        return default
    try:
        return enum(int(text)) if text.lstrip("-").isdigit() else enum[text]
    except (KeyError, ValueError):
        raise ApiError(400, f'Invalid value at \'{name}\' ({enum.__name__}), "{text}"') from None


class MonitoringApi:
    """The Cloud Monitoring stand-in (timeSeries.list) over a TrafficModel."""

    prefixes = ("/v3/projects/",)

    def __init__(self, traffic: TrafficModel | None = None):
        self.traffic = traffic or TrafficModel()

    def handle(self, request: Request) -> Response:
        match = re.fullmatch(r"/v3/projects/([^/]+)/timeSeries", request.path)
        if not match or request.method != "GET":
            raise ApiError(404, f"Method not found: {request.method} {request.path}")
        ints = "enum-encoding=int" in (request.param("$alt") or request.param("alt") or "json")
        body = self._list(match[1], request)
        message = json_format.ParseDict(body, monitoring_v3.ListTimeSeriesResponse.pb()(),
                                        ignore_unknown_fields=False)
        return Response(200, json_format.MessageToDict(message, use_integers_for_enums=ints))

    def _list(self, project: str, request: Request) -> dict[str, Any]:
        terms = parse_filter(request.param("filter") or "")
        end = _timestamp(request.param("interval.endTime"), "interval.endTime")
        start = (_timestamp(request.param("interval.startTime"), "interval.startTime")
                 if request.param("interval.startTime") else end)
        if start > end:
            raise ApiError(400, "The start time must be before the end time.")
        aligner = _enum(Aligner, request.param("aggregation.perSeriesAligner"), "aggregation.perSeriesAligner",
                        Aligner.ALIGN_NONE)
        reducer = _enum(Reducer, request.param("aggregation.crossSeriesReducer"), "aggregation.crossSeriesReducer",
                        Reducer.REDUCE_NONE)
        view = _enum(monitoring_v3.ListTimeSeriesRequest.TimeSeriesView, request.param("view"), "view",
                     monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL)
        group_by = request.query.get("aggregation.groupByFields", [])
        period = self._period(request.param("aggregation.alignmentPeriod"), aligner)
        if aligner not in (Aligner.ALIGN_NONE, Aligner.ALIGN_DELTA, Aligner.ALIGN_SUM):
            raise ApiError(400, f"The stand-in supports ALIGN_DELTA and ALIGN_SUM only, not {aligner.name}.")
        if reducer not in (Reducer.REDUCE_NONE, Reducer.REDUCE_SUM):
            raise ApiError(400, f"The stand-in supports REDUCE_SUM only, not {reducer.name}.")
        if reducer != Reducer.REDUCE_NONE and aligner == Aligner.ALIGN_NONE:
            raise ApiError(400, "The cross-series reducer requires a per-series aligner other than ALIGN_NONE.")
        if group_by and reducer == Reducer.REDUCE_NONE:
            raise ApiError(400, "Group-by fields require a cross-series reducer.")
        for field_name in group_by:
            if not re.fullmatch(r"(metric|resource)\.labels\.\w+", field_name):
                raise ApiError(400, f'Invalid group-by field "{field_name}".')

        windows = self._windows(start, end, period or RAW_SAMPLE_SECONDS)
        series = [] if terms["metric.type"] != REQUEST_COUNT else self._raw(project, terms, windows)
        if reducer == Reducer.REDUCE_SUM:
            series = self._reduce(project, series, group_by)
        series = [s for s in series if s["points"]]
        for s in series:
            s["points"].sort(key=lambda p: p.pop("_end"), reverse=True)
            if view == monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.HEADERS:
                s.pop("points")
            else:
                for p in s["points"]:
                    p["value"] = {"int64Value": str(p["value"])}
        return self._page(series, request)

    @staticmethod
    def _period(text: str | None, aligner: Any) -> float | None:
        if aligner == Aligner.ALIGN_NONE:
            return None
        match = re.fullmatch(r"(\d+(?:\.\d+)?)s", text or "")
        if not match:
            raise ApiError(400, "An alignment period (like \"60s\") is required with a per-series aligner.")
        seconds = float(match[1])
        if seconds < 60:
            raise ApiError(400, "The alignment period must be at least 60 seconds.")
        return seconds

    @staticmethod
    def _windows(start: float, end: float, period: float) -> list[tuple[float, float]]:
        """Periods ending at `end`, stepping back while they still overlap (start, end]."""
        windows, t = [], end
        while t > start or not windows:
            windows.append((t - period, t))
            t -= period
        return windows

    def _raw(self, project: str, terms: dict[str, str], windows: list[tuple[float, float]]) -> list[dict[str, Any]]:
        series = []
        for rev in self.traffic.revisions():
            if rev.project not in (None, project):
                continue
            resource = {"service_name": rev.service, "revision_name": rev.revision, "location": rev.location,
                        "project_id": project, "configuration_name": rev.service}
            for klass, code in (("2xx", "200"), ("4xx", "404"), ("5xx", "500")):
                metric = {"response_code_class": klass, "response_code": code}
                labels = {"metric.type": REQUEST_COUNT, "resource.type": REVISION,
                          **{f"resource.labels.{k}": v for k, v in resource.items()},
                          **{f"metric.labels.{k}": v for k, v in metric.items()}}
                if any(labels.get(key) != value for key, value in terms.items()):
                    continue
                points = []
                for w0, w1 in windows:
                    count = rev.counts(w0, w1)[klass]
                    if count > 0:
                        points.append({"interval": {"startTime": _rfc3339(w0), "endTime": _rfc3339(w1)},
                                       "value": count, "_end": w1})
                series.append({"metric": {"type": REQUEST_COUNT, "labels": metric},
                               "resource": {"type": REVISION, "labels": resource},
                               "metricKind": "DELTA", "valueType": "INT64", "points": points})
        return series

    @staticmethod
    def _reduce(project: str, series: list[dict[str, Any]], group_by: list[str]) -> list[dict[str, Any]]:
        """REDUCE_SUM: one series per distinct value of the group-by labels, points summed."""
        groups: dict[tuple[str, ...], dict[str, Any]] = {}
        for s in series:
            values = tuple(s[f.split(".")[0]]["labels"].get(f.split(".", 2)[2], "") for f in group_by)
            group = groups.get(values)
            if group is None:
                metric_labels = {f.split(".", 2)[2]: v for f, v in zip(group_by, values) if f.startswith("metric.")}
                resource_labels = {"project_id": project,
                                   **{f.split(".", 2)[2]: v for f, v in zip(group_by, values)
                                      if f.startswith("resource.")}}
                group = groups[values] = {"metric": {"type": REQUEST_COUNT, "labels": metric_labels},
                                          "resource": {"type": REVISION, "labels": resource_labels},
                                          "metricKind": "DELTA", "valueType": "INT64", "points": {}}
            for p in s["points"]:
                key = (p["interval"]["startTime"], p["interval"]["endTime"])
                if key in group["points"]:
                    group["points"][key]["value"] += p["value"]
                else:
                    group["points"][key] = {"interval": dict(p["interval"]), "value": p["value"], "_end": p["_end"]}
        for group in groups.values():
            group["points"] = list(group["points"].values())
            if not group["metric"]["labels"]:
                del group["metric"]["labels"]
        return list(groups.values())

    @staticmethod
    def _page(series: list[dict[str, Any]], request: Request) -> dict[str, Any]:
        try:
            size = int(request.param("pageSize") or 0) or 100000
            start = int(request.param("pageToken") or 0)
        except ValueError:
            raise ApiError(400, "Invalid pageSize or pageToken.") from None
        answer: dict[str, Any] = {"timeSeries": series[start:start + size]}
        if start + size < len(series):
            answer["nextPageToken"] = str(start + size)
        return answer
