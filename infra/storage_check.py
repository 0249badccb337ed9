"""Object-storage smoke check: one object's round trip through the S3 API, as Penpot does it.

Penpot's backend keeps uploaded media in a bucket it reaches through the S3 API; on Google
Cloud that is GCS's S3-compatible XML API (https://storage.googleapis.com) signed with an
HMAC key, which Penpot reads from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. This module
does the same calls once, with the same kind of key, and times each step:

1. put     a unique key under the prefix, random bytes, with Content-MD5 so the store
           itself refuses a damaged upload
2. get     the same key: the bytes' SHA-256 must equal what was put
3. list    with the key as the prefix: the key must be listed
4. delete  the key, tried even when get or list failed, so a check leaves nothing behind
5. gone    HEAD on the key must answer 404

The first failing step decides the verdict, one `Problem` and one line; the CLI turns the
problem into an exit code. The store is reached through `ObjectStore`, the five calls of a
boto3 S3 client, so tests can wrap a real client.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import os
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

DEFAULT_PREFIX = "brew-infra-smoke/"
# GCS ignores the region of a V4 signature's scope; Google's HMAC signing docs use "auto",
# and so do other S3-compatible stores. On AWS itself pass the bucket's region.
DEFAULT_REGION = "auto"
DEFAULT_TIMEOUT = 10.0
OBJECT_SIZE = 16 * 1024  # big enough to cross a TCP segment, small enough to stay instant
ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID"
SECRET_KEY_ENV = "AWS_SECRET_ACCESS_KEY"
STEPS = ("put", "get", "list", "delete", "gone")

Addressing = Literal["path", "virtual"]

# Error codes meaning the store does not accept this key for this bucket. HEAD answers have
# no body, so a refused HEAD only has its status as a code.
CREDENTIAL_CODES = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied",
                              "InvalidToken", "ExpiredToken", "403"})
# Loose on purpose: GCS allows underscores and dotted names up to 222 characters, S3 neither.
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


class StorageInputError(ValueError):
    """The check cannot start: a bad endpoint, bucket, prefix, timeout or missing key."""


class Problem(str, Enum):
    CREDENTIALS_REJECTED = "credentials-rejected"
    BUCKET_MISSING = "bucket-missing"
    UNREACHABLE = "endpoint-unreachable"
    ROUND_TRIP_FAILED = "round-trip-failed"


class StepStatus(str, Enum):
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"


class ObjectStore(Protocol):
    """The calls the check makes; a boto3 S3 client is one."""

    def put_object(self, **kwargs: Any) -> dict[str, Any]: ...
    def get_object(self, **kwargs: Any) -> dict[str, Any]: ...
    def list_objects_v2(self, **kwargs: Any) -> dict[str, Any]: ...
    def delete_object(self, **kwargs: Any) -> dict[str, Any]: ...
    def head_object(self, **kwargs: Any) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Credentials:
    """An HMAC key (GCS) or access key (S3): what Penpot's backend is given."""

    access_key_id: str
    secret_access_key: str = field(repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Credentials:
        # Only the environment, never ~/.aws or instance metadata: a key found elsewhere on
        # the operator's machine would pass a check Penpot's own process would fail.
        missing = [name for name in (ACCESS_KEY_ENV, SECRET_KEY_ENV) if not environ.get(name)]
        if missing:
            raise StorageInputError(
                f"set {' and '.join(missing)}: the HMAC key's access ID and secret, the same "
                "variables Penpot's backend reads")
        return cls(environ[ACCESS_KEY_ENV], environ[SECRET_KEY_ENV])

    @property
    def label(self) -> str:
        """Enough of the key ID to tell keys apart in a report, not the whole of it."""
        return self.access_key_id[:8] + "…" if len(self.access_key_id) > 8 else self.access_key_id


@dataclass(frozen=True)
class Target:
    endpoint: str
    bucket: str
    region: str = DEFAULT_REGION
    addressing: Addressing = "path"
    prefix: str = DEFAULT_PREFIX
    timeout: float = DEFAULT_TIMEOUT  # seconds, to connect and for each read, per attempt

    def __post_init__(self) -> None:
        url = urlsplit(self.endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise StorageInputError(f"--s3-endpoint must be an http:// or https:// URL, got {self.endpoint!r}")
        if url.path.strip("/") or url.query:
            # botocore would put the bucket after this path, which no store expects.
            raise StorageInputError(f"--s3-endpoint is the service URL without a path, got {self.endpoint!r} "
                                    "(the bucket goes in --bucket)")
        if not BUCKET_NAME.match(self.bucket):
            raise StorageInputError(f"--bucket {self.bucket!r} is not a bucket name (lowercase letters, "
                                    "digits, '-', '_', '.')")
        if self.addressing not in ("path", "virtual"):
            raise StorageInputError(f"--addressing is path or virtual, got {self.addressing!r}")
        if self.prefix.startswith("/"):
            raise StorageInputError(f"--prefix must not start with '/', got {self.prefix!r}")
        if not 0 < self.timeout <= 300:
            raise StorageInputError(f"--timeout is seconds between 0 and 300, got {self.timeout:g}")
        if not self.region:
            raise StorageInputError("--region must not be empty (GCS accepts 'auto')")

    @property
    def folder(self) -> str:
        """The prefix as a folder, so `--prefix smoke` does not produce `smoke2025…` keys."""
        return self.prefix if not self.prefix or self.prefix.endswith("/") else self.prefix + "/"


@dataclass(frozen=True)
class Step:
    name: str  # one of STEPS
    status: StepStatus
    ms: float | None  # None when skipped
    detail: str = ""


@dataclass(frozen=True)
class CheckResult:
    target: Target
    access_key: str  # Credentials.label
    key: str
    size: int
    steps: tuple[Step, ...]
    problem: Problem | None = None
    message: str = ""  # one line naming what is wrong; empty when the check passed

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def total_ms(self) -> float:
        return round(sum(step.ms or 0.0 for step in self.steps), 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problem": self.problem.value if self.problem else None,
            "message": self.message or None,
            "endpoint": self.target.endpoint,
            "bucket": self.target.bucket,
            "region": self.target.region,
            "addressing": self.target.addressing,
            "access_key": self.access_key,
            "key": self.key,
            "bytes": self.size,
            "total_ms": self.total_ms,
            "steps": [{"step": s.name, "status": s.status.value, "ms": s.ms, "detail": s.detail}
                      for s in self.steps],
        }


def s3_client(target: Target, credentials: Credentials) -> ObjectStore:
    """A boto3 S3 client set up the way an S3-compatible store (GCS) needs it."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    config = Config(
        signature_version="s3v4",
        s3={"addressing_style": target.addressing},
        connect_timeout=target.timeout,
        read_timeout=target.timeout,
        # Two attempts in all: one retry absorbs a dropped connection or a 503 without
        # letting a dead endpoint hold the check for minutes.
        retries={"total_max_attempts": 2, "mode": "standard"},
        # botocore >= 1.36 adds CRC checksums (and aws-chunked uploads) to every request by
        # default; S3-compatible stores, GCS's XML API among them, do not all take them.
        # Integrity is checked here instead: Content-MD5 on put, SHA-256 after get.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    try:
        return boto3.session.Session().client(
            "s3", endpoint_url=target.endpoint, region_name=target.region,
            aws_access_key_id=credentials.access_key_id,
            aws_secret_access_key=credentials.secret_access_key, config=config)
    except (BotoCoreError, ValueError) as error:  # e.g. AWS_PROFILE naming a missing profile
        raise StorageInputError(f"cannot set up the S3 client: {error}") from error


def new_key(target: Target) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{target.folder}{stamp}-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class _Failure:
    problem: Problem
    message: str
    # False only when the put certainly stored nothing (refused by the store, or never
    # connected), so cleanup is not worth another wait on a dead endpoint.
    maybe_written: bool = True


class _Refused(Exception):
    """A step ran and the store's answer was wrong (different bytes, not listed, not gone)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def run_check(client: ObjectStore, target: Target, credentials: Credentials, *,
              payload: bytes | None = None, key: str | None = None) -> CheckResult:
    """Put, get, list, delete and confirm the deletion of one object; never raises for
    anything the store or the network does."""
    data = payload if payload is not None else os.urandom(OBJECT_SIZE)
    key = key or new_key(target)
    digest = hashlib.sha256(data).hexdigest()
    steps: dict[str, Step] = {}
    failures: list[_Failure] = []

    def timed(name: str, action: Callable[[], str]) -> bool:
        start = time.perf_counter()
        try:
            detail = action()
        except _Refused as refusal:
            failure = _Failure(Problem.ROUND_TRIP_FAILED, f"round trip failed at {target.endpoint}: {refusal.message}")
        except Exception as error:  # noqa: BLE001 - classified; anything unforeseen is a failed step
            failure = _classify(error, name, target)
        else:
            steps[name] = Step(name, StepStatus.OK, _ms(start), detail)
            return True
        steps[name] = Step(name, StepStatus.FAILED, _ms(start), failure.message)
        failures.append(failure)
        return False

    def put() -> str:
        md5 = base64.b64encode(hashlib.md5(data).digest()).decode()  # noqa: S324 - the S3 integrity header
        client.put_object(Bucket=target.bucket, Key=key, Body=data, ContentMD5=md5,
                          ContentType="application/octet-stream")
        return f"{key} ({len(data)} bytes)"

    def get() -> str:
        body = client.get_object(Bucket=target.bucket, Key=key)["Body"].read()
        got = hashlib.sha256(body).hexdigest()
        if got != digest:
            raise _Refused(f"get returned different bytes: {len(body)} bytes, sha256 {got[:12]}…, "
                           f"put {len(data)} bytes, sha256 {digest[:12]}…")
        return f"{len(body)} bytes, sha256 {digest[:12]}… matches"

    def listed() -> str:
        answer = client.list_objects_v2(Bucket=target.bucket, Prefix=key, MaxKeys=10)
        if key not in [item["Key"] for item in answer.get("Contents", [])]:
            raise _Refused(f"list with prefix {key} does not show the object just written")
        return f"listed under {target.folder or 'the bucket root'}"

    def delete() -> str:
        client.delete_object(Bucket=target.bucket, Key=key)
        return "cleanup after the failure above" if failures else ""

    def gone() -> str:
        from botocore.exceptions import ClientError

        try:
            client.head_object(Bucket=target.bucket, Key=key)
        except ClientError as error:
            if error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                return "HEAD answers 404"
            raise
        raise _Refused(f"{key} is still there after delete")

    if timed("put", put) and timed("get", get):
        timed("list", listed)
    if (not failures or failures[0].maybe_written) and timed("delete", delete):
        timed("gone", gone)

    skipped = "nothing was written" if failures and not failures[0].maybe_written else "an earlier step failed"
    ordered = tuple(steps.get(name) or Step(name, StepStatus.SKIPPED, None, skipped) for name in STEPS)
    if not failures:
        return CheckResult(target, credentials.label, key, len(data), ordered)
    message = failures[0].message
    if steps.get("delete") and steps["delete"].status is StepStatus.FAILED and len(failures) > 1:
        message += f"; {key} may be left behind (delete: {failures[-1].message})"
    return CheckResult(target, credentials.label, key, len(data), ordered, failures[0].problem, message)


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 1)


def _classify(error: Exception, step: str, target: Target) -> _Failure:
    """One line and a problem for what a call raised."""
    from botocore.exceptions import (
        ClientError,
        ConnectionError,
        ConnectTimeoutError,
        EndpointConnectionError,
        HTTPClientError,
        ReadTimeoutError,
        SSLError,
    )

    endpoint, bucket = target.endpoint, target.bucket
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", "unknown"))
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        refused = isinstance(status, int) and status < 500  # a refusal stored nothing
        if code in CREDENTIAL_CODES:
            # A key granted on one bucket is also refused on a misspelled bucket name: stores
            # check the grant before they look the bucket up.
            hint = (f" (the key is known but may not use bucket {bucket}: check the name and the key's "
                    "role on it)" if code == "AccessDenied" else "")
            return _Failure(Problem.CREDENTIALS_REJECTED, f"credentials rejected by {endpoint}: {code}{hint}",
                            maybe_written=not refused)
        if code == "NoSuchBucket":
            return _Failure(Problem.BUCKET_MISSING, f"bucket {bucket} does not exist at {endpoint}",
                            maybe_written=False)
        text = str(error.response.get("Error", {}).get("Message", "")).strip()
        hint = " (pass --region with the bucket's region)" if code == "AuthorizationHeaderMalformed" else ""
        return _Failure(Problem.ROUND_TRIP_FAILED,
                        f"{step} failed at {endpoint}: {code} (HTTP {status}){': ' + text if text else ''}{hint}",
                        maybe_written=not refused)
    if isinstance(error, SSLError):
        return _Failure(Problem.UNREACHABLE, f"{endpoint} does not answer over TLS: {_cause(error)}",
                        maybe_written=False)
    if isinstance(error, ConnectTimeoutError):
        return _Failure(Problem.UNREACHABLE, f"{endpoint} does not answer: no connection within "
                        f"{target.timeout:g} s", maybe_written=False)
    if isinstance(error, EndpointConnectionError):
        return _Failure(Problem.UNREACHABLE, f"{endpoint} does not answer: {_cause(error)}", maybe_written=False)
    if isinstance(error, ReadTimeoutError):
        return _Failure(Problem.UNREACHABLE, f"{endpoint} does not answer: no response to {step} within "
                        f"{target.timeout:g} s")
    if isinstance(error, (ConnectionError, HTTPClientError)):
        return _Failure(Problem.UNREACHABLE, f"{endpoint} does not answer: {_cause(error)}")
    # The store answered, but not in a way the S3 client understands (an answer that is not
    # S3 XML, a cut-off body), or something unforeseen: the step failed, said in one line.
    return _Failure(Problem.ROUND_TRIP_FAILED, f"{step} failed at {endpoint}: {type(error).__name__}: {error}")


def _cause(error: Exception) -> str:
    """The socket's own words ("[Errno 111] Connection refused"), not urllib3's wrapping."""
    inner = str(getattr(error, "kwargs", {}).get("error") or error)
    errno = re.search(r"\[Errno -?\d+\][^\"')]*", inner)
    return (errno.group(0) if errno else inner).strip()
