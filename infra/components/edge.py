"""The global HTTPS load balancer that prod, staging and demo share (SPEC 3.4).

One reserved IPv4 address serves every host. Each host gets a serverless NEG and a
backend service in its Cloud Run service's region, plus a Google-managed certificate;
one URL map routes host -> backend. The HTTPS proxy carries an SSL policy, and port 80
on the same address only redirects to HTTPS. A Cloud Armor policy (OWASP CRS rules, the
log4j canary, a per-IP rate-based ban) is created only when some host is armored, and is
attached to those hosts' backends alone.

Stages: validate args -> address -> Armor policy (if any host is armored) -> per host NEG,
backend service, certificate -> URL map -> SSL policy -> HTTPS proxy and :443 rule ->
redirect URL map, HTTP proxy and :80 rule -> outputs (address, Cloudflare DNS records).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_gcp import compute

TLS_VERSIONS = ("TLS_1_0", "TLS_1_1", "TLS_1_2", "TLS_1_3")
# The platform refuses anything older (CKV_GCP_4 / GCP-0039).
MIN_TLS_FLOOR = "TLS_1_2"
# COMPATIBLE keeps weak ciphers and CUSTOM needs a feature list we do not take: both fail
# CKV_GCP_4, so only the profiles that pass are accepted.
SSL_PROFILES = ("MODERN", "RESTRICTED", "FIPS_202205")
LOAD_BALANCING_SCHEMES = ("EXTERNAL_MANAGED", "EXTERNAL")
# Cloud Armor accepts only these rate-limit intervals.
RATE_LIMIT_INTERVALS = (10, 30, 60, 120, 180, 240, 300, 600, 900, 1200, 1800, 2700, 3600)

WAF_FIRST_PRIORITY = 1000
WAF_PRIORITY_STEP = 10  # Google's advice: leave room between rules to insert later ones
CVE_CANARY_PRIORITY = 1100
RATE_BAN_PRIORITY = 2000
DEFAULT_RULE_PRIORITY = 2147483647
MAX_WAF_RULES = (CVE_CANARY_PRIORITY - WAF_FIRST_PRIORITY) // WAF_PRIORITY_STEP

ENVIRONMENT_RE = re.compile(r"^[a-z][-a-z0-9]{0,62}$")
HOST_RE = re.compile(r"^(?=.{1,253}$)([a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
WAF_RULE_RE = re.compile(r"^[a-z0-9]+-v\d+-(stable|canary)$")

ALL_IPS = {"versioned_expr": "SRC_IPS_V1", "config": {"src_ip_ranges": ["*"]}}


def backend_description(h: EdgeHost) -> str:
    """What the console shows for a host's backend. Backend services carry no labels, so
    `environment=<name>` here is how the policy rules tell the production backend (the
    one Cloud Armor must guard) from staging's and the demo's."""
    described = f"{h.host} -> Cloud Run {h.service_name}"
    return f"{described}; environment={h.environment}" if h.environment else described


def _slug(host: str) -> str:
    """A GCP resource name (lowercase, digits, dashes, at most 63) derived from a host."""
    return host.replace(".", "-")[:63].rstrip("-")


@dataclass(frozen=True)
class EdgeHost:
    """One public host and the Cloud Run service behind it."""

    host: str
    service_name: str
    region: str
    armored: bool = False
    certificate_name: str | None = None  # default: the host with dots as dashes, e.g. feed-joinsquareup-com
    environment: str | None = None  # prod, staging, demo: whose service this is

    def __post_init__(self) -> None:
        if self.certificate_name is None:
            object.__setattr__(self, "certificate_name", _slug(self.host))


@dataclass(frozen=True)
class ArmorPolicy:
    """The Cloud Armor baseline: OWASP CRS WAF rules, log4j canary, per-IP rate-based ban."""

    policy_name: str
    waf_rules: Sequence[str] = (
        "sqli-v33-stable",
        "xss-v33-stable",
        "lfi-v33-stable",
        "rfi-v33-stable",
        "rce-v33-stable",
        "methodenforcement-v33-stable",
        "scannerdetection-v33-stable",
        "protocolattack-v33-stable",
        "sessionfixation-v33-stable",
    )
    waf_sensitivity: int = 1
    waf_preview: bool = False
    rate_limit_count: int = 500
    rate_limit_interval_seconds: int = 60
    ban_seconds: int = 600
    adaptive_protection: bool = True


@dataclass(frozen=True)
class EdgeArgs:
    project: pulumi.Input[str]
    address_name: str
    url_map_name: str
    hosts: Sequence[EdgeHost]
    armor: ArmorPolicy | None  # None: no host may be armored
    ssl_policy_name: str
    min_tls_version: str = "TLS_1_2"
    ssl_profile: str = "MODERN"
    load_balancing_scheme: str = "EXTERNAL_MANAGED"
    labels: Mapping[str, str] = field(default_factory=dict)


def _validate(args: EdgeArgs) -> None:
    if not args.hosts:
        raise ValueError("EdgeArgs.hosts: expected at least one host, got none")
    seen_hosts: set[str] = set()
    seen_services: set[str] = set()
    for h in args.hosts:
        if not HOST_RE.match(h.host):
            raise ValueError(f"EdgeHost.host: expected a lowercase DNS name, got {h.host!r}")
        if h.host in seen_hosts:
            raise ValueError(f"EdgeArgs.hosts: duplicate host {h.host!r}")
        # One NEG and backend per host are named after the service: a service behind two
        # hosts would declare the same physical names twice.
        if h.service_name in seen_services:
            raise ValueError(f"EdgeArgs.hosts: service {h.service_name!r} is behind more than one host")
        seen_hosts.add(h.host)
        seen_services.add(h.service_name)
        if h.environment is not None and not ENVIRONMENT_RE.match(h.environment):
            raise ValueError(f"EdgeHost.environment: expected a lowercase name like prod, got {h.environment!r}")
        if h.armored and args.armor is None:
            raise ValueError(f"EdgeHost.armored: host {h.host!r} is armored but EdgeArgs.armor is None")
    if args.min_tls_version not in TLS_VERSIONS:
        raise ValueError(f"EdgeArgs.min_tls_version: expected one of {', '.join(TLS_VERSIONS)}, "
                         f"got {args.min_tls_version!r}")
    if TLS_VERSIONS.index(args.min_tls_version) < TLS_VERSIONS.index(MIN_TLS_FLOOR):
        raise ValueError(f"EdgeArgs.min_tls_version: the platform requires {MIN_TLS_FLOOR} or later, "
                         f"got {args.min_tls_version!r}")
    if args.ssl_profile not in SSL_PROFILES:
        raise ValueError(f"EdgeArgs.ssl_profile: expected one of {', '.join(SSL_PROFILES)}, got {args.ssl_profile!r}")
    if args.load_balancing_scheme not in LOAD_BALANCING_SCHEMES:
        raise ValueError(f"EdgeArgs.load_balancing_scheme: expected one of {', '.join(LOAD_BALANCING_SCHEMES)}, "
                         f"got {args.load_balancing_scheme!r}")
    if args.armor is not None:
        _validate_armor(args.armor)


def _validate_armor(a: ArmorPolicy) -> None:
    if not 1 <= a.rate_limit_count <= 10000:
        raise ValueError(f"ArmorPolicy.rate_limit_count: expected 1..10000, got {a.rate_limit_count}")
    if a.rate_limit_interval_seconds not in RATE_LIMIT_INTERVALS:
        raise ValueError(f"ArmorPolicy.rate_limit_interval_seconds: expected one of "
                         f"{', '.join(map(str, RATE_LIMIT_INTERVALS))}, got {a.rate_limit_interval_seconds}")
    if a.ban_seconds < 1:
        raise ValueError(f"ArmorPolicy.ban_seconds: expected at least 1, got {a.ban_seconds}")
    if not 0 <= a.waf_sensitivity <= 4:
        raise ValueError(f"ArmorPolicy.waf_sensitivity: expected 0..4, got {a.waf_sensitivity}")
    if len(a.waf_rules) > MAX_WAF_RULES:
        raise ValueError(f"ArmorPolicy.waf_rules: at most {MAX_WAF_RULES} rules fit before the cve-canary "
                         f"rule at {CVE_CANARY_PRIORITY}, got {len(a.waf_rules)}")
    if len(set(a.waf_rules)) != len(a.waf_rules):
        raise ValueError(f"ArmorPolicy.waf_rules: duplicate rule in {list(a.waf_rules)!r}")
    for rule in a.waf_rules:
        if not WAF_RULE_RE.match(rule):
            raise ValueError(f"ArmorPolicy.waf_rules: expected a preconfigured rule like sqli-v33-stable, got {rule!r}")


def armor_rules(a: ArmorPolicy) -> list[dict]:
    """The policy's rules, in priority order: WAF, cve-canary, rate-based ban, default allow."""
    rules: list[dict] = []
    for i, rule in enumerate(a.waf_rules):
        rules.append({
            "priority": WAF_FIRST_PRIORITY + i * WAF_PRIORITY_STEP,
            "action": "deny(403)",
            "preview": a.waf_preview,
            "description": f"OWASP CRS {rule}",
            "match": {"expr": {
                "expression": f"evaluatePreconfiguredWaf('{rule}', {{'sensitivity': {a.waf_sensitivity}}})",
            }},
        })
    # Never in preview: an enforced, non-allow cve-canary rule is what CKV_GCP_73 looks for.
    rules.append({
        "priority": CVE_CANARY_PRIORITY,
        "action": "deny(403)",
        "preview": False,
        "description": "log4j JNDI lookups (CVE-2021-44228)",
        "match": {"expr": {"expression": "evaluatePreconfiguredWaf('cve-canary')"}},
    })
    rules.append({
        "priority": RATE_BAN_PRIORITY,
        "action": "rate_based_ban",
        "description": f"ban an IP for {a.ban_seconds}s above {a.rate_limit_count} requests "
                       f"per {a.rate_limit_interval_seconds}s",
        "match": ALL_IPS,
        "rate_limit_options": {
            "conform_action": "allow",
            "exceed_action": "deny(429)",
            "enforce_on_key": "IP",
            "rate_limit_threshold": {"count": a.rate_limit_count, "interval_sec": a.rate_limit_interval_seconds},
            "ban_duration_sec": a.ban_seconds,
        },
    })
    # The site is public: whatever no rule above denies is allowed.
    rules.append({
        "priority": DEFAULT_RULE_PRIORITY,
        "action": "allow",
        "description": "default allow",
        "match": ALL_IPS,
    })
    return rules


class Edge(pulumi.ComponentResource):
    """The global external HTTPS load balancer in front of every public host."""

    address: pulumi.Output[str]
    dns_records: pulumi.Output[list]
    backend_services: dict[str, pulumi.Output[str]]
    url_map: pulumi.Output[str]
    security_policy: pulumi.Output[str] | None

    def __init__(self, name: str, args: EdgeArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("brew:gcp:Edge", name, None, opts)
        _validate(args)
        child = pulumi.ResourceOptions(parent=self)
        labels = dict(args.labels)
        scheme = args.load_balancing_scheme

        address = compute.GlobalAddress(
            f"{name}-address",
            name=args.address_name,
            project=args.project,
            address_type="EXTERNAL",
            ip_version="IPV4",
            labels=labels,
            opts=child,
        )

        policy = None
        if any(h.armored for h in args.hosts):
            assert args.armor is not None
            a = args.armor
            policy = compute.SecurityPolicy(
                f"{name}-armor",
                name=a.policy_name,
                project=args.project,
                type="CLOUD_ARMOR",
                description="Cloud Armor baseline: OWASP CRS, cve-canary, per-IP rate-based ban",
                rules=armor_rules(a),
                adaptive_protection_config={
                    "layer7_ddos_defense_config": {"enable": a.adaptive_protection, "rule_visibility": "STANDARD"},
                },
                # The app's API bodies are JSON: without parsing, WAF rules see them as opaque text.
                advanced_options_config={"json_parsing": "STANDARD"},
                labels=labels,
                opts=child,
            )

        backends: dict[str, compute.BackendService] = {}
        certificates: list[compute.ManagedSslCertificate] = []
        for h in args.hosts:
            slug = _slug(h.host)
            neg = compute.RegionNetworkEndpointGroup(
                f"{name}-{slug}-neg",
                name=f"{h.service_name}-neg",
                project=args.project,
                region=h.region,
                network_endpoint_type="SERVERLESS",
                cloud_run={"service": h.service_name},
                opts=child,
            )
            armor = {"security_policy": policy.id} if h.armored and policy is not None else {}
            backends[h.host] = compute.BackendService(
                f"{name}-{slug}-backend",
                name=f"{h.service_name}-backend",
                description=backend_description(h),
                project=args.project,
                load_balancing_scheme=scheme,
                protocol="HTTPS",
                backends=[{"group": neg.id}],
                log_config={"enable": True, "sample_rate": 1.0},
                **armor,
                opts=child,
            )
            certificates.append(compute.ManagedSslCertificate(
                f"{name}-{slug}-cert",
                name=h.certificate_name,
                project=args.project,
                type="MANAGED",
                managed={"domains": [h.host]},
                opts=child,
            ))

        url_map = compute.URLMap(
            f"{name}-url-map",
            name=args.url_map_name,
            project=args.project,
            default_service=backends[args.hosts[0].host].id,
            host_rules=[{"hosts": [h.host], "path_matcher": _slug(h.host)} for h in args.hosts],
            path_matchers=[
                {"name": _slug(h.host), "default_service": backends[h.host].id} for h in args.hosts
            ],
            opts=child,
        )
        ssl_policy = compute.SSLPolicy(
            f"{name}-ssl-policy",
            name=args.ssl_policy_name,
            project=args.project,
            profile=args.ssl_profile,
            min_tls_version=args.min_tls_version,
            opts=child,
        )
        https_proxy = compute.TargetHttpsProxy(
            f"{name}-https-proxy",
            name=f"{args.url_map_name}-https-proxy",
            project=args.project,
            url_map=url_map.id,
            ssl_certificates=[c.id for c in certificates],
            ssl_policy=ssl_policy.id,
            opts=child,
        )
        # The rules name the IP itself rather than the address resource: that is what the
        # live rules hold, so adopting them shows no diff.
        compute.GlobalForwardingRule(
            f"{name}-https",
            name=f"{args.url_map_name}-https",
            project=args.project,
            ip_address=address.address,
            ip_protocol="TCP",
            port_range="443",
            load_balancing_scheme=scheme,
            target=https_proxy.id,
            labels=labels,
            opts=child,
        )

        redirect_map = compute.URLMap(
            f"{name}-redirect-url-map",
            name=f"{args.url_map_name}-http-redirect",
            project=args.project,
            default_url_redirect={
                "https_redirect": True,
                "redirect_response_code": "MOVED_PERMANENTLY_DEFAULT",
                "strip_query": False,
            },
            opts=child,
        )
        http_proxy = compute.TargetHttpProxy(
            f"{name}-http-proxy",
            name=f"{args.url_map_name}-http-proxy",
            project=args.project,
            url_map=redirect_map.id,
            opts=child,
        )
        compute.GlobalForwardingRule(
            f"{name}-http",
            name=f"{args.url_map_name}-http",
            project=args.project,
            ip_address=address.address,
            ip_protocol="TCP",
            port_range="80",
            load_balancing_scheme=scheme,
            target=http_proxy.id,
            labels=labels,
            opts=child,
        )

        hosts = [h.host for h in args.hosts]
        self.address = address.address
        # DNS lives at Cloudflare: these are the records to create there.
        self.dns_records = address.address.apply(
            lambda ip: [{"name": host, "type": "A", "content": ip} for host in hosts]
        )
        self.backend_services = {host: backend.name for host, backend in backends.items()}
        self.url_map = url_map.name
        self.security_policy = policy.name if policy is not None else None
        self.register_outputs({
            "address": self.address,
            "dns_records": self.dns_records,
            "backend_services": self.backend_services,
            "url_map": self.url_map,
            "security_policy": self.security_policy,
        })
