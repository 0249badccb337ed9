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
    # `storage check`: what stopped the object round trip. In the 90s so no number means two
    # things anywhere in the CLI (promote's gates use 10-80, `mirror status` 20-24). A bad
    # URL or a key missing from the environment is BAD_INPUT, before any call is made.
    STORAGE_CREDENTIALS_REJECTED = 90  # InvalidAccessKeyId, SignatureDoesNotMatch, AccessDenied
    STORAGE_BUCKET_MISSING = 91  # NoSuchBucket
    STORAGE_UNREACHABLE = 92  # no connection, TLS failure, or no answer within --timeout
    STORAGE_ROUND_TRIP_FAILED = 93  # the store answered, but an object did not come back as put, or stayed
