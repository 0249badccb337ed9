"""Staging: shopos-feed runs web and worker in one instance over brew-staging, with the
bucket mirror as the way back to bucket storage (SPEC 3.2)."""

from __future__ import annotations

import pulumi

from infra.environments import app
from infra.settings import StackSettings


def build(s: StackSettings) -> None:
    runtime = app.runtime_identity(s)
    provider_secrets = app.secrets(s, runtime)
    # The CI deployer reads the mirror for the promote pipeline's drift check (gate 2).
    readers = tuple(s.identity_email(reader) for reader in s.mirror.readers) if s.mirror else ()
    app.bucket(s, runtime, readers)
    db = app.database(s, (runtime.email, *readers))
    mirror_env = s.mirror.env() if s.mirror else {}
    mirror_labels = s.mirror.labels() if s.mirror else {}
    services = app.services(s, runtime, db, provider_secrets, extra_env=mirror_env, extra_labels=mirror_labels)
    pulumi.export("services", {name: svc.uri for name, svc in services.items()})
    if s.mirror:
        pulumi.export("mirrorSunset", s.mirror.sunset.isoformat())
