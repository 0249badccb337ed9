"""`brew-infra`: the one entry point for people and CI.

Subcommands import what they need when they run, so `--help` stays instant. Every
error a user can cause ends in one line on stderr and a documented exit code
(infra/exit_codes.py), never a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from infra.exit_codes import ExitCode

app = typer.Typer(
    name="brew-infra",
    help="Declare, check and ship the Brew platform on Google Cloud.\n\n"
    "Stacks live in stacks/Pulumi.<stack>.yaml (prod, staging, demo, edge). Exit codes: "
    "0 ok, 1 failed check, 2 bad input, 3 the Pulumi program failed.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True, highlight=False)
# Wide enough for the summary's facts when printing to a CI log rather than a terminal.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
T = TypeVar("T")


class Format(str, Enum):
    text = "text"
    json = "json"


def fail(code: ExitCode, message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", soft_wrap=True)
    raise typer.Exit(int(code))


def guarded(action: Callable[[], T]) -> T:
    """Run `action`, turning the errors a user can cause into one line and an exit code."""
    from infra.settings import SettingsError
    from infra.synth.stacks import StackFileError

    try:
        return action()
    except (SettingsError, StackFileError) as error:
        fail(ExitCode.BAD_INPUT, str(error))
    except typer.Exit:
        raise
    except Exception as error:  # noqa: BLE001 - the program's own failure, reported in one line
        fail(ExitCode.PROGRAM_ERROR, f"the Pulumi program failed: {type(error).__name__}: {error}")


def _stacks(stacks: list[str] | None, all_stacks: bool) -> list[str]:
    from infra.synth.stacks import available_stacks

    if all_stacks and stacks:
        fail(ExitCode.BAD_INPUT, "give stack names or --all, not both")
    if all_stacks:
        return available_stacks()
    if not stacks:
        fail(ExitCode.BAD_INPUT, f"name a stack ({', '.join(available_stacks())}) or pass --all")
    return list(dict.fromkeys(stacks))


@app.command()
def synth(
    stacks: Annotated[list[str] | None, typer.Argument(help="Stacks to synthesize, e.g. prod staging.")] = None,
    all_stacks: Annotated[bool, typer.Option("--all", help="Synthesize every stack in stacks/.")] = False,
    fmt: Annotated[Format, typer.Option("--format", help="text: a summary per stack; json: the graph(s).")] = Format.text,
    out_dir: Annotated[Path, typer.Option("--out", help="Where the graph files go.")] = Path("out"),
) -> None:
    """Run the Pulumi program offline (mock runtime: no credentials, no Pulumi CLI).

    Writes one graph per stack to OUT/<stack>.json: every resource with its type token,
    parent, dependencies and inputs as the engine receives them, sorted so two runs are
    identical. Prints a summary per stack, or with --format json the graph itself (one
    object for one stack, a list for several).

    Examples:
      brew-infra synth --all
      brew-infra synth prod --format json | jq '.resources | length'
    """
    from infra.synth.stacks import read_stack, settings_of, synthesize, write_graph

    names = _stacks(stacks, all_stacks)
    # Validate every stack before writing any graph, so bad input changes nothing.
    guarded(lambda: [settings_of(read_stack(name)) for name in names])
    graphs = []
    for name in names:
        graph = guarded(lambda name=name: synthesize(name))
        path = write_graph(graph, out_dir)
        graphs.append(graph.to_dict())
        if fmt is Format.text:
            _print_summary(graph.to_dict(), path)
    if fmt is Format.json:
        sys.stdout.write(json.dumps(graphs[0] if len(graphs) == 1 else graphs, indent=2, sort_keys=True) + "\n")


def _print_summary(graph: dict, path: Path) -> None:
    from infra.synth.summary import rows

    table = Table(title=f"stack {graph['stack']}  ({path})", title_justify="left", show_lines=False)
    table.add_column("type", style="cyan", no_wrap=True)
    table.add_column("name", style="bold")
    table.add_column("facts")
    listed = rows(graph)
    for row in listed:
        table.add_row(row.type, row.name, row.facts)
    out.print(table)
    out.print(f"{len(listed)} cloud resources in {len(graph['resources'])} declared; outputs: "
              f"{', '.join(sorted(graph['outputs'])) or 'none'}\n")


@app.command("import-plan")
def import_plan(
    stack: Annotated[str, typer.Argument(help="The stack whose live resources to adopt.")],
    output: Annotated[Path, typer.Option("--out", "-o", help="The import file to write.")] = Path(
        "out/import-<stack>.json"),
) -> None:
    """Write the file `pulumi import --file` takes to adopt live resources into STACK.

    Each declared resource is mapped to its live ID, built from the stack's project,
    region and physical names. Resources whose IDs Google generates (alert policies,
    notification channels) are listed on stderr: the first `pulumi up` creates them.

    Example:
      brew-infra import-plan prod && pulumi import -s prod --file out/import-prod.json
    """
    from infra.importplan import build_import_plan
    from infra.synth.stacks import dumps, read_stack, settings_of, synthesize

    def run():
        settings = settings_of(read_stack(stack))
        return build_import_plan(synthesize(stack).to_dict(), settings.project, settings.region)

    plan = guarded(run)
    path = Path(str(output).replace("<stack>", stack))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(plan.to_file()))
    imported = sum(1 for r in plan.resources if "id" in r)
    out.print(f"wrote {path}: {imported} resources to import, "
              f"{len(plan.resources) - imported} components")
    for item in plan.created:
        err.print(f"  not imported (created by pulumi up): {item['type']} {item['name']}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
