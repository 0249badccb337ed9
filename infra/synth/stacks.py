"""Offline synthesis of the repository's stacks: read `stacks/Pulumi.<stack>.yaml`,
validate it, run the same program `pulumi up` runs under the mock runtime, and write
`out/<stack>.json`.

Stages: find the stack file -> parse it -> validate the settings (bad input stops here,
before any resource is declared) -> run the program under the mocks -> write the graph.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.settings import NAMESPACE, SettingsError, StackSettings, load_settings
from infra.synth.engine import Graph, run_program

REPO_ROOT = Path(__file__).resolve().parents[2]


def find_root(start: Path | None = None) -> Path:
    """The project folder: the nearest folder holding Pulumi.yaml, as the Pulumi CLI finds it."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "Pulumi.yaml").is_file():
            return folder
    return REPO_ROOT


class StackFileError(ValueError):
    """A stack that does not exist, or a stack file that is not valid YAML."""


@dataclass(frozen=True)
class StackConfig:
    stack: str
    stack_file: str
    project: str  # the Pulumi project, from Pulumi.yaml
    values: dict[str, Any]  # fully qualified key -> value, as `pulumi config` holds them


# libyaml's parser where the wheel has it: stack files are read on every synth.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml(text: str):
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader


@functools.lru_cache(maxsize=8)
def _project_file(root: Path) -> dict:
    return _load_yaml((root / "Pulumi.yaml").read_text())


def project_name(root: Path) -> str:
    return _project_file(root)["name"]


def stacks_dir(root: Path) -> Path:
    return root / _project_file(root).get("stackConfigDir", ".")


def available_stacks(root: Path | None = None) -> list[str]:
    root = root or find_root()
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in stacks_dir(root).glob("Pulumi.*.yaml"))


def _config_value(value: Any) -> Any:
    # YAML reads an unquoted 2026-11-25 as a date; the Pulumi CLI keeps it a string.
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _config_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_config_value(v) for v in value]
    return value


def read_stack(stack: str, root: Path | None = None) -> StackConfig:
    root = root or find_root()
    path = stacks_dir(root) / f"Pulumi.{stack}.yaml"
    rel = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    if not path.is_file():
        known = ", ".join(available_stacks(root)) or "none"
        raise StackFileError(f"unknown stack {stack!r}: no {rel} (stacks: {known})")
    try:
        document = _load_yaml(path.read_text()) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise StackFileError(f"{rel}{where}: not valid YAML ({getattr(error, 'problem', error)})") from None
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise StackFileError(f"{rel}: expected a top-level 'config:' map")
    return StackConfig(stack, rel, project_name(root), {str(k): _config_value(v) for k, v in config.items()})


def settings_of(cfg: StackConfig) -> StackSettings:
    project = cfg.values.get("gcp:project")
    if not isinstance(project, str) or not project:
        raise SettingsError(cfg.stack_file, "gcp:project", "required setting is missing (the Google Cloud project id)")
    ours = {}
    for key, value in cfg.values.items():
        namespace, _, name = key.partition(":")
        if namespace == NAMESPACE:
            ours[name] = value
    return load_settings(cfg.stack, ours, project, cfg.stack_file)


def synthesize(stack: str, root: Path | None = None, live: dict | None = None) -> Graph:
    """Validate the stack's settings, then run the program exactly as `pulumi up` would."""
    cfg = read_stack(stack, root)
    settings_of(cfg)  # refuse bad input before the mock runtime starts

    def program() -> None:
        # The same two steps as __main__.py, reading config through pulumi.Config.
        from infra.environments import build
        from infra.settings import from_pulumi_config

        build(from_pulumi_config())

    return run_program(program, project=cfg.project, stack=stack, config=cfg.values, live=live)


def write_graph(graph: Graph, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{graph.stack}.json"
    path.write_text(dumps(graph.to_dict()))
    return path


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
