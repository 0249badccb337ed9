"""Bad stack config is refused with one line naming the file, the key and what is expected."""

from __future__ import annotations

import copy

import pytest

from infra.settings import KEYS, SettingsError, load_settings
from infra.synth.stacks import read_stack, settings_of


def ours(stack: str) -> dict:
    values = read_stack(stack).values
    return {k.split(":", 1)[1]: copy.deepcopy(v) for k, v in values.items() if k.startswith("brew:")}


def load(stack: str, config: dict):
    return load_settings(stack, config, "squareup-brew")


def refused(stack: str, config: dict) -> str:
    with pytest.raises(SettingsError) as caught:
        load(stack, config)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"stacks/Pulumi.{stack}.yaml: ")
    return message


def service(config: dict, name: str) -> dict:
    return next(s for s in config["services"] if s["name"] == name)


@pytest.mark.parametrize("stack", ["prod", "staging", "demo", "edge"])
def test_shipped_stacks_load(stack):
    settings = settings_of(read_stack(stack))
    assert settings.environment == stack
    assert settings.project == "squareup-brew"
    assert settings.region == "asia-south1"


def test_worker_with_two_instances_is_refused():
    config = ours("prod")
    service(config, "brew-worker")["maxInstances"] = 2
    message = refused("prod", config)
    assert "brew:services[1].maxInstances" in message
    assert "exactly one instance (min 1, max 1)" in message and "max 2" in message
    assert "(rule BREW-I001)" in message


@pytest.mark.parametrize("ingress", ["all", "internal"])
def test_public_service_needs_load_balancer_ingress(ingress):
    config = ours("prod")
    service(config, "brew-web")["ingress"] = ingress
    message = refused("prod", config)
    assert message.startswith("stacks/Pulumi.prod.yaml: brew:services[0].ingress: ")
    assert f"internal-and-cloud-load-balancing, not {ingress} (rule BREW-S033)" in message


def test_max_instances_below_min_is_refused():
    config = ours("prod")
    service(config, "brew-web")["maxInstances"] = 1
    message = refused("prod", config)
    assert "brew:services[0].maxInstances: expected at least minInstances (2), got 1" in message


def test_role_outside_the_three_is_refused():
    config = ours("prod")
    service(config, "brew-web")["role"] = "cron"
    assert "brew:services[0].role: expected one of web | worker | web,worker, got 'cron'" in refused("prod", config)


def test_malformed_sunset_date_is_refused():
    config = ours("staging")
    config["mirror"]["sunset"] = "25/11/2026"
    assert "brew:mirror.sunset: expected a date as YYYY-MM-DD, got '25/11/2026'" in refused("staging", config)


def test_readthrough_without_mirror_is_refused():
    config = ours("staging")
    config["mirror"]["objectsMirror"] = False
    assert "brew:mirror.objectsReadthrough: READTHROUGH needs objectsMirror: true" in refused("staging", config)


def test_missing_required_setting_is_refused():
    config = ours("prod")
    del config["image"]
    assert refused("prod", config).endswith("brew:image: required setting is missing")


def test_wrong_type_is_refused():
    config = ours("prod")
    service(config, "brew-web")["concurrency"] = "eighty"
    assert "brew:services[0].concurrency: expected an integer, got 'eighty'" in refused("prod", config)


def test_out_of_range_is_refused():
    config = ours("staging")
    config["services"][0]["timeoutSeconds"] = 7200
    assert "expected an integer between 1 and 3600, got 7200" in refused("staging", config)


def test_unknown_setting_is_refused():
    config = ours("prod")
    service(config, "brew-web")["maxInstance"] = 3
    assert "brew:services[0].maxInstance: unknown setting" in refused("prod", config)


def test_unknown_top_level_key_is_refused():
    config = ours("demo")
    config["storgae"] = "pg"
    assert "brew:storgae: unknown setting" in refused("demo", config)


def test_two_worker_services_on_one_database_are_refused():
    config = ours("prod")
    service(config, "brew-web")["role"] = "web,worker"
    service(config, "brew-web").update(minInstances=1, maxInstances=1, cpuAlwaysAllocated=True)
    assert "exactly one service per database runs the worker role" in refused("prod", config)


def test_worker_without_always_allocated_cpu_is_refused():
    config = ours("prod")
    service(config, "brew-worker")["cpuAlwaysAllocated"] = False
    assert "brew:services[1].cpuAlwaysAllocated" in refused("prod", config)


def test_env_cannot_set_what_the_stack_derives():
    config = ours("prod")
    config["env"]["ROLE"] = "web"
    assert "brew:env: ROLE is set by the stack itself" in refused("prod", config)


def test_pg_storage_without_a_database_is_refused():
    config = ours("demo")
    config["storage"] = "pg"
    del config["database"]
    assert "brew:database: storage is pg, so a database is required" in refused("demo", config)


def test_unknown_ingress_is_refused():
    config = ours("prod")
    service(config, "brew-web")["ingress"] = "public"
    assert "brew:services[0].ingress: expected one of all | internal | internal-and-cloud-load-balancing" in refused(
        "prod", config)


def test_edge_host_must_be_a_host_name():
    config = ours("edge")
    config["edge"]["hosts"][0]["host"] = "https://feed.joinsquareup.com"
    assert "brew:edge.hosts[0].host: expected a host name" in refused("edge", config)


@pytest.mark.parametrize(("value", "expected"), [(None, "required setting is missing"),
                                                  ("production", "expected one of prod | staging | demo")])
def test_edge_host_names_its_environment(value, expected):
    config = ours("edge")
    config["edge"]["hosts"][0]["environment"] = value
    assert f"brew:edge.hosts[0].environment: {expected}" in refused("edge", config)


def test_edge_hosts_say_whose_service_they_serve():
    hosts = {h.service: h.environment for h in load("edge", ours("edge")).edge.hosts}
    assert hosts == {"brew-web": "prod", "shopos-feed": "staging", "brew-demo": "demo"}


def test_mirror_sunset_becomes_a_label():
    mirror = load("staging", ours("staging")).mirror
    assert mirror.labels() == {"mirror-sunset": "2026-11-25"}


def test_edge_stack_refuses_app_settings():
    config = ours("edge")
    config["image"] = "x"
    assert "brew:image: the edge stack declares the shared network and load balancer only" in refused("edge", config)


def test_numbers_as_strings_from_the_pulumi_cli_are_accepted():
    # The Pulumi CLI hands top-level scalars to the program as strings.
    config = ours("prod")
    service(config, "brew-web")["minInstances"] = "2"
    settings = load("prod", config)
    assert settings.services[0].min_instances == 2


def test_demo_switches_to_its_own_database_with_one_line():
    config = ours("demo")
    assert load("demo", config).uses_database is False
    config["storage"] = "pg"
    settings = load("demo", config)
    assert settings.uses_database is True
    assert settings.database.name == "brew-demo" and settings.database.availability == "ZONAL"


def test_every_key_is_declared_in_pulumi_yaml_with_a_description():
    import yaml

    from infra.synth.stacks import REPO_ROOT

    declared = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())["config"]
    assert set(declared) == set(KEYS)
    for key, spec in declared.items():
        assert spec.get("description"), key
        kind = KEYS[key][0]
        # Pulumi's project schema types strings and arrays of scalars; objects stay untyped.
        assert spec.get("type") == ({"string": "string", "array": "array" if "items" in spec else None}.get(kind)), key


def test_promote_settings_load_from_prod():
    settings = settings_of(read_stack("prod"))
    assert settings.promote.steps == (10, 50, 100)
    assert settings.promote.max_error_ratio == 0.01
    assert settings.promote.on_inconclusive == "fail"


@pytest.mark.parametrize("steps", [[50, 10, 100], [10, 50], [0, 100], "10,50,100", [10, 10, 100]])
def test_promote_steps_must_ascend_to_100(steps):
    config = ours("prod")
    config["promote"]["steps"] = steps
    assert "brew:promote.steps: expected ascending percentages ending at 100" in refused("prod", config)


def test_promote_on_inconclusive_is_fail_or_hold():
    config = ours("prod")
    config["promote"]["onInconclusive"] = "pass"
    assert "brew:promote.onInconclusive: expected one of fail | hold, got 'pass'" in refused("prod", config)
