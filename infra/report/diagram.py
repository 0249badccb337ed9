"""The architecture diagram: what the synthesized stacks declare, as Graphviz DOT and SVG.

Works on plain graph data only (the `out/<stack>.json` shape `brew-infra synth` writes),
so a graph file from anywhere can be drawn. Links between resources come from what the
graphs themselves say: self-links and names in the inputs (URL map -> backend service
-> serverless NEG -> Cloud Run service name), each resource's `dependencies` (a service
depends on the Cloud SQL instance it connects to, and on the secret version holding a
Memorystore instance's URI), the runtime identity
(`template.serviceAccount`) and IAM members (who may read which bucket, log in to which
database). Drawn together, stacks link across clusters by those names; a name no drawn
stack declares becomes a dashed stand-in outside the clusters, so nothing points nowhere.

The DOT text is sorted throughout, so the same graphs always give the same file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Resource = Mapping[str, Any]

SERVICE = "gcp:cloudrunv2/service:Service"
JOB = "gcp:cloudrunv2/job:Job"
SQL_INSTANCE = "gcp:sql/databaseInstance:DatabaseInstance"
SQL_DATABASE = "gcp:sql/database:Database"
SQL_USER = "gcp:sql/user:User"
REDIS = "gcp:redis/instance:Instance"
SECRET_VERSION = "gcp:secretmanager/secretVersion:SecretVersion"
HMAC_KEY = "gcp:storage/hmacKey:HmacKey"
BUCKET = "gcp:storage/bucket:Bucket"
BUCKET_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
ACCOUNT = "gcp:serviceaccount/account:Account"
ACCOUNT_MEMBER = "gcp:serviceaccount/iAMMember:IAMMember"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
SECRET_MEMBER = "gcp:secretmanager/secretIamMember:SecretIamMember"
ADDRESS = "gcp:compute/globalAddress:GlobalAddress"
FORWARDING_RULE = "gcp:compute/globalForwardingRule:GlobalForwardingRule"
PROXIES = ("gcp:compute/targetHttpsProxy:TargetHttpsProxy", "gcp:compute/targetHttpProxy:TargetHttpProxy")
URL_MAP = "gcp:compute/uRLMap:URLMap"
BACKEND = "gcp:compute/backendService:BackendService"
NEG = "gcp:compute/regionNetworkEndpointGroup:RegionNetworkEndpointGroup"
CERTIFICATE = "gcp:compute/managedSslCertificate:ManagedSslCertificate"
SSL_POLICY = "gcp:compute/sSLPolicy:SSLPolicy"

# Kinds in the order a request meets them; nodes are listed in this order in the DOT.
KINDS = ("host", "address", "urlmap", "backend", "service", "job", "database", "cache", "bucket", "identity")
TITLES = {"host": "host", "address": "global address", "urlmap": "URL map", "backend": "backend service",
          "service": "Cloud Run service", "job": "Cloud Run job", "database": "Cloud SQL instance",
          "cache": "Memorystore for Redis", "bucket": "bucket", "identity": "service account"}
NODE_STYLE = {
    "host": 'shape=ellipse, style=filled, fillcolor="#ffffff"',
    "address": 'fillcolor="#e8eaf6"',
    "urlmap": 'fillcolor="#e8eaf6"',
    "backend": 'fillcolor="#e8eaf6"',
    "service": 'fillcolor="#e3f2fd"',
    "job": 'fillcolor="#ede7f6"',
    "database": 'shape=cylinder, style=filled, fillcolor="#fff3e0"',
    "cache": 'shape=cylinder, style=filled, fillcolor="#ffebee"',
    "bucket": 'shape=folder, style=filled, fillcolor="#e8f5e9"',
    "identity": 'shape=note, style=filled, fillcolor="#fce4ec"',
}
EDGE_STYLE = {
    "traffic": 'color="#1565c0", penwidth=1.6',  # how a request reaches a service
    "data": 'color="#ef6c00"',  # what a service or job reads and writes
    "runs_as": 'style=dashed, color="#ad1457"',  # the identity a service or job runs as
    "access": 'style=dotted, color="#6a1b9a"',  # what an identity is granted
}
INGRESS = {"INGRESS_TRAFFIC_ALL": "ingress all", "INGRESS_TRAFFIC_INTERNAL_ONLY": "ingress internal",
           "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER": "ingress internal + load balancer"}
SA_DOMAIN = ".gserviceaccount.com"


class DiagramError(RuntimeError):
    """Graphviz could not turn the DOT file into SVG."""


class GraphvizMissing(DiagramError):
    """The `dot` program is not on PATH."""


@dataclass(frozen=True)
class Ref:
    """Something a node or an edge points at: how to draw it if no drawn stack declares it."""

    key: str  # unique in the diagram: kind plus the cloud identity (project/region/name, email)
    kind: str
    name: str


@dataclass(frozen=True)
class Node:
    key: str
    kind: str
    lines: tuple[str, ...]  # the name, then the facts
    stack: str | None  # the cluster it is drawn in; None: declared by no drawn stack

    @property
    def declared(self) -> bool:
        return self.stack is not None


@dataclass(frozen=True, order=True)
class Edge:
    tail: str
    head: str
    kind: str  # a key of EDGE_STYLE
    label: str


@dataclass(frozen=True)
class Diagram:
    title: str
    stacks: tuple[str, ...]
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]

    def named(self, kind: str, name: str) -> Node:
        """The one node of a kind by its name (the first line of its label)."""
        found = [n for n in self.nodes if n.kind == kind and n.lines[0] == name]
        if len(found) != 1:
            raise KeyError(f"{len(found)} {kind} nodes named {name!r}")
        return found[0]


# --- keys: one per cloud resource, the same whichever stack mentions it ------------------

def service_ref(project: str, region: str, name: str) -> Ref:
    return Ref(f"service:{project}/{region}/{name}", "service", name)


def job_ref(project: str, region: str, name: str) -> Ref:
    return Ref(f"job:{project}/{region}/{name}", "job", name)


def database_ref(project: str, name: str) -> Ref:
    return Ref(f"database:{project}/{name}", "database", name)


def cache_ref(project: str, region: str, name: str) -> Ref:
    return Ref(f"cache:{project}/{region}/{name}", "cache", name)


def bucket_ref(name: str) -> Ref:
    return Ref(f"bucket:{name}", "bucket", name)  # bucket names are global


def identity_ref(email: str) -> Ref:
    return Ref(f"identity:{email}", "identity", email.split("@")[0])


def host_ref(host: str) -> Ref:
    return Ref(f"host:{host}", "host", host)


def _global_ref(kind: str, r: Resource) -> Ref:
    name = _name(r)
    return Ref(f"{kind}:{r['inputs'].get('project', '')}/{name}", kind, name)


# --- reading graph data -----------------------------------------------------------------

@dataclass(frozen=True)
class _Item:
    stack: str
    resource: Resource


class _Index:
    """Every resource of every drawn graph, found by type, by physical name or by URN."""

    def __init__(self, graphs: Sequence[Mapping[str, Any]]):
        # Graph files from elsewhere may leave out empty inputs; everything below reads them.
        self.items = [_Item(str(g.get("stack", "")), {**r, "inputs": r.get("inputs") or {}})
                      for g in graphs for r in g.get("resources", [])]
        self.by_urn = {item.resource.get("urn"): item for item in self.items if item.resource.get("urn")}

    def of(self, *types: str) -> list[_Item]:
        return [item for item in self.items if item.resource["type"] in types]

    def named(self, types: Iterable[str], link: str | None) -> _Item | None:
        """The resource a self-link or name points at (its last path segment is the name)."""
        if not link:
            return None
        wanted = link.rstrip("/").split("/")[-1]
        return next((i for i in self.of(*types) if _name(i.resource) == wanted), None)

    def dependencies(self, r: Resource, *types: str) -> list[_Item]:
        found = (self.by_urn.get(urn) for urn in r.get("dependencies") or ())
        return [item for item in found if item is not None and item.resource["type"] in types]


def _name(r: Resource) -> str:
    inputs = r.get("inputs") or {}
    return str(inputs.get("name") or inputs.get("accountId") or r["name"])


def _project(r: Resource) -> str:
    return str((r.get("inputs") or {}).get("project", ""))


def _container(r: Resource) -> Mapping[str, Any]:
    """The first container of a service (template.containers) or a job (template.template.containers)."""
    template = r["inputs"].get("template") or {}
    template = template.get("template", template) if r["type"] == JOB else template
    return (template.get("containers") or [{}])[0]


def _run_template(r: Resource) -> Mapping[str, Any]:
    template = r["inputs"].get("template") or {}
    return (template.get("template") or {}) if r["type"] == JOB else template


def _env(r: Resource) -> dict[str, str]:
    """Plain environment values (secret references are left out: they name no resource here)."""
    return {str(e.get("name")): str(e["value"]) for e in _container(r).get("envs") or [] if "value" in e}


def _member_email(member: str) -> str | None:
    return member.removeprefix("serviceAccount:") if member.startswith("serviceAccount:") else None


def _account_email(r: Resource) -> str:
    return f"{r['inputs'].get('accountId', r['name'])}@{_project(r)}.iam{SA_DOMAIN}"


def _short_role(role: str) -> str:
    return role.removeprefix("roles/")


# --- facts: the lines under each node's name ---------------------------------------------

def _run_facts(r: Resource) -> list[str]:
    template, container, env = _run_template(r), _container(r), _env(r)
    labels = r["inputs"].get("labels") or {}
    facts = [TITLES["job" if r["type"] == JOB else "service"]]
    role = env.get("ROLE") or labels.get("role")  # ROLE is what the app reads; the label is a copy
    if role:
        facts.append(f"role {role}")
    if r["type"] == SERVICE:
        scaling = template.get("scaling") or {}
        # Cloud Run's defaults when unset: no minimum, its own maximum.
        facts.append(f"instances {scaling.get('minInstanceCount', 0)}..{scaling.get('maxInstanceCount', 'default')}")
    limits = (container.get("resources") or {}).get("limits") or {}
    if limits:
        facts.append(f"{limits.get('cpu', '?')} vCPU, {limits.get('memory', '?')}")
    if (container.get("resources") or {}).get("cpuIdle") is False:
        facts.append("CPU always allocated")
    if env.get("PENPOT_FLAGS"):
        facts.append(f"flags {env['PENPOT_FLAGS']}")
    if "PENPOT_EXPORTER_WORKER_CONCURRENCY" in env:
        facts.append(f"K = {env['PENPOT_EXPORTER_WORKER_CONCURRENCY']} pollers")
    if r["type"] == SERVICE and r["inputs"].get("ingress") in INGRESS:
        facts.append(INGRESS[r["inputs"]["ingress"]])
    if r["type"] == JOB and container.get("commands"):
        facts.append(" ".join(str(c) for c in [*container["commands"], *(container.get("args") or [])]))
    return facts


def _database_facts(r: Resource, databases: list[str]) -> list[str]:
    inputs = r["inputs"]
    settings = inputs.get("settings") or {}
    flags = {f.get("name"): f.get("value") for f in settings.get("databaseFlags") or []}
    facts = [f"{TITLES['database']}, {inputs.get('databaseVersion', '?')}", f"tier {settings.get('tier', '?')}",
             "HA (regional)" if settings.get("availabilityType") == "REGIONAL" else "zonal"]
    if databases:
        facts.append(f"databases {', '.join(sorted(databases))}")
    if "max_connections" in flags:
        facts.append(f"max_connections {flags['max_connections']}")
    if (settings.get("ipConfiguration") or {}).get("ipv4Enabled") is False:
        facts.append("private IP only")
    return facts


def _cache_facts(r: Resource) -> list[str]:
    inputs = r["inputs"]
    tier = "HA (standard)" if inputs.get("tier") == "STANDARD_HA" else "basic (one node)"
    facts = [f"{TITLES['cache']}, {inputs.get('redisVersion', '?')}", f"{tier}, {inputs.get('memorySizeGb', '?')} GB",
             "AUTH on" if inputs.get("authEnabled") else "AUTH off"]
    if inputs.get("transitEncryptionMode") == "SERVER_AUTHENTICATION":
        facts.append("TLS")
    return facts


def _bucket_facts(r: Resource) -> list[str]:
    inputs = r["inputs"]
    facts = [f"bucket, {inputs.get('location', '?')}",
             "versioning on" if (inputs.get("versioning") or {}).get("enabled") else "versioning off"]
    if inputs.get("publicAccessPrevention") == "enforced":
        facts.append("public access prevented")
    return facts


def _project_role(r: Resource) -> str:
    role = _short_role(r["inputs"].get("role", "?"))
    condition = (r["inputs"].get("condition") or {}).get("title")
    return f"{role} ({condition})" if condition else role


WORKLOAD_POOL = re.compile(r"workloadIdentityPools/([^/]+)(?:/attribute\.([^/]+)/(.+))?")


def _workload_identity(member: str) -> str | None:
    """'workload identity pool github, repository joinsquareup/brew' from a principalSet member."""
    match = WORKLOAD_POOL.search(member)
    if not match:
        return None
    pool, attribute, value = match.groups()
    return f"workload identity pool {pool}" + (f", {attribute} {value}" if attribute else "")


# --- building the diagram ---------------------------------------------------------------

class _Builder:
    def __init__(self, index: _Index):
        self.index = index
        self.nodes: dict[str, Node] = {}
        self.refs: dict[str, Ref] = {}
        self.edges: set[Edge] = set()

    def add(self, ref: Ref, stack: str, facts: Sequence[str]) -> None:
        # The first declaration wins: stacks are read in sorted order, so the choice is stable.
        self.nodes.setdefault(ref.key, Node(ref.key, ref.kind, (ref.name, *facts), stack))

    def link(self, tail: Ref, head: Ref, kind: str, label: str) -> None:
        self.refs.setdefault(tail.key, tail)
        self.refs.setdefault(head.key, head)
        self.edges.add(Edge(tail.key, head.key, kind, label))

    def stand_ins(self) -> list[Node]:
        """A dashed node for every name an edge points at that no drawn stack declares."""
        return [Node(ref.key, ref.kind, (ref.name, TITLES[ref.kind], "not in this diagram"), None)
                for key, ref in self.refs.items() if key not in self.nodes]


def build(graphs: Sequence[Mapping[str, Any]]) -> Diagram:
    """The diagram of one or more synthesized graphs (each as `out/<stack>.json` holds it)."""
    ordered = sorted(graphs, key=lambda g: str(g.get("stack", "")))
    builder = _Builder(_Index(ordered))
    _add_edge_stack(builder)
    _add_runtimes(builder)
    _add_databases(builder)
    _add_caches(builder)
    _add_buckets(builder)
    _add_identities(builder)
    nodes = [*builder.nodes.values(), *builder.stand_ins()]
    stacks = tuple(str(g.get("stack", "")) for g in ordered)
    projects = sorted({str(g.get("project", "")) for g in ordered} - {""})
    title = f"{', '.join(projects) or 'architecture'}: stacks {', '.join(stacks)}"
    return Diagram(title, stacks, tuple(sorted(nodes, key=_node_order)), tuple(sorted(builder.edges)))


def _node_order(node: Node) -> tuple[int, str]:
    return KINDS.index(node.kind), node.key


def _add_edge_stack(b: _Builder) -> None:
    """Hosts -> global address -> URL map -> backend services (with Armor) -> Cloud Run services."""
    certified = {d for item in b.index.of(CERTIFICATE)
                 for d in (item.resource["inputs"].get("managed") or {}).get("domains") or []}
    entrances = _entrances(b)
    for item in b.index.of(URL_MAP):
        r = item.resource
        if r["inputs"].get("defaultUrlRedirect"):
            continue  # the port-80 redirect: a fact on the address, not a routing table
        urlmap = _global_ref("urlmap", r)
        facts = [TITLES["urlmap"]]
        if r["inputs"].get("defaultService"):
            facts.append(f"default -> {r['inputs']['defaultService'].split('/')[-1]}")
        b.add(urlmap, item.stack, facts)
        for address, how in entrances.get(urlmap.key, []):
            b.link(address, urlmap, "traffic", how)
        matchers = {m.get("name"): m for m in r["inputs"].get("pathMatchers") or []}
        for rule in r["inputs"].get("hostRules") or []:
            matcher = matchers.get(rule.get("pathMatcher"), {})
            for host in rule.get("hosts") or []:
                b.add(host_ref(host), item.stack, ["managed TLS certificate"] if host in certified else [])
                for address, _ in entrances.get(urlmap.key, []):
                    b.link(host_ref(host), address, "traffic", "DNS A")
                if urlmap.key not in entrances:  # no forwarding rule drawn: the host still leads somewhere
                    b.link(host_ref(host), urlmap, "traffic", "host rule")
            for service in _matcher_services(matcher):
                backend = b.index.named([BACKEND], service)
                if backend is not None:
                    b.link(urlmap, _global_ref("backend", backend.resource), "traffic",
                           ", ".join(sorted(rule.get("hosts") or [])))
    for item in b.index.of(BACKEND):
        _add_backend(b, item)


def _matcher_services(matcher: Mapping[str, Any]) -> list[str]:
    paths = [rule.get("service") for rule in matcher.get("pathRules") or []]
    return sorted({s for s in [matcher.get("defaultService"), *paths] if s})


def _entrances(b: _Builder) -> dict[str, list[tuple[Ref, str]]]:
    """URL map key -> [(address, 'port 443 HTTPS, TLS_1_2 minimum')], one per forwarding rule.

    Also draws the external addresses, with the ports that only redirect as a fact."""
    reaching: dict[str, list[tuple[Ref, str]]] = defaultdict(list)
    redirects: dict[str, list[str]] = defaultdict(list)
    addresses: dict[str, tuple[_Item, Ref]] = {}
    for rule in b.index.of(FORWARDING_RULE):
        # The rule's ipAddress is the address's value, known only after creation: follow the dependency.
        found = b.index.dependencies(rule.resource, ADDRESS)
        item = found[0] if found else b.index.named([ADDRESS], rule.resource["inputs"].get("ipAddress"))
        proxy = b.index.named(PROXIES, rule.resource["inputs"].get("target"))
        urlmap = proxy and b.index.named([URL_MAP], proxy.resource["inputs"].get("urlMap"))
        if item is None or urlmap is None:
            continue
        address = _global_ref("address", item.resource)
        addresses[address.key] = (item, address)
        port = rule.resource["inputs"].get("portRange", "?")
        if urlmap.resource["inputs"].get("defaultUrlRedirect"):
            redirects[address.key].append(f"port {port} redirects to HTTPS")
            continue
        https = proxy.resource["type"] == PROXIES[0]
        policy = b.index.named([SSL_POLICY], proxy.resource["inputs"].get("sslPolicy"))
        tls = f", {policy.resource['inputs'].get('minTlsVersion')} minimum" if policy else ""
        reaching[_global_ref("urlmap", urlmap.resource).key].append(
            (address, f"port {port} {'HTTPS' if https else 'HTTP'}{tls}"))
    for key, (item, address) in addresses.items():
        kind = item.resource["inputs"].get("addressType", "EXTERNAL")
        b.add(address, item.stack, [f"{TITLES['address']}, {kind}", *sorted(redirects[key])])
    return reaching


def _add_backend(b: _Builder, item: _Item) -> None:
    r = item.resource
    backend = _global_ref("backend", r)
    armor = r["inputs"].get("securityPolicy")
    b.add(backend, item.stack, [f"{TITLES['backend']}, {r['inputs'].get('protocol', '?')}",
                                f"Cloud Armor {armor.split('/')[-1]}" if armor else "no Cloud Armor"])
    for group in r["inputs"].get("backends") or []:
        neg = b.index.named([NEG], group.get("group"))
        service = neg and (neg.resource["inputs"].get("cloudRun") or {}).get("service")
        if service:
            target = service_ref(_project(neg.resource), neg.resource["inputs"].get("region", ""), service)
            b.link(backend, target, "traffic", f"serverless NEG {_name(neg.resource)}")


def _run_ref(r: Resource) -> Ref:
    make = job_ref if r["type"] == JOB else service_ref
    return make(_project(r), str(r["inputs"].get("location", "")), _name(r))


def _add_runtimes(b: _Builder) -> None:
    """Cloud Run services and jobs: what they run as, the database they use, their buckets."""
    buckets = {_name(i.resource) for i in b.index.of(BUCKET)}
    grants = _bucket_grants(b.index)
    for item in b.index.of(SERVICE, JOB):
        r = item.resource
        run = _run_ref(r)
        b.add(run, item.stack, _run_facts(r))
        email = _run_template(r).get("serviceAccount")
        if email:
            b.link(run, identity_ref(email), "runs_as", "runs as")
        for database in _databases_of(b.index, r):
            b.link(run, database, "data", _connection_label(_env(r)))
        for cache, how in _caches_of(b.index, r):
            b.link(run, cache, "data", how)
        # A bucket is the service's when the service names it, or when the identity it runs
        # as is granted the bucket in the same stack (the demo finds its bucket that way).
        named = {v for v in _env(r).values() if v in buckets}
        named |= {_name(i.resource) for i in b.index.dependencies(r, BUCKET)}
        named |= {bucket for bucket, _ in grants.get((item.stack, email), [])}
        for bucket in sorted(named):
            b.link(run, bucket_ref(bucket), "data", "objects")


def _databases_of(index: _Index, r: Resource) -> list[Ref]:
    """The Cloud SQL instances a service or job depends on (directly or through a database)."""
    refs = [database_ref(_project(i.resource), _name(i.resource)) for i in index.dependencies(r, SQL_INSTANCE)]
    refs += [database_ref(_project(i.resource), str(i.resource["inputs"].get("instance", "")))
             for i in index.dependencies(r, SQL_DATABASE)]
    return sorted(set(refs), key=lambda ref: ref.key)


def _connection_label(env: Mapping[str, str]) -> str:
    # Brew's app reads PG*; Penpot's backend PENPOT_DATABASE_* (its URI ends in the database).
    database = env.get("PGDATABASE") or env.get("PENPOT_DATABASE_URI", "").rpartition("/")[2]
    parts = [f"db {database}" if database else "db"]
    pool = env.get("PG_POOL_MAX") or env.get("PENPOT_DATABASE_MAX_POOL_SIZE")
    if pool:
        parts.append(f"pool {pool}")
    user = env.get("PGUSER") or env.get("PENPOT_DATABASE_USERNAME")
    if user:
        parts.append(f"as {user.split('@')[0]}")
    return ", ".join(parts)


def _caches_of(index: _Index, r: Resource) -> list[tuple[Ref, str]]:
    """The Memorystore instances a service uses: directly depended on, or through a secret
    version holding one's connection URI (the env var that reads it labels the edge)."""
    secret_env = {str(((e.get("valueSource") or {}).get("secretKeyRef") or {}).get("secret", "")): str(e.get("name"))
                  for e in _container(r).get("envs") or [] if "valueSource" in e}
    found: dict[str, tuple[Ref, str]] = {}
    for item in index.dependencies(r, REDIS):
        ref = _cache_ref(item.resource)
        found[ref.key] = (ref, "redis")
    for version in index.dependencies(r, SECRET_VERSION):
        how = secret_env.get(str(version.resource["inputs"].get("secret", "")), "redis")
        for item in index.dependencies(version.resource, REDIS):
            ref = _cache_ref(item.resource)
            found[ref.key] = (ref, how)
    return sorted(found.values(), key=lambda pair: pair[0].key)


def _cache_ref(r: Resource) -> Ref:
    return cache_ref(_project(r), str(r["inputs"].get("region", "")), _name(r))


def _bucket_grants(index: _Index) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(stack, identity email) -> [(bucket, role)] from bucket IAM members."""
    grants: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for item in index.of(BUCKET_MEMBER):
        inputs = item.resource["inputs"]
        email = _member_email(str(inputs.get("member", "")))
        if email:
            grants[(item.stack, email)].append((str(inputs.get("bucket", "")), _short_role(inputs.get("role", "?"))))
    return grants


def _add_databases(b: _Builder) -> None:
    databases: dict[tuple[str, str], list[str]] = defaultdict(list)
    for item in b.index.of(SQL_DATABASE):
        inputs = item.resource["inputs"]
        databases[(_project(item.resource), str(inputs.get("instance", "")))].append(_name(item.resource))
    for item in b.index.of(SQL_INSTANCE):
        r = item.resource
        b.add(database_ref(_project(r), _name(r)), item.stack,
              _database_facts(r, databases[(_project(r), _name(r))]))


def _add_caches(b: _Builder) -> None:
    for item in b.index.of(REDIS):
        b.add(_cache_ref(item.resource), item.stack, _cache_facts(item.resource))


def _add_buckets(b: _Builder) -> None:
    for item in b.index.of(BUCKET):
        b.add(bucket_ref(_name(item.resource)), item.stack, _bucket_facts(item.resource))


def _add_identities(b: _Builder) -> None:
    """Service accounts with their project roles and secrets; edges for what else they may use."""
    roles: dict[str, list[str]] = defaultdict(list)
    secrets: dict[str, set[str]] = defaultdict(set)
    used_from: dict[str, list[str]] = defaultdict(list)
    for item in b.index.of(PROJECT_MEMBER):
        email = _member_email(str(item.resource["inputs"].get("member", "")))
        if email:
            roles[email].append(_project_role(item.resource))
    for item in b.index.of(SECRET_MEMBER):
        email = _member_email(str(item.resource["inputs"].get("member", "")))
        if email:
            secrets[email].add(str(item.resource["inputs"].get("secretId", "")))
    hmac = {str(item.resource["inputs"].get("serviceAccountEmail", "")) for item in b.index.of(HMAC_KEY)}
    for (_, email), granted in _bucket_grants(b.index).items():
        for bucket, role in granted:
            b.link(identity_ref(email), bucket_ref(bucket), "access", role)
    for item in b.index.of(SQL_USER):
        inputs = item.resource["inputs"]
        if inputs.get("type") == "CLOUD_IAM_SERVICE_ACCOUNT":
            # Cloud SQL names an IAM database user by the email without ".gserviceaccount.com".
            login = identity_ref(f"{inputs.get('name', '')}{SA_DOMAIN}")
            b.link(login, database_ref(_project(item.resource), str(inputs.get("instance", ""))), "access",
                   "IAM database login")
    for item in b.index.of(ACCOUNT_MEMBER):
        inputs = item.resource["inputs"]
        target = str(inputs.get("serviceAccountId", "")).split("/")[-1]
        member = str(inputs.get("member", ""))
        email, pool = _member_email(member), _workload_identity(member)
        if email and target:
            b.link(identity_ref(email), identity_ref(target), "access", "acts as")
        elif pool and target:
            used_from[target].append(pool)
    for item in b.index.of(ACCOUNT):
        r, email = item.resource, _account_email(item.resource)
        facts = [TITLES["identity"], *([r["inputs"]["displayName"]] if r["inputs"].get("displayName") else []),
                 *sorted(set(used_from[email])), *sorted(set(roles[email]))]
        if secrets[email]:
            facts.append(f"reads {len(secrets[email])} secrets")
        if email in hmac:
            facts.append("HMAC key (S3 API)")
        b.add(identity_ref(email), item.stack, facts)


# --- DOT --------------------------------------------------------------------------------

def escape(text: str) -> str:
    """Text for inside a DOT double-quoted string, kept literal.

    Backslash and double quote are escaped; a newline becomes DOT's line break; `&`
    becomes `&amp;` because Graphviz decodes HTML entities in plain labels."""
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("&", "&amp;")
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n")


def quote(text: str) -> str:
    return f'"{escape(text)}"'


def _label(lines: Iterable[str]) -> str:
    return '"' + "\\n".join(escape(line) for line in lines) + '"'


def _node_line(node: Node, indent: str) -> str:
    style = NODE_STYLE[node.kind] if node.declared else 'style=dashed, fillcolor="#ffffff"'
    if node.kind == "host" and not node.declared:
        style = "shape=ellipse, style=dashed"
    return f"{indent}{quote(node.key)} [label={_label(node.lines)}, {style}];"


def to_dot(diagram: Diagram) -> str:
    """The diagram as Graphviz DOT: a cluster per stack, then the stand-ins, then the edges."""
    lines = [
        "// Generated by `brew-infra diagram` from synthesized graphs; regenerate rather than edit.",
        f"digraph {quote(diagram.title)} {{",
        f'  graph [label={_label([diagram.title])}, labelloc=t, fontname="Helvetica", fontsize=14, '
        'rankdir=LR, newrank=true, nodesep=0.25, ranksep=0.9];',
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]
    for stack in diagram.stacks:
        lines += [f"  subgraph {quote('cluster_' + stack)} {{",
                  f'    graph [label={_label(["stack " + stack])}, style=rounded, color="#9e9e9e"];']
        lines += [_node_line(n, "    ") for n in diagram.nodes if n.stack == stack]
        lines.append("  }")
    lines += [_node_line(n, "  ") for n in diagram.nodes if not n.declared]
    lines += [f"  {quote(e.tail)} -> {quote(e.head)} [label={_label([e.label])}, {EDGE_STYLE[e.kind]}];"
              for e in diagram.edges]
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- files ------------------------------------------------------------------------------

def file_stem(stacks: Sequence[str], every_stack: bool) -> str:
    """`diagram` for --all; otherwise the drawn stacks, sorted, joined by '+' (edge+prod)."""
    # A graph file names its own stack: keep that name from leaving the output folder.
    safe = (re.sub(r"[^A-Za-z0-9_.-]", "_", stack).lstrip(".") or "_" for stack in stacks)
    return "diagram" if every_stack else "+".join(sorted(safe))


def write_dot(diagram: Diagram, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_dot(diagram))
    return path


def render_svg(dot_path: Path, svg_path: Path) -> Path:
    """Render with Graphviz's `dot`; raise GraphvizMissing when it is not installed."""
    # A stale SVG next to a fresh DOT would show an old architecture as the current one.
    svg_path.unlink(missing_ok=True)
    dot = shutil.which("dot")
    if dot is None:
        raise GraphvizMissing(f"wrote {dot_path} but cannot render {svg_path}: Graphviz's `dot` is not "
                              "installed (apt-get install graphviz)")
    result = subprocess.run([dot, "-Tsvg", "-o", str(svg_path), str(dot_path)], capture_output=True, text=True,
                            timeout=120, check=False)
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[0]
        raise DiagramError(f"Graphviz's dot could not render {dot_path}: {reason}")
    return svg_path
