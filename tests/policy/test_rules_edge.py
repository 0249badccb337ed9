"""Edge rules (BREW-S040..S049): the shipped stacks pass, and one changed property of the
edge graph fails exactly the rule that guards it, naming the resource and the property."""

from __future__ import annotations

import re

import pytest

from infra.policy.model import Resource, Rule, Severity
from infra.policy.rules import edge
from tests.policy.helpers import DELETE, changed, find, findings, graph, resource

HTTPS_PROXY = "gcp:compute/targetHttpsProxy:TargetHttpsProxy"
HTTP_PROXY = "gcp:compute/targetHttpProxy:TargetHttpProxy"
SSL = "gcp:compute/sSLPolicy:SSLPolicy"
URL_MAP = "gcp:compute/uRLMap:URLMap"
BACKEND = "gcp:compute/backendService:BackendService"
ARMOR = "gcp:compute/securityPolicy:SecurityPolicy"
RULES = [value for value in vars(edge).values() if isinstance(value, Rule)]
PROD_ARMOR = "projects/squareup-brew/global/securityPolicies/brew-prod-armor"


def where(rule: Rule, data: dict) -> list[tuple[str, str, str]]:
    """(rule, resource, property) of every finding, after checking each names its resource."""
    found = findings(rule, data)
    for f in found:
        assert f.resource in f.message and f.severity is rule.severity, f
    return [(f.rule, f.resource, f.property) for f in found]


def armor_rules(data: dict, keep=lambda rule: True, change=lambda rule: rule) -> dict:
    """`data` with the production Armor policy's rules filtered and changed."""
    rules = [change(dict(r)) for r in find(data, ARMOR, "brew-prod-armor")["inputs"]["rules"] if keep(r)]
    return changed(data, ARMOR, "brew-prod-armor", "rules", rules)


def expression(rule: dict) -> str:
    return rule.get("match", {}).get("expr", {}).get("expression", "")


def test_ids_and_metadata():
    assert sorted(r.id for r in RULES) == [f"BREW-S{n:03d}" for n in range(40, 50)]
    for rule in RULES:
        assert rule.title and rule.description and rule.remediation
        cited = set(re.findall(r"CKV2?_GCP_\d+|AVD-GCP-\d+|KICS [0-9a-f]{8}", rule.description))
        assert cited <= set(rule.references), rule.id
        assert cited or "None of Checkov, KICS or Trivy" in rule.description, rule.id
    warnings = {r.id for r in RULES if r.severity is Severity.WARNING}
    assert warnings == {"BREW-S047", "BREW-S048", "BREW-S049"}


def test_the_production_backend_is_read_from_its_description(graphs):
    environments = {r["inputs"]["name"]: edge.backend_environment(Resource(BACKEND, r["name"], r["inputs"]))
                    for r in graphs["edge"]["resources"] if r["type"] == BACKEND}
    assert environments == {"brew-web-backend": "prod", "shopos-feed-backend": "staging", "brew-demo-backend": "demo"}


@pytest.mark.parametrize(
    ("rule", "type_token", "name", "path", "value", "prop"),
    [
        (edge.https_proxy_has_ssl_policy, HTTPS_PROXY, "squareup-urlmap-https-proxy", "sslPolicy", DELETE,
         "sslPolicy"),
        (edge.ssl_policy_min_tls, SSL, "squareup-tls12", "minTlsVersion", "TLS_1_1", "minTlsVersion"),
        (edge.ssl_policy_min_tls, SSL, "squareup-tls12", "minTlsVersion", DELETE, "minTlsVersion"),
        (edge.ssl_policy_profile, SSL, "squareup-tls12", "profile", "COMPATIBLE", "profile"),
        (edge.ssl_policy_profile, SSL, "squareup-tls12", "profile", DELETE, "profile"),
        (edge.http_redirects_to_https, URL_MAP, "squareup-urlmap-http-redirect", "defaultUrlRedirect.httpsRedirect",
         False, "defaultUrlRedirect.httpsRedirect"),
        (edge.http_redirects_to_https, HTTP_PROXY, "squareup-urlmap-http-proxy", "urlMap",
         "projects/squareup-brew/global/urlMaps/elsewhere", "urlMap"),
        (edge.production_backend_armored, BACKEND, "brew-web-backend", "securityPolicy", DELETE, "securityPolicy"),
        (edge.production_armor_waf, BACKEND, "brew-web-backend", "securityPolicy",
         "projects/squareup-brew/global/securityPolicies/elsewhere", "securityPolicy"),
        (edge.production_armor_only_on_production, BACKEND, "shopos-feed-backend", "securityPolicy", PROD_ARMOR,
         "securityPolicy"),
        (edge.backend_logging, BACKEND, "brew-demo-backend", "logConfig.enable", False, "logConfig.enable"),
    ],
)
def test_one_changed_property_fails_its_rule(graphs, rule, type_token, name, path, value, prop):
    data = changed(graphs["edge"], type_token, name, path, value)
    [(rule_id, resource_name, found_prop)] = where(rule, data)
    assert (rule_id, found_prop) == (rule.id, prop)
    assert resource_name == find(data, type_token, name)["inputs"]["name"]


def test_tls_1_3_makes_compatible_acceptable_but_rsa_key_exchange_never(graphs):
    modern = changed(graphs["edge"], SSL, "squareup-tls12", "minTlsVersion", "TLS_1_3")
    assert where(edge.ssl_policy_profile, changed(modern, SSL, "squareup-tls12", "profile", "COMPATIBLE")) == []
    custom = changed(changed(graphs["edge"], SSL, "squareup-tls12", "profile", "CUSTOM"), SSL, "squareup-tls12",
                     "customFeatures", ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_RSA_WITH_AES_128_GCM_SHA256"])
    assert where(edge.ssl_policy_profile, custom) == [("BREW-S042", "squareup-tls12", "customFeatures[1]")]


def test_http_proxy_on_the_serving_url_map_is_plain_http(graphs):
    data = changed(graphs["edge"], HTTP_PROXY, "squareup-urlmap-http-proxy", "urlMap",
                   "projects/squareup-brew/global/urlMaps/squareup-urlmap")
    assert where(edge.http_redirects_to_https, data) == [
        ("BREW-S043", "squareup-urlmap", "defaultUrlRedirect.httpsRedirect"),
        ("BREW-S043", "squareup-urlmap", "pathMatchers[0].defaultService"),
        ("BREW-S043", "squareup-urlmap", "pathMatchers[1].defaultService"),
        ("BREW-S043", "squareup-urlmap", "pathMatchers[2].defaultService"),
    ]


@pytest.mark.parametrize(
    ("keep", "change", "missing"),
    [
        (lambda r: "xss" not in expression(r), lambda r: r, ["xss"]),
        (lambda r: True, lambda r: {**r, "preview": True} if "sqli" in expression(r) else r, ["sqli"]),
        (lambda r: True, lambda r: {**r, "action": "allow"} if "xss" in expression(r) else r, ["xss"]),
        (lambda r: True, lambda r: {**r, "match": {"expr": {"expression": expression(r).replace(
            "'sensitivity': 1", "'sensitivity': 0")}}} if "sqli" in expression(r) else r, ["sqli"]),
        (lambda r: "-v33-" not in expression(r), lambda r: r, ["sqli", "xss"]),
    ],
    ids=["xss removed", "sqli in preview", "xss allowed", "sqli sensitivity 0", "no WAF rules"],
)
def test_production_armor_blocks_sqli_and_xss(graphs, keep, change, missing):
    found = findings(edge.production_armor_waf, armor_rules(graphs["edge"], keep, change))
    assert [(f.resource, f.property) for f in found] == [("brew-prod-armor", "rules")] * len(missing)
    assert [re.search(r"enforced (\w+) WAF", f.message).group(1) for f in found] == missing


def test_preconfigured_expressions_count_as_waf_rules(graphs):
    data = armor_rules(graphs["edge"], change=lambda r: {**r, "match": {"expr": {
        "expression": "evaluatePreconfiguredExpr('xss-stable')"}}} if "xss" in expression(r) else r)
    assert where(edge.production_armor_waf, data) == []


@pytest.mark.parametrize(
    "change",
    [
        lambda r: {k: v for k, v in r.items() if k != "rateLimitOptions"},
        lambda r: {**r, "preview": True},
        lambda r: {**r, "action": "deny(403)"},
        lambda r: {**r, "rateLimitOptions": {**r["rateLimitOptions"], "exceedAction": "allow"}},
        lambda r: {**r, "rateLimitOptions": {**r["rateLimitOptions"], "rateLimitThreshold": {"count": 0}}},
    ],
    ids=["no options", "preview", "not rate based", "exceed allowed", "no threshold"],
)
def test_production_armor_limits_rates(graphs, change):
    data = armor_rules(graphs["edge"], change=lambda r: change(r) if r["action"] == "rate_based_ban" else r)
    assert where(edge.production_armor_rate_limit, data) == [("BREW-S046", "brew-prod-armor", "rules")]


def test_a_throttle_rule_is_a_rate_limit(graphs):
    data = armor_rules(graphs["edge"], change=lambda r: {**r, "action": "throttle"}
                       if r["action"] == "rate_based_ban" else r)
    assert where(edge.production_armor_rate_limit, data) == []


def test_cve_canary_missing_is_a_warning(graphs):
    data = armor_rules(graphs["edge"], keep=lambda r: "cve-canary" not in expression(r))
    assert where(edge.production_armor_cve_canary, data) == [("BREW-S049", "brew-prod-armor", "rules")]


def test_a_policy_named_for_production_on_staging_is_flagged_even_when_prod_has_none(graphs):
    data = changed(graphs["edge"], BACKEND, "brew-web-backend", "securityPolicy", DELETE)
    data = changed(data, BACKEND, "brew-demo-backend", "securityPolicy", PROD_ARMOR)
    assert where(edge.production_armor_only_on_production, data) == [
        ("BREW-S047", "brew-demo-backend", "securityPolicy")]
    assert where(edge.production_backend_armored, data) == [("BREW-S044", "brew-web-backend", "securityPolicy")]


def test_staging_may_have_an_armor_policy_of_its_own():
    data = graph(
        "edge",
        resource(ARMOR, "staging-armor", {"name": "staging-armor", "rules": []}, stack="edge"),
        resource(BACKEND, "staging", {"name": "shopos-feed-backend", "description": "environment=staging",
                                      "securityPolicy": "projects/p/global/securityPolicies/staging-armor",
                                      "logConfig": {"enable": True}}, stack="edge"),
    )
    for rule in RULES:
        assert findings(rule, data) == []


ODD = graph(
    "edge",
    resource(HTTPS_PROXY, "proxy", {"sslPolicy": ["not", "a", "ref"]}, stack="edge"),
    resource(HTTP_PROXY, "http", {"urlMap": 7}, stack="edge"),
    resource(URL_MAP, "map", {"name": "7", "pathMatchers": "x", "defaultUrlRedirect": "yes"}, stack="edge"),
    resource(SSL, "ssl", {"profile": "CUSTOM", "customFeatures": "TLS_RSA_X", "minTlsVersion": 12}, stack="edge"),
    resource(BACKEND, "backend", {"description": {"environment": "prod"}, "securityPolicy": None,
                                  "logConfig": "on"}, stack="edge"),
    resource(BACKEND, "prod", {"description": "environment=prod", "securityPolicy": "armor"}, stack="edge"),
    resource(ARMOR, "armor", {"name": "armor", "rules": ["x", {"match": "y", "rateLimitOptions": 5},
                                                         {"action": None, "preview": "no"}]}, stack="edge"),
)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_odd_graphs_do_not_crash(rule):
    for f in findings(rule, ODD):
        assert f.rule == rule.id and f.property
