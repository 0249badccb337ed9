"""Demo: brew-demo, one instance, on its bucket today; `brew:storage: pg` gives it a
small zonal Cloud SQL of its own instead (SPEC 3.3, open question 3)."""

from __future__ import annotations

import pulumi

from infra.environments import app
from infra.settings import StackSettings


def build(s: StackSettings) -> None:
    runtime = app.runtime_identity(s)
    provider_secrets = app.secrets(s, runtime)
    bucket = app.bucket(s, runtime)
    db = app.database(s, (runtime.email,))
    services = app.services(s, runtime, db, provider_secrets)
    pulumi.export("services", {name: svc.uri for name, svc in services.items()})
    pulumi.export("storage", s.storage)
    pulumi.export("bucket", bucket.name)
