"""Entry point Pulumi runs for `--policy-pack infra/policy/pack`. It starts pulumi-policy's
server and never returns: tests import `infra.policy.pulumi_pack`, never this file."""

from pulumi_policy import EnforcementLevel, PolicyPack

from infra.policy.pulumi_pack import PACK_NAME, policies

PolicyPack(name=PACK_NAME, enforcement_level=EnforcementLevel.MANDATORY, policies=policies())
