"""An OTLP endpoint that refuses, black-holes or fails must never reach the agent.

Each case runs many real scripted ADK runs in a fresh process whose exporters point
at a broken 127.0.0.1 endpoint, with small queues and buffers so they overflow. What
must hold: every run completes, nothing is raised, the buffer stays at its bound and
counts what it dropped, each signal gets exactly one complete warning (named, not
cut) and the shutdown one line with the counts, and no exporter or SDK message
repeats per batch. (Recovery: tests/test_export_outage.py.)
No wall-clock assertion: timings are reported by benchmarks/bench_dead_endpoint.py.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from typing import Any

import pytest

from .otlp_receivers import BlackHole, refusing_endpoint, run_children

QUEUE = 64
ENV = {
    "OTEL_BSP_MAX_QUEUE_SIZE": str(QUEUE), "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "16",
    "OTEL_BSP_SCHEDULE_DELAY": "20",
    "OTEL_BLRP_MAX_QUEUE_SIZE": str(QUEUE), "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE": "16",
    "OTEL_BLRP_SCHEDULE_DELAY": "20",
    "OTEL_METRIC_EXPORT_INTERVAL": "100",
    "ADK_TASK_TELEMETRY_BUFFER_SPANS": str(QUEUE), "ADK_TASK_TELEMETRY_BUFFER_LOG_RECORDS": "8",
}
ROUNDS = 8  # x (4 tool tasks + ~10 ADK spans) per round: more spans than QUEUE holds


class _Failing503:
    """Answers every OTLP/HTTP export with 503, as an overloaded collector does."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        Thread(target=self._server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# The cause each kind of outage is told with (timeout=1 s in these runs).
# (The HTTP exporter may give up without saying why: then a TCP connect tells.)
EXPECTED_CAUSES = {"refusing": {"connection refused"},
                   "blackhole": {"no answer within 1 s", "no successful answer within 1 s"},
                   "503": {"Service Unavailable", "no successful answer within 1 s"}}
CASES = [("grpc", "refusing"), ("http/protobuf", "refusing"), ("grpc", "blackhole"),
         ("http/protobuf", "blackhole"), ("http/protobuf", "503")]


@pytest.fixture(scope="module")
def broken_runs() -> Iterator[dict[tuple[str, str], tuple[str, dict[str, Any]]]]:
    """Every case at once, each in its own process: (protocol, kind) -> (endpoint, result)."""
    hole, failing = BlackHole(), _Failing503()
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # a port someone else holds
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    endpoints = {"refusing": refusing_endpoint(), "blackhole": hole.endpoint,
                 "503": failing.endpoint}
    try:
        jobs = [({"configure": {"service_name": "dead", "endpoint": endpoints[kind],
                                "protocol": protocol, "timeout": 1},
                  "scenarios": ["parallel_calls", "single_call"], "rounds": ROUNDS,
                  "direct_orphan": True}, ENV) for protocol, kind in CASES]
        busy_port = busy.getsockname()[1]
        jobs.append(({"configure": {"prometheus_port": busy_port},
                      "scenarios": ["single_call"]}, {}))
        *results, busy_result = run_children(jobs)
        out = {case: (endpoints[case[1]], r) for case, r in zip(CASES, results, strict=True)}
        out[("prometheus", "busy")] = (f"127.0.0.1:{busy_port}", busy_result)
        yield out
    finally:
        hole.stop()
        failing.stop()
        busy.close()


@pytest.mark.parametrize("case", CASES, ids=[f"{p}-{k}" for p, k in CASES])
def test_broken_endpoint_never_reaches_the_agent(
        case: tuple[str, str],
        broken_runs: dict[tuple[str, str], tuple[str, dict[str, Any]]]) -> None:
    endpoint, result = broken_runs[case]
    assert result["errors"] == [], result["errors"]
    assert len(result["scenarios"]) == 2 * ROUNDS  # every run completed
    assert result["plugin_internal_errors"] == 0
    traces = result["export_status"]["traces"]
    # The bound, plus the batch in flight (taken from within the bound; never dropped
    # while it may still arrive).
    assert traces["buffered"] <= 2 * QUEUE and traces["dropped"]["buffer_full"] > 0, traces
    assert result["export_failing"] is True
    ours = [x["message"] for x in result["logs"] if x["logger"] == "adk_task_telemetry.export"]
    for s in ("traces", "metrics", "logs"):
        told = [m for m in ours if f"cannot export {s} " in m]
        assert len(told) == 1, json.dumps(ours, indent=1)
        cause = told[0].split("(", 1)[1].split(")", 1)[0]
        assert cause in EXPECTED_CAUSES[case[1]], told[0]
        assert "agent is not affected" in told[0], told[0]
    at_shutdown = [m for m in ours if "gave up on telemetry export at shutdown" in m]
    assert len(ours) == 3 + len(at_shutdown) and len(at_shutdown) <= 1, json.dumps(ours, indent=1)
    dropped = {s: sum(v["dropped"].values()) for s, v in result["export_status_at_end"].items()}
    assert dropped["traces"] >= traces["dropped"]["buffer_full"]
    for msg in ours:
        assert endpoint in msg and msg.endswith("."), msg  # complete, not cut mid-word
    noise = [x for x in result["logs"] if x["logger"].startswith("opentelemetry.exporter")
             or "queue full" in x["message"].lower()]
    assert noise == [], json.dumps(noise, indent=1)
    assert "Traceback" not in result["stderr"], result["stderr"][-3000:]


def test_a_busy_prometheus_port_is_a_warning_not_a_crash(
        broken_runs: dict[tuple[str, str], tuple[str, dict[str, Any]]]) -> None:
    where, result = broken_runs[("prometheus", "busy")]
    assert result["errors"] == [] and result["scenarios"][0][0] == "single_call"
    assert result["prometheus_port"] is None
    assert result["installed"] == {"traces": True, "metrics": True, "logs": True}
    told = [x for x in result["logs"] if x["logger"] == "adk_task_telemetry.export"]
    assert len(told) == 1 and "cannot serve Prometheus metrics on " + where in told[0]["message"]
