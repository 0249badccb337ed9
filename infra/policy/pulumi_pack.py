"""The rules as pulumi-policy policies: `pulumi preview --policy-pack infra/policy/pack`
enforces exactly what `brew-infra check` reports offline.

Errors become MANDATORY policies (the preview fails), warnings ADVISORY. During a
preview some inputs are not known yet (a service account's email before the account
exists); pulumi-policy raises `UnknownValueError` when a rule reads one, and the rule is
then not applicable to that resource, rather than judged on a value it cannot see.
"""

from __future__ import annotations

from collections.abc import Sequence

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError

from infra.policy.model import Context, Resource, Rule, Severity

PACK_NAME = "brew-guardrails"


def policies(rules: Sequence[Rule] | None = None) -> list[Policy]:
    if rules is None:
        from infra.policy.rules import ALL_RULES

        rules = ALL_RULES
    return [_resource_policy(rule) if rule.scope == "resource" else _stack_policy(rule) for rule in rules]


def _describe(rule: Rule) -> str:
    return f"{rule.title}. {rule.description} Remediation: {rule.remediation}"


def _level(rule: Rule) -> EnforcementLevel:
    return EnforcementLevel.MANDATORY if rule.severity is Severity.ERROR else EnforcementLevel.ADVISORY


def _message(rule: Rule, message: str) -> str:
    return f"[{rule.id}] {message}"


def _resource_policy(rule: Rule) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if args.resource_type not in rule.types:
            return
        resource = Resource(args.resource_type, args.name, args.props, args.urn)
        try:
            for _prop, message in rule.check(resource, Context(resource.stack)):  # type: ignore[call-arg]
                report_violation(_message(rule, message), None)
        except UnknownValueError:
            return

    return ResourceValidationPolicy(rule.id, _describe(rule), validate, _level(rule))


def _stack_policy(rule: Rule) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        resources = [Resource(r.resource_type, r.name, r.props, r.urn, r.parent.urn if r.parent else None,
                              tuple(d.urn for d in r.dependencies)) for r in args.resources]
        stack = next((r.stack for r in resources if r.stack), "")
        try:
            for violation in rule.check(resources, Context(stack)):  # type: ignore[call-arg]
                report_violation(_message(rule, violation.message), violation.resource.urn)
        except UnknownValueError:
            return

    return StackValidationPolicy(rule.id, _describe(rule), validate, _level(rule))
