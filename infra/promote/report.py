"""What a promotion tells people and machines: live progress while it runs, a JSON
report and a Markdown summary (appended to $GITHUB_STEP_SUMMARY in GitHub Actions)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TextIO

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from infra.promote.pipeline import Report, Step

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def render_markdown(report: Report) -> str:
    env = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined, keep_trailing_newline=True)
    return env.get_template("promote-report.md.j2").render(report=report, exit_code=report.exit_code)


def write_outputs(report: Report, json_path: Path | None) -> None:
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as out:
            out.write(render_markdown(report))


class LineProgress:
    """Plain, timestamped log lines: what CI logs and pipes get."""

    def __init__(self, stream: TextIO = sys.stderr, clock=time.monotonic):
        self.stream, self.clock, self.start = stream, clock, clock()

    def _line(self, text: str) -> None:
        self.stream.write(f"[{self.clock() - self.start:7.1f}s] {text}\n")
        self.stream.flush()

    def gate(self, gate: str, waiting_for: str) -> None:
        self._line(f"{gate}: {waiting_for}")

    def note(self, gate: str, text: str) -> None:
        self._line(f"{gate}: {text}")

    def done(self, step: Step) -> None:
        self._line(f"{step.gate}: {step.status.upper()} in {step.seconds:.1f}s — {step.detail}")


class LiveProgress(LineProgress):
    """For a person at a terminal: the current gate, its elapsed time and what it waits
    for on one live line; each finished gate stays printed above it."""

    def __init__(self, clock=time.monotonic):
        from rich.console import Console

        super().__init__(sys.stderr, clock)
        self.console = Console(stderr=True, highlight=False)
        self.gate_started = self.clock()
        self.current, self.waiting_for = "starting", ""
        # Rendered on every refresh, so the elapsed time ticks while a gate waits.
        self.status = self.console.status(self)
        self.status.start()

    def __rich__(self) -> str:
        return f"[bold]{self.current}[/] ({self.clock() - self.gate_started:.0f}s): {self.waiting_for}"

    def gate(self, gate: str, waiting_for: str) -> None:
        if gate != self.current:
            self.current, self.gate_started = gate, self.clock()
        self.waiting_for = waiting_for

    def note(self, gate: str, text: str) -> None:
        self.console.print(f"  [dim]{gate}:[/] {text}")

    def done(self, step: Step) -> None:
        colour = {"passed": "green", "skipped": "cyan", "warning": "yellow", "held": "yellow",
                  "rolled_back": "yellow"}.get(step.status, "red")
        self.console.print(f"[{colour}]{step.status:>11}[/] {step.gate:<13} {step.seconds:6.1f}s  {step.detail}")

    def close(self) -> None:
        self.status.stop()
