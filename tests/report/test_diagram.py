"""`brew-infra diagram`: the architecture of the shipped stacks as DOT and SVG, DOT
escaping, and what happens without Graphviz. Graphviz is required here: scripts/setup
installs it, so a missing `dot` fails these tests rather than skipping them."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra.cli import app
from infra.exit_codes import ExitCode
from infra.report.diagram import (BUCKET, JOB, REDIS, SERVICE, SQL_INSTANCE, URL_MAP, Diagram, GraphvizMissing,
                                  build, escape, file_stem, quote, render_svg, to_dot, write_dot)

SVG_NS = "{http://www.w3.org/2000/svg}"
HOSTS = {"feed.joinsquareup.com": "brew-web", "brew.joinsquareup.com": "shopos-feed",
         "demo.joinsquareup.com": "brew-demo"}


def physical_names(graphs: dict[str, dict], type_token: str) -> dict[str, str]:
    """Physical name -> the stack declaring it."""
    return {r["inputs"]["name"]: stack for stack, graph in graphs.items() for r in graph["resources"]
            if r["type"] == type_token}


def hosts_of(graphs: dict[str, dict]) -> set[str]:
    return {host for graph in graphs.values() for r in graph["resources"] if r["type"] == URL_MAP
            for rule in r["inputs"].get("hostRules") or [] for host in rule["hosts"]}


def cluster(dot: str, stack: str) -> str:
    """The body of one stack's cluster in the DOT text."""
    match = re.search(rf'\n  subgraph "cluster_{re.escape(stack)}" {{\n(.*?)\n  }}\n', dot, re.S)
    assert match, f"no cluster for {stack}"
    return match.group(1)


def svg_texts(path: Path) -> list[str]:
    return ["".join(t.itertext()) for t in ET.parse(path).getroot().iter(f"{SVG_NS}text")]


def edge(picture: Diagram, tail: str, head: str) -> str:
    """The label of the one edge between two nodes."""
    labels = [e.label for e in picture.edges if (e.tail, e.head) == (tail, head)]
    assert len(labels) == 1, f"{tail} -> {head}: {labels}"
    return labels[0]


def require_dot() -> None:
    assert shutil.which("dot"), "Graphviz's dot is missing: scripts/setup installs it (apt-get install graphviz)"


@pytest.fixture(scope="module")
def picture(graphs) -> Diagram:
    return build(list(graphs.values()))


@pytest.fixture(scope="module")
def dot(picture) -> str:
    return to_dot(picture)


@pytest.fixture
def graph_files(graphs, tmp_path) -> dict[str, Path]:
    folder = tmp_path / "graphs"
    folder.mkdir()
    for stack, graph in graphs.items():
        (folder / f"{stack}.json").write_text(json.dumps(graph))
    return {stack: folder / f"{stack}.json" for stack in graphs}


@pytest.fixture
def without_dot(tmp_path, monkeypatch) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def invoke(*args: str):
    return CliRunner().invoke(app, ["diagram", *args])


def test_every_service_job_database_bucket_and_host_is_drawn_in_its_stack(graphs, picture, dot):
    expected = {
        ("service", SERVICE): {"brew-web", "brew-worker", "shopos-feed", "brew-demo",
                               "penpot-frontend", "penpot-backend", "penpot-worker", "penpot-exporter"},
        ("job", JOB): {"brew-ops"},
        ("database", SQL_INSTANCE): {"brew-prod", "brew-staging", "penpot-prod"},
        ("cache", REDIS): {"penpot-prod"},
        ("bucket", BUCKET): {"brew-prod", "brew-prototype", "brew-prototype-demo", "squareup-penpot-assets"},
    }
    for (kind, type_token), names in expected.items():
        declared = physical_names(graphs, type_token)
        assert set(declared) == names, kind
        for name, stack in declared.items():
            node = picture.named(kind, name)
            assert node.stack == stack
            assert f"{quote(node.key)} [label={quote(name)[:-1]}\\n" in cluster(dot, stack), (kind, name)
    assert hosts_of(graphs) == set(HOSTS)
    for host in HOSTS:
        assert picture.named("host", host).stack == "edge"
        assert quote(f"host:{host}") in cluster(dot, "edge")


def test_nodes_carry_role_scaling_tier_availability_and_version(picture):
    def facts(kind: str, name: str) -> tuple[str, ...]:
        return picture.named(kind, name).lines

    assert {"role web", "instances 2..10"} <= set(facts("service", "brew-web"))
    assert {"role worker", "instances 1..1", "CPU always allocated"} <= set(facts("service", "brew-worker"))
    assert {"role web,worker", "instances 1..1"} <= set(facts("service", "shopos-feed"))
    assert "role ops" in facts("job", "brew-ops")
    assert {"Cloud SQL instance, POSTGRES_17", "tier db-custom-2-7680", "HA (regional)"} <= set(
        facts("database", "brew-prod"))
    assert "zonal" in facts("database", "brew-staging")
    assert "versioning on" in facts("bucket", "brew-prod")
    assert "port 80 redirects to HTTPS" in facts("address", "squareup-ip")


def test_armor_is_shown_on_the_production_backend_only(picture, dot):
    assert "Cloud Armor brew-prod-armor" in picture.named("backend", "brew-web-backend").lines
    for other in ("shopos-feed-backend", "brew-demo-backend"):
        assert "no Cloud Armor" in picture.named("backend", other).lines
    assert "brew-web-backend\\nbackend service, HTTPS\\nCloud Armor brew-prod-armor" in dot


def test_stacks_drawn_together_link_across_clusters(picture):
    urlmap = picture.named("urlmap", "squareup-urlmap").key
    address = picture.named("address", "squareup-ip").key
    assert edge(picture, address, urlmap) == "port 443 HTTPS, TLS_1_2 minimum"
    for host, service in HOSTS.items():
        backend = picture.named("backend", f"{service}-backend").key
        assert edge(picture, picture.named("host", host).key, address) == "DNS A"
        assert edge(picture, urlmap, backend) == host
        assert edge(picture, backend, picture.named("service", service).key) == f"serverless NEG {service}-neg"
    prod_db, staging_db = picture.named("database", "brew-prod").key, picture.named("database", "brew-staging").key
    runtime = picture.named("identity", "brew-runtime")
    prod_runtime = picture.named("identity", "brew-prod-runtime").key
    for service, pool in (("brew-web", 5), ("brew-worker", 10)):
        key = picture.named("service", service).key
        assert edge(picture, key, prod_db) == f"db brew, pool {pool}, as brew-prod-runtime"
        assert edge(picture, key, picture.named("bucket", "brew-prod").key) == "objects"
        assert edge(picture, key, prod_runtime) == "runs as"
    feed = picture.named("service", "shopos-feed").key
    assert edge(picture, feed, staging_db) == "db brew, pool 10, as brew-runtime"
    assert edge(picture, feed, picture.named("bucket", "brew-prototype").key) == "objects"
    demo = picture.named("service", "brew-demo").key
    assert edge(picture, demo, picture.named("bucket", "brew-prototype-demo").key) == "objects"
    assert not [e for e in picture.edges if e.tail == demo and e.head.startswith("database:")]
    # The ops job in prod runs as brew-runtime, declared by the staging stack, and logs in to
    # brew-prod through its monitoring-only database user.
    ops = picture.named("job", "brew-ops").key
    assert (runtime.stack, edge(picture, ops, runtime.key)) == ("staging", "runs as")
    assert edge(picture, ops, prod_db) == "db brew, pool 1, as brew-runtime"
    assert edge(picture, runtime.key, prod_db) == "IAM database login"
    assert edge(picture, picture.named("identity", "brew-deployer").key, prod_runtime) == "acts as"
    assert all(node.declared for node in picture.nodes), "nothing dangles when every stack is drawn"


def test_a_stack_drawn_alone_points_at_dashed_stand_ins(graphs):
    alone = build([graphs["edge"]])
    text = to_dot(alone)
    stand_ins = {n.lines[0] for n in alone.nodes if not n.declared}
    assert stand_ins == set(HOSTS.values())
    assert all(n.kind == "service" and n.lines[-1] == "not in this diagram" for n in alone.nodes if not n.declared)
    key = quote(alone.named("service", "brew-web").key)
    assert key not in cluster(text, "edge")
    assert re.search(rf"\n  {re.escape(key)} \[label=.*style=dashed", text)


def test_penpot_draws_its_redis_and_who_reads_its_uri(picture):
    cache = picture.named("cache", "penpot-prod")
    assert cache.stack == "penpot-prod"
    assert {"Memorystore for Redis, REDIS_7_2", "HA (standard), 1 GB", "AUTH on"} <= set(cache.lines)
    names = {node.key: node.lines[0] for node in picture.nodes}
    readers = {names[e.tail]: e.label for e in picture.edges if e.head == cache.key}
    # The frontend reads nothing from Redis; the backends and the exporter through the URI secret.
    assert readers == {"penpot-backend": "PENPOT_REDIS_URI", "penpot-worker": "PENPOT_REDIS_URI",
                       "penpot-exporter": "PENPOT_REDIS_URI"}
    backend = picture.named("service", "penpot-backend")
    database = picture.named("database", "penpot-prod")
    assert edge(picture, backend.key, database.key) == "db penpot, pool 20, as penpot-prod-backend"
    assert "K = 2 pollers" in picture.named("service", "penpot-exporter").lines
    assert "HMAC key (S3 API)" in picture.named("identity", "penpot-prod-backend").lines


def test_the_dot_text_is_the_same_whatever_order_the_graphs_come_in(graphs, dot):
    assert to_dot(build(list(reversed(graphs.values())))) == dot
    assert [f'subgraph "cluster_{s}"' in dot for s in sorted(graphs)] == [True] * len(graphs)


def test_dot_renders_the_svg_with_every_piece(graphs, picture, tmp_path):
    require_dot()
    dot_path = write_dot(picture, tmp_path / "diagram.dot")
    svg = render_svg(dot_path, tmp_path / "diagram.svg")
    root = ET.parse(svg).getroot()
    titles = {"".join(g.find(f"{SVG_NS}title").itertext()) for g in root.iter(f"{SVG_NS}g")
              if g.get("class") == "cluster"}
    assert titles == {f"cluster_{stack}" for stack in graphs}
    texts = set(svg_texts(svg))
    for type_token in (SERVICE, JOB, SQL_INSTANCE, BUCKET):
        assert set(physical_names(graphs, type_token)) <= texts
    assert set(HOSTS) <= texts
    assert "Cloud Armor brew-prod-armor" in texts


@pytest.mark.parametrize("text, escaped", [
    ('say "hi"', 'say \\"hi\\"'),
    ("C:\\path\\", "C:\\\\path\\\\"),  # a trailing backslash must not swallow the closing quote
    ("two\nlines", "two\\nlines"),
    ("\\N is the node name", "\\\\N is the node name"),  # literal, not Graphviz's substitution
    ("R&D &amp;", "R&amp;D &amp;amp;"),  # Graphviz decodes entities in plain labels
    ("node -> edge {graph} <b>|x|", "node -> edge {graph} <b>|x|"),
])
def test_escape_keeps_text_literal_inside_dot_quotes(text, escaped):
    assert escape(text) == escaped


def test_odd_names_survive_dot_into_the_svg(tmp_path):
    require_dot()
    odd = 'we"ird\\name {x} <y> |z| R&D \\N end\\'
    graph = {"stack": 'odd "stack"', "project": "p", "resources": [
        {"type": SERVICE, "name": "svc", "urn": "urn:svc", "dependencies": [],
         "inputs": {"name": odd, "project": "p", "location": "r",
                    "template": {"serviceAccount": "node@p.iam.gserviceaccount.com"}}},
        {"type": BUCKET, "name": "bucket", "urn": "urn:bucket", "inputs": {"name": "digraph"}},
    ]}
    svg = render_svg(write_dot(build([graph]), tmp_path / "odd.dot"), tmp_path / "odd.svg")
    texts = svg_texts(svg)
    assert {odd, "stack odd \"stack\"", "digraph", "node"} <= set(texts)


def test_without_dot_the_dot_file_is_written_and_the_error_says_how_to_install(picture, tmp_path, without_dot):
    dot_path = write_dot(picture, tmp_path / "diagram.dot")
    stale = tmp_path / "diagram.svg"
    stale.write_text("<svg/>")
    with pytest.raises(GraphvizMissing, match=r"apt-get install graphviz"):
        render_svg(dot_path, stale)
    assert dot_path.read_text() == to_dot(picture)
    assert not stale.exists(), "an old SVG must not pass for the current architecture"


def test_cli_draws_graph_files_named_by_their_stacks(graph_files, tmp_path):
    require_dot()
    result = invoke("--graph", str(graph_files["prod"]), "--graph", str(graph_files["edge"]),
                    "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["edge+prod.dot", "edge+prod.svg"]
    assert "brew-web" in svg_texts(tmp_path / "out" / "edge+prod.svg")
    assert "2 stacks" in result.stdout


def test_cli_all_writes_diagram_dot_and_svg(tmp_path, dot):
    require_dot()
    result = invoke("--all", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "diagram.dot").read_text() == dot
    assert (tmp_path / "diagram.svg").read_text().lstrip().startswith("<?xml")


def test_cli_without_dot_exits_4_with_one_line_and_keeps_the_dot(graph_files, tmp_path, without_dot):
    result = invoke("--graph", str(graph_files["demo"]), "--out", str(tmp_path))
    assert result.exit_code == ExitCode.TOOL_ERROR == 4
    assert result.stderr.count("\n") == 1 and "apt-get install graphviz" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.dot", "empty-path", "graphs"]


@pytest.mark.parametrize("args, message", [
    ([], "name a stack"),
    (["nope"], "unknown stack 'nope'"),
    (["prod", "--all"], "not both"),
    (["--graph", "{missing}"], "no such graph file"),
    (["--graph", "{not_json}"], "not JSON"),
    (["--graph", "{not_a_graph}"], "not a synthesized graph"),
    (["prod", "--graph", "{prod}"], "stack prod is given twice"),
])
def test_cli_bad_input_exits_2_in_one_line(args, message, graph_files, tmp_path):
    files = {"missing": tmp_path / "missing.json", "not_json": tmp_path / "bad.json",
             "not_a_graph": tmp_path / "list.json", "prod": graph_files["prod"]}
    files["not_json"].write_text("{")
    files["not_a_graph"].write_text("[]")
    result = invoke(*[a.format(**files) for a in args], "--out", str(tmp_path / "out"))
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert result.stderr.count("\n") == 1 and message in result.stderr
    assert not (tmp_path / "out").exists()


def test_file_names_follow_the_drawn_stacks():
    assert file_stem(["prod", "edge", "demo", "staging"], every_stack=True) == "diagram"
    assert file_stem(["prod"], every_stack=False) == "prod"
    assert file_stem(["prod", "edge"], every_stack=False) == "edge+prod"
    assert file_stem(["../../etc/x"], every_stack=False) == "_.._etc_x"


def test_help_teaches_outputs_examples_and_exit_codes():
    result = CliRunner().invoke(app, ["diagram", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for words in ("brew-infra diagram --all", "diagram.svg", "edge+prod.svg", "apt-get install graphviz",
                  "open", "4 Graphviz's dot is"):
        assert words in result.stdout, words


BREW_STACKS = ("demo", "edge", "prod", "staging")


def test_the_readme_picture_is_current(graphs):
    """docs/diagram.svg (shown in the README) is rendered from docs/diagram.dot, which must
    be what `brew-infra diagram demo edge prod staging` draws today. After an intended
    change: BREW_UPDATE_SNAPSHOTS=1 uv run pytest tests/report/test_diagram.py."""
    import os

    from infra.report.diagram import build, render_svg, to_dot
    from infra.synth.stacks import REPO_ROOT

    dot = to_dot(build([graphs[stack] for stack in BREW_STACKS]))
    path = REPO_ROOT / "docs" / "diagram.dot"
    if os.environ.get("BREW_UPDATE_SNAPSHOTS"):
        path.write_text(dot)
        render_svg(path, path.with_suffix(".svg"))
    assert path.read_text() == dot, "docs/diagram.dot is stale: regenerate it (see this test's docstring)"
