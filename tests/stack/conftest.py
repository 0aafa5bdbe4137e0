"""The compose stack of deploy/ as local processes on loopback, and one agent run through it.

``stack`` (session): deploy/compose/docker-compose.yml's topology with the programs built
from their Go modules: the Collector (otelcol-adk) with deploy/otel-collector/config.yaml,
Jaeger v2 with deploy/jaeger/config.yaml, Prometheus 3 with deploy/prometheus/prometheus.yml
and its rules (the flags compose gives it: --web.enable-otlp-receiver,
--enable-feature=exemplar-storage), Alertmanager with deploy/alertmanager/alertmanager.yml,
VictoriaLogs with compose's flags, and a webhook receiver of the test's own. The
configs are the committed ones; only addresses change (a compose service name or
0.0.0.0:PORT becomes 127.0.0.1 and a free port, a volume path the repository's folder),
plus what a container gave each program
for free and a shared host does not: Jaeger's query gRPC port and its own metrics port
(bound to loopback ports here), Alertmanager's cluster port (off: one instance).

``corpus`` (session): one agent process (tests/stack/corpus_app.py) exporting through
``configure_telemetry()`` to that collector, default settings but the endpoint: the
scenario library (the seed bug among them), a scripted app's clean and failing runs,
and the ground truth of what happened, from the run itself. Trace and metric tests
share this one run.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.stack import logstore
from tests.stack.logstore import VictoriaLogs
from tests.stack_programs import REPO, Program, free_port, rewrite, wait_until, write_yaml

DEPLOY = REPO / "deploy"
#: The scripted app's runs in the shared corpus: enough clean traces to measure the
#: sampler's 10 % within a binomial tolerance (tests/stack/test_traces.py), and failing
#: ones that must all be kept.
CLEAN_RUNS = int(os.environ.get("ADK_STACK_CLEAN_RUNS", "800"))
ERROR_RUNS = 20


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def local(port: int) -> str:
    return f"127.0.0.1:{port}"


# --- configs: the committed ones, addresses rewritten -------------------------------

def collector_config(ports: dict[str, int], committed: Any | None = None) -> Any:
    """deploy/otel-collector/config.yaml (or ``committed``, a config of the same shape)
    with its listeners on loopback ports and its exporters at the local Jaeger,
    Prometheus and VictoriaLogs. ``ports``: otlp_grpc, otlp_http, health, metrics,
    jaeger_grpc, prometheus, victorialogs."""
    cfg = committed if committed is not None else load(DEPLOY / "otel-collector" / "config.yaml")
    cfg = rewrite(cfg, {
        "0.0.0.0:4317": local(ports["otlp_grpc"]),
        "0.0.0.0:4318": local(ports["otlp_http"]),
        "0.0.0.0:13133": local(ports["health"]),
        "jaeger:4317": local(ports["jaeger_grpc"]),
        "jaeger-collector.observability.svc.cluster.local:4317": local(ports["jaeger_grpc"]),
        "http://prometheus:9090": f"http://{local(ports['prometheus'])}",
        **logstore.addresses(ports["victorialogs"]),
    })
    _loopback_metrics(cfg, ports["metrics"])
    return cfg


def _loopback_metrics(cfg: Any, port: int) -> None:
    """The collector's own metrics (service.telemetry, host/port fields, not an
    address string) on a loopback port."""
    readers = cfg.get("service", {}).get("telemetry", {}).get("metrics", {}).get("readers")
    if readers is None:
        # What a container gave it for free: the default :8888, taken on a shared host.
        cfg.setdefault("service", {}).setdefault("telemetry", {})["metrics"] = {
            "readers": [{"pull": {"exporter": {"prometheus": {
                "host": "127.0.0.1", "port": port}}}}]}
        return
    for reader in readers:
        prom = reader.get("pull", {}).get("exporter", {}).get("prometheus")
        if prom is not None:
            prom["host"], prom["port"] = "127.0.0.1", port


def jaeger_config(ports: dict[str, int]) -> Any:
    cfg = rewrite(load(DEPLOY / "jaeger" / "config.yaml"), {
        "0.0.0.0:13133": local(ports["health"]),
        "0.0.0.0:16686": local(ports["query"]),
        "0.0.0.0:4317": local(ports["otlp_grpc"]),
        "0.0.0.0:4318": local(ports["otlp_http"]),
    })
    # Ports the committed config leaves at their defaults (query gRPC :16685, own
    # metrics :8888): another program on this host may hold them.
    cfg["extensions"]["jaeger_query"].setdefault("grpc", {})["endpoint"] = \
        local(ports["query_grpc"])
    _loopback_metrics(cfg, ports["metrics"])
    return cfg


def prometheus_config(ports: dict[str, int]) -> Any:
    return rewrite(load(DEPLOY / "prometheus" / "prometheus.yml"), {
        "/etc/prometheus/rules": str(DEPLOY / "prometheus" / "rules"),  # the compose volume
        "localhost:9090": local(ports["prometheus"]),
        "otel-collector:8888": local(ports["collector_metrics"]),
        "jaeger:8888": local(ports.get("jaeger_metrics") or free_port()),
        "host.docker.internal:9464": local(ports["agent_metrics"]),
        "alertmanager:9093": local(ports["alertmanager"]),
    })


def alertmanager_config(ports: dict[str, int]) -> Any:
    return rewrite(load(DEPLOY / "alertmanager" / "alertmanager.yml"), {
        "http://host.docker.internal:5001": f"http://{local(ports['webhook'])}",
    })


# --- the webhook receiver -----------------------------------------------------------

@dataclass
class Delivery:
    path: str
    body: Any
    at: float


class Webhook:
    """Alertmanager's webhook receivers, answered on loopback: every POST kept."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw.decode(errors="replace")
                with hook._lock:
                    hook.deliveries.append(Delivery(self.path, body, time.time()))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> Webhook:
        self._thread.start()
        return self

    def received(self, path: str | None = None) -> list[Delivery]:
        with self._lock:
            return [d for d in self.deliveries if path is None or d.path == path]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- the stack ----------------------------------------------------------------------

def http_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


class Jaeger:
    """Jaeger's own query API (the HTTP JSON API its UI uses)."""

    def __init__(self, base: str) -> None:
        self.base = base

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        """The spans Jaeger holds for one trace (empty when it has none)."""
        try:
            data = http_json(f"{self.base}/api/traces/{trace_id}")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return []
            raise
        return [s for t in data.get("data") or [] for s in t.get("spans", [])]

    def find(self, service: str, tags: dict[str, str], limit: int = 1000,
             lookback_s: int = 3600) -> dict[str, list[dict[str, Any]]]:
        """Traces found by tag, as Jaeger's search does: trace id -> spans."""
        now = int(time.time() * 1e6)
        q = urllib.parse.urlencode({"service": service, "tags": json.dumps(tags),
                                    "limit": limit, "start": now - lookback_s * 1_000_000,
                                    "end": now + 60_000_000})
        data = http_json(f"{self.base}/api/traces?{q}")
        return {t["traceID"]: t.get("spans", []) for t in data.get("data") or []}

    def services(self) -> list[str]:
        return list(http_json(f"{self.base}/api/services").get("data") or [])


def span_tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t.get("value") for t in span.get("tags", [])}


def span_events(span: dict[str, Any]) -> list[dict[str, Any]]:
    """Jaeger's logs of a span as events: {"event": name, other fields...}."""
    return [{f["key"]: f.get("value") for f in log.get("fields", [])}
            for log in span.get("logs", [])]


@dataclass
class Stack:
    workdir: Path
    ports: dict[str, int]
    webhook: Webhook
    programs: dict[str, Program] = field(default_factory=dict)
    configs: dict[str, Path] = field(default_factory=dict)

    @property
    def otlp_http(self) -> str:
        """The collector's OTLP/HTTP endpoint, as an agent is given it."""
        return f"http://{local(self.ports['otlp_http'])}"

    @property
    def otlp_grpc(self) -> str:
        return f"http://{local(self.ports['otlp_grpc'])}"

    @property
    def prometheus(self) -> str:
        return f"http://{local(self.ports['prometheus'])}"

    @property
    def alertmanager(self) -> str:
        return f"http://{local(self.ports['alertmanager'])}"

    @property
    def jaeger(self) -> Jaeger:
        return Jaeger(f"http://{local(self.ports['jaeger_query'])}")

    @property
    def logs(self) -> VictoriaLogs:
        return VictoriaLogs(f"http://{local(self.ports['victorialogs'])}")

    @property
    def agent_metrics_port(self) -> int:
        """Where the adk-agents scrape job looks (compose: host.docker.internal:9464)."""
        return self.ports["agent_metrics"]

    def collector_ports(self, **own: int) -> dict[str, int]:
        """Ports for another collector sending to this stack's Jaeger and Prometheus."""
        return {"otlp_grpc": free_port(), "otlp_http": free_port(), "health": free_port(),
                "metrics": free_port(), "jaeger_grpc": self.ports["jaeger_grpc"],
                "prometheus": self.ports["prometheus"],
                "victorialogs": self.ports["victorialogs"], **own}

    def collector(self, label: str, config: Any, ports: dict[str, int]) -> Program:
        """An otelcol-adk process with ``config`` (already rewritten), not started."""
        path = write_yaml(self.workdir / f"{label}.yaml", config)
        return Program("otelcol-adk", [f"--config={path}"], self.workdir,
                       ready_url=f"http://{local(ports['health'])}/", label=label)


def _ports() -> dict[str, int]:
    names = ["otlp_grpc", "otlp_http", "health", "collector_metrics", "jaeger_grpc",
             "jaeger_http", "jaeger_health", "jaeger_query", "jaeger_query_grpc",
             "jaeger_metrics", "prometheus", "alertmanager", "agent_metrics", "victorialogs"]
    return {n: free_port() for n in names}


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """deploy/compose's topology, started in compose's dependency order."""
    from tests.stack_programs import program

    for name in ("otelcol-adk", "jaeger", "prometheus", "alertmanager", "victoria-logs"):
        program(name)  # a missing binary: one skip (or failure) that says how to build it
    workdir = tmp_path_factory.mktemp("stack")
    webhook = Webhook().start()
    ports = {**_ports(), "webhook": webhook.port}
    s = Stack(workdir, ports, webhook)
    s.configs["jaeger"] = write_yaml(workdir / "jaeger.yaml", jaeger_config({
        "health": ports["jaeger_health"], "query": ports["jaeger_query"],
        "otlp_grpc": ports["jaeger_grpc"], "otlp_http": ports["jaeger_http"],
        "query_grpc": ports["jaeger_query_grpc"], "metrics": ports["jaeger_metrics"]}))
    s.configs["alertmanager"] = write_yaml(workdir / "alertmanager.yml",
                                           alertmanager_config(ports))
    s.configs["prometheus"] = write_yaml(workdir / "prometheus.yml", prometheus_config(ports))
    collector_ports = {"otlp_grpc": ports["otlp_grpc"], "otlp_http": ports["otlp_http"],
                       "health": ports["health"], "metrics": ports["collector_metrics"],
                       "jaeger_grpc": ports["jaeger_grpc"], "prometheus": ports["prometheus"],
                       "victorialogs": ports["victorialogs"]}
    s.configs["collector"] = write_yaml(workdir / "otel-collector.yaml",
                                        collector_config(collector_ports))
    s.programs = {
        "victorialogs": logstore.program(ports["victorialogs"], workdir),
        "jaeger": Program("jaeger", ["--config", str(s.configs["jaeger"])], workdir,
                          ready_url=f"http://{local(ports['jaeger_health'])}/status"),
        "alertmanager": Program("alertmanager", [
            f"--config.file={s.configs['alertmanager']}",
            f"--storage.path={workdir / 'alertmanager-data'}",
            f"--web.listen-address={local(ports['alertmanager'])}",
            "--cluster.listen-address="], workdir,
            ready_url=f"http://{local(ports['alertmanager'])}/-/ready"),
        "prometheus": Program("prometheus", [
            f"--config.file={s.configs['prometheus']}",
            f"--storage.tsdb.path={workdir / 'prometheus-data'}",
            "--storage.tsdb.retention.time=7d",
            "--web.enable-otlp-receiver",
            "--enable-feature=exemplar-storage",
            f"--web.listen-address={local(ports['prometheus'])}"], workdir,
            ready_url=f"http://{local(ports['prometheus'])}/-/ready"),
        "collector": Program("otelcol-adk", [f"--config={s.configs['collector']}"], workdir,
                             ready_url=f"http://{local(ports['health'])}/",
                             label="otel-collector"),
    }
    started: list[Program] = []
    try:
        for p in s.programs.values():
            started.append(p)
            p.start(timeout=120)
        yield s
    finally:
        for p in reversed(started):
            p.stop()
        webhook.stop()


# --- the agent run ------------------------------------------------------------------

@dataclass
class Trace:
    trace_id: str
    units: set[str]
    spans: list[dict[str, Any]]  # as the SDK ended them
    orphaned: list[str] = field(default_factory=list)  # call ids, the tools' record
    raised: list[str] = field(default_factory=list)
    returned: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        if self.orphaned:
            return "orphan"
        if self.raised:
            return "error"
        return "clean" if self.units == {"scripted"} and self.returned else "other"


@dataclass
class Corpus:
    """The agent process and what it did."""

    service: str
    truth: dict[str, Any]
    traces: dict[str, Trace]
    proc: subprocess.Popen[str]
    log: Path

    def of_kind(self, kind: str) -> list[Trace]:
        return [t for t in self.traces.values() if t.kind == kind]

    def unit(self, name: str) -> dict[str, Any]:
        return next(u for u in self.truth["units"] if u["unit"] == name)


def traces_of(truth: dict[str, Any]) -> dict[str, Trace]:
    """The truth file's spans and units, by trace id."""
    out: dict[str, Trace] = {}
    for span in truth["spans"]:
        out.setdefault(span["trace_id"], Trace(span["trace_id"], set(), [])).spans.append(span)
    for unit in truth["units"]:
        for call_id, tid in unit["call_traces"].items():
            t = out.setdefault(tid, Trace(tid, set(), []))
            t.units.add(unit["unit"])
            for key in ("orphaned", "raised", "returned"):
                if call_id in unit[key]:
                    getattr(t, key).append(call_id)
    return out


@contextlib.contextmanager
def agent_process(endpoint: str, workdir: Path, *args: str, label: str = "corpus",
                  timeout: float = 900.0, env: Mapping[str, str] | None = None
                  ) -> Iterator[Corpus]:
    """tests/stack/corpus_app.py with ``args``, exporting to ``endpoint``, until its
    READY; stopped (stdin closed: it cleans up and shuts its pipeline down) on exit.
    Its environment has no OTEL_* variable but those of ``env``."""
    truth_path = workdir / f"{label}-truth.json"
    log = workdir / f"{label}.log"
    environ = {**os.environ,
               "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO),
                                              os.environ.get("PYTHONPATH", "")])}
    for var in [v for v in environ if v.startswith("OTEL_")]:
        del environ[var]  # default settings: nothing from the test's own environment
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.stack.corpus_app", endpoint, str(truth_path), *args],
            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
            env={**environ, **(env or {})})
        try:
            assert proc.stdout is not None
            ready = threading.Event()

            def read() -> None:
                assert proc.stdout is not None
                for line in proc.stdout:
                    if line.strip() == "READY":
                        ready.set()
            threading.Thread(target=read, daemon=True).start()
            if not wait_until(lambda: ready.is_set() or proc.poll() is not None, timeout):
                raise AssertionError(f"{label} not ready in {timeout}s:\n{log.read_text()[-4000:]}")
            assert ready.is_set(), f"{label} exited {proc.returncode}:\n{log.read_text()[-4000:]}"
            truth = json.loads(truth_path.read_text())
            yield Corpus(truth["service"], truth, traces_of(truth), proc, log)
        finally:
            with contextlib.suppress(Exception):
                assert proc.stdin is not None
                proc.stdin.close()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@pytest.fixture(scope="session")
def corpus(stack: Stack) -> Iterator[Corpus]:
    """The scenario corpus and the scripted app's runs, through the stack's collector."""
    with agent_process(stack.otlp_http, stack.workdir, "--clean", str(CLEAN_RUNS),
                       "--errors", str(ERROR_RUNS)) as c:
        yield c
