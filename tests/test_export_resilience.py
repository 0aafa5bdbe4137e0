"""An OTLP endpoint that refuses, black-holes or fails must never reach the agent.

Each case runs many real scripted ADK runs in a fresh process whose exporters point
at a broken 127.0.0.1 endpoint, with small queues so they overflow. What must hold:
every run completes, nothing is raised, the span queue stays at its bound, each
signal gets exactly one complete warning (named, not cut), and no exporter or SDK
message repeats per batch.
No wall-clock assertion: timings are reported by benchmarks/bench_dead_endpoint.py.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from typing import Any

import pytest

from .otlp_receivers import BlackHole, GrpcReceiver, refusing_endpoint, run_children

QUEUE = 64
ENV = {
    "OTEL_BSP_MAX_QUEUE_SIZE": str(QUEUE), "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "16",
    "OTEL_BSP_SCHEDULE_DELAY": "20",
    "OTEL_BLRP_MAX_QUEUE_SIZE": str(QUEUE), "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE": "16",
    "OTEL_BLRP_SCHEDULE_DELAY": "20",
    "OTEL_METRIC_EXPORT_INTERVAL": "100",
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
    assert result["queue_max"]["spans"] <= QUEUE  # bounded, although nothing got out
    assert result["export_failing"] is True
    ours = [x["message"] for x in result["logs"] if x["logger"] == "adk_task_telemetry.export"]
    named = {s: [m for m in ours if f" {s} " in m] for s in ("traces", "metrics", "logs")}
    assert all(len(m) == 1 for m in named.values()), json.dumps(ours, indent=1)
    assert len(ours) == len({m for ms in named.values() for m in ms}), json.dumps(ours, indent=1)
    for msg in ours:
        assert endpoint in msg and msg.endswith("."), msg  # complete, not cut mid-word
        if "cannot export" in msg:
            cause = msg.split("(", 1)[1].split(")", 1)[0]
            assert cause in EXPECTED_CAUSES[case[1]], msg
            assert "agent is not affected" in msg, msg
        else:  # a flush at runner close that could not wait for this signal
            assert "gave up waiting" in msg, msg
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


def test_export_recovers_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """Down first, then a collector appears on the same port: one warning each way,
    and the breaker lets the next batch through once its cooldown is over."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from adk_task_telemetry import setup

    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    for name in ("one", "two", "three"):
        tp.get_tracer("t").start_span(name).end()
    one, two, three = spans.get_finished_spans()

    endpoint = refusing_endpoint()
    port = int(endpoint.rsplit(":", 1)[1])
    quiet = setup._QuietExporterLogs()
    health = setup._ExportHealth("traces", endpoint, cooldown=3600.0,
                                 outage=setup._Outage(quiet))
    exporter = setup._GuardedSpanExporter(
        OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=1), health)
    caplog.set_level(logging.WARNING, logger="adk_task_telemetry.export")
    receiver = None
    try:
        assert exporter.export([one]) == SpanExportResult.FAILURE
        assert health.failing
        # Within the cooldown a batch is dropped without touching the network.
        assert exporter.export([two]) == SpanExportResult.FAILURE
        assert health.dropped_batches == 1
        receiver = GrpcReceiver(port=port)
        health.cooldown = 0.0
        # A fresh channel: gRPC's own reconnect backoff is not what is tested here.
        exporter._inner.shutdown()
        exporter._inner = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=10)
        assert exporter.export([three]) == SpanExportResult.SUCCESS
        assert not health.failing
        names = [s.name for _, _, s in receiver.received.spans()]
        assert names == ["three"]
    finally:
        exporter.shutdown()
        tp.shutdown()
        if receiver is not None:
            receiver.stop()
    texts = [r.getMessage() for r in caplog.records if r.name == "adk_task_telemetry.export"]
    assert len(texts) == 2, texts
    assert "cannot export traces" in texts[0] and "works again" in texts[1]
