"""The documentation against what it documents.

docs/telemetry.md is held to ``semconv.py`` both ways, to the spans, events, metrics and
log records of real runs (tests/contract_run.py through ADK's Runner, in-memory SDK),
and its Prometheus names to a real scrape of ``configure_telemetry(prometheus_port=0)``.
Every captured output in README.md and docs/ is made again by the command that made it
(tools/docs_capture.py, ``make docs``) and compared in its normalized form.

How docs/telemetry.md is read: a contract table is a Markdown table whose first two
header cells are one of ``KINDS``; each of its rows names exactly one thing, in
backticks, in the first cell; the other cells' backticked words are names too where
the column says so (``attributes``, ``unit``, ``Prometheus series``, ``labels``). A
table of enum values follows a heading that names its class (``semconv.Kind``).
"""

from __future__ import annotations

import ast
import asyncio
import itertools
import json
import logging
import os
import re
import select
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Gauge, Histogram, InMemoryMetricReader, Sum
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import adk_task_telemetry
from adk_task_telemetry import TaskTelemetryPlugin
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.engine.run_end import UNWIND_GRACE_S
from adk_task_telemetry.signals.span_processors import OpenSpanProcessor

from . import contract_run
from .conftest import _GLOBAL_TP, _SWITCH
from .tool_modules import load_tool

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "telemetry.md"
ADK = version("google-adk")

#: (first header cell, second header cell) -> what the table lists.
KINDS = {
    ("name", "what"): "scope",
    ("span", "kind"): "span",
    ("event", "on"): "event",
    ("attribute", "type"): "attribute",
    ("metric", "instrument"): "metric",
    ("metric", "Prometheus series"): "prometheus",
    ("log record", "level"): "log",
    ("value", "meaning"): "enum",
}
#: Named by the OpenTelemetry SDK (``record_exception``), not by this package.
SDK_EVENTS = {"exception"}
#: Added to every series by the exporter or by Prometheus, not by us.
#: Metrics of configure_telemetry()'s export pipeline, not of the plugin's runs.
PIPELINE_METRICS = {sc.METRIC_EXPORT_DROPPED}
#: ADK's tool thread pool gauges report while a pool lives and a plugin watches it (the
#: hooks outlive a Runner's close: issue 24), so whether the contract runs' collection
#: sees them depends on when ADK shuts the loop's pool down: not checked here;
#: tests/test_thread_pool.py checks them on a live pool.
UNSEEN_HERE = {sc.METRIC_POOL_BUSY, sc.METRIC_POOL_QUEUED, sc.METRIC_POOL_MAX_WORKERS}
#: What a failure about a name never seen asks for.
HOW = " (a run that produces it belongs in tests/contract_run.py's PLAN or OPTIONS)"
SCRAPE_LABELS = {"otel_scope_name", "otel_scope_version", "otel_scope_schema_url", "le",
                 "job", "instance"}


# --- reading docs/telemetry.md ---------------------------------------------------------


@dataclass
class Table:
    kind: str
    heading: str
    header: list[str]
    rows: list[dict[str, str]]
    line: int

    def first(self) -> list[str]:
        """The name each row is about."""
        out = []
        for row in self.rows:
            cell = row[self.header[0]]
            m = re.fullmatch(r"`([^`]+)`", cell)
            assert m, f"docs/telemetry.md:{self.line}: a {self.kind} row must start with one " \
                      f"`name`, not {cell!r}"
            out.append(m[1])
        return out

    def names(self, column: str) -> dict[str, set[str]]:
        """Row name -> the backticked names of ``column``."""
        return {name: set(re.findall(r"`([^`]+)`", row[column]))
                for name, row in zip(self.first(), self.rows, strict=True)}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


@cache
def tables() -> tuple[Table, ...]:
    lines = DOC.read_text().splitlines()
    out = []
    heading = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line
        if line.startswith("|") and i + 1 < len(lines) and set(lines[i + 1]) <= set("|-: "):
            header = _cells(line)
            rows = []
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                cells = _cells(lines[j])
                assert len(cells) == len(header), f"docs/telemetry.md:{j + 1}: {len(cells)} " \
                                                  f"cells, the header has {len(header)}"
                rows.append(dict(zip(header, cells, strict=True)))
                j += 1
            kind = KINDS.get((header[0], header[1]))
            if kind is not None:
                out.append(Table(kind, heading, header, rows, i + 1))
            i = j
            continue
        i += 1
    return tuple(out)


def table(kind: str) -> Table:
    (found,) = [t for t in tables() if t.kind == kind]
    return found


def enum_tables() -> dict[str, Table]:
    out = {}
    for t in tables():
        if t.kind == "enum":
            m = re.search(r"`semconv\.(\w+)`", t.heading)
            assert m, f"docs/telemetry.md:{t.line}: a table of values needs a heading naming " \
                      "its semconv class"
            out[m[1]] = t
    return out


def doc_span_name(name: str) -> tuple[str, str | None]:
    """``tool_task {gen_ai.tool.name}`` -> ("tool_task ", "gen_ai.tool.name")."""
    m = re.fullmatch(r"(.+ )\{([\w.]+)\}", name)
    return (m[1], m[2]) if m else (name, None)


# --- semconv.py ------------------------------------------------------------------------


def semconv_names() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(kind -> names, enum class -> values), every string constant of semconv.py."""
    kinds: dict[str, set[str]] = {k: set() for k in
                                  ("scope", "span", "event", "attribute", "metric", "unit")}
    enums: dict[str, set[str]] = {}
    for key, value in vars(sc).items():
        if key.startswith("_"):
            continue
        if isinstance(value, str):
            kind = ("event" if key.startswith("EVENT_") else "span" if key.startswith("SPAN_")
                    else "metric" if key.startswith("METRIC_")
                    else "unit" if key.startswith("UNIT_")
                    else "scope" if key in ("SCOPE_NAME", "SCHEMA_URL") or key.endswith(
                        "LOGGER_NAME") else "attribute")
            kinds[kind].add(value)
        elif isinstance(value, type) and value.__module__ == sc.__name__:
            enums[key] = {v for k, v in vars(value).items()
                          if not k.startswith("_") and isinstance(v, str)}
    return kinds, enums


def documented() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """The same, as docs/telemetry.md lists them."""
    kinds: dict[str, set[str]] = {k: set() for k in
                                  ("scope", "span", "event", "attribute", "metric", "unit")}
    for kind in ("scope", "event", "attribute", "metric"):
        kinds[kind] |= set(table(kind).first())
    for name in table("span").first():
        prefix, attr = doc_span_name(name)
        kinds["span"].add(prefix)
        if attr:
            kinds["attribute"].add(attr)
    for cells in table("metric").names("unit").values():
        kinds["unit"] |= cells
    kinds["event"] -= SDK_EVENTS
    return kinds, {cls: set(t.first()) for cls, t in enum_tables().items()}


def test_every_semconv_name_is_documented() -> None:
    code, code_enums = semconv_names()
    doc, doc_enums = documented()
    missing = {kind: sorted(names - doc[kind]) for kind, names in code.items()
               if names - doc[kind]}
    assert not missing, ("semconv.py names that docs/telemetry.md does not document "
                         f"(add a row to the table of their kind): {missing}")
    for cls, values in code_enums.items():
        assert cls in doc_enums, (f"semconv.{cls} has no table in docs/telemetry.md (a heading "
                                  f"naming `semconv.{cls}`, then a | value | meaning | table)")
        assert values <= doc_enums[cls], f"semconv.{cls}: undocumented {values - doc_enums[cls]}"
    buckets = ", ".join(str(b) for b in sc.DURATION_BUCKETS)
    assert buckets in " ".join(DOC.read_text().split()), "the histogram buckets changed"


def test_every_documented_name_is_in_semconv() -> None:
    code, code_enums = semconv_names()
    doc, doc_enums = documented()
    extra = {kind: sorted(names - code[kind]) for kind, names in doc.items()
             if names - code[kind]}
    assert not extra, f"docs/telemetry.md names that semconv.py does not define: {extra}"
    for cls, values in doc_enums.items():
        assert cls in code_enums, f"docs/telemetry.md documents semconv.{cls}, which is gone"
        assert values <= code_enums[cls], f"semconv.{cls} has no {values - code_enums[cls]}"
    # Names used in the other columns are contract names too.
    used = set()
    for kind in ("span", "event", "metric"):
        for cells in table(kind).names("attributes").values():
            used |= cells
    assert used <= code["attribute"], f"unknown attributes: {sorted(used - code['attribute'])}"
    assert set(table("prometheus").first()) == code["metric"]


# --- real runs -------------------------------------------------------------------------


@dataclass
class Seen:
    spans: list[ReadableSpan]
    metrics: list[Any]  # (scope, Metric)
    records: list[logging.LogRecord]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def seen() -> Iterator[Seen]:
    """contract_run.PLAN on the in-memory SDK (ADK's spans included), once."""
    exporter = InMemorySpanExporter()
    _SWITCH.target = SimpleSpanProcessor(exporter)
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    open_spans = OpenSpanProcessor()
    _GLOBAL_TP.add_span_processor(open_spans)
    records = _Records()
    logger = logging.getLogger(sc.LOGGER_NAME)
    logger.addHandler(records)
    try:
        def plugin(**kw: Any) -> TaskTelemetryPlugin:
            return TaskTelemetryPlugin(tracer_provider=_GLOBAL_TP,
                                       meter_provider=meter_provider, **kw)
        asyncio.run(contract_run.produce(plugin))
        data = reader.get_metrics_data()
        metrics = [(sm.scope.name, m) for rm in (data.resource_metrics if data else [])
                   for sm in rm.scope_metrics for m in sm.metrics]
        yield Seen(list(exporter.get_finished_spans()), metrics, records.records)
    finally:
        logger.removeHandler(records)
        open_spans.shutdown()
        _SWITCH.target = None
        meter_provider.shutdown()


def _ours(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if s.instrumentation_scope is not None
            and s.instrumentation_scope.name == sc.SCOPE_NAME]


def _type_of(value: Any) -> str:
    return {bool: "boolean", int: "int", float: "double", str: "string"}.get(type(value), "?")


def test_spans_of_real_runs_are_as_documented(seen: Seen) -> None:
    rows = table("span").names("attributes")
    found: dict[str, set[str]] = {}
    for span in _ours(seen.spans):
        doc_name = next((n for n in rows if span.name.startswith(doc_span_name(n)[0])
                         and (doc_span_name(n)[1] or span.name == n)), None)
        assert doc_name is not None, f"span {span.name!r} is not in docs/telemetry.md"
        found.setdefault(doc_name, set()).update(span.attributes or {})
    assert set(found) == set(rows), f"documented spans never seen: {set(rows) - set(found)}{HOW}"
    for name, attrs in found.items():
        assert attrs == rows[name], (f"{name}: seen {sorted(attrs)}, documented "
                                     f"{sorted(rows[name])}")


def test_events_of_real_runs_are_as_documented(seen: Seen) -> None:
    rows = table("event").names("attributes")
    found: dict[str, set[str]] = {}
    for span in seen.spans:
        for event in span.events:
            if event.name in rows:
                found.setdefault(event.name, set()).update(event.attributes or {})
            elif _ours([span]):
                pytest.fail(f"event {event.name!r} on {span.name!r} is not in docs/telemetry.md")
    assert set(found) == set(rows), f"documented events never seen: {set(rows) - set(found)}{HOW}"
    for name, attrs in found.items():
        if name not in SDK_EVENTS:
            assert attrs == rows[name], (f"{name}: seen {sorted(attrs)}, documented "
                                         f"{sorted(rows[name])}")


def test_attribute_types_are_as_documented(seen: Seen) -> None:
    types = {name: row["type"] for name, row in zip(table("attribute").first(),
                                                    table("attribute").rows, strict=True)}
    wrong = set()
    for span in _ours(seen.spans):
        items = list((span.attributes or {}).items())
        items += [kv for e in span.events if e.name not in SDK_EVENTS
                  for kv in (e.attributes or {}).items()]
        wrong |= {(k, _type_of(v), types.get(k)) for k, v in items if _type_of(v) != types.get(k)}
    assert not wrong, f"(attribute, seen type, documented type): {sorted(wrong)}"


_INSTRUMENTS = {"Counter": (Sum, True), "UpDownCounter": (Sum, False),
                "Histogram": (Histogram, None), "Gauge": (Gauge, None)}


def test_metrics_of_real_runs_are_as_documented(seen: Seen) -> None:
    t = table("metric")
    rows = dict(zip(t.first(), t.rows, strict=True))
    attributes = t.names("attributes")
    found = {m.name: m for scope, m in seen.metrics
             if scope == sc.SCOPE_NAME and m.name not in UNSEEN_HERE}
    # configure_telemetry()'s own pipeline records these; the scrape test sees them.
    rows = {name: row for name, row in rows.items()
            if name not in PIPELINE_METRICS | UNSEEN_HERE}
    assert set(found) == set(rows), (f"documented, not seen: {set(rows) - set(found)}; seen, "
                                     f"not documented: {set(found) - set(rows)}{HOW}")
    for name, metric in found.items():
        instrument = rows[name]["instrument"].split()[0]
        data_type, monotonic = _INSTRUMENTS[instrument]
        assert isinstance(metric.data, data_type), f"{name}: not a {instrument}"
        if monotonic is not None:
            assert metric.data.is_monotonic == monotonic, f"{name}: not a {instrument}"
        assert {metric.unit} == t.names("unit")[name], f"{name}: unit {metric.unit!r}"
        keys = {k for p in metric.data.data_points for k in (p.attributes or {})}
        assert keys == attributes[name], (f"{name}: seen {sorted(keys)}, documented "
                                          f"{sorted(attributes[name])}")


_PLACEHOLDER = re.compile(r"%[-#0-9.]*[sdrf]")


def _message_prefixes() -> list[str]:
    return [name.replace("…", "\0") for name in table("log").first()]


def _matches(message_format: str, prefix: str) -> bool:
    shown = _PLACEHOLDER.sub("\0", message_format)
    return shown.startswith(prefix)


def _logging_calls() -> list[str]:
    """The message formats of every logging call in src/ (logger.warning("..." ...))."""
    out = []
    for path in (REPO / "src" / "adk_task_telemetry").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("debug", "info", "warning", "error", "exception")
                    and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                out.append(node.args[0].value)
    return out


def test_documented_log_records_are_logged_by_the_code() -> None:
    calls = _logging_calls()
    missing = [p for p in _message_prefixes() if not any(_matches(c, p) for c in calls)]
    assert not missing, f"documented log records no code logs: {missing}"


def test_log_records_of_real_runs_are_documented(seen: Seen) -> None:
    ours = [r for r in seen.records if r.name == sc.LOGGER_NAME]
    assert ours, "the runs logged no orphan"
    undocumented = {r.msg for r in ours
                    if not any(_matches(str(r.msg), p) for p in _message_prefixes())}
    assert not undocumented, f"log records docs/telemetry.md does not list: {undocumented}"


# --- a real scrape ---------------------------------------------------------------------


def _prometheus(name: str, unit: str, instrument: str) -> set[str]:
    """The OTLP-to-Prometheus translation of one instrument's name."""
    base = re.sub(r"[^a-zA-Z0-9:]+", "_", name) + ("_seconds" if unit == "s" else "")
    if instrument.startswith("Histogram"):
        return {base + s for s in ("_bucket", "_sum", "_count")}
    return {base + "_total"} if instrument.startswith("Counter") else {base}


def test_prometheus_table_follows_the_translation() -> None:
    metrics = table("metric")
    prom = table("prometheus")
    rows = dict(zip(metrics.first(), metrics.rows, strict=True))
    series = prom.names("Prometheus series")
    labels = prom.names("labels")
    for name, row in rows.items():
        (unit,) = metrics.names("unit")[name]
        assert series[name] == _prometheus(name, unit, row["instrument"]), name
        assert labels[name] == {a.replace(".", "_") for a in metrics.names("attributes")[name]}


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> str:
    """/metrics of a configure_telemetry(prometheus_port=0) process that ran the PLAN."""
    log = tmp_path_factory.mktemp("scrape") / "child.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, contract_run.__file__], cwd=REPO, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        ready, _, _ = select.select([proc.stdout], [], [], 180)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("READY "), (f"no READY (exit {proc.poll()}): {line!r}\n"
                                           f"{log.read_text()[-3000:]}")
        with urllib.request.urlopen(f"http://127.0.0.1:{int(line.split()[1])}/metrics",
                                    timeout=10) as resp:
            text: str = resp.read().decode()
        proc.stdin.close()
        proc.wait(timeout=60)
        return text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_prometheus_names_match_a_real_scrape(scraped: str) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    prom = table("prometheus")
    types = {name: row["type"] for name, row in zip(prom.first(), prom.rows, strict=True)}
    doc_series = prom.names("Prometheus series")
    doc_labels = prom.names("labels")
    owner = {s: name for name, series in doc_series.items() for s in series
             if name not in UNSEEN_HERE}
    unseen = {s for name, series in doc_series.items() for s in series if name in UNSEEN_HERE}
    seen_labels: dict[str, set[str]] = {}
    seen_types: dict[str, str] = {}
    for family in text_string_to_metric_families(scraped):
        for sample in family.samples:
            if not sample.name.startswith(("adk_", "adk:")) or sample.name in unseen:
                continue
            assert sample.name in owner, f"scraped {sample.name}, not in docs/telemetry.md"
            metric = owner[sample.name]
            seen_labels.setdefault(metric, set()).update(set(sample.labels) - SCRAPE_LABELS)
            seen_types[metric] = family.type
    scraped_series = {s for s in owner if owner[s] in seen_labels
                      and re.search(rf"^{re.escape(s)}[{{ ]", scraped, re.M)}
    assert scraped_series == set(owner), (f"documented, not scraped: "
                                          f"{set(owner) - scraped_series}{HOW}")
    types = {m: t for m, t in types.items() if m not in UNSEEN_HERE}
    doc_labels = {m: labels for m, labels in doc_labels.items() if m not in UNSEEN_HERE}
    assert seen_types == types, f"scraped TYPEs {seen_types}"
    assert seen_labels == doc_labels, {m: (sorted(seen_labels.get(m, ())), sorted(doc_labels[m]))
                                       for m in doc_labels if seen_labels.get(m) != doc_labels[m]}


# --- captured outputs ------------------------------------------------------------------


def capture() -> ModuleType:
    """tools/docs_capture.py."""
    return load_tool("docs_capture")


@cache
def _run(cap: Any) -> tuple[str, int]:
    return capture().run(cap, Path(sys.executable).parent)  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", [b.name for b in capture().BLOCKS])
def test_captured_output_is_current(name: str) -> None:
    tool = capture()
    block = tool.BY_NAME[name]
    if block.capture.adk != ADK:
        pytest.skip(f"captured on google-adk {block.capture.adk}: checked in the run of "
                    f"`make test` on that version (this is {ADK})")
    found = tool.committed()[name]
    assert found.marker == tool.marker(block), f"{found.doc}: stale marker line"
    fresh = tool.shown(block, *_run(block.capture))
    diff = tool.differences(found.text, fresh)
    assert not diff, (f"{found.doc.relative_to(REPO)}: block {name} is stale (`make docs` "
                      "rewrites it):\n" + "\n".join(diff))


def test_a_stale_copy_fails_the_check() -> None:
    """The describe() line docs/testing.md showed before its block was generated."""
    tool = capture()
    block = tool.BY_NAME["testing-describe"]
    fresh = tool.shown(block, *_run(block.capture))
    stale = ("seed=28 live caller=aclose_k k=2 [stream#c1,stream#c1,fast#c1 | "
             "stream#c4,non_blocking#c5]\n")
    assert stale != fresh
    diff = tool.differences(stale, fresh)
    assert f"-{stale.strip()}" in diff and f"+{fresh.strip()}" in diff


def test_run_to_run_noise_passes_the_check() -> None:
    """Timings, bars and ids differ between runs of one command; nothing else does."""
    tool = capture()
    block = tool.BY_NAME["readme-demo"]
    first = tool.shown(block, *_run(block.capture))
    second = tool.shown(block, *tool.run(block.capture, Path(sys.executable).parent))
    assert tool.differences(first, second) == []
    noisy = re.sub(r"\d+\.\d+ (ms|s)\b", lambda m: f"{float(m[0].split()[0]) * 7:.1f} {m[1]}",
                   first).replace("━━", "━━━━━")
    assert tool.differences(first, noisy) == []
    assert tool.differences(first, first.replace("━", "┃")) == []  # a bar drawn as a tick
    assert tool.differences(first, first.replace("call-goog", "call-good")) != []


# --- the rest of the docs --------------------------------------------------------------


DOC_FILES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])


def test_no_reference_to_a_document_outside_the_repository() -> None:
    pattern = re.compile(r"DESIGN\.md|\.\./shared|design document")
    places = [*DOC_FILES, *(REPO / "src").rglob("*.py"), *(REPO / "dashboards").glob("*.py"),
              *(REPO / "deploy").rglob("*.py"), *(REPO / "deploy").rglob("*.yml"),
              *(REPO / "tests").glob("*.py")]
    hits = [f"{p.relative_to(REPO)}:{n}" for p in places if p != Path(__file__)
            for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, f"references to a document users do not have: {hits}"


def _known_names() -> set[str]:
    """Contract names in every spelling, and the foreign ones telemetry.md's GenAI section
    documents (ADK's own)."""
    code, _ = semconv_names()
    known = code["attribute"] | code["metric"]
    for cells in (*table("prometheus").names("Prometheus series").values(),
                  *table("prometheus").names("labels").values()):
        known |= cells
        known |= {re.sub(r"_(bucket|sum|count)$", "", c) for c in cells}
    text = DOC.read_text()
    genai = text[text.index("## OpenTelemetry GenAI conventions"):]
    return known | set(re.findall(r"`([^`]+)`", genai))


def test_every_contract_name_in_the_docs_exists() -> None:
    """A backticked adk.* / gen_ai.* / adk_* name anywhere in README.md and docs/ is a
    name of the contract (or one of ADK's, documented as such in telemetry.md)."""
    known = _known_names()
    not_names = {"adk_tool_tasks", "adk_fail_on_orphans"}  # the pytest plugin's
    bad = set()
    for doc in DOC_FILES:
        prose = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.S | re.M)
        for token in re.findall(r"`([^`\n]+)`", prose):
            name = re.split(r"[{=!(\s]", token)[0]
            if (not re.match(r"(adk|gen_ai)[._]", name) or name in not_names
                    or name.startswith(("adk_task_telemetry", "adk_compat"))):
                continue
            if name.endswith("*"):
                ok = any(k.startswith(name.rstrip("*")) for k in known) or name in known
            else:
                ok = name.rstrip("_") in known
            if not ok:
                bad.add(f"{doc.relative_to(REPO)}: {token}")
    assert not bad, f"names that are not in the contract (docs/telemetry.md): {sorted(bad)}"


def _slug(heading: str) -> str:
    text = heading.lstrip("#").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_relative_links_resolve() -> None:
    bad = []
    for doc in DOC_FILES:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                bad.append(f"{doc.relative_to(REPO)}: {target}")
            elif anchor and dest.suffix == ".md":
                slugs = {_slug(line) for line in dest.read_text().splitlines()
                         if line.startswith("#")}
                if anchor not in slugs:
                    bad.append(f"{doc.relative_to(REPO)}: {target} (no such heading)")
    assert not bad, bad


def test_readme_layout_lists_every_public_name_and_module() -> None:
    readme = (REPO / "README.md").read_text()
    layout = readme[readme.index("## Layout"):]
    lines = layout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  __init__.py"))
    entry = [lines[start], *itertools.takewhile(lambda line: line.startswith(" " * 5),
                                                 lines[start + 1:])]
    init_line = " ".join(entry)
    public = set(adk_task_telemetry.__all__) - {"__version__"}
    missing = sorted(n for n in public if not re.search(rf"\b{n}\b", init_line))
    assert not missing, f"README's layout does not list the public names {missing}"
    package = REPO / "src" / "adk_task_telemetry"
    modules = {p.name for p in package.glob("*.py")} | {
        p.name + "/" for p in package.iterdir() if (p / "__init__.py").exists()}
    unlisted = sorted(m for m in modules if not re.search(rf"(^|[\s,]){re.escape(m)}", layout,
                                                          re.M))
    assert not unlisted, f"README's layout does not list {unlisted}"


def _keys(value: Any, path: str = "") -> set[str]:
    if isinstance(value, dict):
        return {f"{path}.{k}" for k in value} | {
            key for k, v in value.items() for key in _keys(v, f"{path}.{k}")}
    if isinstance(value, list):
        return {key for v in value for key in _keys(v, f"{path}[]")}
    return set()


def _audit_json(*args: str) -> Any:
    proc = subprocess.run([sys.executable, "-m", "adk_task_telemetry.cli", "audit", "-q",
                           "--json", *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO)
    return json.loads(proc.stdout)


def test_audit_json_example_has_the_real_fields() -> None:
    """docs/cli.md's annotated `audit --json` document against real ones: the same fields
    (live_stubborn_tool orphans on every ADK version); on google-adk 2.12.0, where it was
    taken, the same totals and orphan."""
    cli = (REPO / "docs" / "cli.md").read_text()
    example = json.loads(re.sub(r"//[^\n]*", "", cli.split("```jsonc\n", 1)[1].split("```")[0]))
    real = _audit_json("-s", "seed_bug", "-s", "live_stubborn_tool")
    shown, actual = _keys(example), _keys(real)
    # The example's unanswered entry is a comment (seed_bug has none).
    assert shown == actual, (f"in the example only: {sorted(shown - actual)}; "
                             f"in a real document only: {sorted(actual - shown)}")
    if example["versions"]["google-adk"] == ADK:
        real = _audit_json()
        assert example["totals"] == real["totals"]
        (orphan,) = [o for s in real["scenarios"] for o in s["orphans"]]
        stuck = {k: v for k, v in orphan["stuck_at"].items() if k != "file"}
        assert {k: v for k, v in example["scenarios"][0]["orphans"][0]["stuck_at"].items()
                if k != "file"} == stuck


def _doc_section(title: str) -> str:
    """The text under the heading ``title`` of docs/telemetry.md, up to the next heading."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f" {title}\n")
    end = text.find("\n#", start)
    return text[start:end if end >= 0 else len(text)]


def test_every_run_end_rule_states_its_time_to_report() -> None:
    """Issue 31: docs/telemetry.md says, for every run-end trigger, how long after the
    caller sees the run end an orphan is reported, and why; the grace of the unwinding
    rule is stated with the value the code uses, in the rule and in that table."""
    rows = {}
    for line in _doc_section("Time to report").splitlines():
        found = re.match(r"\| `([^`]+)` \|(.*)", line)
        if found:
            rows[found[1]] = [c.strip() for c in found[2].strip().strip("|").split(" | ")]
    triggers = {v for k, v in vars(sc.EndTrigger).items() if k.isupper()}
    assert set(rows) == triggers, "one row per semconv.EndTrigger value"
    for trigger, (reported, why) in rows.items():
        assert reported and why, f"{trigger}: says neither when nor why"
    grace = f"{UNWIND_GRACE_S:g} s (`UNWIND_GRACE_S`)"
    assert grace in rows[sc.EndTrigger.RUN_SPAN_END][0]
    assert grace in _doc_section("When a cut run ends")
