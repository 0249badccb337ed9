"""Runbooks for alert policies: markdown rendered from `templates/alerts/<key>.md.j2`.

The rendered text becomes an alert policy's documentation, so the on-call engineer reads
what the alert means and what to run in the incident itself. Facts (service names, the
lease key, thresholds) are passed in by the environment, never written into templates;
a fact a template needs but was not given is an error, not an empty string.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
ALERTS_DIR = "alerts"

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    undefined=jinja2.StrictUndefined,
    autoescape=False,  # markdown, not HTML
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


def runbook_keys() -> list[str]:
    """The keys that have a runbook template."""
    return sorted(p.name.removesuffix(".md.j2") for p in (TEMPLATES / ALERTS_DIR).glob("*.md.j2"))


def render_runbook(key: str, **facts: Any) -> str:
    """Render the runbook for alert `key`; raises jinja2.UndefinedError if a fact is missing."""
    try:
        template = _env.get_template(f"{ALERTS_DIR}/{key}.md.j2")
    except jinja2.TemplateNotFound:
        raise ValueError(f"no runbook template for key {key!r} in templates/{ALERTS_DIR}") from None
    return template.render(**facts)
