"""OTLP receivers for the export tests, and the instrumented process they talk to.

The receivers are real servers on 127.0.0.1 built on grpcio and opentelemetry-proto:
they decode what the SDK's exporters really send. The instrumented process is a
fresh interpreter (``python otlp_receivers.py '<json>'``): OTel's global providers
can be set once per process and ADK binds its tracers to the first one, so every
configure_telemetry() under test gets a process of its own.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gzip
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span

HERE = Path(__file__).resolve().parent
SCOPE = "adk_task_telemetry"


# --- decoding ---------------------------------------------------------------------


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return attrs(v.kvlist_value.values)
    return getattr(v, kind)


def attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in kvs}


@dataclass
class Received:
    """Everything one receiver decoded, in arrival order. Thread-safe."""

    traces: list[trace_service_pb2.ExportTraceServiceRequest] = field(default_factory=list)
    metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = field(default_factory=list)
    logs: list[logs_service_pb2.ExportLogsServiceRequest] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    #: Trace requests decoded after their sender had given up on them (its export
    #: timed out, so it counts them failed): in ``traces`` too, but never answered.
    abandoned_traces: list[trace_service_pb2.ExportTraceServiceRequest] = field(
        default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def add(self, kind: str, request: Any, headers: dict[str, str],
            abandoned: bool = False) -> None:
        with self.cond:
            getattr(self, kind).append(request)
            self.headers.append(headers)
            if abandoned and kind == "traces":
                self.abandoned_traces.append(request)
            self.cond.notify_all()

    def answered_span_ids(self) -> set[str]:
        """Span ids (hex) received in a request answered while its sender waited: what
        an exporter knows arrived. A span only in abandoned requests arrived, but its
        sender counts it failed, and drops it as lost should its buffer overflow."""
        with self.cond:
            abandoned = {id(r) for r in self.abandoned_traces}
            return {span.span_id.hex() for req in self.traces if id(req) not in abandoned
                    for rs in req.resource_spans for ss in rs.scope_spans
                    for span in ss.spans}

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 0.2))
        return True

    def spans(self) -> list[tuple[dict[str, Any], str, Span]]:
        """(resource attributes, scope name, span) for every span received."""
        with self.cond:
            return [(attrs(rs.resource.attributes), ss.scope.name, span)
                    for req in self.traces for rs in req.resource_spans
                    for ss in rs.scope_spans for span in ss.spans]

    def tool_spans(self) -> list[Span]:
        """Our ``tool_task`` spans (not the call ledger's ``unanswered_call`` spans)."""
        return [s for _, scope, s in self.spans()
                if scope == SCOPE and s.name.startswith("tool_task ")]

    def metric_list(self, scope: str = SCOPE) -> list[tuple[dict[str, Any], Metric]]:
        with self.cond:
            return [(attrs(rm.resource.attributes), m)
                    for req in self.metrics for rm in req.resource_metrics
                    for sm in rm.scope_metrics if sm.scope.name == scope for m in sm.metrics]

    def scope_names(self) -> set[str]:
        with self.cond:
            return {sm.scope.name for req in self.metrics for rm in req.resource_metrics
                    for sm in rm.scope_metrics}

    def log_records(self) -> list[tuple[dict[str, Any], str, LogRecord]]:
        with self.cond:
            return [(attrs(rl.resource.attributes), sl.scope.name, rec)
                    for req in self.logs for rl in req.resource_logs
                    for sl in rl.scope_logs for rec in sl.log_records]


# --- OTLP/gRPC --------------------------------------------------------------------


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, rx: Received) -> None:
        self.rx = rx

    def Export(self, request: Any, context: Any) -> Any:
        self.rx.add("traces", request, dict(context.invocation_metadata()),
                    abandoned=not context.is_active())  # deadline passed: sender gave up
        return trace_service_pb2.ExportTraceServiceResponse()


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, rx: Received) -> None:
        self.rx = rx

    def Export(self, request: Any, context: Any) -> Any:
        self.rx.add("metrics", request, dict(context.invocation_metadata()))
        return metrics_service_pb2.ExportMetricsServiceResponse()


class _Logs(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, rx: Received) -> None:
        self.rx = rx

    def Export(self, request: Any, context: Any) -> Any:
        self.rx.add("logs", request, dict(context.invocation_metadata()))
        return logs_service_pb2.ExportLogsServiceResponse()


class GrpcReceiver:
    """An OTLP/gRPC collector stand-in on 127.0.0.1 (an ephemeral port)."""

    protocol = "grpc"

    def __init__(self, port: int = 0, received: Received | None = None) -> None:
        self.received = received or Received()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(
            _Traces(self.received), self._server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
            _Metrics(self.received), self._server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_Logs(self.received), self._server)
        self.port = self._server.add_insecure_port(f"127.0.0.1:{port}")
        self._server.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.stop(grace=None).wait(5)


# --- OTLP/HTTP --------------------------------------------------------------------

_HTTP_PATHS: dict[str, tuple[str, Any, Any]] = {
    "/v1/traces": ("traces", trace_service_pb2.ExportTraceServiceRequest,
                   trace_service_pb2.ExportTraceServiceResponse),
    "/v1/metrics": ("metrics", metrics_service_pb2.ExportMetricsServiceRequest,
                    metrics_service_pb2.ExportMetricsServiceResponse),
    "/v1/logs": ("logs", logs_service_pb2.ExportLogsServiceRequest,
                 logs_service_pb2.ExportLogsServiceResponse),
}


def _peer_closed(sock: socket.socket) -> bool:
    """The client closed its end before we answered (its export timed out: urllib3
    closes the connection), so it will count the request failed."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False  # still connected, nothing more sent: it waits for the answer
    except OSError:
        return True


class HttpReceiver:
    """An OTLP/HTTP (protobuf) collector stand-in on 127.0.0.1."""

    protocol = "http/protobuf"

    def __init__(self, port: int = 0, received: Received | None = None) -> None:
        self.received = rx = received or Received()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                enc = (self.headers.get("Content-Encoding") or "").lower()
                if enc == "gzip":
                    body = gzip.decompress(body)
                elif enc == "deflate":
                    body = zlib.decompress(body)
                route = _HTTP_PATHS.get(self.path)
                if route is None or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_response(404)
                    self.end_headers()
                    return
                kind, req_cls, resp_cls = route
                request = req_cls()
                request.ParseFromString(body)
                rx.add(kind, request, {k.lower(): v for k, v in self.headers.items()},
                       abandoned=_peer_closed(self.connection))
                payload = resp_cls().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def restarted(receiver: GrpcReceiver | HttpReceiver) -> GrpcReceiver | HttpReceiver:
    """The same collector started again on the same port (after ``stop()``), keeping
    what it received before."""
    return type(receiver)(port=receiver.port, received=receiver.received)


# --- endpoints that do not work ---------------------------------------------------


def refusing_endpoint() -> str:
    """A 127.0.0.1 port with nobody listening: connections are refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class BlackHole:
    """Accepts TCP connections, reads nothing, answers nothing, closes nothing."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.port = int(self._sock.getsockname()[1])
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted.append(conn)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for c in self.accepted:
            c.close()
        self._sock.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the instrumented process -----------------------------------------------------


def run_child(spec: dict[str, Any], *, env: dict[str, str] | None = None,
              timeout: float = 90.0) -> dict[str, Any]:
    """Runs ``spec`` in a fresh interpreter and returns what it reported."""
    return run_children([(spec, env)], timeout=timeout)[0]


def run_children(jobs: list[tuple[dict[str, Any], dict[str, str] | None]],
                 timeout: float = 90.0) -> list[dict[str, Any]]:
    """Runs several instrumented processes at once (they mostly wait on sockets)."""
    procs = [start_child(spec, env=env, stdin=False) for spec, env in jobs]
    # Read every child's pipes at once: a child whose stdout pipe is full (console
    # exporters) would otherwise block while we wait for another one.
    outputs: dict[int, tuple[str, str]] = {}

    def read(i: int, proc: subprocess.Popen[str]) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            outputs[i] = proc.communicate(timeout=timeout)

    readers = [threading.Thread(target=read, args=(i, p), daemon=True)
               for i, p in enumerate(procs)]
    for t in readers:
        t.start()
    for t in readers:
        t.join(timeout + 5)
    if len(outputs) < len(procs):
        for p in procs:
            p.kill()
        raise subprocess.TimeoutExpired([sys.executable], timeout)
    results = []
    for i, proc in enumerate(procs):
        stdout, stderr = outputs[i]
        lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, (
            f"child failed (rc={proc.returncode})\nstdout:\n{stdout[-3000:]}\n"
            f"stderr:\n{stderr[-6000:]}")
        result: dict[str, Any] = json.loads(lines[-1][len("RESULT "):])
        result["stderr"] = stderr
        result["stdout"] = stdout
        results.append(result)
    return results


def start_child(spec: dict[str, Any], *, env: dict[str, str] | None = None,
                stdin: bool = True) -> subprocess.Popen[str]:
    """Starts ``spec`` in a fresh interpreter (which may talk to the parent by line)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    full_env.update(env or {})
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), json.dumps(spec)],
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=full_env, cwd=str(HERE))


class _Capture(logging.Handler):
    """Every WARNING+ record that reaches the root logger, as the user would see it."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[dict[str, str]] = []
        self.echo = False

    def emit(self, record: logging.LogRecord) -> None:
        rec = {"logger": record.name, "level": record.levelname,
               "message": record.getMessage()}
        self.records.append(rec)
        if self.echo:
            print("EXITLOG " + json.dumps(rec), flush=True)


async def _child(spec: dict[str, Any]) -> dict[str, Any]:
    from opentelemetry import trace

    from adk_task_telemetry import TaskTelemetryPlugin, configure_telemetry
    from adk_task_telemetry.scenarios import run_scenario

    capture = _Capture()
    logging.getLogger().addHandler(capture)
    out: dict[str, Any] = {"errors": [], "scenarios": []}
    # Registered before anything of ours, so it runs last: when the exit's own work
    # (ours and any other atexit handler) is over; the interpreter's teardown follows.
    atexit.register(lambda: print(f"ATEXIT-DONE {time.time()}", flush=True))

    app_spans = None
    app_reader = None
    if spec.get("app_provider"):  # the application installed its own tracer provider first
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
        app_spans = InMemorySpanExporter()
        app_tp = TracerProvider()
        app_tp.add_span_processor(SimpleSpanProcessor(app_spans))
        trace.set_tracer_provider(app_tp)
        # ... and its own MeterProvider, which cannot take our readers.
        from opentelemetry import metrics as otel_metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        app_reader = InMemoryMetricReader()
        otel_metrics.set_meter_provider(MeterProvider(metric_readers=[app_reader]))

    kwargs = spec.get("configure", {})
    handles = [configure_telemetry(**kwargs) for _ in range(int(spec.get("configure_times", 1)))]
    handle = handles[0]
    out["same_handle"] = all(h is handle for h in handles)
    out["prometheus_port"] = handle.prometheus_port
    out["otlp_targets"] = {k: t.endpoint for k, t in handle.otlp_targets.items()}
    out["actions"] = handle.actions
    out["installed"] = {"traces": handle.tracer_provider is not None,
                        "metrics": handle.meter_provider is not None,
                        "logs": handle.logger_provider is not None}
    if spec.get("announce"):  # tell the parent where to scrape, then go on
        print("READY " + json.dumps({
            "prometheus_port": handle.prometheus_port,
            "prometheus_bound": handle.prometheus_host}), flush=True)

    plugin = TaskTelemetryPlugin()
    loop_lag: list[float] = []
    rounds = int(spec.get("rounds", 1))
    for _ in range(rounds):
        for name in spec.get("scenarios", []):
            try:
                t0 = time.perf_counter()
                run = await run_scenario(name, [plugin],
                                         close_runner=spec.get("close_runner", True))
                await run.probe.cleanup()
                out["scenarios"].append([name, time.perf_counter() - t0])
            except BaseException as exc:
                out["errors"].append(f"{name}: {type(exc).__name__}: {exc}")
        # The event loop must stay responsive while exporters struggle.
        t0 = time.perf_counter()
        await asyncio.sleep(0)
        loop_lag.append(time.perf_counter() - t0)
    if spec.get("direct_orphan"):
        await _direct_orphan(plugin)
    out["loop_lag_max"] = max(loop_lag) if loop_lag else 0.0
    out["plugin_internal_errors"] = plugin.internal_errors
    out["export_status"] = _status(handle)
    if spec.get("announce"):
        print("SCENARIOS-DONE", flush=True)
        sys.stdin.readline()  # the parent says when it has scraped
    if spec.get("explicit_shutdown", True):
        t0 = time.perf_counter()
        handle.shutdown()
        out["shutdown_seconds"] = time.perf_counter() - t0
    out["export_failing"] = handle.export_failing
    out["export_status_at_end"] = _status(handle)
    out["app_spans"] = None if app_spans is None else [
        s.name for s in app_spans.get_finished_spans()]
    out["app_metrics"] = None if app_reader is None else sorted({
        m.name for rm in (app_reader.get_metrics_data() or _Empty()).resource_metrics
        for sm in rm.scope_metrics for m in sm.metrics})
    out["logs"] = capture.records
    out["ended_at"] = time.time()  # what follows is the interpreter's exit
    capture.echo = True  # what the exit logs (atexit or SIGTERM) goes to stdout
    return out


async def _direct_orphan(plugin: Any) -> None:
    """An orphan on every ADK version, through the real Runner: the caller leaves a
    live run whose streaming tool ignores cancellation for a while (an application
    bug that ADK 2.13's fix of the seed scenario does not cover)."""
    from google.adk.agents import LlmAgent
    from google.adk.agents.live_request_queue import LiveRequestQueue
    from google.adk.agents.run_config import RunConfig, StreamingMode
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    from adk_task_telemetry.scenarios import ScriptedLlm, call

    started = asyncio.Event()
    stop = asyncio.Event()
    body: list[asyncio.Task[Any]] = []

    async def direct_tool() -> Any:
        """Streams ticks; ignores cancellation until told to stop."""
        task = asyncio.current_task()
        if task is not None:
            body.append(task)
        started.set()
        while not stop.is_set():
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue
            yield "tick"

    model = ScriptedLlm()
    agent = LlmAgent(name="direct_agent", model=model, instruction="scripted",
                     tools=[direct_tool])
    runner = Runner(app=App(name="direct_app", root_agent=agent, plugins=[plugin]),
                    session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="direct_app", user_id="u")
    queue = LiveRequestQueue()
    agen = runner.run_live(user_id="u", session_id=session.id, live_request_queue=queue,
                           run_config=RunConfig(streaming_mode=StreamingMode.BIDI,
                                                response_modalities=[types.Modality.TEXT]))
    model.say_live(call("direct_tool", "call-direct-orphan"))

    # Read in this task (no wait_for: a generator read in one task and closed in
    # another detaches ADK's span context in the wrong one); the parent bounds the child.
    async for _event in agen:
        if started.is_set():
            break
    await agen.aclose()  # the caller leaves; the tool keeps running
    queue.close()
    await asyncio.sleep(0)
    stop.set()
    await asyncio.wait(body, timeout=5)
    await asyncio.sleep(0)
    await runner.close()


class _Empty:
    resource_metrics: list[Any] = []


def _status(handle: Any) -> dict[str, Any]:
    """handle.export_status() as JSON: per signal, buffered, sent, dropped..."""
    import dataclasses

    return {k: dataclasses.asdict(v) for k, v in handle.export_status().items()}


def _main() -> None:
    spec = json.loads(sys.argv[1])
    result = asyncio.run(_child(spec))
    print("RESULT " + json.dumps(result), flush=True)
    if spec.get("sigterm_self"):  # docker stop / Kubernetes, with no server in between
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # never reached if SIGTERM still kills the process


if __name__ == "__main__":
    _main()
