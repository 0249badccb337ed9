from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def graphs() -> dict[str, dict]:
    """Every shipped stack, synthesized once for the session (mock runtime)."""
    from infra.synth.stacks import available_stacks, synthesize

    return {stack: synthesize(stack).to_dict() for stack in available_stacks()}
