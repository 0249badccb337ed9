"""Exit codes of `brew-infra`, one meaning each (the README lists them)."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the command ran and the answer is "no" (findings, dangerous change)
    BAD_INPUT = 2  # unknown stack, invalid stack file or setting, bad arguments
    PROGRAM_ERROR = 3  # the Pulumi program itself failed under the mock runtime
    # An outside program the command runs is missing or failed, the input being fine: for
    # `diagram`, Graphviz's `dot` (apt-get install graphviz); the DOT file is written anyway.
    TOOL_ERROR = 4
