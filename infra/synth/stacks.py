"""Offline synthesis of the repository's stacks: read `stacks/Pulumi.<stack>.yaml`,
validate it, run the same program `pulumi up` runs under the mock runtime, and write
`out/<stack>.json`.

The repository holds more than one Pulumi project: Brew's at the root and each
blueprint's in a folder of its own (`penpot/`, SPEC 6), each with its Pulumi.yaml, its
stack files and its program. Stack names are unique across them, so a stack name alone
says which project, which settings and which program it is.

Stages: find the stack's project and file -> parse it -> validate the settings (bad input
stops here, before any resource is declared) -> run the project's program under the
mocks -> write the graph.
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.settings import SettingsError
from infra.synth.engine import Graph, run_program

REPO_ROOT = Path(__file__).resolve().parents[2]
# Blueprint projects, as folders under the root project (each with its own Pulumi.yaml).
BLUEPRINTS = ("penpot",)


@dataclass(frozen=True)
class Program:
    """What a Pulumi project's __main__.py runs: a settings module (NAMESPACE,
    load_settings, from_pulumi_config) and a module whose build(settings) composes it."""

    settings: str
    compose: str

    def namespace(self) -> str:
        return importlib.import_module(self.settings).NAMESPACE

    def load(self, stack: str, values: dict[str, Any], project: str, stack_file: str) -> Any:
        return importlib.import_module(self.settings).load_settings(stack, values, project, stack_file)

    def run(self) -> None:
        # The same two steps as the project's __main__.py, reading config through pulumi.Config.
        settings = importlib.import_module(self.settings).from_pulumi_config()
        importlib.import_module(self.compose).build(settings)


# Pulumi project name (Pulumi.yaml `name`) -> its program.
PROGRAMS: dict[str, Program] = {
    "brew": Program("infra.settings", "infra.environments"),
    "penpot": Program("infra.penpot_settings", "infra.environments.penpot"),
}


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
    stack_file: str  # relative to the root project's folder, e.g. penpot/stacks/Pulumi.penpot-prod.yaml
    project: str  # the Pulumi project, from Pulumi.yaml
    values: dict[str, Any]  # fully qualified key -> value, as `pulumi config` holds them

    @property
    def program(self) -> Program:
        return program_of(self.project, self.stack_file)


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


def project_folders(root: Path) -> list[Path]:
    """The root project's folder, then each blueprint's found under it."""
    return [root, *(root / name for name in BLUEPRINTS if (root / name / "Pulumi.yaml").is_file())]


def _stack_files(root: Path) -> dict[str, tuple[Path, Path]]:
    """Stack name -> (its project's folder, its file), across every project."""
    found: dict[str, tuple[Path, Path]] = {}
    for folder in project_folders(root):
        for path in sorted(stacks_dir(folder).glob("Pulumi.*.yaml")):
            stack = path.name[len("Pulumi."):-len(".yaml")]
            if stack in found:
                # `synth <stack>` could not tell which one is meant.
                raise StackFileError(f"stack {stack!r} is declared twice: {found[stack][1].relative_to(root)} "
                                     f"and {path.relative_to(root)}; stack names are unique across projects")
            found[stack] = (folder, path)
    return found


def available_stacks(root: Path | None = None) -> list[str]:
    return sorted(_stack_files(root or find_root()))


def _locate(stack: str, root: Path) -> tuple[Path, Path]:
    """(project folder, stack file); an unknown stack's file would be the root project's."""
    return _stack_files(root).get(stack, (root, stacks_dir(root) / f"Pulumi.{stack}.yaml"))


def stack_path(stack: str, root: Path | None = None) -> Path:
    return _locate(stack, root or find_root())[1]


def program_of(project: str, where: str) -> Program:
    if project not in PROGRAMS:
        raise StackFileError(f"{where}: Pulumi project {project!r} has no program here "
                             f"(known: {', '.join(sorted(PROGRAMS))})")
    return PROGRAMS[project]


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
    folder, path = _locate(stack, root)
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
    return StackConfig(stack, rel, project_name(folder), {str(k): _config_value(v) for k, v in config.items()})


def settings_of(cfg: StackConfig) -> Any:
    """The stack's typed settings, by its project's settings module (Brew's StackSettings,
    Penpot's PenpotSettings)."""
    program = cfg.program
    project = cfg.values.get("gcp:project")
    if not isinstance(project, str) or not project:
        raise SettingsError(cfg.stack_file, "gcp:project", "required setting is missing (the Google Cloud project id)")
    namespace = program.namespace()
    ours = {}
    for key, value in cfg.values.items():
        prefix, _, name = key.partition(":")
        if prefix == namespace:
            ours[name] = value
    return program.load(cfg.stack, ours, project, cfg.stack_file)


def synthesize(stack: str, root: Path | None = None, live: dict | None = None) -> Graph:
    """Validate the stack's settings, then run its project's program exactly as `pulumi up` would."""
    cfg = read_stack(stack, root)
    settings_of(cfg)  # refuse bad input before the mock runtime starts
    return run_program(cfg.program.run, project=cfg.project, stack=stack, config=cfg.values, live=live)


def write_graph(graph: Graph, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{graph.stack}.json"
    path.write_text(dumps(graph.to_dict()))
    return path


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
