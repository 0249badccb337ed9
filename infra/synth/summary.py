"""A readable line per resource: its type, its name and the facts a reviewer checks.

Works on plain graph data only, so it can summarize a graph file from anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Inputs = dict[str, Any]


@dataclass(frozen=True)
class Row:
    type: str  # short type, e.g. cloudrunv2/Service
    name: str  # the physical name where there is one, else the Pulumi name
    facts: str


def short_type(token: str) -> str:
    # gcp:cloudrunv2/service:Service -> cloudrunv2/Service
    if token.count(":") == 2:
        package, module, kind = token.split(":")
        return f"{module.split('/')[0]}/{kind}"
    return token


def _env(container: Inputs) -> dict[str, str]:
    return {e["name"]: e.get("value", "<secret>") for e in container.get("envs", [])}


def _service(i: Inputs) -> str:
    t = i.get("template", {})
    c = (t.get("containers") or [{}])[0]
    env = _env(c)
    scaling = t.get("scaling", {})
    res = c.get("resources", {})
    limits = res.get("limits", {})
    # Brew's app says its role in ROLE; another app (Penpot) only in the role label.
    role_label = (i.get("labels") or {}).get("role")
    facts = [
        f"ROLE={env['ROLE']}" if "ROLE" in env or not role_label else f"role {role_label}",
        f"instances {scaling.get('minInstanceCount', 0)}..{scaling.get('maxInstanceCount', '?')}",
        f"{limits.get('cpu', '?')} vCPU {limits.get('memory', '?')}",
        f"concurrency {t.get('maxInstanceRequestConcurrency', '?')}",
        f"ingress {str(i.get('ingress', '?')).removeprefix('INGRESS_TRAFFIC_').lower()}",
    ]
    if res.get("cpuIdle") is False:
        facts.append("cpu always allocated")
    if t.get("sessionAffinity"):
        facts.append("session affinity")
    if "timeout" in t:
        facts.append(f"timeout {t['timeout']}")
    if "PG_POOL_MAX" in env:
        facts.append(f"pool {env['PG_POOL_MAX']}")
    if "PENPOT_DATABASE_MAX_POOL_SIZE" in env:
        facts.append(f"pool {env['PENPOT_DATABASE_MAX_POOL_SIZE']}")
    if "PENPOT_FLAGS" in env:
        facts.append(f"flags {env['PENPOT_FLAGS']}")
    if "PENPOT_EXPORTER_WORKER_CONCURRENCY" in env:
        facts.append(f"K={env['PENPOT_EXPORTER_WORKER_CONCURRENCY']}")
    facts += [f"{key}={env[key]}" for key in ("STORAGE", "OBJECTS_MIRROR", "OBJECTS_READTHROUGH", "DEMO_MODE")
              if key in env]
    facts.append(f"as {str(t.get('serviceAccount', '?')).split('@')[0]}")
    return ", ".join(facts)


def _job(i: Inputs) -> str:
    t = i.get("template", {}).get("template", {})
    c = (t.get("containers") or [{}])[0]
    return f"runs {' '.join(c.get('commands', []) + c.get('args', []))}, as {str(t.get('serviceAccount', '?')).split('@')[0]}"


def _sql(i: Inputs) -> str:
    s = i.get("settings", {})
    ip = s.get("ipConfiguration", {})
    b = s.get("backupConfiguration", {})
    facts = [
        i.get("databaseVersion", "?"),
        s.get("tier", "?"),
        str(s.get("availabilityType", "?")).lower(),
        "private IP only" if ip.get("ipv4Enabled") is False else "PUBLIC IP",
        "backups" if b.get("enabled") else "no backups",
    ]
    if b.get("pointInTimeRecoveryEnabled"):
        facts.append("point-in-time recovery")
    if i.get("deletionProtection"):
        facts.append("deletion protection")
    return ", ".join(facts)


def _redis(i: Inputs) -> str:
    facts = [str(i.get("redisVersion", "?")), str(i.get("tier", "?")).lower(), f"{i.get('memorySizeGb', '?')} GB",
             "AUTH" if i.get("authEnabled") else "no AUTH",
             "TLS" if i.get("transitEncryptionMode") == "SERVER_AUTHENTICATION" else "no TLS"]
    return ", ".join(facts)


def _bucket(i: Inputs) -> str:
    facts = [i.get("location", "?")]
    facts.append("versioned" if i.get("versioning", {}).get("enabled") else "not versioned")
    if i.get("uniformBucketLevelAccess"):
        facts.append("uniform access")
    if i.get("publicAccessPrevention") == "enforced":
        facts.append("public access prevented")
    return ", ".join(facts)


def _url_map(i: Inputs) -> str:
    if "defaultUrlRedirect" in i:
        return "redirects HTTP to HTTPS"
    matchers = {m["name"]: m.get("defaultService", "?") for m in i.get("pathMatchers", [])}
    routes = []
    for rule in i.get("hostRules", []):
        backend = str(matchers.get(rule.get("pathMatcher"), "?"))
        routes.append(f"{', '.join(rule.get('hosts', []))} -> {_last(backend)}")
    return "; ".join(routes)


def _last(ref: str) -> str:
    return ref.rstrip("/").split("/")[-1]


def _backend(i: Inputs) -> str:
    policy = i.get("securityPolicy")
    return f"Cloud Armor {_last(str(policy))}" if policy else "no Cloud Armor"


def _alert(i: Inputs) -> str:
    return f"{i.get('displayName', '?')} ({len(i.get('conditions', []))} condition(s))"


def _account(i: Inputs) -> str:
    return i.get("displayName", "")


def _iam(i: Inputs) -> str:
    condition = i.get("condition", {}).get("title")
    return f"{i.get('role', '?')} -> {i.get('member', '?')}" + (f" ({condition})" if condition else "")


def _proxy(i: Inputs) -> str:
    return f"SSL policy {_last(str(i['sslPolicy']))}" if i.get("sslPolicy") else ""


def _ssl_policy(i: Inputs) -> str:
    return f"{i.get('profile', '?')}, minimum {i.get('minTlsVersion', '?')}"


def _address(i: Inputs) -> str:
    return str(i.get("address") or i.get("addressType") or "")


FACTS: dict[str, Callable[[Inputs], str]] = {
    "gcp:cloudrunv2/service:Service": _service,
    "gcp:cloudrunv2/job:Job": _job,
    "gcp:sql/databaseInstance:DatabaseInstance": _sql,
    "gcp:storage/bucket:Bucket": _bucket,
    "gcp:redis/instance:Instance": _redis,
    "gcp:compute/uRLMap:URLMap": _url_map,
    "gcp:compute/backendService:BackendService": _backend,
    "gcp:monitoring/alertPolicy:AlertPolicy": _alert,
    "gcp:serviceaccount/account:Account": _account,
    "gcp:projects/iAMMember:IAMMember": _iam,
    "gcp:compute/targetHttpsProxy:TargetHttpsProxy": _proxy,
    "gcp:compute/sSLPolicy:SSLPolicy": _ssl_policy,
    "gcp:compute/globalAddress:GlobalAddress": _address,
}


def physical_name(resource: dict) -> str:
    i = resource["inputs"]
    for key in ("name", "accountId", "secretId", "displayName"):
        if isinstance(i.get(key), str) and i[key]:
            return i[key]
    return resource["name"]


def rows(graph: dict) -> list[Row]:
    """A row per resource whose facts matter, and one row per other type with its count.

    Components are structure, not cloud resources, and are left out.
    """
    out, others = [], {}
    for r in graph["resources"]:
        if not r["type"].startswith("gcp:"):
            continue
        describe = FACTS.get(r["type"])
        if describe is None:
            others.setdefault(short_type(r["type"]), []).append(physical_name(r))
        else:
            out.append(Row(short_type(r["type"]), physical_name(r), describe(r["inputs"])))
    for kind, names in others.items():
        shown = ", ".join(sorted(_last(n) for n in names))
        out.append(Row(kind, f"{len(names)} declared", shown))
    return sorted(out, key=lambda row: (row.type, row.name))
