"""Zero-code instrumentation: ``opentelemetry-instrument`` adds TaskTelemetryPlugin.

The subprocess tests run the real ``opentelemetry-instrument`` (opentelemetry-distro's
configurator builds the SDK from OTEL_* variables) around a script and around ADK's
real ``adk api_server``; the spans are decoded by a real OTLP receiver on a socket.
The in-process tests instrument real ADK Runners and uninstrument afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from opentelemetry._logs import SeverityNumber

from adk_task_telemetry import TaskTelemetryPlugin, adk_compat
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.scenarios import run_scenario
from adk_task_telemetry.scenarios.model import ScriptedLlm, call, text

from .conftest import Telemetry
from .otlp_receivers import GrpcReceiver, HttpReceiver, attrs, free_port
from .zero_code.scripted import CALL_IDS

# Without the 'instrument' extra the whole module is a named skip, not a collection error.
pytest.importorskip(
    "opentelemetry.instrumentation.instrumentor",
    reason="opentelemetry-instrumentation is not installed: install the 'instrument' extra")
from adk_task_telemetry.instrumentation import AdkTaskTelemetryInstrumentor

REPO = Path(__file__).resolve().parent.parent
ZERO = Path(__file__).resolve().parent / "zero_code"
BIN = Path(sys.executable).parent
INSTRUMENT = BIN / "opentelemetry-instrument"
ADK = BIN / "adk"
PLUGIN_PATH = "adk_task_telemetry.TaskTelemetryPlugin"

pytestmark = pytest.mark.skipif(
    not INSTRUMENT.exists(),
    reason="opentelemetry-instrument is not installed: install the 'instrument' extra")


def _env(endpoint: str, protocol: str = "grpc", **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({
        # The agents import tests.zero_code.scripted; a PYTHONPATH given (a source tree
        # tested with another venv) still comes first for the package itself.
        "PYTHONPATH": os.pathsep.join([*filter(None, [os.environ.get("PYTHONPATH")]),
                                       str(REPO)]),
        "OTEL_SERVICE_NAME": "zero-code-test",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "300",
    })
    env.update(extra)
    return env


def _tool_spans(rx: GrpcReceiver | HttpReceiver) -> list[Any]:
    return rx.received.tool_spans()


def _runs_arrived(rx: GrpcReceiver | HttpReceiver, tool_spans: int) -> bool:
    """At least ``tool_spans`` tool_task spans arrived, and so did the root span of every
    trace they are in. A run's root span ends after every task of the run, and one
    batch processor exports spans in the order they ended: once the roots are there,
    nothing of those runs (a duplicate span included) is still on its way."""
    tools = _tool_spans(rx)
    roots = {s.trace_id for _, _, s in rx.received.spans() if not s.parent_span_id}
    return len(tools) >= tool_spans and {s.trace_id for s in tools} <= roots


def _by_call(spans: list[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for s in spans:
        out.setdefault(str(attrs(s.attributes)["gen_ai.tool.call.id"]), []).append(s)
    return out


def _started_total(rx: GrpcReceiver | HttpReceiver) -> int:
    total = 0
    for _, metric in rx.received.metric_list():
        if metric.name == "adk.tool_task.started":
            points = metric.sum.data_points
            total = max(total, sum(int(p.as_int) for p in points))
    return total


@pytest.fixture
def grpc_rx() -> Iterator[GrpcReceiver]:
    rx = GrpcReceiver()
    yield rx
    rx.stop()


# --- opentelemetry-instrument python script.py ----------------------------------


def _script(mode: str, rx: GrpcReceiver, **env: str) -> dict[str, Any]:
    proc = subprocess.run(
        [str(INSTRUMENT), sys.executable, str(ZERO / "app_script.py"), mode],
        capture_output=True, text=True, timeout=120, env=_env(rx.endpoint, **env),
        cwd=str(REPO), stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_opentelemetry_instrument_adds_the_plugin_and_spans_reach_the_collector(
        grpc_rx: GrpcReceiver) -> None:
    out = _script("plain", grpc_rx)
    assert out["plugins"] == ["TaskTelemetryPlugin"], out  # ours, and only ours, first
    assert grpc_rx.received.wait_for(lambda: len(_tool_spans(grpc_rx)) >= 3)
    by_call = _by_call(_tool_spans(grpc_rx))
    assert sorted(by_call) == sorted(CALL_IDS)
    all_spans = {s.span_id: s for _, _, s in grpc_rx.received.spans()}
    for call_id, spans in by_call.items():
        assert len(spans) == 1, call_id
        span = spans[0]
        a = attrs(span.attributes)
        assert span.name == "tool_task lookup"
        assert a["adk.tool_task.outcome"] == "ok" and a["adk.app.name"] == "zero_code_app"
        parent = all_spans.get(span.parent_span_id)
        assert parent is not None and parent.name == "execute_tool lookup", call_id
    resources = {r.get("service.name") for r, _, _ in grpc_rx.received.spans()}
    assert resources == {"zero-code-test"}  # exported by the distro's SDK, from OTEL_*
    assert grpc_rx.received.wait_for(lambda: _started_total(grpc_rx) == 3)


def test_an_app_that_lists_the_plugin_gets_no_second_one(grpc_rx: GrpcReceiver) -> None:
    out = _script("listed", grpc_rx)
    assert out["plugins"] == ["TaskTelemetryPlugin"], out
    assert grpc_rx.received.wait_for(lambda: _runs_arrived(grpc_rx, 3))
    by_call = _by_call(_tool_spans(grpc_rx))
    assert {k: len(v) for k, v in by_call.items()} == dict.fromkeys(CALL_IDS, 1)
    # The app's own plugin is the only instance: its metrics are all reported.
    assert grpc_rx.received.wait_for(lambda: _started_total(grpc_rx) == 3)


def test_zero_code_reports_the_seed_orphan(grpc_rx: GrpcReceiver) -> None:
    """ADK issue 7058 through opentelemetry-instrument: the orphan reaches the collector
    on the versions that have the bug, and nothing is orphaned on 2.13."""
    out = _script("seed_bug", grpc_rx)
    assert grpc_rx.received.wait_for(lambda: len(_tool_spans(grpc_rx)) >= 2)
    orphans = [s for s in _tool_spans(grpc_rx)
               if attrs(s.attributes)["adk.tool_task.outcome"] == "orphaned"]
    if adk_compat.ADK_VERSION < (2, 13, 0):
        assert out["still_running"] == ["call-goog"], out
        assert [attrs(s.attributes)["gen_ai.tool.call.id"] for s in orphans] == ["call-goog"]
        events = [e for e in orphans[0].events if e.name == "orphaned_task"]
        assert len(events) == 1
        assert attrs(events[0].attributes)["adk.tool_task.age"] >= 0
    else:
        assert out["still_running"] == [] and orphans == []


def test_plugin_options_reach_a_zero_code_user_through_the_environment(
        grpc_rx: GrpcReceiver) -> None:
    """ADK_TASK_TELEMETRY_CAPTURE_ARGUMENTS and _MAX_ARGUMENT_LENGTH, with no code: the
    instrumentor's plugin records each call's arguments, cut to the length asked."""
    _script("plain", grpc_rx, ADK_TASK_TELEMETRY_CAPTURE_ARGUMENTS="true",
            ADK_TASK_TELEMETRY_MAX_ARGUMENT_LENGTH="12")
    assert grpc_rx.received.wait_for(lambda: len(_tool_spans(grpc_rx)) >= 3)
    captured = [attrs(s.attributes).get("gen_ai.tool.call.arguments")
                for s in _tool_spans(grpc_rx)]
    # {"city": "<name>"} is longer than 12 characters: each is cut, with its ellipsis.
    assert all(isinstance(a, str) and len(a) == 12 and a.startswith('{"city": ')
               and a.endswith("\u2026") for a in captured), captured


def test_without_the_variable_no_argument_is_captured(grpc_rx: GrpcReceiver) -> None:
    _script("plain", grpc_rx)
    assert grpc_rx.received.wait_for(lambda: len(_tool_spans(grpc_rx)) >= 3)
    assert all("gen_ai.tool.call.arguments" not in attrs(s.attributes)
               for s in _tool_spans(grpc_rx))


def test_the_entry_point_name_disables_it(grpc_rx: GrpcReceiver) -> None:
    out = _script("plain", grpc_rx, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="adk_task_telemetry")
    assert out["plugins"] == [], out
    # ADK's own spans still arrive: only our instrumentor was left out.
    assert grpc_rx.received.wait_for(lambda: any(
        s.name.startswith("execute_tool") for _, _, s in grpc_rx.received.spans()))
    assert _tool_spans(grpc_rx) == []


# --- adk api_server -------------------------------------------------------------


class ApiServer:
    """ADK's real ``adk api_server`` on 127.0.0.1, on the agents folder under tests/."""

    def __init__(self, env: dict[str, str], agents: Path, *, instrument: bool,
                 extra: list[str]) -> None:
        self.port = free_port()
        # In-memory services: ADK's default keeps sessions in a file under the agents folder.
        cmd = [*([str(INSTRUMENT)] if instrument else []), str(ADK), "api_server",
               "--host", "127.0.0.1", "--port", str(self.port),
               "--session_service_uri", "memory://", "--artifact_service_uri", "memory://",
               *extra, str(agents)]
        self.proc = subprocess.Popen(cmd, env=env, cwd=str(REPO), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.get("/list-apps")
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"adk api_server did not start:\n{self.stop()}") from None
                time.sleep(0.2)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
            return json.loads(r.read())

    def post(self, path: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def run(self, app: str, session: str) -> list[dict[str, Any]]:
        """One real ``/run`` request: the scripted model asks for three parallel calls."""
        self.post(f"/apps/{app}/users/u/sessions/{session}", {})
        events: list[dict[str, Any]] = self.post("/run", {
            "app_name": app, "user_id": "u", "session_id": session,
            "new_message": {"role": "user", "parts": [{"text": "weather?"}]}})
        return events

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            out, _ = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return out or ""


def _calls_in(events: list[dict[str, Any]]) -> set[str]:
    return {p["functionCall"]["id"] for e in events for p in (e.get("content") or {}).get(
        "parts", []) if p.get("functionCall")}


def _serve(rx: GrpcReceiver | HttpReceiver, tmp: Path, apps: list[str], *, instrument: bool,
           extra: tuple[str, ...] = ()) -> tuple[dict[str, dict[str, list[Any]]], str]:
    """Runs one /run per app; returns the tool_task spans per app and call id, and the log."""
    agents = tmp / "agents"
    shutil.copytree(ZERO / "agents", agents, ignore=shutil.ignore_patterns("__pycache__"))
    server = ApiServer(_env(rx.endpoint, rx.protocol), agents, instrument=instrument,
                       extra=list(extra))
    try:
        for i, app in enumerate(apps):
            assert _calls_in(server.run(app, f"s{i}")) == set(CALL_IDS), app
        arrived = rx.received.wait_for(lambda: _runs_arrived(rx, 3 * len(apps)), timeout=20)
    finally:
        log = server.stop()
    assert arrived, f"tool_task spans did not arrive:\n{log[-4000:]}"
    out: dict[str, dict[str, list[Any]]] = {}
    for s in _tool_spans(rx):
        a = attrs(s.attributes)
        out.setdefault(str(a["adk.app.name"]), {}).setdefault(
            str(a["gen_ai.tool.call.id"]), []).append(s)
    return out, log


def _once_per_call(spans: dict[str, list[Any]]) -> dict[str, int]:
    return {k: len(v) for k, v in spans.items()}


def test_opentelemetry_instrument_adk_api_server(grpc_rx: GrpcReceiver, tmp_path: Path) -> None:
    spans, log = _serve(grpc_rx, tmp_path, ["parallel_agent", "listed_agent"], instrument=True)
    assert _once_per_call(spans["parallel_agent"]) == dict.fromkeys(CALL_IDS, 1), log[-3000:]
    # The app that lists the plugin itself: still one span per call.
    assert _once_per_call(spans["listed_agent"]) == dict.fromkeys(CALL_IDS, 1), log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_adk_api_server_extra_plugins_without_the_instrumentor(tmp_path: Path) -> None:
    # ADK exports by itself (OTLP/HTTP) when an OTEL_EXPORTER_OTLP endpoint is set.
    rx = HttpReceiver()
    try:
        spans, log = _serve(rx, tmp_path, ["parallel_agent"], instrument=False,
                            extra=("--extra_plugins", PLUGIN_PATH))
    finally:
        rx.stop()
    assert _once_per_call(spans["parallel_agent"]) == dict.fromkeys(CALL_IDS, 1), log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_extra_plugins_and_the_instrumentor_give_one_span_per_call(
        grpc_rx: GrpcReceiver, tmp_path: Path) -> None:
    spans, log = _serve(grpc_rx, tmp_path, ["parallel_agent"], instrument=True,
                        extra=("--extra_plugins", PLUGIN_PATH))
    assert _once_per_call(spans["parallel_agent"]) == dict.fromkeys(CALL_IDS, 1), log[-3000:]


# --- in process: the wrap point, its order rules and uninstrument() ---------------


@pytest.fixture
def instrumented(telemetry: Telemetry) -> Iterator[AdkTaskTelemetryInstrumentor]:
    inst = AdkTaskTelemetryInstrumentor()
    inst.instrument(tracer_provider=telemetry.tracer_provider,
                    meter_provider=telemetry.meter_provider)
    try:
        yield inst
    finally:
        inst.uninstrument()


class _Other(BasePlugin):
    pass


def _runner(plugins: list[BasePlugin], name: str = "zc") -> Runner:
    agent = LlmAgent(name="a", model=ScriptedLlm([[text("hi")]]))
    return Runner(app=App(name=name, root_agent=agent, plugins=plugins),
                  session_service=InMemorySessionService())


def test_uninstrument_restores_exactly_what_was_wrapped(telemetry: Telemetry) -> None:
    before = {name: vars(Runner)[name] for name in ("__init__",)}
    inst = AdkTaskTelemetryInstrumentor()
    inst.instrument(tracer_provider=telemetry.tracer_provider,
                    meter_provider=telemetry.meter_provider)
    try:
        assert all(vars(Runner)[n] is not f for n, f in before.items())
        assert isinstance(_runner([]).plugin_manager.plugins[0], TaskTelemetryPlugin)
    finally:
        inst.uninstrument()
    assert {name: vars(Runner)[name] for name in before} == before
    assert _runner([]).plugin_manager.plugins == []


def test_the_plugin_goes_first_and_an_existing_one_is_moved_first(
        instrumented: AdkTaskTelemetryInstrumentor) -> None:
    other = _Other(name="other")
    plugins = _runner([other]).plugin_manager.plugins
    assert plugins == [instrumented.plugin, other]
    mine = TaskTelemetryPlugin(name="mine")
    plugins = _runner([_Other(name="x"), mine]).plugin_manager.plugins
    assert plugins[0] is mine and len(plugins) == 2  # moved, not doubled
    deprecated = Runner(app_name="zc", agent=LlmAgent(name="a", model=ScriptedLlm()),
                        plugins=[other], session_service=InMemorySessionService())
    assert deprecated.plugin_manager.plugins == [instrumented.plugin, other]


async def test_agent_tool_children_share_the_parent_plugin_no_duplicates(
        instrumented: AdkTaskTelemetryInstrumentor, telemetry: Telemetry) -> None:
    run = await run_scenario("agent_tool", [])
    await run.probe.cleanup()
    by_call = telemetry.by_call()  # asserts one span per call id
    assert len(by_call) == 3, sorted(by_call)
    assert instrumented.plugin is not None and instrumented.plugin.state().runs == 0


async def test_closing_one_runner_leaves_the_runs_of_another_alone(
        instrumented: AdkTaskTelemetryInstrumentor, telemetry: Telemetry) -> None:
    """The plugin is shared: closing runner B must not sweep A's run (only the last
    runner's close does)."""
    release = asyncio.Event()

    async def wait_here() -> str:
        await release.wait()
        return "ok"

    agent = LlmAgent(name="a", model=ScriptedLlm([[call("wait_here", "call-w")],
                                                   [text("done")]]), tools=[wait_here])
    runner_a = Runner(app=App(name="zc", root_agent=agent),
                      session_service=InMemorySessionService())
    runner_b = _runner([])
    session = await runner_a.session_service.create_session(app_name="zc", user_id="u")

    async def consume() -> None:
        msg = types.Content(role="user", parts=[types.Part(text="go")])
        async for _ in runner_a.run_async(user_id="u", session_id=session.id,
                                          new_message=msg):
            pass

    task = asyncio.create_task(consume())
    plugin = instrumented.plugin
    assert plugin is not None
    for _ in range(200):
        if plugin.state().open:
            break
        await asyncio.sleep(0.01)
    assert plugin.state().open == 1
    await runner_b.close()
    assert plugin.state().orphans == 0 and plugin.state().open == 1
    release.set()
    await asyncio.wait_for(task, 10)
    await runner_a.close()
    span = telemetry.by_call()["call-w"]
    assert (span.attributes or {})["adk.tool_task.outcome"] == "ok"
    assert not [e for e in span.events if e.name == "orphaned_task"]


async def test_an_orphan_is_logged_in_its_span_context(
        instrumented: AdkTaskTelemetryInstrumentor, telemetry: Telemetry) -> None:
    """The orphan's WARNING record reaches a logs bridge inside the orphaned task's span
    (what links the log line to the trace in a backend), once per orphan."""
    run = await run_scenario("live_stubborn_tool", [])  # orphaned on every ADK version
    try:
        assert run.probe.pending() == ["call-feed"]  # the ground truth: still running
        span = telemetry.by_call()["call-feed"]
        assert (span.attributes or {})[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.ORPHANED
        (record,) = telemetry.log_records("orphaned tool task:")
        assert (record.trace_id, record.span_id) == (span.context.trace_id,
                                                     span.context.span_id)
        assert record.severity_number == SeverityNumber.WARN
        assert "tool=stubborn_feed call_id=call-feed" in str(record.body)
        # The event's attributes as the record's (what a logs store filters on).
        attrs = dict(record.attributes or {})
        assert attrs[sc.GEN_AI_TOOL_CALL_ID] == "call-feed"
        assert attrs[sc.GEN_AI_TOOL_NAME] == "stubborn_feed"
        assert attrs[sc.ADK_INVOCATION_ID] == span.attributes[sc.ADK_INVOCATION_ID]
        assert sc.CODE_STACKTRACE not in attrs
    finally:
        await run.probe.cleanup()


def test_the_instrumentor_requires_the_adk_that_pyproject_requires() -> None:
    """The oldest supported google-adk is one fact: adk_compat owns it, the instrumentor's
    dependency check reads it, and pyproject.toml (which cannot import it) says the same."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    from adk_task_telemetry.instrumentation import AdkTaskTelemetryInstrumentor

    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library "
                                  "from Python 3.11 on")

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml")
                              .read_text())
    (declared,) = [Requirement(r) for r in pyproject["project"]["dependencies"]
                   if Requirement(r).name == "google-adk"]
    (checked,) = [Requirement(r) for r in
                  AdkTaskTelemetryInstrumentor().instrumentation_dependencies()]
    wanted = SpecifierSet(f">={adk_compat.OLDEST_SUPPORTED_ADK}")
    assert declared.specifier == wanted and checked.specifier == wanted
