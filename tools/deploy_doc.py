"""`make docs`: the tables of docs/deploy.md that restate code, written from that code.

docs/deploy.md lists the alerts, the dashboard's panels, the compose stack's images and
the programs `make stack-bin` builds. Written by hand they drifted (an alert table with
4 of 5 alerts, a stale panel list); here each is a marked block this tool owns::

    <!-- deploy-doc:begin NAME: written by tools/deploy_doc.py from SOURCE -->
    ...
    <!-- deploy-doc:end -->

    python tools/deploy_doc.py            # rewrite the blocks
    python tools/deploy_doc.py --check    # exit 1 when a block is stale (tests/test_deploy_doc.py)

Sources: the alerts from deploy/prometheus/alerts.py (name, severity, when it fires,
``for``, the metrics each reads, its runbook); the panels from
dashboards/adk_task_telemetry.py (the dashboard it builds, row by row); the images and
host ports from
deploy/compose/docker-compose.yml; the programs' versions from tools/stack/versions.py
(the ocb manifest and the go.mod files the Makefile builds from). It needs the
dashboard's dependency (grafana-foundation-sdk, the dev extra).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "deploy.md"
BEGIN = re.compile(r"^<!-- deploy-doc:begin (?P<name>[\w-]+)(?::.*)? -->$")
END = "<!-- deploy-doc:end -->"

ALERTS_PY = ROOT / "deploy" / "prometheus" / "alerts.py"
DASHBOARD_PY = ROOT / "dashboards" / "adk_task_telemetry.py"
COMPOSE = ROOT / "deploy" / "compose" / "docker-compose.yml"
VERSIONS_PY = ROOT / "tools" / "stack" / "versions.py"


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the blocks ---------------------------------------------------------------------

#: Series names in a PromQL expression (recording rules have a colon).
_SERIES = re.compile(r"\b(?:adk|otelcol)_[a-z0-9_]+\b|\badk:[a-z0-9_:]+\b")


def metrics_read(expr: str) -> list[str]:
    """The metric and recorded series an expression reads, in order, once each (labels
    of the contract, also spelled adk_*, are left out: they never precede ``[``, ``{``,
    ``)``, `` >`` or an operator the way a series does)."""
    labels = set(re.findall(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)", expr))
    label_names = {n.strip() for group in labels for n in group.split(",")}
    label_names |= set(re.findall(r"\b(\w+)\s*(?:=~|!=|=)\s*\"", expr))
    seen: list[str] = []
    for name in _SERIES.findall(expr):
        if name not in label_names and name not in seen:
            seen.append(name)
    return seen


def alerts_table() -> str:
    alerts = _load(ALERTS_PY, "adk_deploy_doc_alerts")
    rows = ["| alert | severity | fires when | for | reads | runbook |",
            "|---|---|---|---|---|---|"]
    for spec in alerts.ALERTS:
        reads = ", ".join(f"`{m}`" for m in metrics_read(spec["expr"]))
        rows.append(f"| {spec['alert']} | {spec['labels']['severity']} | "
                    f"{alerts.FIRES_WHEN[spec['alert']]} | {spec.get('for', '-')} | {reads} | "
                    f"[runbook](runbooks/{spec['alert']}.md) |")
    return "\n".join(rows) + "\n"


def dashboard_panels() -> list[tuple[str, list[str]]]:
    """(row title, panel titles) of the dashboard the code builds."""
    sys.path.insert(0, str(DASHBOARD_PY.parent))
    try:
        dash = _load(DASHBOARD_PY, "adk_deploy_doc_dashboard")
    finally:
        sys.path.remove(str(DASHBOARD_PY.parent))
    rows: list[tuple[str, list[str]]] = []
    for panel in json.loads(dash.render())["panels"]:
        if panel["type"] == "row":
            rows.append((panel["title"], []))
        else:
            rows[-1][1].append(panel["title"])
    return rows


def panels_list() -> str:
    return "".join(f"- **{row}**: {'; '.join(panels)}\n" for row, panels in dashboard_panels())


_PORT = re.compile(r'^\s*-\s*"\$\{ADK_STACK_BIND:-127\.0\.0\.1\}:(\d+):\d+"\s*(?:#\s*(.*))?$')


def compose_services() -> list[tuple[str, str, list[str]]]:
    """(service, image, host ports with their comments) in file order."""
    out: list[tuple[str, str, list[str]]] = []
    for line in COMPOSE.read_text().splitlines():
        service = re.match(r"^  ([a-z][\w-]*):\s*$", line)
        if service:
            out.append((service.group(1), "", []))
            continue
        if not out:
            continue
        image = re.match(r"^\s+image:\s*(\S+)", line)
        if image:
            out[-1] = (out[-1][0], image.group(1), out[-1][2])
        port = _PORT.match(line)
        if port:
            note = f" ({port.group(2).strip()})" if port.group(2) else ""
            out[-1][2].append(f"{port.group(1)}{note}")
    return [s for s in out if s[1]]


def compose_table() -> str:
    rows = ["| service | image | host port (127.0.0.1) |", "|---|---|---|"]
    rows += [f"| {name} | `{image}` | {', '.join(ports) or '-'} |"
             for name, image, ports in compose_services()]
    return "\n".join(rows) + "\n"


#: Where a program's main package is not the module's cmd/<name>, and how it is built.
_MAIN_PACKAGE = {
    "jaeger": ", `cmd/jaeger`",
    "victorialogs": ", `app/victoria-logs`, pure Go (`CGO_ENABLED=0`)",
}


def programs_table() -> str:
    v = _load(VERSIONS_PY, "adk_deploy_doc_versions")
    col = v.release("otelcol")
    rows = [
        "| program | built from | version (`--version`) | image it stands for |",
        "|---|---|---|---|",
        f"| `otelcol-adk` | `deploy/otel-collector/distribution/` (ocb manifest "
        f"`builder-config.yaml`, generated `main.go`, `components.go`, `go.mod`) | {col} | "
        f"`otel/opentelemetry-collector-contrib:{col}` |",
    ]
    for program, binaries, image, tag_v in (
            ("jaeger", "`jaeger`", "jaegertracing/jaeger", ""),
            ("prometheus", "`prometheus`, `promtool`", "prom/prometheus", "v"),
            ("alertmanager", "`alertmanager`, `amtool`", "prom/alertmanager", "v"),
            ("victorialogs", "`victoria-logs`", "victoriametrics/victoria-logs", "v")):
        path, module = v.GO_MODS[program]
        release = v.release(program)
        shown = f"v{release}" if program in ("jaeger", "victorialogs") else release
        rows.append(f"| {binaries} | `{path.relative_to(ROOT)}`: `{module}` "
                    f"{v.module_version(program)}{_MAIN_PACKAGE.get(program, '')} | "
                    f"{shown} | `{image}:{tag_v}{release}` |")
    return "\n".join(rows) + "\n"


BLOCKS: dict[str, tuple[str, Callable[[], str]]] = {
    "compose-images": ("deploy/compose/docker-compose.yml", compose_table),
    "alerts": ("deploy/prometheus/alerts.py", alerts_table),
    "panels": ("dashboards/adk_task_telemetry.py", panels_list),
    "programs": ("tools/stack/versions.py", programs_table),
}


# --- the marked blocks of the doc ---------------------------------------------------


def marker(name: str) -> str:
    return (f"<!-- deploy-doc:begin {name}: written by tools/deploy_doc.py from "
            f"{BLOCKS[name][0]} -->")


def rewrite(text: str, produce: Callable[[str], str] | None = None) -> str:
    """``text`` with every marked block made again (``produce(name)``, default: the
    block's source). An unknown or unterminated block is an error."""
    make = produce or (lambda name: BLOCKS[name][1]())
    lines = text.splitlines(True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        found = BEGIN.match(lines[i].rstrip("\n"))
        if not found:
            out.append(lines[i])
            i += 1
            continue
        name = found.group("name")
        if name not in BLOCKS:
            raise ValueError(f"unknown deploy-doc block {name!r}")
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip("\n") == END), None)
        if end is None:
            raise ValueError(f"deploy-doc block {name!r} has no {END}")
        out += [marker(name) + "\n", make(name), END + "\n"]
        i = end + 1
    return "".join(out)


def block_names(text: str) -> list[str]:
    return [m.group("name") for line in text.splitlines() if (m := BEGIN.match(line))]


def stale(doc: Path = DOC) -> list[str]:
    """The blocks of ``doc`` that differ from their source, and the ones it lacks."""
    text = doc.read_text()
    names = block_names(text)
    missing = [f"{n} (no block)" for n in BLOCKS if n not in names]
    fresh = rewrite(text)
    changed = [n for n in names if _block(text, n) != _block(fresh, n)]
    return missing + changed


def _block(text: str, name: str) -> str:
    lines = text.splitlines(True)
    start = next(i for i, line in enumerate(lines)
                 if (m := BEGIN.match(line.rstrip("\n"))) and m.group("name") == name)
    end = next(j for j in range(start + 1, len(lines)) if lines[j].rstrip("\n") == END)
    return "".join(lines[start + 1:end])


def main(argv: list[str]) -> int:
    if "--check" in argv:
        bad = stale()
        for name in bad:
            print(f"docs/deploy.md: block {name} is stale: run `make docs` "
                  "(or python tools/deploy_doc.py)", file=sys.stderr)
        return 1 if bad else 0
    text = DOC.read_text()
    new = rewrite(text)
    if new != text:
        DOC.write_text(new)
        print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
