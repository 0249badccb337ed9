"""The pure pieces of the pipeline: traffic splits, mirror flag rules, the report."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest

from infra.promote.mirror import check_mirror_flags
from infra.promote.pipeline import Report, Step, split_traffic
from infra.promote.report import LineProgress, render_markdown, write_outputs
from infra.settings import MirrorFlags

ON = {"STORAGE": "pg", "OBJECTS_MIRROR": "1", "OBJECTS_READTHROUGH": "1"}
DECLARED = MirrorFlags(objects_mirror=True, objects_readthrough=True, sunset=dt.date(2026, 11, 25))


@pytest.mark.parametrize(
    ("percent", "before", "expected"),
    [
        (10, {"old": 100}, {"new": 10, "old": 90}),
        (50, {"a": 50, "b": 50}, {"new": 50, "a": 25, "b": 25}),
        (10, {"a": 67, "b": 33}, {"new": 10, "a": 61, "b": 29}),
        (100, {"old": 100}, {"new": 100}),
        (33, {"a": 50, "b": 50}, {"new": 33, "a": 33, "b": 34}),  # the remainder goes to one, by name
    ],
)
def test_split_traffic_sums_to_100(percent, before, expected):
    traffic = split_traffic("new", percent, before)
    assert traffic == expected
    assert sum(traffic.values()) == 100


def test_mirror_flags_as_declared_pass():
    verdict = check_mirror_flags(ON, DECLARED, "pg", dt.date(2026, 11, 24))
    assert verdict.ok and not verdict.warnings


def test_readthrough_without_mirror_is_refused():
    verdict = check_mirror_flags({**ON, "OBJECTS_MIRROR": "0"}, None, "pg", dt.date(2026, 11, 1))
    assert not verdict.ok and "OBJECTS_READTHROUGH is on without OBJECTS_MIRROR" in verdict.problems[0].message
    assert verdict.exit_code == 20


def test_live_flags_that_differ_from_the_declared_ones_are_drift():
    verdict = check_mirror_flags({**ON, "OBJECTS_READTHROUGH": "0"}, DECLARED, "pg", dt.date(2026, 11, 1))
    assert not verdict.ok and "drift" in verdict.problems[0].message
    assert verdict.exit_code == 21


def test_staging_storage_must_equal_production():
    verdict = check_mirror_flags({**ON, "STORAGE": "bucket"}, DECLARED, "pg", dt.date(2026, 11, 1))
    assert not verdict.ok and "staging STORAGE is 'bucket', production's is 'pg'" in verdict.problems[0].message
    assert verdict.exit_code == 22


@pytest.mark.parametrize(("today", "overdue"), [(dt.date(2026, 11, 25), False), (dt.date(2026, 11, 26), True)])
def test_flags_past_the_sunset_are_a_warning(today, overdue):
    verdict = check_mirror_flags(ON, DECLARED, "pg", today)
    assert verdict.ok
    assert any(w.kind == "overdue" for w in verdict.warnings) is overdue
    strict = check_mirror_flags(ON, DECLARED, "pg", today, strict=True)
    assert strict.ok is not overdue
    assert strict.exit_code == (24 if overdue else 0)


def report() -> Report:
    r = Report(result="rolled_back", failed_gate="web", image="repo@sha256:abc", backup_id="17", run_id="42",
               exit_code=60)
    r.lease.update(before="w-1", after="w-1", gap_seconds=0.25)
    r.steps = [Step("preflight", "passed", 0.3, "ok"), Step("web", "failed", 2.0, "5xx | too many"),
               Step("rollback", "rolled_back", 0.8, "brew-web back")]
    return r


def test_markdown_summary_has_the_result_the_facts_and_every_gate():
    text = render_markdown(report())
    assert text.startswith("## ↩️ Promotion rolled back at `web`")
    for fact in ("`repo@sha256:abc`", "`w-1`", "0.25 s", "`17`", "| Exit code | 60 |"):
        assert fact in text
    assert "| web | failed | 2.0 | 5xx \\| too many |" in text
    assert "| rollback | rolled_back |" in text


def test_outputs_write_json_and_append_to_the_github_step_summary(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    write_outputs(report(), tmp_path / "out" / "report.json")
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["result"] == "rolled_back" and data["failed_gate"] == "web"
    assert data["lease"] == {"before": "w-1", "after": "w-1", "gap_seconds": 0.25}
    assert data["steps"][1] == {"gate": "web", "status": "failed", "seconds": 2.0, "detail": "5xx | too many"}
    assert summary.read_text().startswith("earlier step\n## ↩️ Promotion rolled back")


def test_line_progress_prints_plain_timed_lines():
    stream, now = io.StringIO(), iter([0.0, 1.5, 3.25])
    progress = LineProgress(stream, clock=lambda: next(now))
    progress.gate("worker", "waiting for w-2 to take the lease")
    progress.done(Step("worker", "passed", 1.7, "w-2 holds the lease"))
    assert stream.getvalue().splitlines() == [
        "[    1.5s] worker: waiting for w-2 to take the lease",
        "[    3.2s] worker: PASSED in 1.7s — w-2 holds the lease",
    ]


class _Progress:
    def gate(self, gate, waiting_for):
        pass

    def note(self, gate, text):
        pass

    def done(self, step):
        pass


def test_an_unexpected_error_in_a_gate_fails_that_gate_with_its_code_not_a_traceback():
    from infra.promote.pipeline import EXIT_CODES, GateFailed, Pipeline
    from infra.promote.runner import target_of
    from infra.synth.stacks import read_stack, settings_of

    class BrokenLease:
        def read(self):
            raise ConnectionResetError("server closed the connection")

    target = target_of(settings_of(read_stack("prod")), settings_of(read_stack("staging")))
    pipeline = Pipeline(target, run=None, sql=None, metrics=None, lease=BrokenLease(), progress=_Progress(),
                        run_id="t")
    with pytest.raises(GateFailed) as caught:
        pipeline._gate("lease_before", lambda: pipeline.lease.read())
    assert caught.value.code == EXIT_CODES["lease_before"]
    assert caught.value.detail == "ConnectionResetError: server closed the connection"
    assert pipeline.report.steps[-1].status == "refused"
