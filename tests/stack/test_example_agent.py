"""deploy/k8s/example-agent as it runs: ADK's own server (`adk api_server`) with the
manifest's own command, arguments and environment, sending to the k8s tier (gateway ->
sampler -> Jaeger, gateway -> VictoriaLogs; tests/stack/scaleout.py), and a request that
orphans a tool task; the orphan's span is found in Jaeger and its log record in
VictoriaLogs.

From the manifest, as the kubelet would run it: the container's ``command`` and ``args``
and its ``env`` (``fieldRef`` values given, ``$(VAR)`` expanded), with only addresses
rewritten: the gateway Service's name and port become the local gateway's listener for
that port (its OTLP/HTTP port for 4318, its gRPC one for 4317, as the Service maps
them), ``--host``/``--port`` a loopback port, and the image's agents folder
(``/app/agents``) a copy of tests/agents: the test's agent stands in for the user's
image and does what the manifest's header tells a user's agent.py to do
(``configure_telemetry()`` from the OTEL_* variables, an ``App`` with the plugin).
``adk`` is the command of the test's own virtualenv.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from adk_task_telemetry import semconv as sc
from tests.stack.conftest import span_tags
from tests.stack.logstore import ORPHAN_RECORD, quoted
from tests.stack.scaleout import Topology, can_run_topology
from tests.stack_programs import REPO, free_port, http_ok, wait_until

MANIFEST = REPO / "deploy" / "k8s" / "example-agent" / "agent-example.yaml"
GATEWAY = REPO / "deploy" / "k8s" / "otel-gateway.yaml"
AGENTS = REPO / "tests" / "agents"
APP, USER = "telemetry_app", "k8s-user"
POD_NAME = "support-agent-7d4b9c-x2k8q"
#: The orphan's record and span: the sampler decides 10 s after the run's root arrives
#: (decision_wait_after_root_received), plus the SDK's and the collectors' batching.
ARRIVES_WITHIN = 180.0


def _container() -> dict[str, Any]:
    (deployment,) = [d for d in yaml.safe_load_all(MANIFEST.read_text())
                     if d and d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _env(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet builds it: fieldRef values given,
    ``$(VAR)`` references to earlier variables expanded."""
    fields = {"metadata.name": POD_NAME, "metadata.namespace": "adk-observability"}
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "valueFrom" in var:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[var["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                                      lambda m: env.get(m.group(1), m.group(0)),
                                      str(var["value"]))
    return env


def _gateway_ports() -> dict[int, str]:
    """The gateway Service's port -> the container port name it targets."""
    for d in yaml.safe_load_all(GATEWAY.read_text()):
        if d and d["kind"] == "Service" and d["metadata"]["name"] == "otel-gateway":
            return {int(p["port"]): str(p["targetPort"]) for p in d["spec"]["ports"]}
    raise AssertionError("no otel-gateway Service")


def _rewrite_endpoint(value: str, topo: Topology) -> str:
    """The gateway Service's address -> the local gateway's listener for that port."""
    local = {"otlp-http": topo.gateway_http[0], "otlp-grpc": topo.gateway_grpc[0]}
    for port, target in _gateway_ports().items():
        value = value.replace(
            f"http://otel-gateway.adk-observability.svc.cluster.local:{port}", local[target])
    return value


class AgentServer:
    """The manifest's container as a local process."""

    def __init__(self, topo: Topology, workdir: Path) -> None:
        container = _container()
        self.port = free_port()
        agents = workdir / "agents"
        shutil.copytree(AGENTS, agents, ignore=shutil.ignore_patterns("__pycache__"))
        argv = [*container["command"], *container.get("args", [])]
        assert argv[:2] == ["adk", "api_server"], argv
        argv[0] = str(Path(sys.executable).parent / "adk")
        rewritten = {"--host=0.0.0.0": "--host=127.0.0.1", "--port=8000": f"--port={self.port}",
                     "/app/agents": str(agents)}
        assert set(rewritten) <= set(argv), argv  # the manifest still says these
        self.argv = [rewritten.get(a, a) for a in argv]
        probe = container["readinessProbe"]["httpGet"]
        self.ready_url = f"http://127.0.0.1:{self.port}{probe['path']}"
        self.env = {k: _rewrite_endpoint(v, topo) for k, v in _env(container).items()}
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ATT_"))}
        environ["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO),
                                                 os.environ.get("PYTHONPATH", "")])
        # The test's agent: configure_telemetry() from the OTEL_* variables alone.
        environ["ATT_CONFIGURE"] = "env"
        self.log = workdir / "support-agent.log"
        self.proc = subprocess.Popen(self.argv, cwd=workdir, env={**environ, **self.env},
                                     stdout=self.log.open("wb"), stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 120.0) -> None:
        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"adk api_server exited {self.proc.returncode}:\n"
                                     f"{self.log.read_text()[-4000:]}")
            return http_ok(self.ready_url)
        assert wait_until(up, timeout, 0.5), self.log.read_text()[-4000:]

    def session(self) -> str:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/apps/{APP}/users/{USER}/sessions", data=b"{}",
            headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            return str(json.loads(r.read())["id"])

    def live_and_leave(self, tag: str, timeout: float = 60.0) -> None:
        """/run_live: ``linger <tag>`` (a streaming tool that goes on for a while when
        cancelled: an orphan on every ADK version); leaves once the call is dispatched."""
        from websockets.sync.client import connect

        sid = self.session()
        url = (f"ws://127.0.0.1:{self.port}/run_live?app_name={APP}&user_id={USER}"
               f"&session_id={sid}&modalities=TEXT")
        with connect(url, open_timeout=timeout) as ws:
            ws.send(json.dumps({"content": {"role": "user",
                                            "parts": [{"text": f"linger {tag}"}]}}))
            deadline = time.monotonic() + timeout
            while True:
                event = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
                parts = (event.get("content") or {}).get("parts") or []
                if any(p.get("functionResponse", {}).get("id") == f"{tag}-linger"
                       for p in parts):
                    return

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    reason = can_run_topology()
    if reason:
        pytest.skip(reason)
    topo = Topology(tmp_path_factory.mktemp("k8s-agent"), gateways=1, samplers=1)
    try:
        topo.start()
        yield topo
    finally:
        topo.stop()


def test_the_example_agent_under_adk_api_server_reaches_jaeger_and_the_logs_store(
        tier: Topology, tmp_path: Path) -> None:
    server = AgentServer(tier, tmp_path)
    try:
        server.wait_ready()
        tag = f"k8s{int(time.time() * 1000) % 10**8}"
        call_id = f"{tag}-linger"
        server.live_and_leave(tag)
        # The log record: by service, its record kind and the call id.
        query = (f'"service.name":={quoted(server.env["OTEL_SERVICE_NAME"])} '
                 f'{ORPHAN_RECORD} "{sc.GEN_AI_TOOL_CALL_ID}":={quoted(call_id)}')
        found: list[dict[str, Any]] = []

        def logged() -> bool:
            nonlocal found
            found = tier.logs.query(query)
            return bool(found)
        assert wait_until(logged, ARRIVES_WITHIN, 1.0), (
            f"no orphan record for {call_id} in VictoriaLogs:\n{server.log.read_text()[-4000:]}")
        assert len(found) == 1, found
        record = found[0]
        assert record[sc.GEN_AI_TOOL_NAME] == "linger_feed", record
        assert record["service.instance.id"] == POD_NAME, record  # $(POD_NAME), expanded
        # Its trace in Jaeger, through the sampler: the orphan's tool_task span.
        spans: list[dict[str, Any]] = []

        def traced() -> bool:
            nonlocal spans
            url = f"http://127.0.0.1:{tier.jaeger_query}/api/traces/{record['trace_id']}"
            try:
                with urllib.request.urlopen(url, timeout=10) as r:
                    data = json.loads(r.read())
            except urllib.error.HTTPError:
                return False
            spans = [s for t in data.get("data") or [] for s in t["spans"]]
            return any(s["spanID"] == record["span_id"] for s in spans)
        assert wait_until(traced, ARRIVES_WITHIN, 1.0), (
            f"trace {record['trace_id']} not in Jaeger: {[s['operationName'] for s in spans]}")
        (own,) = [s for s in spans if s["spanID"] == record["span_id"]]
        tags = span_tags(own)
        assert own["operationName"] == f"{sc.SPAN_NAME_PREFIX}linger_feed", own["operationName"]
        assert tags[sc.GEN_AI_TOOL_CALL_ID] == call_id, tags
        assert tags[sc.ADK_TOOL_TASK_OUTCOME] == "orphaned", tags
        # ADK's own spans of that run came the same way (its providers, OTLP/HTTP).
        assert any(s["spanID"] != own["spanID"] and not s["operationName"].startswith(
            sc.SPAN_NAME_PREFIX) for s in spans), [s["operationName"] for s in spans]
    finally:
        server.stop()
