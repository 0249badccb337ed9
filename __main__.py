"""The Pulumi program: read this stack's settings once, then compose its environment."""

import pulumi

from infra.environments import build
from infra.settings import SettingsError, from_pulumi_config

try:
    settings = from_pulumi_config()
except SettingsError as error:
    # RunError prints the one-line message without a Python traceback.
    raise pulumi.RunError(str(error)) from None

build(settings)
