"""What a rule sees and what it says.

A rule looks at resources the way a Pulumi policy pack does — type token, logical name,
camelCase inputs, URN — so one implementation serves `brew-infra check` (over
synthesized graphs) and the policy pack (over real previews). Nothing here imports
pulumi or pulumi_gcp: a graph file from anywhere can be checked (SPEC 2).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal


class Severity(str, Enum):
    ERROR = "error"  # fails `check` (exit 1) and is MANDATORY in the policy pack
    WARNING = "warning"  # reported, never fails; ADVISORY in the policy pack


_MISSING = object()
_INDEX = re.compile(r"^(\w+)\[(\d+)\]$")


@dataclass(frozen=True)
class Resource:
    """One declared resource. `inputs` are the camelCase properties Pulumi sends."""

    type: str
    name: str  # Pulumi's logical name
    inputs: Mapping[str, Any]
    urn: str = ""
    parent: str | None = None
    dependencies: tuple[str, ...] = ()

    @property
    def stack(self) -> str:
        """The stack, from the URN (`urn:pulumi:<stack>::<project>::...`)."""
        return self.urn.removeprefix("urn:pulumi:").split("::", 1)[0] if self.urn else ""

    @property
    def physical_name(self) -> str:
        """The name in the cloud when declared (`name`, `accountId`), else the logical name."""
        return str(self.inputs.get("name") or self.inputs.get("accountId") or self.name)

    @property
    def labels(self) -> Mapping[str, str]:
        """Resource labels: `labels`, or Cloud SQL's `settings.userLabels`."""
        return self.get("labels") or self.get("settings.userLabels") or {}

    def get(self, path: str, default: Any = None) -> Any:
        """A nested input by dotted camelCase path; `containers[0]` indexes a list.

        `get("settings.ipConfiguration.ipv4Enabled")`; absent anywhere on the way -> default.
        """
        value: Any = self.inputs
        for part in path.split("."):
            index = None
            match = _INDEX.match(part)
            if match:
                part, index = match.group(1), int(match.group(2))
            if not isinstance(value, Mapping):
                return default
            value = value.get(part, _MISSING)
            if value is _MISSING or value is None:
                return default
            if index is not None:
                if not isinstance(value, Sequence) or isinstance(value, str) or index >= len(value):
                    return default
                value = value[index]
        return value


@dataclass(frozen=True)
class Context:
    """What a rule may know beyond the resources: which stack, whether it is production,
    and today's date in UTC (dated rules, such as the mirror sunset, compare against it)."""

    stack: str
    today: dt.date = field(default_factory=lambda: dt.datetime.now(dt.UTC).date())

    @property
    def production(self) -> bool:
        return is_production_stack(self.stack)


def is_production_stack(stack: str) -> bool:
    """`prod`, or a blueprint's `<system>-prod` (for example `penpot-prod`)."""
    return stack == "prod" or stack.endswith("-prod")


def is_production(resource: Resource, ctx: Context) -> bool:
    """A resource's own `environment` label decides; unlabelled ones follow the stack."""
    environment = resource.labels.get("environment") if isinstance(resource.labels, Mapping) else None
    return is_production_stack(environment) if environment else ctx.production


@dataclass(frozen=True)
class Violation:
    """One breach found by a rule: the resource, the property path (camelCase, dotted)
    and a one-line message that names both."""

    resource: Resource
    property: str
    message: str


# A resource rule yields (property, message) for one resource of its types; a stack rule
# sees every resource of one stack and yields Violations (cross-resource rules).
ResourceCheck = Callable[[Resource, Context], Iterable[tuple[str, str]]]
StackCheck = Callable[[Sequence[Resource], Context], Iterable[Violation]]


@dataclass(frozen=True)
class Rule:
    id: str  # BREW-Snnn security, BREW-Innn platform invariant, BREW-Bnnn budget; never reused
    severity: Severity
    title: str  # short, for tables: "Cloud SQL has no public IP"
    description: str  # why; cites the scanners' IDs for the same check, or says none has one
    remediation: str  # what to change, in the stack file or the component
    scope: Literal["resource", "stack"]
    check: ResourceCheck | StackCheck
    types: tuple[str, ...] = ()  # the type tokens a resource rule inspects
    references: tuple[str, ...] = ()  # e.g. ("CKV_GCP_60", "AVD-GCP-0017"), or a docs URL

    def __post_init__(self) -> None:
        if not re.fullmatch(r"BREW-[SIB]\d{3}", self.id):
            raise ValueError(f"rule id {self.id!r} is not BREW-S/I/B followed by three digits")
        if self.scope == "resource" and not self.types:
            raise ValueError(f"{self.id}: a resource rule names the types it inspects")

    def violations(self, resources: Sequence[Resource], ctx: Context) -> Iterable[Violation]:
        if self.scope == "stack":
            yield from self.check(resources, ctx)  # type: ignore[arg-type]
            return
        for resource in resources:
            if resource.type in self.types:
                for prop, message in self.check(resource, ctx):  # type: ignore[arg-type]
                    yield Violation(resource, prop, message)


def resource_rule(id: str, severity: Severity, title: str, *, types: Sequence[str], description: str,
                  remediation: str, references: Sequence[str] = ()) -> Callable[[ResourceCheck], Rule]:
    """Decorator: the function becomes a resource `Rule` of that ID."""

    def wrap(check: ResourceCheck) -> Rule:
        return Rule(id, severity, title, description, remediation, "resource", check, tuple(types),
                    tuple(references))

    return wrap


def stack_rule(id: str, severity: Severity, title: str, *, description: str, remediation: str,
               references: Sequence[str] = ()) -> Callable[[StackCheck], Rule]:
    """Decorator: the function becomes a stack (cross-resource) `Rule` of that ID."""

    def wrap(check: StackCheck) -> Rule:
        return Rule(id, severity, title, description, remediation, "stack", check, (), tuple(references))

    return wrap
