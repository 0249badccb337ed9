"""Check JSON the sandbox's stand-ins send against Google's published discovery documents.

The documents ship in the `google-api-python-client` wheel
(`googleapiclient/discovery_cache/documents/<api>.<version>.json`). `validate` walks a
response against one named schema and fails (AssertionError naming the JSON path) on a
field the schema does not list, a value of the wrong JSON type or format (int64 as a
string of digits, google-datetime as RFC 3339, google-duration as "1.5s"), or an enum
value outside the listed ones.

    validate("run.v2", "GoogleCloudRunV2Service", body)
    validate_error("run.v2", body)   # {"error": {"code", "message", "status", "details"}}
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import googleapiclient

DOCUMENTS = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents"

# google.rpc.Code names, as the `status` field of Google's JSON error envelope spells them.
RPC_CODES = {
    0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION", 10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED",
    13: "INTERNAL", 14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}

_INT64 = re.compile(r"^-?\d+$")
_DURATION = re.compile(r"^-?\d+(\.\d{1,9})?s$")
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$")


@cache
def document(doc_name: str) -> dict[str, Any]:
    """The discovery document `doc_name` ("run.v2", "sqladmin.v1", ...)."""
    return json.loads((DOCUMENTS / f"{doc_name}.json").read_text())


def validate(doc_name: str, schema: str, data: Any, *, int_enums: bool = False) -> None:
    """Fail with the JSON path when `data` does not fit schema `schema` of document `doc_name`.

    `int_enums`: the body answered `$alt=json;enum-encoding=int`, so an enum field may be a
    non-negative integer (the document lists names only, so the number itself is not checked).
    """
    schemas = document(doc_name)["schemas"]
    if schema not in schemas:
        raise AssertionError(f"{doc_name} has no schema {schema!r}")
    _check(schemas, {"$ref": schema}, data, "$", int_enums)


def validate_error(doc_name: str, data: Any, code: int | None = None) -> None:
    """Google's error envelope: {"error": GoogleRpcStatus + "status": <google.rpc.Code name>}."""
    _expect(isinstance(data, dict) and set(data) == {"error"}, "$", f"not an error envelope: {data!r}")
    error = dict(data["error"])
    status = error.pop("status", None)
    _expect(status in RPC_CODES.values(), "$.error.status", f"{status!r} is not a google.rpc.Code name")
    validate(doc_name, "GoogleRpcStatus", error)
    _expect(isinstance(error.get("code"), int) and bool(error.get("message")), "$.error", "code and message required")
    if code is not None:
        _expect(error["code"] == code, "$.error.code", f"expected {code}, got {error['code']}")


def _expect(condition: bool, path: str, message: str) -> None:
    if not condition:
        raise AssertionError(f"{path}: {message}")


def _check(schemas: dict[str, Any], spec: dict[str, Any], value: Any, path: str, int_enums: bool = False) -> None:
    if "$ref" in spec:
        spec = schemas[spec["$ref"]]
    kind = spec.get("type")
    if kind == "any":
        return
    if kind == "object" or "properties" in spec:
        _expect(isinstance(value, dict), path, f"expected an object, got {type(value).__name__}")
        properties = spec.get("properties", {})
        extra = spec.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                _check(schemas, properties[key], item, f"{path}.{key}", int_enums)
            elif extra is not None:
                _check(schemas, extra, item, f"{path}.{key}", int_enums)
            else:
                raise AssertionError(f"{path}.{key}: field not in schema {spec.get('id', '(inline)')}")
        return
    if kind == "array":
        _expect(isinstance(value, list), path, f"expected an array, got {type(value).__name__}")
        for index, item in enumerate(value):
            _check(schemas, spec["items"], item, f"{path}[{index}]", int_enums)
        return
    if kind == "boolean":
        _expect(isinstance(value, bool), path, f"expected a boolean, got {value!r}")
        return
    if kind == "integer":
        _expect(isinstance(value, int) and not isinstance(value, bool), path, f"expected an integer, got {value!r}")
        return
    if kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = ok or value in ("NaN", "Infinity", "-Infinity")
        _expect(ok, path, f"expected a number, got {value!r}")
        return
    if kind == "string":
        if "enum" in spec and int_enums and isinstance(value, int) and not isinstance(value, bool):
            _expect(value >= 0, path, f"{value!r} is not an enum number")
            return
        _expect(isinstance(value, str), path, f"expected a string, got {value!r}")
        if "enum" in spec:
            _expect(value in spec["enum"], path, f"{value!r} is not one of {spec['enum']}")
        fmt = spec.get("format")
        if fmt in ("int64", "uint64"):
            _expect(bool(_INT64.match(value)), path, f"{value!r} is not an {fmt} string")
        elif fmt == "google-datetime":
            ok = bool(_RFC3339.match(value))
            if ok:
                try:
                    datetime.fromisoformat(re.sub(r"\.\d+", "", value).replace("Z", "+00:00"))
                except ValueError:
                    ok = False
            _expect(ok, path, f"{value!r} is not an RFC 3339 timestamp")
        elif fmt == "google-duration":
            _expect(bool(_DURATION.match(value)), path, f"{value!r} is not a duration")
        return
    raise AssertionError(f"{path}: schema type {kind!r} not understood by the validator")
