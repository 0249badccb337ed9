"""The Penpot blueprint (SPEC 6): penpot-prod synthesized from Brew's components under the
mock runtime, every service with its env, flags and size, the exporter's table, secrets
only through Secret Manager, LDAP on and off, and bad settings refused in one line."""

from __future__ import annotations

import copy
import dataclasses
import re

import pytest
import yaml

from infra.penpot_settings import KEYS, ExporterSettings, PenpotSettings, ServiceSettings
from infra.settings import SettingsError
from infra.synth.engine import SECRET, run_program
from infra.synth.stacks import PROGRAMS, REPO_ROOT, available_stacks, read_stack, settings_of, stack_path
from tests.graphs import env_of, one, service, template_container

STACK = "penpot-prod"
STACK_FILE = "penpot/stacks/Pulumi.penpot-prod.yaml"
PROJECT = "squareup-penpot"
BACKEND_SA = f"penpot-prod-backend@{PROJECT}.iam.gserviceaccount.com"
EXPORTER_SA = f"penpot-prod-exporter@{PROJECT}.iam.gserviceaccount.com"
FRONTEND_SA = f"penpot-prod-frontend@{PROJECT}.iam.gserviceaccount.com"
SECRET_IAM = "gcp:secretmanager/secretIamMember:SecretIamMember"
SQL = "gcp:sql/databaseInstance:DatabaseInstance"
REDIS = "gcp:redis/instance:Instance"


def secret_ref(name: str) -> dict:
    return {"secretKeyRef": {"secret": f"projects/{PROJECT}/secrets/{name}", "version": "latest"}}


def flags(svc: dict) -> list[str]:
    return env_of(svc)["PENPOT_FLAGS"].split()


def readers(graph: dict, secret_id: str) -> set[str]:
    return {r["inputs"]["member"].removeprefix("serviceAccount:") for r in graph["resources"]
            if r["type"] == SECRET_IAM and r["inputs"]["secretId"].endswith(f"/{secret_id}")}


def config(change=None) -> dict:
    values = copy.deepcopy(read_stack(STACK).values)
    if change:
        change(values)
    return values


def settings(change=None) -> PenpotSettings:
    cfg = read_stack(STACK)
    return settings_of(dataclasses.replace(cfg, values=config(change)))


def synth(change) -> dict:
    """penpot-prod with a changed config, validated and run as `synth` would."""
    settings(change)
    return run_program(PROGRAMS["penpot"].run, project="penpot", stack=STACK, config=config(change)).to_dict()


@pytest.fixture(scope="module")
def prod(graphs) -> dict:
    return graphs[STACK]


@pytest.fixture(scope="module")
def with_ldap() -> dict:
    def on(values):
        values["penpot:ldap"] = {"enabled": True, "host": "ldap.joinsquareup.com", "starttls": True,
                                 "baseDn": "ou=people,dc=joinsquareup,dc=com",
                                 "bindDn": "cn=penpot,dc=joinsquareup,dc=com"}

    return synth(on)


# --- finding the stack ----------------------------------------------------------------------

def test_synth_finds_the_penpot_project_s_stack_beside_brew_s():
    assert available_stacks() == ["demo", "edge", "penpot-prod", "prod", "staging"]
    cfg = read_stack(STACK)
    assert (cfg.stack_file, cfg.project) == (STACK_FILE, "penpot")
    assert stack_path(STACK) == REPO_ROOT / STACK_FILE
    assert read_stack("prod").project == "brew"
    assert isinstance(settings_of(cfg), PenpotSettings)


def test_a_stack_name_in_two_projects_is_refused(tmp_path):
    from infra.synth.stacks import StackFileError

    for folder, name in ((tmp_path, "brew"), (tmp_path / "penpot", "penpot")):
        (folder / "stacks").mkdir(parents=True)
        (folder / "Pulumi.yaml").write_text(f"name: {name}\nstackConfigDir: stacks\n")
        (folder / "stacks" / "Pulumi.prod.yaml").write_text("config: {}\n")
    with pytest.raises(StackFileError, match="stack 'prod' is declared twice: stacks/Pulumi.prod.yaml and "
                                             "penpot/stacks/Pulumi.prod.yaml"):
        available_stacks(tmp_path)
    # From inside the blueprint's folder, as `pulumi` runs there, its own stacks are found.
    assert available_stacks(tmp_path / "penpot") == ["prod"]
    assert read_stack("prod", tmp_path / "penpot").project == "penpot"


def test_the_graph_is_the_penpot_project_s(prod):
    assert (prod["project"], prod["stack"]) == ("penpot", STACK)
    assert all(r["urn"].startswith("urn:pulumi:penpot-prod::penpot::") for r in prod["resources"])


def test_the_project_s_main_declares_what_synth_declares(prod):
    import runpy

    main = REPO_ROOT / "penpot" / "__main__.py"
    graph = run_program(lambda: runpy.run_path(str(main)), project="penpot", stack=STACK,
                        config=read_stack(STACK).values).to_dict()
    assert graph == prod


def test_synth_penpot_prod_from_the_cli(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from infra.cli import app

    monkeypatch.chdir(REPO_ROOT)
    result = CliRunner().invoke(app, ["synth", STACK, "--format", "json", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["stack"] == STACK
    assert (tmp_path / f"{STACK}.json").is_file()


def test_every_penpot_key_is_declared_in_its_pulumi_yaml_with_a_description():
    project = yaml.safe_load((REPO_ROOT / "penpot" / "Pulumi.yaml").read_text())
    assert (project["name"], project["stackConfigDir"]) == ("penpot", "stacks")
    assert project["runtime"]["options"] == {"toolchain": "uv", "virtualenv": "../.venv"}
    assert set(project["config"]) == set(KEYS)
    for key, spec in project["config"].items():
        assert spec.get("description"), key
        assert spec.get("type") == {"string": "string", "array": "array"}.get(KEYS[key][0]), key


# --- the services ---------------------------------------------------------------------------

def test_frontend_is_behind_the_load_balancer_and_reads_no_secret(prod):
    frontend = service(prod, "penpot-frontend")
    t = frontend["inputs"]["template"]
    assert (frontend["inputs"]["ingress"], frontend["inputs"]["invokerIamDisabled"],
            frontend["inputs"]["defaultUriDisabled"]) == ("INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER", True, True)
    assert (t["scaling"]["minInstanceCount"], t["scaling"]["maxInstanceCount"]) == (2, 4)
    assert template_container(frontend)["resources"]["limits"] == {"cpu": "1", "memory": "512Mi"}
    assert t["serviceAccount"] == FRONTEND_SA
    assert "vpcAccess" not in t
    assert env_of(frontend) == {"PENPOT_FLAGS": "disable-telemetry",
                                "PENPOT_BACKEND_URI": "https://design.joinsquareup.com"}
    assert "ROLE" not in env_of(frontend)


def test_web_backends_do_not_run_the_worker(prod):
    backend = service(prod, "penpot-backend")
    t = backend["inputs"]["template"]
    assert flags(backend) == ["disable-backend-worker", "enable-smtp", "disable-telemetry"]
    assert backend["inputs"]["ingress"] == "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"
    assert (t["scaling"]["minInstanceCount"], t["scaling"]["maxInstanceCount"]) == (2, 4)
    assert template_container(backend)["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}
    assert template_container(backend)["resources"]["cpuIdle"] is True
    assert (t["sessionAffinity"], t["timeout"], t["serviceAccount"]) == (True, "3600s", BACKEND_SA)
    assert env_of(backend)["PENPOT_DATABASE_MAX_POOL_SIZE"] == "20"


def test_worker_enabled_backends_are_their_own_service_and_size(prod):
    worker = service(prod, "penpot-worker")
    t = worker["inputs"]["template"]
    assert flags(worker) == ["enable-backend-worker", "enable-smtp", "disable-telemetry"]
    assert worker["inputs"]["ingress"] == "INGRESS_TRAFFIC_INTERNAL_ONLY"
    assert worker["inputs"]["invokerIamDisabled"] is False
    assert (t["scaling"]["minInstanceCount"], t["scaling"]["maxInstanceCount"]) == (1, 2)
    assert template_container(worker)["resources"]["cpuIdle"] is False  # the dispatcher polls between requests
    assert env_of(worker)["PENPOT_DATABASE_MAX_POOL_SIZE"] == "10"
    assert t["serviceAccount"] == BACKEND_SA
    assert worker["inputs"]["labels"]["role"] == "worker"


@pytest.mark.parametrize("name", ["penpot-backend", "penpot-worker"])
def test_backends_reach_postgres_through_the_iam_proxy_sidecar(prod, name):
    backend = service(prod, name)
    app, proxy = backend["inputs"]["template"]["containers"]
    env = env_of(backend)
    assert env["PENPOT_DATABASE_URI"] == "postgresql://127.0.0.1:5432/penpot"
    assert env["PENPOT_DATABASE_USERNAME"] == f"penpot-prod-backend@{PROJECT}.iam"
    assert "PENPOT_DATABASE_PASSWORD" not in env  # IAM login: no password exists
    assert (app["name"], app["ports"], app["dependsOns"]) == ("app", {"containerPort": 6060}, ["cloud-sql-proxy"])
    assert proxy["args"] == ["--auto-iam-authn", "--private-ip", "--structured-logs", "--port=5432",
                             f"{PROJECT}:asia-south1:penpot-prod"]
    assert proxy["startupProbe"]["tcpSocket"] == {"port": 5432}
    assert one(prod, SQL, "penpot-prod")["urn"] in backend["dependencies"]
    assert backend["inputs"]["template"]["vpcAccess"]["networkInterfaces"] == [
        {"network": "penpot-vpc", "subnetwork": "penpot-run-asia-south1"}]


@pytest.mark.parametrize("name", ["penpot-backend", "penpot-worker"])
def test_backends_use_the_bucket_through_the_s3_api(prod, name):
    env = env_of(service(prod, name))
    assert {k: env[k] for k in env if k.startswith("PENPOT_OBJECTS_STORAGE_")} == {
        "PENPOT_OBJECTS_STORAGE_BACKEND": "s3",
        "PENPOT_OBJECTS_STORAGE_S3_ENDPOINT": "https://storage.googleapis.com",
        "PENPOT_OBJECTS_STORAGE_S3_BUCKET": "squareup-penpot-assets",
        "PENPOT_OBJECTS_STORAGE_S3_REGION": "auto",
    }
    assert env["AWS_ACCESS_KEY_ID"].startswith("GOOG1E")
    assert env["AWS_SECRET_ACCESS_KEY"] == secret_ref("penpot-prod-storage-hmac-secret")
    assert env["PENPOT_REDIS_URI"] == secret_ref("penpot-prod-redis-uri")
    assert env["PENPOT_SECRET_KEY"] == secret_ref("penpot-prod-secret-key")
    assert (env["PENPOT_PUBLIC_URI"], env["PENPOT_TENANT"]) == ("https://design.joinsquareup.com", "default")


def test_the_exporter_carries_its_configuration_table(prod):
    exporter = service(prod, "penpot-exporter")
    t = exporter["inputs"]["template"]
    assert env_of(exporter) == {
        "PENPOT_PUBLIC_URI": "https://design.joinsquareup.com",
        "PENPOT_TENANT": "default",
        "PENPOT_EXPORTER_JOB_TTL": "3600",
        "PENPOT_EXPORTER_WORKER_CONCURRENCY": "2",
        "PENPOT_WASM_WORKER_POOL_MAX": "2",
        "PENPOT_BROWSER_POOL_MAX": "2",
        "PENPOT_WASM_WORKER_POOL_MIN": "1",
        "PENPOT_WASM_WORKER_IDLE_TIMEOUT": "300",
        "PENPOT_WASM_WORKER_IMAGE_CACHE_SIZE": "134217728",
        "PENPOT_REDIS_URI": secret_ref("penpot-prod-redis-uri"),
        "PENPOT_SECRET_KEY": secret_ref("penpot-prod-secret-key"),
    }
    assert exporter["inputs"]["ingress"] == "INGRESS_TRAFFIC_INTERNAL_ONLY"
    assert template_container(exporter)["resources"]["cpuIdle"] is False  # K pollers block on Redis
    assert (t["scaling"]["minInstanceCount"], t["serviceAccount"]) == (1, EXPORTER_SA)
    assert len(t["containers"]) == 1
    # It talks to the backend's management API, never to Postgres.
    assert one(prod, SQL, "penpot-prod")["urn"] not in exporter["dependencies"]


def test_the_exporter_defaults_are_the_table_s():
    def bare(values):
        values["penpot:exporter"] = {"name": "penpot-exporter", "maxInstances": 1}

    exporter = settings(bare).exporter
    assert exporter == ExporterSettings(service=exporter.service)
    assert (exporter.job_ttl_seconds, exporter.worker_concurrency, exporter.wasm_worker_pool_min,
            exporter.wasm_worker_idle_timeout_seconds, exporter.wasm_worker_image_cache_size) == (
        3600, 2, 1, 300, 134217728)
    assert exporter.internal_uri is None and exporter.shared_key is False
    assert exporter.service == ServiceSettings(name="penpot-exporter", role="exporter", min_instances=1,
                                               max_instances=1, cpu="1", memory="1Gi", concurrency=80,
                                               timeout_seconds=300, session_affinity=False, env={})


def test_k_sizes_the_pollers_and_both_pools():
    def four(values):
        values["penpot:exporter"].update(workerConcurrency=4, wasmWorkerPoolMin=3, internalUri="http://penpot:8080")

    env = settings(four).exporter.env("https://p.example.com", "ws0")
    assert {k: env[k] for k in ("PENPOT_EXPORTER_WORKER_CONCURRENCY", "PENPOT_WASM_WORKER_POOL_MAX",
                                "PENPOT_BROWSER_POOL_MAX", "PENPOT_WASM_WORKER_POOL_MIN")} == {
        "PENPOT_EXPORTER_WORKER_CONCURRENCY": "4", "PENPOT_WASM_WORKER_POOL_MAX": "4",
        "PENPOT_BROWSER_POOL_MAX": "4", "PENPOT_WASM_WORKER_POOL_MIN": "3"}
    assert (env["PENPOT_INTERNAL_URI"], env["PENPOT_TENANT"]) == ("http://penpot:8080", "ws0")


# --- data: Redis, Postgres, the bucket ------------------------------------------------------

def test_redis_is_memorystore_with_auth_and_its_uri_only_in_secret_manager(prod):
    redis = one(prod, REDIS, "penpot-prod")["inputs"]
    assert (redis["tier"], redis["connectMode"], redis["authEnabled"], redis["reservedIpRange"]) == (
        "STANDARD_HA", "PRIVATE_SERVICE_ACCESS", True, "penpot-private-services")
    assert redis["authorizedNetwork"] == f"projects/{PROJECT}/global/networks/penpot-vpc"
    assert readers(prod, "penpot-prod-redis-uri") == {BACKEND_SA, EXPORTER_SA}
    versions = {r["inputs"]["secret"].rsplit("/", 1)[1]: r["inputs"]["secretData"] for r in prod["resources"]
                if r["type"] == "gcp:secretmanager/secretVersion:SecretVersion"}
    assert versions == {"penpot-prod-redis-uri": SECRET, "penpot-prod-storage-hmac-secret": SECRET}


def test_postgres_is_private_ha_and_logs_in_the_backends_by_iam(prod):
    db = one(prod, SQL, "penpot-prod")["inputs"]
    assert (db["databaseVersion"], db["settings"]["availabilityType"]) == ("POSTGRES_16", "REGIONAL")
    assert db["settings"]["ipConfiguration"]["ipv4Enabled"] is False
    assert db["settings"]["ipConfiguration"]["allocatedIpRange"] == "penpot-private-services"
    users = [u["inputs"] for u in prod["resources"] if u["type"] == "gcp:sql/user:User"]
    assert users == [{"instance": "penpot-prod", "name": f"penpot-prod-backend@{PROJECT}.iam",
                      "project": PROJECT, "type": "CLOUD_IAM_SERVICE_ACCOUNT"}]


def test_the_hmac_secret_is_only_ever_a_secret_manager_reference(prod):
    key = one(prod, "gcp:storage/hmacKey:HmacKey", None)
    assert key["inputs"]["serviceAccountEmail"] == BACKEND_SA
    assert readers(prod, "penpot-prod-storage-hmac-secret") == {BACKEND_SA}
    assert "mock-hmac-secret" not in str(prod)  # the key's secret output never reaches the graph
    for svc in prod["resources"]:
        if svc["type"] == "gcp:cloudrunv2/service:Service":
            assert isinstance(env_of(svc).get("AWS_SECRET_ACCESS_KEY", {}), dict), svc["name"]
    bucket_grants = [(r["inputs"]["role"], r["inputs"]["member"]) for r in prod["resources"]
                     if r["type"] == "gcp:storage/bucketIAMMember:BucketIAMMember"]
    assert bucket_grants == [("roles/storage.objectAdmin", f"serviceAccount:{BACKEND_SA}")]


def test_smtp_credentials_are_secrets_read_by_the_backends_only(prod):
    for name in ("penpot-backend", "penpot-worker"):
        env = env_of(service(prod, name))
        assert env["PENPOT_SMTP_USERNAME"] == secret_ref("penpot-prod-smtp-username")
        assert env["PENPOT_SMTP_PASSWORD"] == secret_ref("penpot-prod-smtp-password")
        assert (env["PENPOT_SMTP_HOST"], env["PENPOT_SMTP_PORT"], env["PENPOT_SMTP_TLS"]) == (
            "smtp.resend.com", "587", "true")
    for secret_id in ("penpot-prod-smtp-username", "penpot-prod-smtp-password"):
        assert readers(prod, secret_id) == {BACKEND_SA}
    assert readers(prod, "penpot-prod-secret-key") == {BACKEND_SA, EXPORTER_SA}
    assert not [v for v in env_of(service(prod, "penpot-exporter")) if v.startswith("PENPOT_SMTP_")]


# --- LDAP behind its setting ----------------------------------------------------------------

def test_ldap_off_declares_nothing_ldap(prod):
    assert "ldap" not in str(prod).lower()


def test_ldap_on_adds_its_flag_its_settings_and_its_bind_password_secret(with_ldap):
    for name in ("penpot-frontend", "penpot-backend", "penpot-worker"):
        assert "enable-login-with-ldap" in flags(service(with_ldap, name)), name
    assert "PENPOT_FLAGS" not in env_of(service(with_ldap, "penpot-exporter"))
    env = env_of(service(with_ldap, "penpot-worker"))
    assert {k: v for k, v in env.items() if k.startswith("PENPOT_LDAP_")} == {
        "PENPOT_LDAP_HOST": "ldap.joinsquareup.com",
        "PENPOT_LDAP_PORT": "389",
        "PENPOT_LDAP_SSL": "false",
        "PENPOT_LDAP_STARTTLS": "true",
        "PENPOT_LDAP_BASE_DN": "ou=people,dc=joinsquareup,dc=com",
        "PENPOT_LDAP_BIND_DN": "cn=penpot,dc=joinsquareup,dc=com",
        "PENPOT_LDAP_BIND_PASSWORD": secret_ref("penpot-prod-ldap-bind-password"),
        "PENPOT_LDAP_USER_QUERY": "(|(uid=:username)(mail=:username))",
        "PENPOT_LDAP_ATTRS_USERNAME": "uid",
        "PENPOT_LDAP_ATTRS_EMAIL": "mail",
        "PENPOT_LDAP_ATTRS_FULLNAME": "cn",
    }
    assert readers(with_ldap, "penpot-prod-ldap-bind-password") == {BACKEND_SA}


def test_every_labelled_resource_says_penpot_and_its_environment(prod):
    labelled = [r["inputs"].get("labels") or r["inputs"].get("userLabels") or
                (r["inputs"].get("settings") or {}).get("userLabels") for r in prod["resources"]
                if r["type"] in ("gcp:cloudrunv2/service:Service", SQL, REDIS, "gcp:storage/bucket:Bucket",
                                 "gcp:secretmanager/secret:Secret", "gcp:monitoring/alertPolicy:AlertPolicy")]
    assert len(labelled) == 13
    for labels in labelled:
        assert (labels["environment"], labels["system"], labels["managed-by"]) == ("prod", "penpot", "pulumi")


def test_the_connections_alert_carries_the_backends_budget(prod):
    [policy] = [r for r in prod["resources"] if r["type"] == "gcp:monitoring/alertPolicy:AlertPolicy"]
    text = policy["inputs"]["documentation"]["content"]
    assert "| penpot-backend | 4 | 20 | 80 |" in text and "| penpot-worker | 2 | 10 | 20 |" in text
    assert "**100**" in text and "lease" not in text


# --- bad settings ---------------------------------------------------------------------------

def _set(path: str, value):
    def change(values):
        *parents, last = path.split(".")
        target = values
        for part in parents:
            target = target[part]
        target[last] = value
    return change


@pytest.mark.parametrize(("change", "key", "expected"), [
    (_set("penpot:exporter.wasmWorkerPoolMin", 3), "penpot:exporter.wasmWorkerPoolMin",
     "expected at most workerConcurrency (2), the pool's maximum, got 3 (rule BREW-I101)"),
    (_set("penpot:exporter.workerConcurrency", 0), "penpot:exporter.workerConcurrency",
     "expected an integer between 1 and 64, got 0"),
    (_set("penpot:worker.minInstances", 0), "penpot:worker.minInstances",
     "the worker takes no requests, so it keeps at least one instance, got 0"),
    (_set("penpot:backend.maxInstances", 1), "penpot:backend.maxInstances",
     "expected at least minInstances (2), got 1"),
    (_set("penpot:flags", ["enable-backend-worker"]), "penpot:flags[0]",
     "enable-backend-worker is set by the stack from the backend and worker services, not by flags"),
    (_set("penpot:flags", ["enable-login-with-ldap"]), "penpot:flags[0]",
     "enable-login-with-ldap is set by the stack from penpot:ldap.enabled, not by flags"),
    (_set("penpot:flags", ["disable-telemetry", "enable-telemetry"]), "penpot:flags[1]",
     "enable-telemetry contradicts disable-telemetry"),
    (_set("penpot:flags", ["telemetry"]), "penpot:flags[0]", "expected ^(enable|disable)-"),
    (_set("penpot:backend.env", {"PENPOT_DATABASE_URI": "postgresql://elsewhere/penpot"}),
     "penpot:backend.env.PENPOT_DATABASE_URI", "is set by the stack itself, not by config"),
    (_set("penpot:publicUri", "design.joinsquareup.com"), "penpot:publicUri", "expected an http(s) URL"),
    (_set("penpot:redis.tier", "premium"), "penpot:redis.tier", "expected one of basic | standard-ha"),
    (_set("penpot:ldap", {"enabled": True, "host": "ldap", "bindDn": "cn=x"}), "penpot:ldap.baseDn",
     "required setting is missing"),
    (_set("penpot:ldap", {"enabled": True, "ssl": True, "starttls": True}), "penpot:ldap.starttls",
     "LDAP over SSL (ssl: true) and STARTTLS exclude each other"),
    (_set("penpot:ldap", {"enabled": False, "hots": "typo"}), "penpot:ldap.hots", "unknown setting"),
    (_set("penpot:exporter.kk", 1), "penpot:exporter.kk", "unknown setting"),
    (_set("penpot:database.tier", "big"), "penpot:database.tier", "expected a machine tier"),
    (_set("penpot:worker.name", "penpot-backend"), "penpot:frontend", "service names must be unique"),
])
def test_bad_settings_are_refused_in_one_line_naming_the_file_and_key(change, key, expected):
    with pytest.raises(SettingsError) as caught:
        settings(change)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{STACK_FILE}: {key}: "), message
    assert expected in message, message


def test_a_missing_project_names_gcp_project():
    with pytest.raises(SettingsError, match=re.escape(f"{STACK_FILE}: gcp:project: required setting is missing")):
        settings(lambda values: values.pop("gcp:project"))
