from __future__ import annotations

import pytest

from infra.synth import engine


@pytest.fixture
def ignore_changes(monkeypatch) -> dict[str, list[str]]:
    """Resource name -> the ignoreChanges the engine received for it (not part of the graph)."""
    seen: dict[str, list[str]] = {}
    original = engine.RecordingMonitor.RegisterResource

    def register(self, request):
        seen[request.name] = list(request.ignoreChanges)
        return original(self, request)

    monkeypatch.setattr(engine.RecordingMonitor, "RegisterResource", register)
    return seen
