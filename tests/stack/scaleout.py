"""The topology of deploy/k8s as local processes: agents -> two gateway collectors
(loadbalancing exporter by trace id) -> two tail-sampling collectors -> Jaeger v2; the
gateways' log records -> VictoriaLogs (deploy/k8s/victorialogs.yaml's flags).

Every config is the one in the manifests (the ``config.yaml`` of the otel-gateway and
otel-sampler ConfigMaps, deploy/jaeger/config.yaml), parsed from the YAML, with only
addresses rewritten for loopback, and these stated changes:

- each program's own telemetry (``service.telemetry.metrics``, 0.0.0.0:8888 in the
  manifests, on every pod) gets a port of its own: several pods share one host here;
- the samplers' probabilistic baseline is set to ``SAMPLING_PERCENT`` (1 %), the rate
  the scale-out claim is made at (the manifest keeps 10 %);
- the gateways' metrics exporter (to Prometheus) points at a port nothing listens on:
  this topology is about traces.

The gateways' resolver stays ``dns`` with the headless Service's hostname, as
committed. As in k8s, that name resolves to one address per sampler pod: the samplers
listen on 127.0.0.2 and 127.0.0.3 (Linux routes 127/8 to lo) on one port, and each
gateway runs in a mount namespace of its own (``unshare --mount``) where a hosts file
maps the name to both, the way ``ip netns exec`` gives a namespace its
/etc/netns/<ns>/hosts. The network stays the host's loopback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.stack import logstore
from tests.stack_programs import REPO, Program, free_port, wait_until, write_yaml

GATEWAY_MANIFEST = REPO / "deploy" / "k8s" / "otel-gateway.yaml"
SAMPLER_MANIFEST = REPO / "deploy" / "k8s" / "otel-sampler.yaml"
JAEGER_CONFIG = REPO / "deploy" / "jaeger" / "config.yaml"
SAMPLER_IPS = ("127.0.0.2", "127.0.0.3")
SAMPLING_PERCENT = 1


def configmap_config(manifest: Path, name: str) -> dict[str, Any]:
    """The collector config inside a manifest's ConfigMap ``name``, parsed."""
    for doc in yaml.safe_load_all(manifest.read_text()):
        if doc and doc.get("kind") == "ConfigMap" and doc["metadata"]["name"] == name:
            return dict(yaml.safe_load(doc["data"]["config.yaml"]))
    raise AssertionError(f"no ConfigMap {name} in {manifest}")


def can_run_topology() -> str | None:
    """Why the topology cannot run here (None when it can): the gateways need a mount
    namespace of their own for their hosts file."""
    if sys.platform != "linux":
        return "the scale-out topology needs Linux (127/8 on lo, mount namespaces)"
    if shutil.which("unshare") is None:
        return "the scale-out topology needs util-linux's unshare for the gateways' hosts file"
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return ("the scale-out topology needs a mount namespace (root or user namespaces) "
                f"for the gateways' hosts file: {probe.stderr.strip()}")
    return None


# --- the programs' own metrics ---------------------------------------------------

_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class Metrics:
    """One scrape of a collector's own Prometheus endpoint."""

    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def total(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` (with or without ``_total``) whose labels
        include ``labels``."""
        names = {name, f"{name}_total"}
        return sum(v for n, lab, v in self.samples
                   if n in names and all(lab.get(k) == x for k, x in labels.items()))

    def names(self, prefix: str) -> list[str]:
        return sorted({n for n, _, _ in self.samples if n.startswith(prefix)})


def scrape(url: str) -> Metrics:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
    except (OSError, urllib.error.URLError):
        return Metrics()
    out = Metrics()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            labels = dict(_LABEL.findall(m.group(3) or ""))
            out.samples.append((m.group(1), labels, float(m.group(4))))
    return out


# --- the topology -------------------------------------------------------------------


def _telemetry(config: dict[str, Any], port: int) -> dict[str, Any]:
    service = config.setdefault("service", {})
    service.setdefault("telemetry", {})["metrics"] = {
        "readers": [{"pull": {"exporter": {"prometheus": {
            "host": "127.0.0.1", "port": port}}}}]}
    return config


@dataclass
class Node:
    """One program of the topology and where its own metrics are."""

    program: Program
    metrics_url: str

    def metrics(self) -> Metrics:
        return scrape(self.metrics_url)


class Topology:
    """Jaeger, ``samplers`` tail-sampling collectors, ``gateways`` gateway collectors."""

    def __init__(self, workdir: Path, *, gateways: int = 2, samplers: int = 2) -> None:
        assert samplers <= len(SAMPLER_IPS)
        self.workdir = workdir
        from tests.stack_programs import rewrite

        # Jaeger: deploy/jaeger/config.yaml.
        self.jaeger_otlp, self.jaeger_query = free_port(), free_port()
        jaeger_health, jaeger_metrics = free_port(), free_port()
        jaeger_cfg = _telemetry(rewrite(yaml.safe_load(JAEGER_CONFIG.read_text()), {
            "0.0.0.0:4317": f"127.0.0.1:{self.jaeger_otlp}",
            "0.0.0.0:4318": f"127.0.0.1:{free_port()}",
            "0.0.0.0:16686": f"127.0.0.1:{self.jaeger_query}",
            "0.0.0.0:13133": f"127.0.0.1:{jaeger_health}",
        }), jaeger_metrics)
        # Its query gRPC port, left at the default :16685 by the committed config: another
        # program on this host may hold it (conftest.jaeger_config does the same).
        jaeger_cfg["extensions"]["jaeger_query"].setdefault("grpc", {})["endpoint"] = \
            f"127.0.0.1:{free_port()}"
        self.jaeger = Node(Program(
            "jaeger", ["--config", str(write_yaml(workdir / "jaeger.yaml", jaeger_cfg))],
            workdir, ready_url=f"http://127.0.0.1:{jaeger_health}/status"),
            f"http://127.0.0.1:{jaeger_metrics}/metrics")

        # VictoriaLogs: where the gateways send log records.
        self.victorialogs_port = free_port()
        self.victorialogs = Node(logstore.program(self.victorialogs_port, workdir,
                                                  command=logstore.k8s_flags()),
                                 f"http://127.0.0.1:{self.victorialogs_port}/metrics")
        self.logs = logstore.VictoriaLogs(f"http://127.0.0.1:{self.victorialogs_port}")

        # Samplers: the otel-sampler ConfigMap, one per loopback address, one port.
        self.sampler_port = _common_free_port(SAMPLER_IPS[:samplers])
        sampler_base = configmap_config(SAMPLER_MANIFEST, "otel-sampler-config")
        jaeger_endpoint = sampler_base["exporters"]["otlp/jaeger"]["endpoint"]
        self.sampler_config: dict[str, Any] = {}
        self.samplers: list[Node] = []
        for i, ip in enumerate(SAMPLER_IPS[:samplers]):
            health, metrics = free_port(), free_port()
            cfg = rewrite(sampler_base, {
                "0.0.0.0:4317": f"{ip}:{self.sampler_port}",
                "0.0.0.0:13133": f"127.0.0.1:{health}",
                jaeger_endpoint: f"127.0.0.1:{self.jaeger_otlp}",
            })
            for policy in cfg["processors"]["tail_sampling"]["policies"]:
                if policy["type"] == "probabilistic":
                    policy["probabilistic"]["sampling_percentage"] = SAMPLING_PERCENT
            _telemetry(cfg, metrics)
            self.sampler_config = cfg
            path = write_yaml(workdir / f"sampler-{i}.yaml", cfg)
            self.samplers.append(Node(Program(
                "otelcol-adk", ["--config", str(path)], workdir,
                ready_url=f"http://127.0.0.1:{health}/", label=f"sampler-{i}"),
                f"http://127.0.0.1:{metrics}/metrics"))

        # Gateways: the otel-gateway ConfigMap; the resolver's hostname resolves, in
        # each gateway's own hosts file, to every sampler address.
        gateway_base = configmap_config(GATEWAY_MANIFEST, "otel-gateway-config")
        dns = gateway_base["exporters"]["loadbalancing"]["resolver"]["dns"]
        self.sampler_hostname = str(dns["hostname"])
        hosts = workdir / "gateway-hosts"
        hosts.write_text("127.0.0.1 localhost\n" + "".join(
            f"{ip} {self.sampler_hostname}\n" for ip in SAMPLER_IPS[:samplers]))
        prom_endpoint = gateway_base["exporters"]["otlphttp/prometheus"]["endpoint"]
        prom_base = prom_endpoint.split("/api/")[0]
        self.gateways: list[Node] = []
        self.gateway_http: list[str] = []
        self.gateway_grpc: list[str] = []
        for i in range(gateways):
            health, metrics, http_port, grpc_port = (free_port(), free_port(), free_port(),
                                                     free_port())
            cfg = rewrite(gateway_base, {
                "0.0.0.0:4317": f"127.0.0.1:{grpc_port}",
                "0.0.0.0:4318": f"127.0.0.1:{http_port}",
                "0.0.0.0:13133": f"127.0.0.1:{health}",
                prom_base: f"http://127.0.0.1:{free_port()}",  # nothing listens
                **logstore.addresses(self.victorialogs_port),
            })
            lb_dns = cfg["exporters"]["loadbalancing"]["resolver"]["dns"]
            assert str(lb_dns["port"]) == "4317", lb_dns  # the Service's port, rewritten:
            lb_dns["port"] = str(self.sampler_port)
            _telemetry(cfg, metrics)
            path = write_yaml(workdir / f"gateway-{i}.yaml", cfg)
            self.gateways.append(Node(Program(
                "otelcol-adk", ["--config", str(path)], workdir,
                ready_url=f"http://127.0.0.1:{health}/", label=f"gateway-{i}",
                wrapper=["unshare", "--mount", "sh", "-c",
                         'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts)]),
                f"http://127.0.0.1:{metrics}/metrics"))
            self.gateway_http.append(f"http://127.0.0.1:{http_port}")
            self.gateway_grpc.append(f"http://127.0.0.1:{grpc_port}")

    def nodes(self) -> list[Node]:
        return [self.jaeger, self.victorialogs, *self.samplers, *self.gateways]

    def start(self) -> None:
        for node in self.nodes():
            node.program.start()
        # A gateway routes only once its resolver has seen every sampler.
        for g in self.gateways:
            def resolved(g: Node = g) -> bool:
                return g.metrics().total("otelcol_loadbalancer_num_backends") >= len(
                    self.samplers)
            if not wait_until(resolved, 60, 0.5):
                raise AssertionError(
                    f"{g.program.label} never resolved {len(self.samplers)} samplers:\n"
                    f"{g.metrics().names('otelcol_loadbalancer')}\n{g.program.log()}")

    def stop(self) -> None:
        for node in reversed(self.nodes()):
            node.program.stop()

    def decision_s(self) -> float:
        """How long a sampler waits before it decides a trace whose root span arrived:
        ``decision_wait_after_root_received`` where set, else ``decision_wait``."""
        ts = self.sampler_config["processors"]["tail_sampling"]
        after_root = _seconds(ts.get("decision_wait_after_root_received", "0s"))
        return after_root or _seconds(ts.get("decision_wait", "30s"))

    def jaeger_traces(self, services: list[str], since_s: float) -> dict[str, set[str]]:
        """trace id -> the span ids Jaeger holds, for every trace of ``services`` that
        Jaeger's query API finds since ``since_s`` (unix time)."""
        out: dict[str, set[str]] = {}
        start_us, end_us = int((since_s - 60) * 1e6), int((time.time() + 60) * 1e6)
        for service in services:
            url = (f"http://127.0.0.1:{self.jaeger_query}/api/traces?service={service}"
                   f"&start={start_us}&end={end_us}&limit=100000")
            with urllib.request.urlopen(url, timeout=30) as r:
                data = json.loads(r.read())
            for t in data.get("data") or []:
                out.setdefault(t["traceID"].rjust(32, "0"), set()).update(
                    s["spanID"].rjust(16, "0") for s in t["spans"])
        return out


def _seconds(value: Any) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", str(value))
    assert m, value
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0}[m.group(2)]


def _common_free_port(ips: tuple[str, ...]) -> int:
    import socket

    for _ in range(50):
        port = free_port(ips[0])
        ok = True
        for ip in ips[1:]:
            with socket.socket() as s:
                try:
                    s.bind((ip, port))
                except OSError:
                    ok = False
        if ok:
            return port
    raise AssertionError(f"no port free on all of {ips}")


# --- the agents --------------------------------------------------------------------


class Agent:
    """One ``tests.stack.scaleout_agent`` process, its progress read as it goes."""

    def __init__(self, name: str, endpoint: str, workdir: Path, *, runs: int,
                 seconds: float, interval: float) -> None:
        self.name = name
        self.stderr_path = workdir / f"{name}.err"
        # Metrics export only at the end (the gateways' metrics route has no Prometheus
        # here); traces as configure_telemetry() sets them up by default.
        env = {**os.environ, "OTEL_METRIC_EXPORT_INTERVAL": "600000",
               "PYTHONPATH": os.pathsep.join(
                   [str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.stack.scaleout_agent", "--endpoint", endpoint,
             "--name", name, "--runs", str(runs), "--seconds", str(seconds),
             "--interval", str(interval)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.stderr_path.open("wb"), text=True, cwd=REPO, env=env)
        self.ready = threading.Event()
        self.runs = 0
        self.result: dict[str, Any] | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("READY"):
                self.ready.set()
            elif line.startswith("RAN "):
                self.runs = int(line.split()[1])
            elif line.startswith("{"):
                self.result = json.loads(line)

    def stop(self) -> None:
        """Asks it to stop after its current run (it then flushes and reports)."""
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.close()
            except BrokenPipeError:
                pass

    def join(self, timeout: float = 120.0) -> dict[str, Any]:
        self.proc.wait(timeout)
        self._reader.join(10)
        if self.result is None:
            raise AssertionError(f"{self.name} exited {self.proc.returncode} without a "
                                 f"report:\n{self.stderr_path.read_text()[-4000:]}")
        return self.result

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Load:
    """``count`` agents spread over the gateways."""

    def __init__(self, topo: Topology, workdir: Path, tag: str, *, count: int, runs: int,
                 seconds: float, interval: float) -> None:
        self.agents = [Agent(f"agent-{tag}-{i}", topo.gateway_http[i % len(topo.gateway_http)],
                             workdir, runs=runs, seconds=seconds, interval=interval)
                       for i in range(count)]

    def wait_ready(self, timeout: float = 120.0) -> None:
        for a in self.agents:
            def up(a: Agent = a) -> bool:
                return a.ready.is_set() or a.proc.poll() is not None
            if not wait_until(up, timeout) or not a.ready.is_set():
                raise AssertionError(f"{a.name} not ready:\n"
                                     f"{a.stderr_path.read_text()[-4000:]}")

    def runs(self) -> int:
        return sum(a.runs for a in self.agents)

    def finish(self) -> dict[str, dict[str, Any]]:
        """Stops every agent; every trace they ended, by trace id (kind, span ids,
        times, agent)."""
        for a in self.agents:
            a.stop()
        traces: dict[str, dict[str, Any]] = {}
        for a in self.agents:
            for tid, t in a.join()["traces"].items():
                traces[tid] = {**t, "agent": a.name}
        return traces

    def kill(self) -> None:
        for a in self.agents:
            a.kill()

    def dropped(self) -> int:
        """Spans the agents' own export dropped (configure_telemetry's counts)."""
        return sum(sum(a.result["export"]["traces"]["dropped"].values())
                   for a in self.agents if a.result)


def by_kind(traces: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"orphan": [], "error": [], "clean": []}
    for tid, t in traces.items():
        out[t["kind"]].append(tid)
    return out


def iter_samples(nodes: list[Node], name: str, **labels: str) -> Iterator[float]:
    for node in nodes:
        yield node.metrics().total(name, **labels)
