"""Edge: what the shared HTTPS load balancer declares, read from the synthesized graph."""

from __future__ import annotations

import dataclasses

import pulumi
import pytest

from infra.components.edge import ArmorPolicy, Edge, EdgeArgs, EdgeHost
from infra.synth.engine import run_program

BACKEND = "gcp:compute/backendService:BackendService"
URL_MAP = "gcp:compute/uRLMap:URLMap"
RULE = "gcp:compute/globalForwardingRule:GlobalForwardingRule"
ARMOR = "gcp:compute/securityPolicy:SecurityPolicy"

HOSTS = (
    EdgeHost("feed.example.com", "brew-web", "asia-south1", armored=True, environment="prod"),
    EdgeHost("brew.example.com", "shopos-feed", "asia-south1", environment="staging"),
    EdgeHost("demo.example.com", "brew-demo", "europe-west1", certificate_name="demo-cert"),
)


def edge_args(**changes) -> EdgeArgs:
    args = EdgeArgs(
        project="p",
        address_name="squareup-ip",
        url_map_name="squareup-urlmap",
        hosts=HOSTS,
        armor=ArmorPolicy(policy_name="brew-prod-armor"),
        ssl_policy_name="squareup-tls12",
        labels={"environment": "edge"},
    )
    return dataclasses.replace(args, **changes)


def synth(args: EdgeArgs):
    def program():
        edge = Edge("edge", args)
        pulumi.export("address", edge.address)
        pulumi.export("dnsRecords", edge.dns_records)
        pulumi.export("backendServices", edge.backend_services)
        pulumi.export("urlMap", edge.url_map)

    return run_program(program, project="brew", stack="test", config={"gcp:project": "p"})


@pytest.fixture(scope="module")
def graph():
    return synth(edge_args())


def urn_of(graph, type_token: str, name: str) -> str:
    return graph.one(type_token, name)["urn"]


def test_every_child_is_parented_to_the_component(graph):
    edge = graph.by_type("brew:gcp:Edge")
    assert len(edge) == 1
    children = [r for r in graph.resources if r["type"] != "brew:gcp:Edge"]
    assert children and all(r["parent"] == edge[0]["urn"] for r in children)


def test_armor_is_attached_only_to_the_armored_backend(graph):
    policy = graph.one(ARMOR, "edge-armor")
    by_name = {b["inputs"]["name"]: b["inputs"] for b in graph.by_type(BACKEND)}
    assert set(by_name) == {"brew-web-backend", "shopos-feed-backend", "brew-demo-backend"}
    assert by_name["brew-web-backend"]["securityPolicy"].endswith("/securityPolicies/brew-prod-armor")
    assert policy["urn"] in graph.one(BACKEND, "edge-feed-example-com-backend")["dependencies"]
    assert "securityPolicy" not in by_name["shopos-feed-backend"]
    assert "securityPolicy" not in by_name["brew-demo-backend"]


def test_backends_are_serverless_negs_in_the_service_region_with_logging(graph):
    negs = {n["inputs"]["cloudRun"]["service"]: n["inputs"]
            for n in graph.by_type("gcp:compute/regionNetworkEndpointGroup:RegionNetworkEndpointGroup")}
    assert negs["brew-demo"]["region"] == "europe-west1"
    assert {n["networkEndpointType"] for n in negs.values()} == {"SERVERLESS"}
    for backend in graph.by_type(BACKEND):
        assert backend["inputs"]["protocol"] == "HTTPS"
        assert backend["inputs"]["loadBalancingScheme"] == "EXTERNAL_MANAGED"
        assert backend["inputs"]["logConfig"]["enable"] is True
        assert len(backend["inputs"]["backends"]) == 1


def test_backend_description_names_host_service_and_environment(graph):
    descriptions = {b["inputs"]["name"]: b["inputs"]["description"] for b in graph.by_type(BACKEND)}
    assert descriptions == {
        "brew-web-backend": "feed.example.com -> Cloud Run brew-web; environment=prod",
        "shopos-feed-backend": "brew.example.com -> Cloud Run shopos-feed; environment=staging",
        # No environment given: nothing for the policy rules to read.
        "brew-demo-backend": "demo.example.com -> Cloud Run brew-demo",
    }


def test_armor_policy_baseline(graph):
    inputs = graph.one(ARMOR, "edge-armor")["inputs"]
    assert inputs["type"] == "CLOUD_ARMOR"
    assert inputs["adaptiveProtectionConfig"]["layer7DdosDefenseConfig"]["enable"] is True
    assert inputs["advancedOptionsConfig"]["jsonParsing"] == "STANDARD"
    rules = {int(r["priority"]): r for r in inputs["rules"]}
    assert rules[1000]["match"]["expr"]["expression"] == "evaluatePreconfiguredWaf('sqli-v33-stable', {'sensitivity': 1})"
    waf = [p for p in rules if 1000 <= p < 1100]
    assert waf == list(range(1000, 1090, 10))
    assert all(rules[p]["action"] == "deny(403)" for p in waf)
    canary = [r for r in inputs["rules"] if "cve-canary" in r.get("match", {}).get("expr", {}).get("expression", "")]
    assert len(canary) == 1 and canary[0]["action"] != "allow" and canary[0]["preview"] is False
    ban = rules[2000]
    assert ban["action"] == "rate_based_ban"
    opts = ban["rateLimitOptions"]
    assert (opts["conformAction"], opts["exceedAction"], opts["enforceOnKey"]) == ("allow", "deny(429)", "IP")
    assert opts["rateLimitThreshold"] == {"count": 500, "intervalSec": 60}
    assert opts["banDurationSec"] == 600
    assert rules[2147483647]["action"] == "allow"


def test_no_armor_policy_when_no_host_is_armored():
    hosts = tuple(dataclasses.replace(h, armored=False) for h in HOSTS)
    graph = synth(edge_args(hosts=hosts))
    assert graph.by_type(ARMOR) == []
    assert all("securityPolicy" not in b["inputs"] for b in graph.by_type(BACKEND))


def test_host_rules_map_each_host_to_its_backend(graph):
    url_map = graph.one(URL_MAP, "edge-url-map")["inputs"]
    assert url_map["name"] == "squareup-urlmap"
    matchers = {m["name"]: m["defaultService"] for m in url_map["pathMatchers"]}
    routed = {host: matchers[rule["pathMatcher"]] for rule in url_map["hostRules"] for host in rule["hosts"]}
    assert set(routed) == {"feed.example.com", "brew.example.com", "demo.example.com"}
    # The mocks hand back live IDs (projects/P/global/backendServices/NAME).
    assert routed["feed.example.com"].endswith("/backendServices/brew-web-backend")
    assert routed["brew.example.com"].endswith("/backendServices/shopos-feed-backend")
    assert routed["demo.example.com"].endswith("/backendServices/brew-demo-backend")
    assert url_map["defaultService"] == routed["feed.example.com"]


def test_https_proxy_carries_ssl_policy_and_one_certificate_per_host(graph):
    ssl = graph.one("gcp:compute/sSLPolicy:SSLPolicy", "edge-ssl-policy")
    assert ssl["inputs"] == {"minTlsVersion": "TLS_1_2", "name": "squareup-tls12", "profile": "MODERN", "project": "p"}
    proxy = graph.one("gcp:compute/targetHttpsProxy:TargetHttpsProxy", "edge-https-proxy")
    assert proxy["inputs"]["sslPolicy"].endswith("/sslPolicies/squareup-tls12")
    assert proxy["inputs"]["urlMap"].endswith("/urlMaps/squareup-urlmap")
    assert ssl["urn"] in proxy["dependencies"]
    certs = graph.by_type("gcp:compute/managedSslCertificate:ManagedSslCertificate")
    assert sorted(c["inputs"]["name"] for c in certs) == ["brew-example-com", "demo-cert", "feed-example-com"]
    assert all(len(c["inputs"]["managed"]["domains"]) == 1 for c in certs)
    assert len(proxy["inputs"]["sslCertificates"]) == 3


def test_port_80_redirects_to_https_on_the_same_address(graph):
    address = graph.outputs["address"]
    rules = {r["inputs"]["portRange"]: r for r in graph.by_type(RULE)}
    assert set(rules) == {"443", "80"}
    assert rules["80"]["inputs"]["ipAddress"] == rules["443"]["inputs"]["ipAddress"] == address
    assert all(r["inputs"]["labels"] == {"environment": "edge"} for r in rules.values())
    http_proxy = graph.one("gcp:compute/targetHttpProxy:TargetHttpProxy", "edge-http-proxy")
    assert urn_of(graph, "gcp:compute/targetHttpProxy:TargetHttpProxy", "edge-http-proxy") in rules["80"]["dependencies"]
    redirect = graph.one(URL_MAP, "edge-redirect-url-map")
    assert redirect["urn"] in http_proxy["dependencies"]
    assert http_proxy["inputs"]["urlMap"].endswith("/urlMaps/squareup-urlmap-http-redirect")
    assert redirect["inputs"]["defaultUrlRedirect"] == {
        "httpsRedirect": True, "redirectResponseCode": "MOVED_PERMANENTLY_DEFAULT", "stripQuery": False,
    }
    assert "defaultService" not in redirect["inputs"]


def test_address_is_a_global_external_ipv4_with_labels(graph):
    address = graph.one("gcp:compute/globalAddress:GlobalAddress", "edge-address")["inputs"]
    assert (address["name"], address["addressType"], address["ipVersion"]) == ("squareup-ip", "EXTERNAL", "IPV4")
    assert address["labels"] == {"environment": "edge"}


def test_outputs_dns_records_backends_and_url_map(graph):
    ip = graph.outputs["address"]
    assert graph.outputs["dnsRecords"] == [
        {"name": h.host, "type": "A", "content": ip} for h in HOSTS
    ]
    assert graph.outputs["backendServices"] == {
        "feed.example.com": "brew-web-backend",
        "brew.example.com": "shopos-feed-backend",
        "demo.example.com": "brew-demo-backend",
    }
    assert graph.outputs["urlMap"] == "squareup-urlmap"


def test_certificate_name_defaults_to_the_host():
    assert EdgeHost("feed.example.com", "s", "r").certificate_name == "feed-example-com"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hosts": ()}, "EdgeArgs.hosts"),
        ({"hosts": (HOSTS[0], dataclasses.replace(HOSTS[1], host="feed.example.com"))}, "duplicate host 'feed.example.com'"),
        ({"armor": None}, "EdgeHost.armored"),
        ({"hosts": (dataclasses.replace(HOSTS[0], environment="Prod"),)}, "EdgeHost.environment"),
        ({"min_tls_version": "TLS_9"}, "EdgeArgs.min_tls_version"),
        ({"min_tls_version": "TLS_1_1"}, "requires TLS_1_2"),
        ({"ssl_profile": "COMPATIBLE"}, "EdgeArgs.ssl_profile"),
        ({"armor": ArmorPolicy("a", rate_limit_count=0)}, "ArmorPolicy.rate_limit_count"),
        ({"armor": ArmorPolicy("a", rate_limit_count=10001)}, "ArmorPolicy.rate_limit_count"),
        ({"armor": ArmorPolicy("a", waf_sensitivity=5)}, "ArmorPolicy.waf_sensitivity"),
        ({"armor": ArmorPolicy("a", waf_sensitivity=-1)}, "ArmorPolicy.waf_sensitivity"),
        ({"armor": ArmorPolicy("a", rate_limit_interval_seconds=45)}, "ArmorPolicy.rate_limit_interval_seconds"),
    ],
)
def test_bad_args_raise_value_error(changes, message):
    with pytest.raises(ValueError, match=message):
        # Validation happens before any child is declared, so no mocks are needed.
        synth(edge_args(**changes))
