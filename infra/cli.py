"""`brew-infra`: the one entry point for people and CI.

Subcommands import what they need when they run, so `--help` stays instant. Every
error a user can cause ends in one line on stderr and a documented exit code
(infra/exit_codes.py), never a traceback.
"""

from __future__ import annotations

import io
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
    "0 ok, 1 failed check or dangerous change, 2 bad input, 3 the Pulumi program failed, "
    "4 a required tool (Graphviz) is missing; promote, mirror status and storage check add their own "
    "codes (README, Exit codes).",
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


sandbox_app = typer.Typer(help="A local rehearsal of production: real PostgreSQL, stand-ins for the "
                            "Cloud Run, Cloud SQL Admin and Monitoring APIs, simulated workers.",
                            no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")
SANDBOX_DIR = Path(".sandbox")


def _faults(inject: list[str] | None) -> list[str]:
    from infra.sandbox.faults import FAULTS

    unknown = [f for f in inject or [] if f not in FAULTS]
    if unknown:
        fail(ExitCode.BAD_INPUT, f"unknown fault {unknown[0]!r}; choose from {', '.join(FAULTS)}")
    return list(inject or [])


@sandbox_app.command("up")
def sandbox_up(
    inject: Annotated[list[str] | None, typer.Option("--inject", help="A fault to inject (repeatable); "
                                                     "see `brew-infra sandbox faults`.")] = None,
    directory: Annotated[Path, typer.Option("--dir", help="Where the sandbox keeps its state.")] = SANDBOX_DIR,
) -> None:
    """Start the sandbox in the background; `brew-infra promote --sandbox-dir .sandbox` uses it."""
    import subprocess
    import time

    faults = _faults(inject)
    state = directory / "sandbox.json"
    if state.exists():
        fail(ExitCode.BAD_INPUT, f"a sandbox is already up in {directory} (brew-infra sandbox down first)")
    directory.mkdir(parents=True, exist_ok=True)
    log = open(directory / "sandbox.log", "ab")
    argv = [sys.executable, "-m", "infra.sandbox.daemon", "--dir", str(directory)]
    for fault in faults:
        argv += ["--inject", fault]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while not state.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            fail(ExitCode.PROGRAM_ERROR, f"the sandbox did not start; see {directory / 'sandbox.log'}")
        time.sleep(0.1)
    data = json.loads(state.read_text())
    out.print(f"sandbox up (pid {proc.pid}); faults: {', '.join(data['faults']) or 'none'}")
    for name, endpoint in data["endpoints"].items():
        out.print(f"  {name:<11} {endpoint}")


@sandbox_app.command("down")
def sandbox_down(directory: Annotated[Path, typer.Option("--dir")] = SANDBOX_DIR) -> None:
    """Stop the sandbox and remove its state."""
    import os
    import shutil
    import signal
    import time

    pid_file = directory / "pid"
    if not pid_file.exists():
        out.print(f"no sandbox up in {directory}")
        return
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            os.kill(pid, 0)
            time.sleep(0.1)
    except ProcessLookupError:
        pass
    shutil.rmtree(directory, ignore_errors=True)
    out.print("sandbox down")


@sandbox_app.command("status")
def sandbox_status(
    directory: Annotated[Path, typer.Option("--dir")] = SANDBOX_DIR,
    fmt: Annotated[Format, typer.Option("--format")] = Format.text,
) -> None:
    """Whether the sandbox is up, where it answers, what each service serves, who holds the lease."""
    state = directory / "sandbox.json"
    if not state.exists():
        if fmt is Format.json:
            sys.stdout.write(json.dumps({"up": False}) + "\n")
        else:
            out.print(f"no sandbox up in {directory}")
        raise typer.Exit(int(ExitCode.FAILED))
    data = json.loads(state.read_text())
    status = {"up": True, **data, **_live_status(data["endpoints"])}
    if fmt is Format.json:
        sys.stdout.write(json.dumps(status, indent=2) + "\n")
        return
    out.print(f"sandbox up; faults: {', '.join(data['faults']) or 'none'}")
    for name, traffic in status["services"].items():
        out.print(f"  {name:<12} {', '.join(f'{r} {p}%' for r, p in traffic.items())}")
    out.print(f"  lease holder {status['lease_holder'] or 'none'}")


def _live_status(endpoints: dict[str, str]) -> dict:
    from infra.promote.clients import CloudRun, Endpoints
    from infra.promote.database import plain
    from infra.promote.lease import WorkerLease
    from infra.sandbox.sandbox import topology_from_stacks

    top = topology_from_stacks()
    run = CloudRun(top.project, top.region, Endpoints(endpoints["run"], endpoints["sqladmin"], endpoints["monitoring"]))
    services = {name: run.get_service(name).traffic for name in (top.staging_service, top.web_service,
                                                                   top.worker_service)}
    lease = WorkerLease(plain(endpoints["database"]))
    try:
        holder = lease.read().revision
    finally:
        lease.close()
    return {"services": services, "lease_holder": holder}


@sandbox_app.command("faults")
def sandbox_faults() -> None:
    """The faults `--inject` takes."""
    from infra.sandbox.faults import FAULTS

    for name, what in FAULTS.items():
        out.print(f"  {name:<22} {what}")


@app.command()
def promote(
    image: Annotated[str | None, typer.Option("--image", help="The digest to promote (default: what staging "
                                              "serves). Staging must serve it.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Run only the read-only gates and print the plan.")] = False,
    report: Annotated[Path | None, typer.Option("--report", help="Write the JSON report here.")] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", envvar="GITHUB_RUN_ID", help="Identifies this "
                                               "promotion; running again with the same id resumes it.")] = None,
    database_dsn: Annotated[str | None, typer.Option("--database-dsn", envvar="BREW_DATABASE_DSN",
                                                     help="Read the lease over this DSN (Cloud SQL Auth Proxy). "
                                                     "Default: the Cloud SQL connector with the deployer's IAM "
                                                     "login.")] = None,
    sandbox: Annotated[bool, typer.Option("--sandbox", help="Start a sandbox around this one run.")] = False,
    inject: Annotated[list[str] | None, typer.Option("--inject", help="With --sandbox: a fault to inject "
                                                     "(repeatable).")] = None,
    sandbox_dir: Annotated[Path | None, typer.Option("--sandbox-dir", help="Promote inside a sandbox started "
                                                     "with `brew-infra sandbox up`.")] = None,
    staging_database_dsn: Annotated[str | None, typer.Option(
        "--staging-database-dsn", envvar="BREW_STAGING_DATABASE_DSN",
        help="Staging's database, for the bucket mirror drift check of gate 2 (without it the check is "
             "reported as not configured).")] = None,
    prod_stack: Annotated[str, typer.Option("--stack", help="The production stack.")] = "prod",
    staging_stack: Annotated[str, typer.Option("--staging-stack")] = "staging",
) -> None:
    """Promote the image staging serves to production, through the gates, or roll back.

    Gates: preflight (and the promotion lock), mirror, lease_before, backup, worker
    (with the lease hand-over), web (stepped traffic with health checks), settle. Any
    failure rolls back what was changed. Exit codes: 0 promoted, 10 preflight, 11 lock
    held by another promotion, 20 mirror, 30 lease before, 40 backup, 50 worker,
    60 web, 61 web held (inconclusive), 70 settle, 80 rollback failed, 2 bad input.

    Examples:
      brew-infra promote --sandbox                       # a clean rehearsal
      brew-infra promote --sandbox --inject web-errors   # watch it roll back
      brew-infra promote --report out/promote.json       # in CI
    """
    import uuid

    from infra.synth.stacks import read_stack, settings_of

    faults = _faults(inject)
    if faults and not sandbox:
        fail(ExitCode.BAD_INPUT, "--inject needs --sandbox")
    if "crash-after-worker" in faults:
        fail(ExitCode.BAD_INPUT, "crash-after-worker needs a sandbox that outlives the run: brew-infra sandbox up "
                                 "--inject crash-after-worker, then brew-infra promote --sandbox-dir .sandbox twice")
    if sandbox and sandbox_dir:
        fail(ExitCode.BAD_INPUT, "give --sandbox or --sandbox-dir, not both")
    prod = guarded(lambda: settings_of(read_stack(prod_stack)))
    staging = guarded(lambda: settings_of(read_stack(staging_stack)))
    run_id = run_id or uuid.uuid4().hex[:12]
    rehearsal = sandbox or sandbox_dir is not None
    # The client libraries load only once the arguments are known to be good (~3 s).
    from infra.promote.clients import Endpoints
    from infra.promote.database import cloud_sql, plain
    from infra.promote.runner import mirror_check, promote as run_promotion, target_of
    from infra.sandbox.faults import PROMOTE_OVERRIDES  # short timings only for rehearsals

    target = guarded(lambda: target_of(prod, staging, PROMOTE_OVERRIDES if rehearsal else None))

    def run(endpoints: Endpoints, connect, mirror_sync, today=None) -> None:
        result = run_promotion(target, endpoints, connect, run_id, image, dry_run, report, mirror_sync, today)
        err.print(f"{result.result}" + (f" at {result.failed_gate}" if result.failed_gate else "")
                  + f" (exit {result.exit_code})")
        if dry_run and result.plan:
            for line in result.plan:
                out.print(f"  plan: {line}")
        raise typer.Exit(result.exit_code)

    if sandbox:
        from infra.sandbox.sandbox import Sandbox, topology_from_stacks

        with Sandbox(topology_from_stacks(prod_stack, staging_stack), faults) as box:
            run(*_sandbox_wiring(box.endpoints(), staging, prod.project))
    if sandbox_dir is not None:
        e = _sandbox_endpoints(sandbox_dir)
        _arm_crash(sandbox_dir)
        run(*_sandbox_wiring(e, staging, prod.project))
    assert prod.database is not None and prod.deployer is not None
    connect = plain(database_dsn) if database_dsn else cloud_sql(
        f"{prod.project}:{prod.region}:{prod.database.name}",
        prod.identity_email(prod.deployer.account_id).removesuffix(".gserviceaccount.com"), prod.database.database)
    staging_connect = plain(staging_database_dsn) if staging_database_dsn else None
    run(Endpoints(), connect, mirror_check(staging.mirror, staging_connect, None, prod.project))


def _sandbox_endpoints(sandbox_dir: Path) -> dict:
    state = sandbox_dir / "sandbox.json"
    if not state.exists():
        fail(ExitCode.BAD_INPUT, f"no sandbox up in {sandbox_dir} (brew-infra sandbox up)")
    return json.loads(state.read_text())["endpoints"]


def _sandbox_wiring(e: dict, staging, project: str):
    """Endpoints, the lease connection, the mirror check and the calendar of a sandbox."""
    import datetime as dt

    from infra.promote.clients import Endpoints
    from infra.promote.database import plain
    from infra.promote.runner import mirror_check

    staging_connect = plain(e["staging_database"]) if "staging_database" in e else None
    today = dt.date.fromisoformat(e["today"])
    return (Endpoints(e["run"], e["sqladmin"], e["monitoring"]), plain(e["database"]),
            mirror_check(staging.mirror, staging_connect, e.get("storage"), project), lambda: today)


mirror_app = typer.Typer(help="Staging's bucket mirror: the way back to bucket storage.", no_args_is_help=True)
app.add_typer(mirror_app, name="mirror")


@mirror_app.command("status")
def mirror_status(
    stack: Annotated[str, typer.Option("--stack", help="The staging stack.")] = "staging",
    prod_stack: Annotated[str, typer.Option("--prod-stack", help="The production stack (its STORAGE).")] = "prod",
    strict: Annotated[bool, typer.Option("--strict", help="Flags on past their sunset fail (exit 24) "
                                         "instead of warning.")] = False,
    staging_database_dsn: Annotated[str | None, typer.Option(
        "--staging-database-dsn", envvar="BREW_STAGING_DATABASE_DSN",
        help="Staging's database, for the drift check (Cloud SQL Auth Proxy).")] = None,
    sandbox_dir: Annotated[Path | None, typer.Option("--sandbox-dir", help="Check a sandbox started with "
                                                     "`brew-infra sandbox up`.")] = None,
    fmt: Annotated[Format, typer.Option("--format")] = Format.text,
) -> None:
    """Is staging's way back to bucket storage sound? Flags, sunset and the bucket mirror.

    Reads the live staging service's OBJECTS_MIRROR / OBJECTS_READTHROUGH / STORAGE, the
    declared settings and, while the mirror is on, compares every row with its bucket
    object (streaming both sides in key order). Exit codes: 0 ok, 20 READTHROUGH without
    MIRROR, 21 live flags differ from the declared ones, 22 STORAGE differs from
    production's, 23 mirror out of sync, 24 past the sunset (with --strict), 2 bad input.
    """
    import datetime as dt

    from infra.promote.clients import CloudRun, Endpoints
    from infra.promote.database import plain
    from infra.promote.mirror import mirror_verdict
    from infra.promote.runner import mirror_check
    from infra.synth.stacks import read_stack, settings_of

    staging = guarded(lambda: settings_of(read_stack(stack)))
    prod = guarded(lambda: settings_of(read_stack(prod_stack)))
    if sandbox_dir is not None:
        endpoints, _, check, today = _sandbox_wiring(_sandbox_endpoints(sandbox_dir), staging, prod.project)
    else:
        staging_connect = plain(staging_database_dsn) if staging_database_dsn else None
        endpoints, check = Endpoints(), mirror_check(staging.mirror, staging_connect, None, prod.project)
        today = lambda: dt.datetime.now(dt.timezone.utc).date()  # noqa: E731 - dates compare in UTC
    service = staging.services[0].name

    def verdict():
        env = CloudRun(staging.project, staging.region, endpoints).get_service(service).env
        return mirror_verdict(env, staging.mirror, prod.storage, today(), check, strict)

    result = guarded(verdict)
    if fmt is Format.json:
        sys.stdout.write(json.dumps({
            "ok": result.ok, "exit_code": result.exit_code, "flags": result.flags,
            "problems": [{"kind": p.kind, "message": p.message} for p in result.problems],
            "warnings": [{"kind": w.kind, "message": w.message} for w in result.warnings],
        }, indent=2) + "\n")
    else:
        out.print(f"{service}: " + ", ".join(f"{k}={v}" for k, v in result.flags.items()))
        for problem in result.problems:
            out.print(f"[red]  {problem.kind}:[/] {problem.message}")
        for warning in result.warnings:
            out.print(f"[yellow]  {warning.kind}:[/] {warning.message}")
        out.print("[green]ok[/]" if result.ok else f"[red]refused[/] (exit {result.exit_code})")
    raise typer.Exit(result.exit_code)


def _arm_crash(sandbox_dir: Path) -> None:
    """The sandbox's one-shot crash-after-worker fault: this run dies after the worker gate."""
    import os

    from infra.promote.pipeline import CRASH_AFTER_ENV
    from infra.sandbox.daemon import CRASH_MARKER

    marker = sandbox_dir / CRASH_MARKER
    if marker.exists():
        os.environ[CRASH_AFTER_ENV] = marker.read_text().strip()
        marker.unlink()


# --- review: check ---
class CheckFormat(str, Enum):
    table = "table"
    json = "json"
    sarif = "sarif"


@app.command()
def check(
    stacks: Annotated[list[str] | None, typer.Argument(help="Stacks to check, e.g. prod edge.")] = None,
    all_stacks: Annotated[bool, typer.Option("--all", help="Check every stack in stacks/.")] = False,
    graph_files: Annotated[list[Path] | None, typer.Option(
        "--graph", help="Check a synthesized graph file instead (repeatable), e.g. out/prod.json.")] = None,
    fmt: Annotated[CheckFormat, typer.Option(
        "--format", help="table for people; json; sarif (2.1.0) for code-scanning annotations.")] = CheckFormat.table,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report here, not stdout.")] = None,
) -> None:
    """Check stacks against the guardrail rules (BREW-Snnn security, BREW-Innn platform
    invariants, BREW-Bnnn connection budgets), offline, without credentials.

    Each finding names the rule, the resource, the property and the fix. Errors fail
    the check; warnings are reported only. The same rules run on real previews as a
    Pulumi policy pack: pulumi preview -s prod --policy-pack infra/policy/pack.

    Examples:
      brew-infra check --all
      brew-infra check prod --format json
      brew-infra check --all --format sarif -o out/check.sarif
      brew-infra check --graph out/prod.json

    Exit codes: 0 no error finding (warnings allowed), 1 at least one error finding,
    2 bad input (unknown stack, invalid stack or graph file), 3 the program failed.
    """
    from infra.policy.engine import GraphFileError, evaluate, load_graph
    from infra.policy.output import summary, to_json, to_sarif
    from infra.policy.rules import ALL_RULES
    from infra.synth.stacks import find_root, stack_path, synthesize

    root = find_root()
    if graph_files and (stacks or all_stacks):
        fail(ExitCode.BAD_INPUT, "give stacks (or --all) or --graph files, not both")
    graphs, sources = [], {}
    if graph_files:
        for path in graph_files:
            try:
                graph = load_graph(path)
            except GraphFileError as error:
                fail(ExitCode.BAD_INPUT, str(error))
            graphs.append(graph)
            sources[graph["stack"]] = path
    else:
        for name in _stacks(stacks, all_stacks):
            graphs.append(guarded(lambda name=name: synthesize(name).to_dict()))
            sources[name] = stack_path(name, root)
    findings = [f for graph in graphs for f in evaluate(graph)]
    names = [graph["stack"] for graph in graphs]
    counts = summary(findings)
    if fmt is CheckFormat.table:
        text = _findings_table(findings, names, len(ALL_RULES), counts)
    else:
        data = to_json(findings, names, ALL_RULES) if fmt is CheckFormat.json else to_sarif(
            findings, ALL_RULES, sources, root)
        text = json.dumps(data, indent=2) + "\n"
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        err.print(f"wrote {output}: {counts['errors']} error(s), {counts['warnings']} warning(s)")
    elif fmt is CheckFormat.table:
        out.print(text, end="", soft_wrap=True, markup=False)
    else:
        sys.stdout.write(text)
    if counts["errors"]:
        raise typer.Exit(int(ExitCode.FAILED))


def _findings_table(findings, stacks: list[str], rules: int, counts: dict[str, int]) -> str:
    console = Console(record=True, highlight=False, width=out.width, file=io.StringIO())
    if findings:
        table = Table(show_lines=False)
        for column in ("rule", "severity", "stack", "resource", "property", "finding"):
            table.add_column(column, no_wrap=column in ("rule", "severity", "stack"))
        for f in findings:
            table.add_row(f.rule, f.severity.value, f.stack, f.resource, f.property, f.message)
        console.print(table)
        fixes = {f.rule: f.remediation for f in findings}
        console.print("How to fix:")
        for rule, remediation in fixes.items():
            console.print(f"  {rule}: {remediation}", markup=False)
    verdict = "FAILED" if counts["errors"] else "passed"
    console.print(f"{verdict}: {counts['errors']} error(s), {counts['warnings']} warning(s) from {rules} rules "
                  f"over {', '.join(stacks)}", markup=False)
    return console.export_text()


@app.command()
def rules(
    fmt: Annotated[Format, typer.Option("--format", help="text: a table; json: every rule in full.")] = Format.text,
) -> None:
    """List the guardrail rules `check` and the policy pack enforce: ID, severity, title,
    what the scanners (Checkov, KICS, Trivy) call the same check."""
    from infra.policy.output import rule_dict
    from infra.policy.rules import ALL_RULES

    if fmt is Format.json:
        sys.stdout.write(json.dumps([rule_dict(rule) for rule in ALL_RULES], indent=2) + "\n")
        return
    table = Table(show_lines=False)
    for column in ("rule", "severity", "title", "references"):
        table.add_column(column, no_wrap=column in ("rule", "severity"))
    for rule in ALL_RULES:
        table.add_row(rule.id, rule.severity.value, rule.title, ", ".join(rule.references) or "-")
    out.print(table)
    out.print(f"{len(ALL_RULES)} rules")


# --- review: diff, report ---
class ReportFormat(str, Enum):
    markdown = "markdown"
    json = "json"


def _emit_report(report, fmt: ReportFormat, output: Path | None) -> None:
    from infra.report.diff import render_markdown

    text = render_markdown(report) if fmt is ReportFormat.markdown else json.dumps(
        report.to_dict(), indent=2, default=str) + "\n"
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        err.print(f"wrote {output}: {len(report.dangerous)} dangerous change(s), "
                  f"{len(report.new_findings)} new finding(s)")
    else:
        sys.stdout.write(text)
    if report.dangerous:
        raise typer.Exit(int(ExitCode.FAILED))


@app.command()
def diff(
    base: Annotated[str, typer.Argument(help="A git ref (main, HEAD~1, a commit), a graph file or a folder "
                                        "of graph files.")],
    head: Annotated[str | None, typer.Argument(help="The same kinds; default: the working tree.")] = None,
    fmt: Annotated[ReportFormat, typer.Option("--format", help="markdown (a pull-request comment) or json.")]
    = ReportFormat.markdown,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report here, not stdout.")] = None,
) -> None:
    """What a change declares, per stack: resources added, removed, replaced (a change to
    a property that forces replacement, such as a name, region or database version) and
    changed property by property; the dangerous ones flagged (deleting or replacing a
    Cloud SQL instance, database, bucket or the global address; any change to ingress,
    IAM, Cloud Armor, TLS or the worker's scaling); guardrail findings new against BASE.

    Git refs are synthesized with their own code, offline.

    Examples:
      brew-infra diff HEAD~1                      # last commit -> working tree
      brew-infra diff origin/main HEAD -o out/diff.md
      brew-infra diff old/prod.json out/prod.json --format json

    Exit codes: 0 no dangerous change, 1 a dangerous change, 2 bad input (unknown ref,
    not a repository, bad graph file, a ref mixed with a file), 3 the program failed.
    """
    from infra.report.diff import compare
    from infra.report.sides import SideError, is_graph_path, load_side, resolve_ref
    from infra.synth.stacks import find_root

    if head is not None and is_graph_path(base) != is_graph_path(head):
        fail(ExitCode.BAD_INPUT, f"compare two git refs or two graph files/folders, not {base!r} with {head!r}")
    if head is None and is_graph_path(base):
        fail(ExitCode.BAD_INPUT, f"{base} is a graph file: give the graph file to compare it with as HEAD")
    root = find_root()
    for spec in (base, head):  # both refs known before minutes of synthesis
        if spec is not None and not is_graph_path(spec):
            try:
                resolve_ref(root, spec)
            except SideError as error:
                fail(ExitCode.BAD_INPUT, str(error))

    def side(spec: str | None):
        try:
            return load_side(spec, root)
        except SideError as error:
            fail(ExitCode.BAD_INPUT, str(error))

    base_label, base_graphs = side(base)
    head_label, head_graphs = guarded(lambda: side(head))  # the working tree runs this checkout's program
    _emit_report(compare(base_graphs, head_graphs, base_label, head_label), fmt, output)


@app.command()
def report(
    preview: Annotated[Path, typer.Option("--preview", help="The output of `pulumi preview --json`.")],
    fmt: Annotated[ReportFormat, typer.Option("--format", help="markdown or json.")] = ReportFormat.markdown,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report here, not stdout.")] = None,
) -> None:
    """Render a real `pulumi preview --json` through the diff report's template.

    Example:
      pulumi preview -s prod --json > preview.json && brew-infra report --preview preview.json

    Exit codes as for diff: 0, 1 a dangerous change, 2 bad input.
    """
    from infra.report.preview import PreviewError, read_preview

    try:
        result = read_preview(preview)
    except PreviewError as error:
        fail(ExitCode.BAD_INPUT, str(error))
    _emit_report(result, fmt, output)


# --- review: diagram ---
@app.command()
def diagram(
    stacks: Annotated[list[str] | None, typer.Argument(help="Stacks to draw, e.g. prod edge.")] = None,
    all_stacks: Annotated[bool, typer.Option("--all", help="Draw every stack in stacks/ together.")] = False,
    graph_files: Annotated[list[Path] | None, typer.Option(
        "--graph", help="Draw a synthesized graph file too (repeatable), e.g. out/prod.json.")] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="Where the .dot and .svg files go.")] = Path("out"),
) -> None:
    """Draw the architecture as Graphviz DOT and SVG, a cluster per stack.

    Shows the hosts, the global address, the URL map, backends with their
    Cloud Armor policy, Cloud Run services (role, min..max instances) and
    jobs, Cloud SQL instances (tier, HA or zonal, version), buckets, and
    service accounts (what runs as them, what they are granted).

    Stacks drawn together link across clusters by name: the edge backends
    to the services they serve, a job to the identity it runs as. A name no
    drawn stack declares is drawn as a dashed stand-in. Stacks are
    synthesized offline; --graph files are drawn as they are.

    Files: OUT/diagram.dot and OUT/diagram.svg for --all; otherwise named by
    the drawn stacks, sorted and joined by '+' (prod.svg, edge+prod.svg).
    The SVG is rendered by Graphviz's dot (apt-get install graphviz): open
    it in a browser.

    Examples:
      brew-infra diagram --all
      brew-infra diagram prod
      brew-infra diagram --graph out/edge.json --graph out/prod.json

    Exit codes: 0 written, 2 bad input (unknown stack, bad graph file, a
    stack given twice), 3 the Pulumi program failed, 4 Graphviz's dot is
    missing or failed (the DOT file is written anyway).
    """
    from infra.policy.engine import GraphFileError, load_graph
    from infra.report.diagram import DiagramError, build, file_stem, render_svg, write_dot
    from infra.synth.stacks import read_stack, settings_of, synthesize

    if not (stacks or all_stacks or graph_files):
        _stacks(stacks, all_stacks)  # fails with the stacks to choose from
    graphs = []
    for path in graph_files or []:
        try:
            graphs.append(load_graph(path))
        except GraphFileError as error:
            fail(ExitCode.BAD_INPUT, str(error))
    names = _stacks(stacks, all_stacks) if stacks or all_stacks else []
    drawn = [str(graph["stack"]) for graph in graphs] + names
    twice = sorted({name for name in drawn if drawn.count(name) > 1})
    if twice:
        fail(ExitCode.BAD_INPUT, f"stack {twice[0]} is given twice (a stack name and a --graph file, or two files)")
    # Validate every stack before synthesizing any, so bad input fails fast.
    guarded(lambda: [settings_of(read_stack(name)) for name in names])
    graphs += [guarded(lambda name=name: synthesize(name).to_dict()) for name in names]
    picture = build(graphs)
    stem = file_stem(drawn, all_stacks)
    try:
        dot_path = write_dot(picture, out_dir / f"{stem}.dot")
    except OSError as error:
        fail(ExitCode.BAD_INPUT, f"cannot write {out_dir / stem}.dot: {error.strerror or error}")
    try:
        svg_path = render_svg(dot_path, out_dir / f"{stem}.svg")
    except DiagramError as error:
        fail(ExitCode.TOOL_ERROR, str(error))
    stacks_drawn = f"{len(picture.stacks)} stack" + ("s" if len(picture.stacks) != 1 else "")
    out.print(f"wrote {dot_path} and {svg_path}: {stacks_drawn}, {len(picture.nodes)} nodes, "
              f"{len(picture.edges)} edges", markup=False)


# --- storage: check ---
storage_app = typer.Typer(help="Object storage as Penpot's backend uses it (S3 API; GCS with an HMAC key).",
                          no_args_is_help=True)
app.add_typer(storage_app, name="storage")


class Addressing(str, Enum):
    path = "path"
    virtual = "virtual"


@storage_app.command("check")
def storage_check(
    s3_endpoint: Annotated[str, typer.Option(
        "--s3-endpoint", envvar=["PENPOT_OBJECTS_STORAGE_S3_ENDPOINT", "PENPOT_STORAGE_ASSETS_S3_ENDPOINT"],
        help="The S3 API's URL, e.g. https://storage.googleapis.com for GCS.")],
    bucket: Annotated[str, typer.Option(
        "--bucket", envvar=["PENPOT_OBJECTS_STORAGE_S3_BUCKET", "PENPOT_STORAGE_ASSETS_S3_BUCKET"],
        help="The bucket Penpot stores its objects in.")],
    region: Annotated[str, typer.Option(
        "--region", envvar=["PENPOT_OBJECTS_STORAGE_S3_REGION", "PENPOT_STORAGE_ASSETS_S3_REGION"],
        help="Region in the signature's scope: GCS takes any ('auto'); on AWS, the bucket's.")] = "auto",
    prefix: Annotated[str, typer.Option(
        "--prefix", help="Folder the test object is written under (a trailing / is added).")] = "brew-infra-smoke/",
    addressing: Annotated[Addressing, typer.Option(
        "--addressing", help="path: URL/bucket/key (GCS, MinIO, moto); virtual: bucket.host/key.")] = Addressing.path,
    fmt: Annotated[Format, typer.Option("--format", help="text for people, json for machines.")] = Format.text,
    timeout: Annotated[float, typer.Option(
        "--timeout", help="Seconds to connect and to wait for each answer, per attempt (2 attempts).")] = 10.0,
) -> None:
    """Put, get, list and delete one object through the S3 API, as Penpot's
    backend does.

    Writes random bytes under a unique key in PREFIX, reads them back
    (SHA-256 must match), lists them, deletes them (even when a step before
    failed) and checks they are gone (HEAD answers 404). Each step is timed.

    The key comes from the environment only, where Penpot's backend reads it:
    AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; on GCS, an HMAC key's access
    ID and secret (gcloud storage hmac create SERVICE_ACCOUNT_EMAIL).
    Endpoint, bucket and region default to Penpot's own settings when set:
    PENPOT_OBJECTS_STORAGE_S3_* (Penpot 2.x) or PENPOT_STORAGE_ASSETS_S3_*
    (older releases).

    Examples:
      export AWS_ACCESS_KEY_ID=GOOG1E... AWS_SECRET_ACCESS_KEY=...
      brew-infra storage check --s3-endpoint https://storage.googleapis.com \\
        --bucket penpot-assets
      brew-infra storage check --s3-endpoint http://localhost:9000 \\
        --bucket penpot --format json

    Exit codes: 0 passed, 2 bad input (bad URL or bucket name, key not in
    the environment), 90 credentials rejected, 91 bucket missing, 92 the
    endpoint does not answer, 93 round trip failed (bytes differ, object
    not listed or not deleted).
    """
    import os

    from infra.storage_check import Credentials, Problem, StorageInputError, Target, run_check, s3_client

    try:
        target = Target(s3_endpoint.rstrip("/"), bucket, region, addressing.value, prefix, timeout)
        credentials = Credentials.from_env(os.environ)
        client = s3_client(target, credentials)
    except StorageInputError as error:
        fail(ExitCode.BAD_INPUT, str(error))
    result = run_check(client, target, credentials)
    code = ExitCode.OK if result.problem is None else {
        Problem.CREDENTIALS_REJECTED: ExitCode.STORAGE_CREDENTIALS_REJECTED,
        Problem.BUCKET_MISSING: ExitCode.STORAGE_BUCKET_MISSING,
        Problem.UNREACHABLE: ExitCode.STORAGE_UNREACHABLE,
        Problem.ROUND_TRIP_FAILED: ExitCode.STORAGE_ROUND_TRIP_FAILED,
    }[result.problem]
    if fmt is Format.json:
        sys.stdout.write(json.dumps(result.to_dict() | {"exit_code": int(code)}, indent=2) + "\n")
    else:
        out.print(f"storage check: {target.endpoint} bucket {target.bucket} ({target.addressing}-style, "
                  f"region {target.region}, key {result.access_key})", markup=False)
        for step in result.steps:
            ms = f"{step.ms:7.1f} ms" if step.ms is not None else " " * 10
            out.print(f"  {step.name:<7} {step.status.value:<8}{ms}  {step.detail}".rstrip(), markup=False)
        if result.ok:
            out.print(f"passed: put, get, list and delete work ({result.total_ms:.1f} ms)", markup=False)
    if result.problem is not None:
        fail(code, result.message)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
