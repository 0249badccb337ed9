"""Edge rules (SPEC 3.4): TLS 1.2 or later on the HTTPS proxy, port 80 only redirects,
and Cloud Armor with WAF and rate limiting in front of production — and only production.

The edge stack links host -> backend service -> serverless NEG -> Cloud Run service;
backend services carry no labels, so the edge component writes `environment=<name>` in
each backend's description and these rules read the production backend from there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from infra.policy.model import (
    Context,
    Resource,
    Severity,
    Violation,
    is_production,
    is_production_stack,
    resource_rule,
    stack_rule,
)
from infra.policy.rules._graph import at, items, last_segment, named, number, production_word

HTTPS_PROXY = "gcp:compute/targetHttpsProxy:TargetHttpsProxy"
HTTP_PROXY = "gcp:compute/targetHttpProxy:TargetHttpProxy"
SSL_POLICY = "gcp:compute/sSLPolicy:SSLPolicy"
URL_MAP = "gcp:compute/uRLMap:URLMap"
BACKEND = "gcp:compute/backendService:BackendService"
ARMOR = "gcp:compute/securityPolicy:SecurityPolicy"

SECURE_TLS = ("TLS_1_2", "TLS_1_3")
# The preconfigured WAF families production must block; the SPEC baseline enables more.
REQUIRED_WAF = ("sqli", "xss")
RATE_ACTIONS = ("rate_based_ban", "throttle")

_ENVIRONMENT = re.compile(r"\benvironment=([a-z][-a-z0-9]*)")
_WAF = re.compile(r"evaluatePreconfigured(?:Waf|Expr)\(\s*['\"]([a-z0-9]+)-")
_SENSITIVITY_OFF = re.compile(r"['\"]sensitivity['\"]\s*:\s*0\b")
_EDGE_REMEDIATION = "stacks/Pulumi.edge.yaml brew:edge, built by infra/components/edge.py"


def backend_environment(backend: Resource) -> str | None:
    """The environment the edge component wrote in the backend's description."""
    match = _ENVIRONMENT.search(str(backend.get("description") or ""))
    return match.group(1) if match else None


def _production_backend(backend: Resource) -> bool:
    environment = backend_environment(backend)
    return environment is not None and is_production_stack(environment)


# --- TLS and HTTP ---------------------------------------------------------------------

@resource_rule(
    "BREW-S040", Severity.ERROR, "HTTPS proxy has an SSL policy", types=[HTTPS_PROXY],
    description="Without an SSL policy the proxy takes Google's default, which still negotiates TLS 1.0 "
                "and 1.1 with weak ciphers. None of Checkov, KICS or Trivy checks target_https_proxy.ssl_policy; "
                "Google's SSL policy docs attach the policy to the target HTTPS proxy.",
    remediation=f"Set brew:edge.sslPolicy in {_EDGE_REMEDIATION}, which passes it to the HTTPS proxy.",
    references=("https://cloud.google.com/load-balancing/docs/ssl-policies-concepts",),
)
def https_proxy_has_ssl_policy(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if not res.get("sslPolicy"):
        yield "sslPolicy", (f"HTTPS proxy {res.physical_name} has no SSL policy (sslPolicy): Google's default "
                            "allows TLS 1.0")


@resource_rule(
    "BREW-S041", Severity.ERROR, "SSL policy requires TLS 1.2 or later", types=[SSL_POLICY],
    description="TLS 1.0 and 1.1 are deprecated (RFC 8996); an absent minTlsVersion means TLS_1_0. "
                "Same check as Trivy AVD-GCP-0039 (minTlsVersion TLS_1_2 or TLS_1_3) and part of Checkov CKV_GCP_4.",
    remediation=f"Set brew:edge.minTlsVersion to TLS_1_2 or TLS_1_3 in {_EDGE_REMEDIATION}.",
    references=("CKV_GCP_4", "AVD-GCP-0039"),
)
def ssl_policy_min_tls(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    version = res.get("minTlsVersion") or "TLS_1_0"
    if version not in SECURE_TLS:
        yield "minTlsVersion", f"SSL policy {res.physical_name} accepts {version} (minTlsVersion); require TLS_1_2"


@resource_rule(
    "BREW-S042", Severity.ERROR, "SSL policy profile has no weak ciphers", types=[SSL_POLICY],
    description="The COMPATIBLE profile (the default) keeps the widest, weakest cipher set below TLS 1.3, and a "
                "CUSTOM profile with TLS_RSA_* suites gives up forward secrecy. Checkov CKV_GCP_4 passes RESTRICTED, "
                "MODERN with TLS 1.2, and CUSTOM without TLS_RSA_*; with TLS 1.3 as the minimum the profile's older "
                "suites cannot be negotiated, so COMPATIBLE passes there.",
    remediation="Use the MODERN or RESTRICTED profile (EdgeArgs.ssl_profile in infra/components/edge.py).",
    references=("CKV_GCP_4", "AVD-GCP-0039"),
)
def ssl_policy_profile(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    profile = res.get("profile") or "COMPATIBLE"
    if profile == "COMPATIBLE" and res.get("minTlsVersion") != "TLS_1_3":
        yield "profile", (f"SSL policy {res.physical_name} uses the COMPATIBLE profile (profile): weak ciphers "
                          "below TLS 1.3")
    if profile == "CUSTOM":
        for i, feature in enumerate(items(res.get("customFeatures"))):
            if str(feature).startswith("TLS_RSA_"):
                yield (f"customFeatures[{i}]",
                       f"SSL policy {res.physical_name} allows {feature} (customFeatures[{i}]): no forward secrecy")


@stack_rule(
    "BREW-S043", Severity.ERROR, "Port 80 only redirects to HTTPS",
    description="Plain HTTP exposes sessions and content to anyone on the path. Every HTTP proxy's URL map must "
                "redirect to HTTPS and route no host to a backend. Checkov CKV2_GCP_38 fails any HTTP proxy behind "
                "an EXTERNAL forwarding rule whatever it serves (and passes EXTERNAL_MANAGED); this rule checks what "
                "the proxy actually does. KICS and Trivy have no equivalent.",
    remediation="Point the HTTP proxy at a URL map with defaultUrlRedirect.httpsRedirect: true and no path "
                "matchers, as the redirect map in infra/components/edge.py does.",
    references=("CKV2_GCP_38",),
)
def http_redirects_to_https(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    url_maps = named(resources, URL_MAP)
    for proxy in (r for r in resources if r.type == HTTP_PROXY):
        name = last_segment(proxy.get("urlMap"))
        url_map = url_maps.get(name)
        if url_map is None:
            yield Violation(proxy, "urlMap", f"HTTP proxy {proxy.physical_name} uses URL map {name or '(none)'} "
                                             "not declared in this stack, so nothing shows it redirects (urlMap)")
            continue
        if url_map.get("defaultUrlRedirect.httpsRedirect") is not True:
            yield Violation(url_map, "defaultUrlRedirect.httpsRedirect",
                            f"URL map {url_map.physical_name} behind HTTP proxy {proxy.physical_name} does not "
                            "redirect to HTTPS (defaultUrlRedirect.httpsRedirect)")
        for i, matcher in enumerate(items(url_map.get("pathMatchers"))):
            if at(matcher, "defaultService"):
                yield Violation(url_map, f"pathMatchers[{i}].defaultService",
                                f"URL map {url_map.physical_name} serves {last_segment(at(matcher, 'defaultService'))} "
                                f"over plain HTTP (pathMatchers[{i}].defaultService)")


# --- Cloud Armor ----------------------------------------------------------------------

@resource_rule(
    "BREW-S044", Severity.ERROR, "Production backend has Cloud Armor", types=[BACKEND],
    description="The production host is the public attack surface: without a security policy nothing filters "
                "OWASP attacks or floods before they reach Cloud Run. None of Checkov, KICS or Trivy checks "
                "backend_service.security_policy.",
    remediation=f"Mark the production host `armored: true` in {_EDGE_REMEDIATION}.",
    references=("https://cloud.google.com/armor/docs/best-practices",),
)
def production_backend_armored(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if _production_backend(res) and not res.get("securityPolicy"):
        yield "securityPolicy", f"production backend {res.physical_name} has no Cloud Armor policy (securityPolicy)"


def _production_policies(resources: Sequence[Resource], ctx: Context) -> dict[str, Resource]:
    """Armor policies guarding production: attached to a production backend, or production
    by their own labels or name (brew-prod-armor), keyed by name; a backend stands in for
    a policy this stack does not declare."""
    declared = named(resources, ARMOR)
    found = {name: policy for name, policy in declared.items() if is_production(policy, ctx) or production_word(name)}
    for backend in resources:
        if backend.type == BACKEND and _production_backend(backend) and backend.get("securityPolicy"):
            name = last_segment(backend.get("securityPolicy"))
            found.setdefault(name, declared.get(name, backend))
    return found


def _enforced(rule: object) -> bool:
    return at(rule, "preview") is not True


def _waf_families(policy: Resource) -> set[str]:
    """WAF families the policy blocks: enforced deny rules on a preconfigured expression
    (sensitivity 0 turns every signature off, so it blocks nothing)."""
    families = set()
    for rule in items(policy.get("rules")):
        expression = str(at(rule, "match.expr.expression") or "")
        if _enforced(rule) and str(at(rule, "action") or "").startswith("deny") \
                and not _SENSITIVITY_OFF.search(expression):
            families.update(_WAF.findall(expression))
    return families


@stack_rule(
    "BREW-S045", Severity.ERROR, "Production Armor policy blocks SQL injection and XSS",
    description="Cloud Armor's preconfigured OWASP CRS rules (evaluatePreconfiguredWaf / evaluatePreconfiguredExpr) "
                "are what stops injection attacks at the edge; a policy without enforced sqli and xss rules is a "
                "policy in name only. None of Checkov, KICS or Trivy checks the WAF rules (Checkov's Armor check "
                "looks only for the log4j cve-canary rule, see BREW-S049).",
    remediation="Keep sqli-v33-stable and xss-v33-stable in ArmorPolicy.waf_rules (infra/components/edge.py), "
                "not in preview and with sensitivity 1 or more.",
    references=("https://cloud.google.com/armor/docs/waf-rules",),
)
def production_armor_waf(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    for name, policy in _production_policies(resources, ctx).items():
        if policy.type != ARMOR:
            yield Violation(policy, "securityPolicy", f"production backend {policy.physical_name} uses Armor policy "
                                                      f"{name}, not declared in this stack, so its WAF rules cannot "
                                                      "be checked (securityPolicy)")
            continue
        blocked = _waf_families(policy)
        for family in REQUIRED_WAF:
            if family not in blocked:
                yield Violation(policy, "rules", f"Armor policy {name} has no enforced {family} WAF rule (rules): "
                                                 f"add evaluatePreconfiguredWaf('{family}-v33-stable')")


def _rate_limited(rule: object) -> bool:
    return (at(rule, "action") in RATE_ACTIONS and _enforced(rule)
            and (number(at(rule, "rateLimitOptions.rateLimitThreshold.count")) or 0) > 0
            and (number(at(rule, "rateLimitOptions.rateLimitThreshold.intervalSec")) or 0) > 0
            and at(rule, "rateLimitOptions.exceedAction") not in (None, "allow"))


@stack_rule(
    "BREW-S046", Severity.ERROR, "Production Armor policy limits request rates",
    description="A per-client rate-based ban or throttle keeps one client from exhausting the web instances and "
                "the Postgres connection budget behind them (SPEC 4). None of Checkov, KICS or Trivy checks it.",
    remediation="Keep the rate_based_ban rule of infra/components/edge.py; tune brew:edge.rateLimitPerMinute in "
                "stacks/Pulumi.edge.yaml.",
    references=("https://cloud.google.com/armor/docs/rate-limiting-overview",),
)
def production_armor_rate_limit(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    for name, policy in _production_policies(resources, ctx).items():
        if policy.type == ARMOR and not any(_rate_limited(rule) for rule in items(policy.get("rules"))):
            yield Violation(policy, "rules", f"Armor policy {name} has no enforced rate_based_ban or throttle rule "
                                             "with rateLimitOptions (rules)")


@stack_rule(
    "BREW-S047", Severity.WARNING, "Only production backends use the production Armor policy",
    description="Staging and the demo run without Cloud Armor on purpose (SPEC 3.4). Attaching the production "
                "policy to them mixes their traffic into production's adaptive protection and per-IP bans, so a "
                "tester's load test can ban an office IP from production. Not a security gap, hence a warning. "
                "None of Checkov, KICS or Trivy checks it.",
    remediation=f"Remove `armored: true` from the staging or demo host in {_EDGE_REMEDIATION}.",
    references=(),
)
def production_armor_only_on_production(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    production = _production_policies(resources, ctx)
    for backend in resources:
        if backend.type != BACKEND or _production_backend(backend) or backend_environment(backend) is None:
            continue
        name = last_segment(backend.get("securityPolicy"))
        if name in production:
            yield Violation(backend, "securityPolicy",
                            f"{backend_environment(backend)} backend {backend.physical_name} uses the production "
                            f"Armor policy {name} (securityPolicy)")


@resource_rule(
    "BREW-S048", Severity.WARNING, "Backend service logs requests", types=[BACKEND],
    description="Load balancer request logs are the record of who reached which host, and what Cloud Armor "
                "tuning reads. KICS 0ef3f3f1 (gcp_http_load_balancer_logging_disabled, MEDIUM); a warning because "
                "Cloud Run's own request logs still exist.",
    remediation="Keep log_config enable: true on the backends in infra/components/edge.py.",
    references=("KICS 0ef3f3f1",),
)
def backend_logging(res: Resource, ctx: Context) -> Iterator[tuple[str, str]]:
    if res.get("logConfig.enable") is not True:
        yield "logConfig.enable", f"backend {res.physical_name} does not log requests (logConfig.enable)"


@stack_rule(
    "BREW-S049", Severity.WARNING, "Production Armor policy blocks the log4j canary",
    description="An enforced, non-allow cve-canary rule blocks Log4Shell (CVE-2021-44228) probes. Checkov "
                "CKV_GCP_73 requires it; a warning because the app runs on Node, not Java.",
    remediation="Keep the cve-canary rule of infra/components/edge.py (never in preview).",
    references=("CKV_GCP_73",),
)
def production_armor_cve_canary(resources: Sequence[Resource], ctx: Context) -> Iterator[Violation]:
    for name, policy in _production_policies(resources, ctx).items():
        rules = items(policy.get("rules")) if policy.type == ARMOR else None
        if rules is not None and not any(
                "cve-canary" in str(at(rule, "match.expr.expression") or "") and _enforced(rule)
                and at(rule, "action") != "allow" for rule in rules):
            yield Violation(policy, "rules", f"Armor policy {name} has no enforced cve-canary rule (rules)")
