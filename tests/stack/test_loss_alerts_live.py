"""The loss alerts fire to the webhook from real faults, and resolve once the fault is
gone: a backend stopped, a collector refusing, the plugin's buffer overflowing.

Everything runs as a real process on loopback, apart from the shared stack (this test
stops its own Jaeger): Jaeger v2, two collectors, Prometheus 3 with the committed
prometheus.yml (its otel-collector job scraping both collectors, its jaeger job Jaeger),
the committed rules, Alertmanager, and an agent process (tests/stack/metrics_app.py)
pushing its metrics into Prometheus' OTLP receiver. Faults:

- **a backend stopped**: collector ``main`` (deploy/otel-collector/config.yaml) exports
  traces to Jaeger, which is stopped: OtelCollectorExportFailing (``otlp/jaeger``);
  Jaeger is started again and the failures stop;
- **a collector refusing**: collector ``tiny`` (the same config, its memory limiter at
  2 MiB, below what any collector uses) refuses every span sent to it:
  OtelCollectorRefusing; then nothing is sent to it any more;
- **a tail sampler overflowing**: collector ``small`` (``num_traces: 2``) receives five
  traces a second and evicts them undecided: OtelCollectorTracesDroppedTooEarly; then
  nothing is sent to it any more;
- **spans after their trace's decision**: collector ``main`` receives plain roots too,
  and a child of each 3 s after it, when most of those traces have been decided not
  sampled: OtelCollectorLateSpans; then kept roots only;
- **the plugin's buffer overflowing**: the agent's traces endpoint is a closed port and
  its span buffer holds 10 spans (``ADK_TASK_TELEMETRY_BUFFER_SPANS``), and it tracks at
  most one open tool task (``ADK_TASK_TELEMETRY_MAX_OPEN_TASKS=1``) while it runs
  parallel calls: AdkTelemetryExportDropped (``buffer_full``) and AdkToolTaskOverflow;
  then the agent stops.

Test-specific settings, each said here: the rules run with time 15 times faster on
Prometheus' side, as in test_alerts_live.py (windows and offsets 10m -> 40s, scrape and
evaluation 1 s); Alertmanager groups with ``group_wait: 1s`` and ``group_interval: 2s``
(the committed 30 s / 5 min would hold a resolved notification up to 5 minutes; routes
and receivers stay as committed); collector ``main`` gives up on a failed send after 2 s
(``retry_on_failure.max_elapsed_time``; the committed default retries 5 minutes before
counting a failure) and its tail sampler decides 1 s after a trace's root (10 s
committed). About 1 to 2 minutes.
"""

from __future__ import annotations

import collections
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode

from ..stack_programs import Program, free_port, running, wait_until, write_yaml
from . import logstore
from .conftest import collector_config, jaeger_config, local
from .metrics_helpers import (
    ALERTMANAGER_YML,
    PROMETHEUS_YML,
    RULES_DIR,
    Api,
    Webhook,
    alertmanager,
    metrics_app,
    otlp_env,
    prometheus,
)
from .test_alerts_live import ALERT_TIME_SCALE, scale_rules, scaled

AGENT = "adk-lossy"
#: alertname -> the labels that name the fault's series.
FAULTS = {
    "OtelCollectorExportFailing": {"exporter": "otlp/jaeger", "signal": "traces"},
    "OtelCollectorRefusing": {"receiver": "otlp", "signal": "traces"},
    "AdkTelemetryExportDropped": {"job": AGENT, "adk_export_signal": "traces",
                                  "adk_export_reason": "buffer_full"},
    "AdkToolTaskOverflow": {"job": AGENT},
    "OtelCollectorTracesDroppedTooEarly": {"job": "otel-collector"},
    "OtelCollectorLateSpans": {"job": "otel-collector"},
}


class Sender:
    """Posts one small OTLP/HTTP trace (a root span, status ERROR: a policy keeps it)
    every 0.2 s to each target while it is on; to a ``late`` target also a plain root
    (the 10 % baseline keeps few of them) and a child of the plain root it posted there
    3 s before, long after that trace's decision. No retry, no buffer: what the
    collector answers is all that happens."""

    LATE_BY = 15  # posts (0.2 s apart)

    def __init__(self) -> None:
        self.targets: dict[str, tuple[str, bool]] = {}
        self.answers: dict[str, list[int]] = {}
        self._roots: dict[str, collections.deque[Any]] = {}
        self._stop = threading.Event()
        self._tracer = TracerProvider().get_tracer("loss-alerts-test")
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _root(self, error: bool = True) -> Any:
        span = self._tracer.start_span("root")
        if error:
            span.set_status(Status(StatusCode.ERROR))
        span.end()
        return span

    def _child(self, parent: Any) -> Any:
        span = self._tracer.start_span("late", context=trace.set_span_in_context(parent))
        span.end()
        return span

    def _post(self, url: str, span: Any) -> int:
        body = encode_spans([span]).SerializeToString()
        req = urllib.request.Request(url, data=body,
                                     headers={"Content-Type": "application/x-protobuf"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except OSError:
            return 0

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for name, (url, late) in list(self.targets.items()):
                root = self._root()
                self.answers.setdefault(name, []).append(self._post(url, root))
                if not late:
                    continue
                plain = self._root(error=False)  # 90 % of these are not sampled
                self._post(url, plain)
                roots = self._roots.setdefault(name, collections.deque())
                roots.append(plain)
                if len(roots) > self.LATE_BY:
                    self._post(url, self._child(roots.popleft()))

    def __enter__(self) -> Sender:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@dataclass
class Notes:
    hook: Webhook

    def states(self, name: str) -> list[str]:
        """The statuses the webhook received for ``name``'s fault, in order."""
        want = FAULTS[name]
        return [a["status"] for _, a in self.hook.alerts()
                if a["labels"]["alertname"] == name
                and all(a["labels"].get(k) == v for k, v in want.items())]

    def fired(self) -> set[str]:
        return {n for n in FAULTS if "firing" in self.states(n)}

    def resolved(self) -> set[str]:
        return {n for n in FAULTS if "resolved" in self.states(n)}


def _rules(workdir: Path) -> Path:
    rules_dir = workdir / "rules"
    rules_dir.mkdir()
    for path in sorted(RULES_DIR.glob("*.yml")):
        (rules_dir / path.name).write_text(scale_rules(path.read_text(), ALERT_TIME_SCALE))
    return rules_dir


def _collectors(workdir: Path, jaeger_grpc: int, prom_port: int,
                logs_port: int) -> dict[str, tuple[Program, dict[str, int]]]:
    """``main`` as committed but for its retries and decision wait; ``tiny`` as
    committed but for its memory limiter; ``small`` but for its ``num_traces``. Their
    logs pipelines export to a real logs store (``logs_port``): a logs exporter with
    nowhere to send would be a fault of its own."""
    out = {}
    for label in ("main", "tiny", "small"):
        ports = {"otlp_grpc": free_port(), "otlp_http": free_port(), "health": free_port(),
                 "metrics": free_port(), "jaeger_grpc": jaeger_grpc, "prometheus": prom_port,
                 "victorialogs": logs_port}
        cfg = collector_config(ports)
        if label == "main":
            cfg["exporters"]["otlp/jaeger"]["retry_on_failure"] = {
                "enabled": True, "initial_interval": "1s", "max_interval": "1s",
                "max_elapsed_time": "2s"}
            cfg["processors"]["tail_sampling"]["decision_wait_after_root_received"] = "1s"
        elif label == "tiny":
            cfg["processors"]["memory_limiter"].update(limit_mib=2, spike_limit_mib=1)
        else:
            cfg["processors"]["tail_sampling"]["num_traces"] = 2
        path = write_yaml(workdir / f"collector-{label}.yaml", cfg)
        out[label] = (Program("otelcol-adk", [f"--config={path}"], workdir,
                              ready_url=f"http://{local(ports['health'])}/", label=label),
                      ports)
    return out


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Notes]:
    workdir = tmp_path_factory.mktemp("loss-alerts")
    k = ALERT_TIME_SCALE
    jp = {n: free_port() for n in ("health", "query", "otlp_grpc", "otlp_http",
                                   "query_grpc", "metrics")}
    jaeger_path = write_yaml(workdir / "jaeger.yaml", jaeger_config(jp))

    def jaeger() -> Program:
        return Program("jaeger", ["--config", str(jaeger_path)], workdir,
                       ready_url=f"http://{local(jp['health'])}/status")

    prom_port = free_port()
    logs_port = free_port()
    collectors = _collectors(workdir, jp["otlp_grpc"], prom_port, logs_port)
    am_cfg: dict[str, Any] = yaml.safe_load(ALERTMANAGER_YML.read_text())
    am_cfg["route"].update(group_wait="1s", group_interval="2s")
    for route in am_cfg["route"]["routes"]:
        route.update(group_wait="1s", group_interval="2s")
    prom_cfg: dict[str, Any] = yaml.safe_load(PROMETHEUS_YML.read_text())
    for key in ("scrape_interval", "evaluation_interval"):
        prom_cfg["global"][key] = scaled(prom_cfg["global"][key], k)
    for job in prom_cfg["scrape_configs"]:
        if job["job_name"] == "otel-collector":
            job["static_configs"] = [{"targets": [
                local(ports["metrics"]) for _, ports in collectors.values()]}]
    dead = free_port()  # nothing listens: the agent's traces endpoint
    with Webhook() as hook, Sender() as sender:
        am_prog, am = alertmanager(workdir, {"host.docker.internal:5001":
                                             f"127.0.0.1:{hook.port}"}, config=am_cfg)
        prom_prog, prom = prometheus(workdir, {
            "alertmanager:9093": am.url.removeprefix("http://"),
            "jaeger:8888": local(jp["metrics"]),
            "host.docker.internal:9464": local(free_port()),
        }, config=prom_cfg, rules_dir=_rules(workdir), port=prom_port)
        prom_prog.args.append(f"--query.lookback-delta={scaled('5m', k)}")
        backend = jaeger()
        agent_env = {**otlp_env(prom.url), "OTEL_METRIC_EXPORT_INTERVAL": str(60_000 // k),
                     "OTEL_TRACES_EXPORTER": "otlp",
                     "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://{local(dead)}/v1/traces",
                     "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
                     "ADK_TASK_TELEMETRY_BUFFER_SPANS": "10",
                     "ADK_TASK_TELEMETRY_MAX_OPEN_TASKS": "1"}
        with running(am_prog, prom_prog, backend, logstore.program(logs_port, workdir),
                     *(p for p, _ in collectors.values())):
            notes = Notes(hook)
            for label, (_, ports) in collectors.items():
                # main also gets children of its roots 3 s late (decided after 1 s)
                sender.targets[label] = (f"http://{local(ports['otlp_http'])}/v1/traces",
                                         label == "main")
            backend.stop()  # the backend goes away while traces keep coming
            with metrics_app(workdir, "otlp", AGENT, "--workload", "clean", env=agent_env):
                ok = wait_until(lambda: notes.fired() == set(FAULTS), timeout=240, interval=1)
                assert ok, (f"fired {notes.fired()} of {set(FAULTS)}\n"
                            f"{_why(prom)}\n{prom_prog.log()}\n{am_prog.log()}")
            # The faults end: the backend is back, nothing is sent to the refusing
            # or the small collector nor late to main, the agent has stopped.
            sender.targets.pop("tiny")
            sender.targets.pop("small")
            sender.targets["main"] = (sender.targets["main"][0], False)
            backend = jaeger()
            with running(backend):
                ok = wait_until(lambda: notes.resolved() == set(FAULTS), timeout=300,
                                interval=1)
                assert ok, (f"resolved {notes.resolved()} of {set(FAULTS)}\n{_why(prom)}\n"
                            f"{collectors['main'][0].log()}")
                yield notes


def _why(prom: Api) -> str:
    res = prom.query("ALERTS")["data"]["result"]
    return "ALERTS: " + "; ".join(f"{r['metric'].get('alertname')} "
                                  f"{r['metric'].get('alertstate')}" for r in res)


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_each_loss_alert_fires_from_its_fault_and_resolves(faults: Notes, name: str) -> None:
    states = faults.states(name)
    print(f"\n{name}: webhook statuses {states}")
    assert "firing" in states
    assert states.index("firing") < len(states) - 1 - states[::-1].index("resolved")
    alert = next(a for _, a in faults.hook.alerts() if a["labels"]["alertname"] == name)
    assert alert["annotations"]["runbook_url"].endswith(f"/{name}.md")


def test_every_loss_alert_went_to_the_ticket_receiver(faults: Notes) -> None:
    paths = {p for p, a in faults.hook.alerts() if a["labels"]["alertname"] in FAULTS}
    assert paths == {"/alerts/tickets"}
