"""Every row of SPEC section 3, checked on the synthesized stacks (Pulumi's mock runtime)."""

from __future__ import annotations

import pytest

from tests.graphs import env_of, one, physical, service, template_container

PROJECT = "squareup-brew"
PROD_RUNTIME = f"brew-prod-runtime@{PROJECT}.iam.gserviceaccount.com"
RUNTIME = f"brew-runtime@{PROJECT}.iam.gserviceaccount.com"


# --- 3.1 prod -------------------------------------------------------------------------

def test_prod_web(graphs):
    web = service(graphs["prod"], "brew-web")
    t = web["inputs"]["template"]
    env = env_of(web)
    assert env["ROLE"] == "web"
    assert (t["scaling"]["minInstanceCount"], t["scaling"]["maxInstanceCount"]) == (2, 10)
    assert template_container(web)["resources"]["limits"] == {"cpu": "2", "memory": "2Gi"}
    assert t["maxInstanceRequestConcurrency"] == 80
    assert t["sessionAffinity"] is True
    assert web["inputs"]["ingress"] == "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"
    assert env["PG_POOL_MAX"] == "5"
    assert t["serviceAccount"] == PROD_RUNTIME
    assert web["inputs"]["location"] == "asia-south1"


def test_prod_worker(graphs):
    worker = service(graphs["prod"], "brew-worker")
    t = worker["inputs"]["template"]
    env = env_of(worker)
    assert env["ROLE"] == "worker"
    assert (t["scaling"]["minInstanceCount"], t["scaling"]["maxInstanceCount"]) == (1, 1)
    assert template_container(worker)["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}
    assert template_container(worker)["resources"]["cpuIdle"] is False  # CPU always allocated
    assert worker["inputs"]["ingress"] == "INGRESS_TRAFFIC_INTERNAL_ONLY"
    assert env["PG_POOL_MAX"] == "10"
    assert t["serviceAccount"] == PROD_RUNTIME


def test_prod_common_env(graphs):
    for name in ("brew-web", "brew-worker"):
        env = env_of(service(graphs["prod"], name))
        assert env["AI_PROVIDER"] == "gemini"
        assert env["RETIRE_OFF"] == "1"
        assert env["GEMINI_MODEL_PLAYS"] == "gemini-3.1-pro-preview"
        assert env["GEMINI_MODEL_DEFAULT"] == "gemini-3.5-flash"
        assert env["STORAGE"] == "pg"


def test_prod_ops_job_runs_as_brew_runtime_through_a_monitoring_login(graphs):
    job = one(graphs["prod"], "gcp:cloudrunv2/job:Job", "brew-ops")
    t = job["inputs"]["template"]["template"]
    assert t["serviceAccount"] == RUNTIME
    container = t["containers"][0]
    assert container.get("commands", []) + container.get("args", []) == ["node", "db/status.mjs"]
    env = {e["name"]: e.get("value") for e in container["envs"]}
    assert env["PGUSER"] == f"brew-runtime@{PROJECT}.iam"
    # brew-runtime's login on brew-prod exists, as an IAM user (the pg_monitor grant is SQL).
    users = [u["inputs"]["name"] for u in graphs["prod"]["resources"] if u["type"] == "gcp:sql/user:User"]
    assert f"brew-runtime@{PROJECT}.iam" in users
    assert "schedule" not in str(job["inputs"]).lower()


def test_prod_database(graphs):
    db = one(graphs["prod"], "gcp:sql/databaseInstance:DatabaseInstance", "brew-prod")
    i = db["inputs"]
    s = i["settings"]
    assert i["databaseVersion"] == "POSTGRES_17"
    assert s["availabilityType"] == "REGIONAL"
    assert s["ipConfiguration"]["ipv4Enabled"] is False
    assert s["ipConfiguration"]["privateNetwork"] == f"projects/{PROJECT}/global/networks/brew-vpc"
    assert s["backupConfiguration"]["enabled"] is True
    assert s["backupConfiguration"]["pointInTimeRecoveryEnabled"] is True
    assert i["deletionProtection"] is True


def test_prod_bucket(graphs):
    b = one(graphs["prod"], "gcp:storage/bucket:Bucket", "brew-prod")["inputs"]
    assert b["versioning"]["enabled"] is True
    assert b["uniformBucketLevelAccess"] is True
    assert b["publicAccessPrevention"] == "enforced"


def test_prod_alerts(graphs):
    policies = {p["inputs"]["displayName"]: p for p in graphs["prod"]["resources"]
                if p["type"] == "gcp:monitoring/alertPolicy:AlertPolicy"}
    assert set(policies) == {
        "worker lost its lease",
        "oldest queued job waits over 10 minutes",
        "Postgres connections above 160",
        "more than 3 brands waited over 30 minutes",
    }
    connections = policies["Postgres connections above 160"]["inputs"]["conditions"][0]["conditionThreshold"]
    assert "cloudsql.googleapis.com/database/postgresql/num_backends" in connections["filter"]
    assert f'database_id="{PROJECT}:brew-prod"' in connections["filter"]
    assert connections["thresholdValue"] == 160
    lease = policies["worker lost its lease"]["inputs"]["conditions"]
    assert any("logging.googleapis.com/user/brew/worker_lease_lost" in str(c) for c in lease)
    assert any("container/instance_count" in str(c) and "conditionAbsent" in c for c in lease)
    for policy in policies.values():
        assert policy["inputs"]["documentation"]["content"].strip()
    descriptors = {d["inputs"]["type"] for d in graphs["prod"]["resources"]
                   if d["type"] == "gcp:monitoring/metricDescriptor:MetricDescriptor"}
    assert descriptors == {"custom.googleapis.com/brew/queue/oldest_wait_seconds",
                           "custom.googleapis.com/brew/builds/brands_waiting"}


# --- 3.2 staging ----------------------------------------------------------------------

def test_staging_service(graphs):
    feed = service(graphs["staging"], "shopos-feed")
    t = feed["inputs"]["template"]
    env = env_of(feed)
    assert env["ROLE"] == "web,worker"
    assert (t["scaling"]["minInstanceCount"], t["scaling"]["maxInstanceCount"]) == (1, 1)
    assert template_container(feed)["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}
    assert template_container(feed)["resources"]["cpuIdle"] is False
    assert t["timeout"] == "3600s"
    assert t["maxInstanceRequestConcurrency"] == 200
    assert env["STORAGE"] == "pg"
    assert (env["OBJECTS_MIRROR"], env["OBJECTS_READTHROUGH"]) == ("1", "1")
    assert t["serviceAccount"] == RUNTIME


def test_staging_database_and_bucket(graphs):
    db = one(graphs["staging"], "gcp:sql/databaseInstance:DatabaseInstance", "brew-staging")["inputs"]
    assert db["databaseVersion"] == "POSTGRES_17"
    assert db["settings"]["availabilityType"] == "ZONAL"
    assert db["settings"]["ipConfiguration"]["ipv4Enabled"] is False
    one(graphs["staging"], "gcp:storage/bucket:Bucket", "brew-prototype")
    assert graphs["staging"]["outputs"]["mirrorSunset"] == "2026-11-25"
    # On the service too, where a check of the declared resources alone can read it.
    assert service(graphs["staging"], "shopos-feed")["inputs"]["labels"]["mirror-sunset"] == "2026-11-25"


# --- 3.3 demo -------------------------------------------------------------------------

def test_demo(graphs):
    demo = service(graphs["demo"], "brew-demo")
    t = demo["inputs"]["template"]
    env = env_of(demo)
    assert env["DEMO_MODE"] == "1"
    assert (t["scaling"]["minInstanceCount"], t["scaling"]["maxInstanceCount"]) == (1, 1)
    assert env["GEMINI_MODEL_PLAYS"] == env["GEMINI_MODEL_DEFAULT"] == "gemini-3.5-flash"
    assert env["STORAGE"] == "bucket"
    assert "PGHOST" not in env
    assert t["serviceAccount"] == RUNTIME
    assert not [r for r in graphs["demo"]["resources"] if r["type"].startswith("gcp:sql/")]
    one(graphs["demo"], "gcp:storage/bucket:Bucket", "brew-prototype-demo")
    # brew-runtime is created by staging; the demo only refers to it.
    assert not [r for r in graphs["demo"]["resources"] if r["type"] == "gcp:serviceaccount/account:Account"]


# --- 3.4 edge -------------------------------------------------------------------------

def test_edge_url_map_routes_three_hosts(graphs):
    maps = [m for m in graphs["edge"]["resources"] if m["type"] == "gcp:compute/uRLMap:URLMap"]
    main = next(m for m in maps if m["inputs"]["name"] == "squareup-urlmap")["inputs"]
    matchers = {m["name"]: m["defaultService"] for m in main["pathMatchers"]}
    routes = {h: matchers[r["pathMatcher"]] for r in main["hostRules"] for h in r["hosts"]}
    backends = {b["urn"]: b for b in graphs["edge"]["resources"]
                if b["type"] == "gcp:compute/backendService:BackendService"}
    negs = {n["inputs"]["cloudRun"]["service"] for n in graphs["edge"]["resources"]
            if n["type"] == "gcp:compute/regionNetworkEndpointGroup:RegionNetworkEndpointGroup"}
    assert set(routes) == {"feed.joinsquareup.com", "brew.joinsquareup.com", "demo.joinsquareup.com"}
    assert negs == {"brew-web", "shopos-feed", "brew-demo"}
    assert len(backends) == 3


def test_armor_on_the_production_backend_only(graphs):
    backends = [b["inputs"] for b in graphs["edge"]["resources"]
                if b["type"] == "gcp:compute/backendService:BackendService"]
    armored = [b for b in backends if b.get("securityPolicy")]
    assert len(armored) == 1
    assert "feed" in armored[0]["name"] or "brew-web" in armored[0]["name"]
    assert armored[0]["description"].endswith("environment=prod")
    assert sorted(b["description"].rsplit("=", 1)[1] for b in backends) == ["demo", "prod", "staging"]
    policy = one(graphs["edge"], "gcp:compute/securityPolicy:SecurityPolicy", "brew-prod-armor")
    assert policy


def test_tls_and_redirect(graphs):
    edge = graphs["edge"]
    certs = [c for c in edge["resources"] if c["type"] == "gcp:compute/managedSslCertificate:ManagedSslCertificate"]
    domains = sorted(d for c in certs for d in c["inputs"]["managed"]["domains"])
    assert domains == ["brew.joinsquareup.com", "demo.joinsquareup.com", "feed.joinsquareup.com"]
    ssl = one(edge, "gcp:compute/sSLPolicy:SSLPolicy", "squareup-tls12")["inputs"]
    assert ssl["minTlsVersion"] == "TLS_1_2"
    proxy = next(p for p in edge["resources"] if p["type"] == "gcp:compute/targetHttpsProxy:TargetHttpsProxy")
    assert proxy["inputs"].get("sslPolicy")
    redirect = next(m for m in edge["resources"] if m["type"] == "gcp:compute/uRLMap:URLMap"
                    and "defaultUrlRedirect" in m["inputs"])
    assert redirect["inputs"]["defaultUrlRedirect"]["httpsRedirect"] is True
    ports = sorted(str(r["inputs"]["portRange"]) for r in edge["resources"]
                   if r["type"] == "gcp:compute/globalForwardingRule:GlobalForwardingRule")
    assert ports == ["443", "80"]


def test_global_address_and_dns_records(graphs):
    one(graphs["edge"], "gcp:compute/globalAddress:GlobalAddress", "squareup-ip")
    records = graphs["edge"]["outputs"]["dnsRecords"]
    assert sorted(r["name"] for r in records) == ["brew.joinsquareup.com", "demo.joinsquareup.com",
                                                 "feed.joinsquareup.com"]
    assert {r["type"] for r in records} == {"A"}


def test_network_private_services_range(graphs):
    edge = graphs["edge"]
    psa = next(a["inputs"] for a in edge["resources"] if a["type"] == "gcp:compute/globalAddress:GlobalAddress"
               and a["inputs"].get("purpose") == "VPC_PEERING")
    assert (psa["address"], psa["prefixLength"]) == ("172.30.0.0", 20)
    one(edge, "gcp:servicenetworking/connection:Connection", None)


# --- 3.5 identities -------------------------------------------------------------------

def test_both_runtime_identities_and_the_deployer(graphs):
    assert physical(graphs["prod"], "gcp:serviceaccount/account:Account") >= {"brew-prod-runtime", "brew-deployer"}
    assert physical(graphs["staging"], "gcp:serviceaccount/account:Account") == {"brew-runtime"}


def test_brew_runtime_cannot_read_production_secrets_or_bucket(graphs):
    prod = graphs["prod"]
    for r in prod["resources"]:
        if r["type"] in ("gcp:secretmanager/secretIamMember:SecretIamMember",
                         "gcp:storage/bucketIAMMember:BucketIAMMember"):
            assert r["inputs"]["member"] == f"serviceAccount:{PROD_RUNTIME}", r["urn"]


def test_production_secrets_are_containers_only(graphs):
    prod = graphs["prod"]
    secrets = [r for r in prod["resources"] if r["type"] == "gcp:secretmanager/secret:Secret"]
    assert len(secrets) == 14
    assert not [r for r in prod["resources"] if r["type"] == "gcp:secretmanager/secretVersion:SecretVersion"]


def test_deployer_uses_workload_identity_federation(graphs):
    prod = graphs["prod"]
    provider = next(r for r in prod["resources"]
                    if r["type"] == "gcp:iam/workloadIdentityPoolProvider:WorkloadIdentityPoolProvider")
    assert provider["inputs"]["oidc"]["issuerUri"] == "https://token.actions.githubusercontent.com"
    assert "joinsquareup/brew" in provider["inputs"]["attributeCondition"]
    assert not [r for r in prod["resources"] if r["type"] == "gcp:serviceaccount/key:Key"]


# --- every resource -------------------------------------------------------------------

LABELLED = {
    "gcp:cloudrunv2/service:Service": "labels",
    "gcp:cloudrunv2/job:Job": "labels",
    "gcp:storage/bucket:Bucket": "labels",
    "gcp:secretmanager/secret:Secret": "labels",
    "gcp:compute/globalAddress:GlobalAddress": "labels",
    "gcp:compute/globalForwardingRule:GlobalForwardingRule": "labels",
    "gcp:monitoring/alertPolicy:AlertPolicy": "userLabels",
}


@pytest.mark.parametrize("stack", ["prod", "staging", "demo", "edge"])
def test_every_labelled_resource_carries_environment_service_and_managed_by(graphs, stack):
    checked = 0
    for r in graphs[stack]["resources"]:
        key = LABELLED.get(r["type"])
        labels = r["inputs"].get(key) if key else None
        if r["type"] == "gcp:sql/databaseInstance:DatabaseInstance":
            labels = r["inputs"]["settings"].get("userLabels")
        if key or r["type"] == "gcp:sql/databaseInstance:DatabaseInstance":
            checked += 1
            assert labels and {"environment", "service", "managed-by"} <= set(labels), r["urn"]
            assert labels["environment"] == stack and labels["managed-by"] == "pulumi"
    assert checked > 0


def test_the_deployer_reads_staging_s_mirror_and_nothing_more(graphs):
    deployer = f"serviceAccount:brew-deployer@{PROJECT}.iam.gserviceaccount.com"
    staging = graphs["staging"]
    grants = {(r["inputs"]["role"], r["inputs"]["member"]) for r in staging["resources"]
              if r["type"] == "gcp:storage/bucketIAMMember:BucketIAMMember"}
    assert ("roles/storage.objectViewer", deployer) in grants
    assert not [g for g in grants if g[1] == deployer and g[0] != "roles/storage.objectViewer"]
    users = {u["inputs"]["name"] for u in staging["resources"] if u["type"] == "gcp:sql/user:User"}
    assert f"brew-deployer@{PROJECT}.iam" in users
    prod_grants = {r["inputs"]["role"]: r["inputs"].get("condition", {}).get("expression", "")
                   for r in graphs["prod"]["resources"] if r["type"] == "gcp:projects/iAMMember:IAMMember"
                   and r["inputs"]["member"] == deployer}
    assert "instances/brew-staging" in prod_grants["roles/cloudsql.client"]
    assert "instances/brew-staging" not in prod_grants["roles/cloudsql.editor"]  # backups: production only
