"""Cloud Run security rules (BREW-S030..S039): reachable only the way each role needs
(the web through the load balancer, the worker from the VPC), never invokable by the
public, running as its own identity with its secrets in Secret Manager.

Absent properties are judged by the provider's default: ingress from everywhere
(INGRESS_TRAFFIC_ALL), the project's default compute service account.

Checkov and KICS check public invokers on v1 services only; nothing in Checkov, KICS or
Trivy covers `cloudrunv2` services, so the rest are this project's own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from infra.policy.model import Context, Resource, Severity, is_production, resource_rule
from infra.policy.rules.storage import public_grants

SERVICE = "gcp:cloudrunv2/service:Service"
JOB = "gcp:cloudrunv2/job:Job"
RUN_IAM = (
    "gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
    "gcp:cloudrunv2/serviceIamBinding:ServiceIamBinding",
    "gcp:cloudrunv2/serviceIamPolicy:ServiceIamPolicy",
    "gcp:cloudrunv2/jobIamMember:JobIamMember",
    "gcp:cloudrunv2/jobIamBinding:JobIamBinding",
    "gcp:cloudrunv2/jobIamPolicy:JobIamPolicy",
    "gcp:cloudrun/iamMember:IamMember",
    "gcp:cloudrun/iamBinding:IamBinding",
    "gcp:cloudrun/iamPolicy:IamPolicy",
)
INGRESS_ALL = "INGRESS_TRAFFIC_ALL"
INGRESS_INTERNAL = "INGRESS_TRAFFIC_INTERNAL_ONLY"
INGRESS_LOAD_BALANCER = "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"
# The Compute Engine and App Engine default accounts often hold Editor on the project (the
# automatic grant older projects got), so a service running as one can change almost anything.
DEFAULT_ACCOUNT = re.compile(r"-compute@developer\.gserviceaccount\.com$|@appspot\.gserviceaccount\.com$")
# Env names that, by convention, carry a credential: *_KEY, *_TOKEN, anything with
# PASSWORD/PASSWD/SECRET/CREDENTIAL in it.
SECRET_NAME = re.compile(r"(?:^|_)(?:KEY|TOKEN)$|PASSWORD|PASSWD|SECRET|CREDENTIAL", re.IGNORECASE)
SERVICES_KEY = "brew:services in stacks/Pulumi.<stack>.yaml"
INGRESS_DOCS = "https://cloud.google.com/run/docs/securing/ingress"
PUBLIC_DOCS = "https://cloud.google.com/run/docs/authenticating/public"
IDENTITY_DOCS = "https://cloud.google.com/run/docs/securing/service-identity"
SECRETS_DOCS = "https://cloud.google.com/run/docs/configuring/services/secrets"


def _template_path(r: Resource) -> str:
    # A job's task template sits one level deeper than a service's revision template.
    return "template.template" if r.type == JOB else "template"


def _envs(r: Resource) -> Iterator[tuple[str, Mapping]]:
    """(property path, env entry) for every env var of every container."""
    containers = f"{_template_path(r)}.containers"
    for c in range(len(r.get(containers) or ())):
        for e, env in enumerate(r.get(f"{containers}[{c}].envs") or ()):
            if isinstance(env, Mapping):
                yield f"{containers}[{c}].envs[{e}]", env


def _is_worker_only(r: Resource) -> bool:
    """The role label says worker, or the ROLE env var names worker but not web."""
    if r.labels.get("role") == "worker":
        return True
    roles = {part.strip() for _, env in _envs(r) if env.get("name") == "ROLE"
             for part in str(env.get("value", "")).split(",")}
    return "worker" in roles and "web" not in roles


@resource_rule(
    "BREW-S030", Severity.ERROR, "Production Cloud Run service is not open to all ingress", types=[SERVICE],
    description="INGRESS_TRAFFIC_ALL (the default) lets anyone reach the run.app URL directly, "
                "around the load balancer and its Cloud Armor policy. None of Checkov, KICS or "
                "Trivy has this rule (Cloud Run ingress documentation).",
    remediation=f"Set ingress: internal-and-cloud-load-balancing (web) or internal (worker) under "
                f"{SERVICES_KEY}.",
    references=(INGRESS_DOCS,),
)
def run_no_public_ingress(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    ingress = r.get("ingress")
    if not is_production(r, ctx) or ingress not in (None, INGRESS_ALL):
        return
    state = f"not set, so {INGRESS_ALL}" if ingress is None else ingress
    yield ("ingress",
           f"Cloud Run service {r.physical_name}: ingress is {state}; production services take "
           "traffic through the load balancer or the VPC only")


@resource_rule(
    "BREW-S031", Severity.ERROR, "Worker Cloud Run service is internal-only", types=[SERVICE],
    description="The worker serves no users: its only callers are in the VPC, so any wider ingress "
                "is attack surface for nothing. A service is a worker when its role label is "
                "worker, or its ROLE env var names worker but not web. None of Checkov, KICS or "
                "Trivy has this rule (Cloud Run ingress documentation).",
    remediation=f"Set ingress: internal on the worker under {SERVICES_KEY}.",
    references=(INGRESS_DOCS,),
)
def run_worker_internal(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    ingress = r.get("ingress")
    if ingress == INGRESS_INTERNAL or not _is_worker_only(r):
        return
    state = f"not set, so {INGRESS_ALL}" if ingress is None else ingress
    yield ("ingress",
           f"Cloud Run service {r.physical_name}: ingress is {state}; a worker takes "
           f"{INGRESS_INTERNAL} only")


@resource_rule(
    "BREW-S032", Severity.ERROR, "Cloud Run grants nothing to allUsers or allAuthenticatedUsers",
    types=RUN_IAM,
    description="A public invoker grant makes the service callable by anyone with its URL, and "
                "allAuthenticatedUsers means any Google account. Public web traffic comes through "
                "the load balancer with invokerIamDisabled instead (BREW-S033). Checkov CKV_GCP_102 "
                "and KICS 07a27a3b cover only v1 service IAM; this covers v1 and v2 services and jobs.",
    remediation="Remove the member; for the public web set public: true under "
                f"{SERVICES_KEY} (invokerIamDisabled behind the load balancer).",
    references=("CKV_GCP_102", "07a27a3b-46e9-4172-bc68-25e3277d7998"),
)
def run_no_public_invoker(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    # v2 IAM resources name their service or job in `name`, v1 ones in `service`.
    target = r.get("name") or r.get("service") or r.name
    for prop, member, role in public_grants(r):
        yield (prop, f"Cloud Run {target}: {prop} grants {role or 'a role'} to {member}; Cloud Run is "
                     "never invokable by the public")


@resource_rule(
    "BREW-S033", Severity.ERROR, "Invoker IAM is off only behind the load balancer", types=[SERVICE],
    description="invokerIamDisabled lets anyone who reaches the service call it. That is how the "
                "public web is served through the load balancer (IAM would refuse its "
                "unauthenticated requests), but only INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER keeps "
                "everyone else out. None of Checkov, KICS or Trivy has this rule.",
    remediation=f"Set public: true only together with ingress: internal-and-cloud-load-balancing "
                f"under {SERVICES_KEY}.",
    references=(PUBLIC_DOCS, INGRESS_DOCS),
)
def run_invoker_iam_behind_load_balancer(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    ingress = r.get("ingress")
    if r.get("invokerIamDisabled") is not True or ingress == INGRESS_LOAD_BALANCER:
        return
    state = f"not set, so {INGRESS_ALL}" if ingress is None else ingress
    yield ("invokerIamDisabled",
           f"Cloud Run service {r.physical_name}: invokerIamDisabled is true with ingress {state}; "
           f"unauthenticated calls are allowed only with {INGRESS_LOAD_BALANCER}")


@resource_rule(
    "BREW-S034", Severity.ERROR, "Cloud Run runs as its own service account", types=[SERVICE, JOB],
    description="Without serviceAccount a revision runs as the Compute Engine default account, "
                "which often holds Editor on the whole project. None of Checkov, KICS or Trivy "
                "checks Cloud Run's identity; Checkov CKV_GCP_46 / Trivy AVD-GCP-0006 are the "
                "project-IAM counterpart (no default service accounts in project IAM).",
    remediation="Pass the runtime identity (brew:runtimeIdentity, or the job's identity under "
                "brew:jobs) as service_account_email to the CloudRunService / CloudRunJob component.",
    references=("CKV_GCP_46", "AVD-GCP-0006", IDENTITY_DOCS),
)
def run_own_identity(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    prop = f"{_template_path(r)}.serviceAccount"
    account = r.get(prop)
    kind = "job" if r.type == JOB else "service"
    if account is None:
        yield (prop, f"Cloud Run {kind} {r.physical_name}: {prop} is not set, so it runs as the "
                     "Compute Engine default service account")
    elif DEFAULT_ACCOUNT.search(str(account)):
        yield (prop, f"Cloud Run {kind} {r.physical_name}: {prop} is the default account {account}; "
                     "Cloud Run runs as its own service account")


@resource_rule(
    "BREW-S035", Severity.ERROR, "Cloud Run secrets come from Secret Manager", types=[SERVICE, JOB],
    description="A plain env value is stored in the revision, shown in the console and readable "
                "by anyone with run.services.get; a Secret Manager reference (valueSource."
                "secretKeyRef) is resolved at start-up and audited. An env var is taken for a "
                "secret by its name: *_KEY, *_TOKEN, or containing PASSWORD, PASSWD, SECRET or "
                "CREDENTIAL. None of Checkov, KICS or Trivy has this rule for Cloud Run.",
    remediation="Move the variable from brew:env (or the service's env) to brew:secrets in "
                "stacks/Pulumi.<stack>.yaml; the components turn it into a secretKeyRef.",
    references=(SECRETS_DOCS,),
)
def run_secrets_from_secret_manager(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    kind = "job" if r.type == JOB else "service"
    for path, env in _envs(r):
        name = str(env.get("name", ""))
        if "value" in env and SECRET_NAME.search(name):
            yield (f"{path}.value",
                   f"Cloud Run {kind} {r.physical_name}: {path}.value sets {name} in plain text; "
                   "secrets come from Secret Manager (valueSource.secretKeyRef)")


@resource_rule(
    "BREW-S036", Severity.ERROR, "Production Cloud Run service has deletion protection", types=[SERVICE],
    description="Deleting a production service takes the site (or the worker and its lease) down "
                "until it is recreated. Pulumi's deletionProtection (default true) refuses the "
                "delete. None of Checkov, KICS or Trivy has this rule.",
    remediation="Leave deletion_protection on for production: infra/environments/app.py sets it on "
                "the CloudRunService component for the prod environment.",
)
def run_deletion_protection(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if is_production(r, ctx) and r.get("deletionProtection") is False:
        yield ("deletionProtection",
               f"Cloud Run service {r.physical_name}: deletionProtection is false; Pulumi may delete a "
               "production service")


@resource_rule(
    "BREW-S037", Severity.WARNING, "Production service behind the load balancer has no run.app URL",
    types=[SERVICE],
    description="A service fronted by the load balancer needs no run.app URL; ingress already "
                "refuses outside requests to it, so this is defence in depth rather than an open "
                "door, hence a warning. None of Checkov, KICS or Trivy has this rule.",
    remediation=f"Set public: true under {SERVICES_KEY} (defaultUriDisabled), or set "
                "default_uri_disabled on the CloudRunService component.",
    references=(INGRESS_DOCS,),
)
def run_default_uri_disabled(r: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if not is_production(r, ctx) or r.get("ingress") != INGRESS_LOAD_BALANCER \
            or r.get("defaultUriDisabled") is True:
        return
    yield ("defaultUriDisabled",
           f"Cloud Run service {r.physical_name}: defaultUriDisabled is not true; a service behind the "
           "load balancer needs no run.app URL")
