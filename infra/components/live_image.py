"""The container image a Cloud Run service or job is really running, read from Google Cloud.

CI's promote pipeline, not Pulumi, decides which image runs. Marking the image with
`ignoreChanges` is not enough: on any later update Pulumi would send the image stored in
its state and silently roll a promotion back. So the components declare the image that is
live right now, and use the configured image only when there is nothing live yet.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

import pulumi
from pulumi_gcp import cloudrunv2

Kind = Literal["service", "job"]

_COLLECTIONS: dict[str, str] = {"service": "services", "job": "jobs"}


def is_not_found(error: BaseException, kind: Kind, name: str) -> bool:
    """Whether a failed lookup of `name` means "that service/job does not exist".

    Source: terraform-provider-google `data_source_google_cloud_run_v2_service.go` and
    `..._job.go` read through the resource's Read, whose `HandleNotFoundError` turns a
    googleapi 404 into an empty ID; the data source then fails with
    `fmt.Errorf("%s not found", id)`, id = `projects/P/locations/R/services|jobs/NAME`.
    Pulumi's Python `invoke` surfaces it as `invoke of <tok> failed: ... <id> not found`.
    Every other API error (403, 429, 5xx) arrives wrapped as "Error when reading or
    editing ..." without that suffix, so matching only "<collection>/NAME not found"
    (or ": NAME not found", for a message naming the bare resource name) keeps those
    failing loudly.
    """
    collection = _COLLECTIONS[kind]
    pattern = rf"(?:/{collection}/|: ){re.escape(name)} not found\b"
    return re.search(pattern, str(error)) is not None


def serving_image(
    kind: Kind,
    name: str,
    project: str,
    region: str,
    fallback: str,
    opts: pulumi.InvokeOptions | None = None,
) -> str:
    """The image the live service/job runs, or `fallback` when it does not exist yet.

    Fails closed: any lookup error other than "not found" propagates, because quietly
    using the configured image could deploy a stale one over a promotion.
    """
    if kind not in _COLLECTIONS:
        raise ValueError(f"kind: {kind!r} is not one of {sorted(_COLLECTIONS)}")
    if not fallback:
        raise ValueError(f"fallback: {fallback!r} must be a non-empty image reference")
    try:
        if kind == "service":
            service = cloudrunv2.get_service(name=name, location=region, project=project, opts=opts)
            containers = _field(_first(_field(service, "templates")), "containers")
        else:
            job = cloudrunv2.get_job(name=name, location=region, project=project, opts=opts)
            # A job nests the task template inside the execution template.
            execution = _first(_field(job, "templates"))
            containers = _field(_first(_field(execution, "templates")), "containers")
    except Exception as error:
        if not is_not_found(error, kind, name):
            raise
        pulumi.log.info(f"Cloud Run {kind} {name} does not exist yet; declaring the configured image {fallback}")
        return fallback
    image = _field(_first(containers), "image")
    # A live resource without a container image has nothing to preserve.
    return image or fallback


def _first(items: Sequence[Any] | None) -> Any:
    return items[0] if items else None


def _field(value: Any, key: str) -> Any:
    """A field of an invoke result, which is a typed result or a plain dict depending on depth."""
    if value is None:
        return None
    if isinstance(value, dict) and key in value:
        return value[key]
    return getattr(value, key, None)
