"""One composition per environment; `build` picks it from the validated settings."""

from __future__ import annotations

from infra.settings import StackSettings


def build(settings: StackSettings) -> None:
    # Imported here so a stack loads only the components it uses.
    if settings.environment == "prod":
        from infra.environments.prod import build as compose
    elif settings.environment == "staging":
        from infra.environments.staging import build as compose
    elif settings.environment == "demo":
        from infra.environments.demo import build as compose
    else:
        from infra.environments.edge import build as compose
    compose(settings)
