"""The Penpot program: read this stack's settings once, then compose Penpot on Google Cloud."""

import pulumi

from infra.environments.penpot import build
from infra.penpot_settings import from_pulumi_config
from infra.settings import SettingsError

try:
    settings = from_pulumi_config()
except SettingsError as error:
    # RunError prints the one-line message without a Python traceback.
    raise pulumi.RunError(str(error)) from None

build(settings)
