"""Helpers for the deploy/, dashboards/ and alert tests: tools, a throwaway Prometheus,
and offline validators for collector configs and Kubernetes manifests."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
RULES = DEPLOY / "prometheus" / "rules" / "adk-task-telemetry.rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "tests" / "adk-task-telemetry.test.yml"
DASHBOARD_CODE = REPO / "dashboards" / "adk_task_telemetry.py"
DASHBOARD_JSON = REPO / "dashboards" / "generated" / "adk-task-telemetry.json"
RUNBOOKS = REPO / "docs" / "runbooks"

ALERTS = ("AdkToolTaskOrphaned", "AdkToolTaskOrphansAlive", "AdkToolTaskErrorRateHigh",
          "AdkToolTaskStuck", "AdkToolCallUnanswered",
          # loss: what the plugin and the collectors could not deliver
          "AdkTelemetryExportDropped", "AdkToolTaskOverflow", "OtelCollectorRefusing",
          "OtelCollectorExportFailing", "OtelCollectorTracesDroppedTooEarly",
          "OtelCollectorLateSpans")

_PACKAGES = {"promtool": "prometheus", "prometheus": "prometheus",
             "docker-compose": "docker-compose", "chromium": "chromium"}


def require_tool(name: str) -> str:
    """The tool's path; fails (never skips) when it is missing."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists()
                                  else None)
    if path is None:
        pytest.fail(f"{name} not found: install Debian's {_PACKAGES.get(name, name)} package "
                    "(`make system-deps` does it as root)", pytrace=False)
    return path


def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_yaml_all(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- a throwaway Prometheus -----------------------------------------------------


class Prometheus:
    """A real Prometheus server on 127.0.0.1 with temporary config and storage."""

    def __init__(self, workdir: Path, config: dict[str, Any] | None = None,
                 files: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        for rel, text in (files or {}).items():
            (workdir / rel).parent.mkdir(parents=True, exist_ok=True)
            (workdir / rel).write_text(text)
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config or {"global": {}}))
        self.log_path = workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        binary = require_tool("prometheus")
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.config_path}",
             f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}",
             "--web.enable-lifecycle", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited: {self.log()}")
            with contextlib.suppress(OSError), urllib.request.urlopen(
                    f"{self.url}/-/ready", timeout=1) as r:
                if r.status == 200:
                    return
            time.sleep(0.1)
        raise AssertionError(f"prometheus not ready in {timeout}s: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def api(self, path: str, **params: Any) -> dict[str, Any]:
        """GET /api/v1/<path>; returns the JSON body, errors included."""
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as r:
                body: dict[str, Any] = json.load(r)
        except urllib.error.HTTPError as e:
            body = json.load(e)
        return body

    def query(self, expr: str, **params: Any) -> dict[str, Any]:
        return self.api("query", query=expr, **params)


@contextlib.contextmanager
def prometheus_server(workdir: Path, config: dict[str, Any] | None = None,
                      files: dict[str, str] | None = None) -> Iterator[Prometheus]:
    server = Prometheus(workdir, config, files)
    try:
        server.start()
        yield server
    finally:
        server.stop()


# --- dashboard: its queries as Grafana sends them ------------------------------------

DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources" / "datasources.yml"
#: What Grafana assumes when a Prometheus datasource sets no ``timeInterval``.
GRAFANA_DEFAULT_TIME_INTERVAL = "15s"
#: The browser width the dashboard is assumed to be drawn at (a panel's width in pixels
#: is Grafana's max data points when the panel sets none). At the dashboard's 1h range,
#: any width from 206 to 240,000 px gives the same intervals: the datasource's
#: interval is the floor of $__interval.
VIEWPORT_PX = 1920
_SAFE_RESOLUTION = 11000  # Grafana's promlib: at most 11,000 points per series
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def parse_interval(text: str) -> float:
    """Seconds in a Grafana interval string ("15s", "1m", "1h30m"; a bare number: s)."""
    text = text.strip().strip("<>")
    if re.fullmatch(r"\d+", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|[smhdwy])", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not an interval: {text!r}"
    return sum(float(n) * _UNITS[u] for n, u in parts)


def round_interval(ms: float) -> float:
    """Grafana's roundInterval (rangeutil.ts; gtime.RoundInterval in Go): a nice step."""
    table = ((10, 1), (15, 10), (35, 20), (75, 50), (150, 100), (350, 200), (750, 500),
             (1500, 1000), (3500, 2000), (7500, 5000), (12500, 10000), (17500, 15000),
             (25000, 20000), (45000, 30000), (90000, 60000), (210000, 120000),
             (450000, 300000), (750000, 600000), (1050000, 900000), (1500000, 1200000),
             (2700000, 1800000), (5400000, 3600000), (9000000, 7200000),
             (16200000, 10800000), (32400000, 21600000), (86400000, 43200000),
             (604800000, 86400000), (1814400000, 604800000), (3628800000, 2592000000))
    for limit, value in table:
        if ms < limit:
            return float(value)
    return 31536000000.0


def format_interval(seconds: float) -> str:
    """gtime.FormatInterval: the largest whole unit ("1m", "15s", "500ms")."""
    for unit in ("y", "d", "h", "m", "s"):
        if seconds >= _UNITS[unit]:
            return f"{int(seconds // _UNITS[unit])}{unit}"
    return f"{max(1, int(seconds * 1000))}ms"


def go_duration(seconds: float) -> str:
    """Go's time.Duration.String() of whole seconds ("4m0s", "1m15s", "45s"): how
    Grafana writes $__rate_interval into the query."""
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{sec}s"
    if m:
        return f"{m}m{sec}s"
    return f"{sec}s"


def datasource_time_interval(path: Path = DATASOURCES, uid: str = "prometheus") -> str | None:
    """The provisioned Prometheus datasource's ``timeInterval`` (None: not set)."""
    for ds in load_yaml(path)["datasources"]:
        if ds.get("uid") == uid:
            value = (ds.get("jsonData") or {}).get("timeInterval")
            return str(value) if value else None
    raise AssertionError(f"no datasource {uid} in {path}")


def dashboard_range_s(dashboard: dict[str, Any]) -> float:
    """The dashboard's default time range ("now-1h" to "now") in seconds."""
    m = re.fullmatch(r"now-(\w+)", dashboard["time"]["from"])
    assert m and dashboard["time"]["to"] == "now", dashboard["time"]
    return parse_interval(m.group(1))


class GrafanaQuery:
    """One panel query as Grafana 11/12 sends it to Prometheus.

    The frontend (rangeutil.calculateInterval) takes ``intervalMs`` = the range divided
    by the panel's max data points (its width in pixels unless it sets maxDataPoints),
    rounded, and never below the panel's min interval or else the datasource's
    ``timeInterval`` (15s unset). The backend (promlib models/query.go) takes the step
    from the query's own min step (``interval``) or that intervalMs, and
    ``$__rate_interval`` = max(intervalMs + s, 4 * s) where s is the query's min step,
    else the datasource's timeInterval; ``$__range`` is the range in whole seconds.
    Range queries are aligned down to the step (UTC); an instant query is evaluated at
    the range's end as it is (promlib's client, grafana/grafana#69516).
    """

    def __init__(self, panel: dict[str, Any], target: dict[str, Any], *, now: float,
                 range_s: float, time_interval: str | None,
                 viewport_px: int = VIEWPORT_PX) -> None:
        self.title = f"{panel['title']} {target.get('refId', '')}".strip()
        self.instant = bool(target.get("instant"))
        ds_interval = time_interval or GRAFANA_DEFAULT_TIME_INTERVAL
        range_ms = range_s * 1000
        width = max(1, round(panel.get("gridPos", {}).get("w", 24) / 24 * viewport_px))
        max_points = int(panel.get("maxDataPoints") or width)
        low_limit = parse_interval(str(panel.get("interval") or ds_interval)) * 1000
        interval_ms = max(round_interval(range_ms / max_points), low_limit)
        min_step = str(target.get("interval") or "")
        if min_step in ("", "0s") or min_step.startswith("$"):
            min_interval_ms = interval_ms
        else:
            min_interval_ms = parse_interval(min_step) * 1000
        calculated = range_ms / max_points
        step_ms = min_interval_ms if calculated < min_interval_ms else round_interval(calculated)
        step_ms = max(step_ms, round_interval(range_ms / _SAFE_RESOLUTION))
        step_ms *= int(target.get("intervalFactor") or 1)
        scrape_s = parse_interval(min_step if min_step not in ("", "0s") and
                                  not min_step.startswith("$") else ds_interval)
        self.interval_s = interval_ms / 1000
        self.step_s = step_ms / 1000
        self.rate_interval_s = max(interval_ms / 1000 + scrape_s, 4 * scrape_s)
        self.range_s = range_s
        self.now = now
        self.end = now // self.step_s * self.step_s
        self.start = (now - range_s) // self.step_s * self.step_s
        self.vars = {
            "$__rate_interval": go_duration(self.rate_interval_s),
            "$__interval": format_interval(self.step_s),
            "$__range": f"{round(range_s)}s",
        }
        self.raw_expr: str = target["expr"]

    def expr(self, variables: dict[str, str] | None = None) -> str:
        """The PromQL sent, the dashboard's variables given as regexes (default All)."""
        return substitute(self.raw_expr, self.vars, variables)

    def params(self) -> dict[str, Any]:
        """Arguments of /api/v1/query (instant) or /api/v1/query_range."""
        if self.instant:
            return {"time": self.now}
        return {"start": self.start, "end": self.end, "step": self.step_s}


def grafana_vars(time_interval: str | None = None, panel_w: int = 12,
                 range_s: float = 3600.0) -> dict[str, str]:
    """$__rate_interval, $__interval, $__range of a query without a min step on a
    ``panel_w``-column panel over ``range_s``, by Grafana's rules, for the provisioned
    datasource's interval (or ``time_interval``)."""
    q = GrafanaQuery({"title": "", "gridPos": {"w": panel_w}}, {"expr": ""}, now=0.0,
                     range_s=range_s, time_interval=time_interval or datasource_time_interval())
    return q.vars


# What Grafana puts in place of its variables, by its own rules (GrafanaQuery), for the
# provisioned datasource at the dashboard's 1h range.
GRAFANA_VARS = {**grafana_vars(), "${datasource}": "prometheus"}


def substitute(expr: str, values: dict[str, str] | None = None,
               variables: dict[str, str] | None = None) -> str:
    """A panel/variable query as Grafana would send it: the dashboard's variables as
    ``variables`` gives them (regexes), All (".*") for the others."""
    out = expr
    for k, v in {**GRAFANA_VARS, **(values or {})}.items():
        out = out.replace(k, v)
    chosen = variables or {}
    return re.sub(r"\$\{?(job|app|agent|tool)\}?", lambda m: chosen.get(m.group(1), ".*"), out)


def dashboard_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in dashboard.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def dashboard_targets(dashboard: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(panel title, target) for every query of every panel."""
    return [(p["title"], t) for p in dashboard_panels(dashboard) for t in p.get("targets", [])]


def label_values_call(query: str) -> tuple[str | None, str]:
    """``label_values(selector, label)`` -> (selector or None, label)."""
    m = re.fullmatch(r"\s*label_values\((?:(.*),\s*)?(\w+)\)\s*", query)
    assert m, f"not a label_values() query: {query}"
    return m.group(1), m.group(2)


# --- OpenTelemetry Collector config ---------------------------------------------

# Component types that exist in otelcol-contrib (the image the stack pins).
KNOWN_COMPONENTS = {
    "receivers": {"otlp", "prometheus", "hostmetrics", "filelog", "jaeger", "zipkin"},
    "processors": {"memory_limiter", "batch", "tail_sampling", "probabilistic_sampler",
                   "resource", "attributes", "filter", "transform", "k8sattributes",
                   "resourcedetection"},
    "exporters": {"otlp", "otlphttp", "loadbalancing", "prometheus", "prometheusremotewrite",
                  "debug", "file"},
    "connectors": {"spanmetrics", "forward", "routing", "count"},
    "extensions": {"health_check", "pprof", "zpages", "basicauth", "bearertokenauth"},
}
_PIPELINE_KINDS = ("receivers", "processors", "exporters")


def validate_collector(config: dict[str, Any]) -> list[str]:
    """Problems in a collector config: undeclared, unused or unknown components."""
    errors: list[str] = []
    service = config.get("service") or {}
    pipelines = service.get("pipelines") or {}
    if not pipelines:
        errors.append("service.pipelines is empty")
    used: dict[str, set[str]] = {k: set() for k in (*_PIPELINE_KINDS, "connectors",
                                                     "extensions")}
    declared = {k: set((config.get(k) or {}).keys()) for k in used}
    for kind, names in declared.items():
        for name in names:
            ctype = name.split("/", 1)[0]
            if ctype not in KNOWN_COMPONENTS[kind]:
                errors.append(f"{kind}: unknown component type {ctype!r} ({name})")
    for pname, pipeline in pipelines.items():
        ptype = pname.split("/", 1)[0]
        if ptype not in ("traces", "metrics", "logs"):
            errors.append(f"pipeline {pname}: unknown signal {ptype!r}")
        for kind in _PIPELINE_KINDS:
            members: list[str] = list(pipeline.get(kind) or [])
            if kind != "processors" and not members:
                errors.append(f"pipeline {pname}: no {kind}")
            if len(set(members)) != len(members):
                errors.append(f"pipeline {pname}: duplicate {kind}")
            for name in members:
                if name in declared[kind]:
                    used[kind].add(name)
                elif kind in ("receivers", "exporters") and name in declared["connectors"]:
                    used["connectors"].add(name)
                else:
                    errors.append(f"pipeline {pname}: {kind[:-1]} {name!r} is not declared")
        procs = pipeline.get("processors") or []
        if procs and procs[0] != "memory_limiter":
            errors.append(f"pipeline {pname}: memory_limiter must come first")
        if "batch" in procs and procs[-1] != "batch":
            errors.append(f"pipeline {pname}: batch must come last")
    for name in service.get("extensions") or []:
        if name in declared["extensions"]:
            used["extensions"].add(name)
        else:
            errors.append(f"service.extensions: {name!r} is not declared")
    for kind, names in declared.items():
        for name in sorted(names - used[kind]):
            errors.append(f"{kind}: {name!r} is declared but used nowhere")
    return errors


# --- Kubernetes manifests, offline ------------------------------------------------

API_VERSIONS = {
    "Namespace": "v1", "ConfigMap": "v1", "Service": "v1", "ServiceAccount": "v1",
    "Deployment": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1",
    "PodDisruptionBudget": "policy/v1", "HorizontalPodAutoscaler": "autoscaling/v2",
    "PrometheusRule": "monitoring.coreos.com/v1", "PodMonitor": "monitoring.coreos.com/v1",
}
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")
_DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SVC_REF = re.compile(r"([a-z0-9-]+)\.([a-z0-9-]+)\.svc(?:\.cluster\.local)?:(\d+)")


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def validate_k8s(docs: list[dict[str, Any]]) -> list[str]:
    """Schema-light checks and cross-references between manifests."""
    errors: list[str] = []
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        kind = d.get("kind")
        meta = d.get("metadata") or {}
        name = meta.get("name", "")
        where = f"{kind}/{name}"
        if kind not in API_VERSIONS:
            errors.append(f"{where}: unknown kind")
            continue
        if d.get("apiVersion") != API_VERSIONS[kind]:
            errors.append(f"{where}: apiVersion {d.get('apiVersion')} != {API_VERSIONS[kind]}")
        if not name or not _DNS1123.fullmatch(name) or len(name) > 253:
            errors.append(f"{where}: bad metadata.name")
        if kind != "Namespace" and not meta.get("namespace"):
            errors.append(f"{where}: no metadata.namespace")
        by_kind.setdefault(kind, []).append(d)

    def ns(d: dict[str, Any]) -> str:
        return str(d["metadata"].get("namespace", ""))

    namespaces = {d["metadata"]["name"] for d in by_kind.get("Namespace", [])}
    configmaps = {(ns(d), d["metadata"]["name"]): d for d in by_kind.get("ConfigMap", [])}
    services = {(ns(d), d["metadata"]["name"]): d for d in by_kind.get("Service", [])}
    workloads = [d for k in WORKLOADS for d in by_kind.get(k, [])]
    for d in docs:
        n = (d.get("metadata") or {}).get("namespace")
        if n and n not in namespaces:
            errors.append(f"{d['kind']}/{d['metadata']['name']}: namespace {n} not defined")

    def container_ports(w: dict[str, Any]) -> tuple[set[str], set[int]]:
        names: set[str] = set()
        nums: set[int] = set()
        for c in w["spec"]["template"]["spec"].get("containers", []):
            for p in c.get("ports", []):
                nums.add(int(p["containerPort"]))
                if "name" in p:
                    names.add(p["name"])
        return names, nums

    def check_ref(where: str, text: str) -> None:
        for svc, namespace, port in _SVC_REF.findall(text):
            if namespace not in namespaces:
                continue  # a service of the user's own (Prometheus, Jaeger)
            s = services.get((namespace, svc))
            if s is None:
                errors.append(f"{where}: refers to Service {namespace}/{svc}, not defined")
            elif int(port) not in {int(p["port"]) for p in s["spec"].get("ports", [])}:
                errors.append(f"{where}: Service {namespace}/{svc} has no port {port}")

    for w in workloads:
        where = f"{w['kind']}/{w['metadata']['name']}"
        spec = w.get("spec") or {}
        tmpl = spec.get("template") or {}
        labels = (tmpl.get("metadata") or {}).get("labels") or {}
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        if not _matches(selector, labels):
            errors.append(f"{where}: selector.matchLabels do not match the template labels")
        pod = tmpl.get("spec") or {}
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        # A StatefulSet's claim templates are volumes of its pods too.
        volumes.update({c["metadata"]["name"]: {} for c in spec.get("volumeClaimTemplates", [])})
        containers = pod.get("containers") or []
        if not containers:
            errors.append(f"{where}: no containers")
        port_names, port_nums = container_ports(w)
        for c in containers:
            cw = f"{where} container {c.get('name')}"
            image = str(c.get("image", ""))
            tag = image.rsplit("/", 1)[-1]
            if not c.get("name") or ":" not in tag or tag.endswith(":latest"):
                errors.append(f"{cw}: needs a name and a pinned image tag ({image!r})")
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    errors.append(f"{cw}: volumeMount {m['name']} has no volume")
            for probe_name in ("readinessProbe", "livenessProbe", "startupProbe"):
                probe = c.get(probe_name)
                if probe and "httpGet" in probe:
                    port = probe["httpGet"]["port"]
                    if port not in port_names and port not in port_nums:
                        errors.append(f"{cw}: {probe_name} port {port} not a container port")
            defined: set[str] = set()
            for env in c.get("env", []):
                for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(env.get("value", ""))):
                    if ref not in defined:
                        errors.append(f"{cw}: env {env['name']} uses $({ref}) before it is set")
                defined.add(env["name"])
                check_ref(cw, str(env.get("value", "")))
        for v in volumes.values():
            cm = v.get("configMap")
            if cm is None:
                continue
            target = configmaps.get((ns(w), cm["name"]))
            if target is None:
                errors.append(f"{where}: volume {v['name']} uses missing ConfigMap {cm['name']}")
                continue
            for item in cm.get("items", []):
                if item["key"] not in (target.get("data") or {}):
                    errors.append(f"{where}: ConfigMap {cm['name']} has no key {item['key']}")
        if w["kind"] == "StatefulSet":
            svc = services.get((ns(w), spec.get("serviceName", "")))
            if svc is None or svc["spec"].get("clusterIP") != "None":
                errors.append(f"{where}: serviceName must name a headless Service")

    for key, s in services.items():
        where = f"Service/{key[1]}"
        sel = (s.get("spec") or {}).get("selector") or {}
        backends = [w for w in workloads if ns(w) == key[0] and _matches(
            sel, w["spec"]["template"]["metadata"].get("labels") or {})]
        if not backends:
            errors.append(f"{where}: selector matches no workload")
        for p in s["spec"].get("ports", []):
            target = p.get("targetPort", p["port"])
            if not any(target in container_ports(w)[0] or target in container_ports(w)[1]
                       for w in backends):
                errors.append(f"{where}: targetPort {target} is not a port of its pods")

    for (_, name), cm in configmaps.items():
        for key, text in (cm.get("data") or {}).items():
            if key.endswith((".yaml", ".yml")):
                try:
                    cfg = yaml.safe_load(text)
                except yaml.YAMLError as e:
                    errors.append(f"ConfigMap/{name} {key}: not YAML: {e}")
                    continue
                if isinstance(cfg, dict) and "service" in cfg and "receivers" in cfg:
                    errors.extend(f"ConfigMap/{name}: {e}" for e in validate_collector(cfg))
                check_ref(f"ConfigMap/{name}", text)
                for exp_name, exp in ((cfg or {}).get("exporters") or {}).items():
                    dns = ((exp or {}).get("resolver") or {}).get("dns")
                    if dns:
                        m = re.fullmatch(r"([a-z0-9-]+)\.([a-z0-9-]+)\.svc(?:\.cluster\.local)?",
                                         dns["hostname"])
                        svc = services.get((m.group(2), m.group(1))) if m else None
                        if svc is None or svc["spec"].get("clusterIP") != "None":
                            errors.append(f"ConfigMap/{name} {exp_name}: resolver must name "
                                          "a headless Service")
                        else:
                            check_ref(f"ConfigMap/{name}", f"{dns['hostname']}:{dns['port']}")

    for d in by_kind.get("HorizontalPodAutoscaler", []):
        ref = d["spec"]["scaleTargetRef"]
        if not any(w["kind"] == ref["kind"] and w["metadata"]["name"] == ref["name"]
                   and ns(w) == ns(d) for w in workloads):
            errors.append(f"HorizontalPodAutoscaler/{d['metadata']['name']}: target {ref} "
                          "not defined")
    for d in by_kind.get("PodDisruptionBudget", []):
        sel = d["spec"]["selector"]["matchLabels"]
        if not any(ns(w) == ns(d) and _matches(sel, w["spec"]["template"]["metadata"]["labels"])
                   for w in workloads):
            errors.append(f"PodDisruptionBudget/{d['metadata']['name']}: matches no workload")
    for d in by_kind.get("PrometheusRule", []):
        for g in (d.get("spec") or {}).get("groups") or []:
            for r in g.get("rules", []):
                if not r.get("expr") or not (r.get("alert") or r.get("record")):
                    errors.append(f"PrometheusRule/{d['metadata']['name']}: bad rule {r}")
    return errors


# --- the telemetry contract, as Prometheus names it --------------------------------


def contract_names() -> tuple[set[str], set[str]]:
    """(metric names, label names) in Prometheus, from semconv (docs/telemetry.md's translation)."""
    from adk_task_telemetry import semconv as sc

    def prom(name: str) -> str:
        return re.sub(r"[^a-zA-Z0-9:]+", "_", name)

    metrics = {prom(sc.METRIC_STARTED) + "_total", prom(sc.METRIC_ACTIVE),
               prom(sc.METRIC_ORPHANED) + "_total", prom(sc.METRIC_ORPHANS_ALIVE),
               prom(sc.METRIC_UNANSWERED) + "_total", prom(sc.METRIC_POOL_BUSY),
               prom(sc.METRIC_OVERFLOW) + "_total", prom(sc.METRIC_EXPORT_DROPPED) + "_total",
               prom(sc.METRIC_POOL_QUEUED), prom(sc.METRIC_POOL_MAX_WORKERS),
               prom(sc.METRIC_OLDEST_AGE) + "_seconds"}
    for hist in (sc.METRIC_DURATION, sc.METRIC_ORPHAN_LIFETIME):
        metrics |= {prom(hist) + "_seconds" + s for s in ("_bucket", "_sum", "_count")}
    labels = {prom(a) for a in (sc.GEN_AI_TOOL_NAME, sc.GEN_AI_AGENT_NAME,
                                sc.ADK_TOOL_TASK_KIND, sc.ADK_APP_NAME,
                                sc.ADK_TOOL_TASK_OUTCOME, sc.ERROR_TYPE,
                                sc.ADK_RUN_END_TRIGGER, sc.ADK_TOOL_TASK_CANCEL_CAUSE,
                                sc.ADK_TOOL_CALL_UNANSWERED_REASON,
                                sc.ADK_EXPORT_SIGNAL, sc.ADK_EXPORT_REASON)}
    return metrics, labels


def check_contract_names(expr: str) -> list[str]:
    """Metric and contract-label names in ``expr`` that the contract does not define."""
    metrics, labels = contract_names()
    bad = [m for m in re.findall(r"\badk_tool_(?:task|call)_\w+", expr)
           if m not in metrics and m not in labels]
    bad += [lbl for lbl in re.findall(r"\b(?:gen_ai|adk)_[a-z_]+\b", expr)
            if not lbl.startswith(("adk_tool_task_", "adk_tool_call_")) and lbl not in labels
            and lbl not in metrics]
    return bad
