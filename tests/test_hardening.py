"""Load, faults, bad input, privacy, strict mode and opt-in orphan cancellation."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider

from adk_task_telemetry import TaskTelemetryPlugin, TrackerState
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.scenarios import run_concurrent_mixed, run_scenario
from adk_task_telemetry.signals.capture import REDACTED

from .conftest import Telemetry


def _has_workflows() -> bool:
    from adk_task_telemetry.adk_compat import HAS_NODE_RUNTIME
    return HAS_NODE_RUNTIME


def _sum(points: list[Any]) -> float:
    return sum(p.value for p in points)


# --- load -------------------------------------------------------------------------


async def test_thousand_concurrent_runs_with_mixed_outcomes(telemetry: Telemetry) -> None:
    plugin = telemetry.plugin()
    results = await run_concurrent_mixed([plugin], runs=1000, calls=10, fail_every=4)
    failed = sum(isinstance(r, ValueError) for r in results)
    assert failed == 250
    spans = telemetry.tool_spans()
    ids = [str((s.attributes or {})[sc.GEN_AI_TOOL_CALL_ID]) for s in spans]
    assert len(ids) == 10_000 and len(set(ids)) == 10_000  # every span ended exactly once
    outcomes: dict[str, int] = {}
    for s in spans:
        o = str((s.attributes or {})[sc.ADK_TOOL_TASK_OUTCOME])
        outcomes[o] = outcomes.get(o, 0) + 1
    assert outcomes.get("error") == 250
    assert outcomes.get("orphaned", 0) == 0
    # Siblings of a failing call finish or are cancelled; all of them are accounted for.
    assert outcomes.get("ok", 0) + outcomes.get("cancelled", 0) == 10_000 - 250
    m = telemetry.metrics()
    assert _sum(m[sc.METRIC_STARTED]) == 10_000
    assert sum(p.count for p in m[sc.METRIC_DURATION]) == 10_000
    assert _sum(m[sc.METRIC_ACTIVE]) == 0
    assert plugin.open_tasks() == []
    # ADK 1.x gives no signal at all when a run_async fails: its record goes when
    # ADK lets go of the run (here: the exceptions we kept hold its frames).
    del results
    for _ in range(50):  # the loop closes ADK's abandoned generators, then they go
        gc.collect()
        await asyncio.sleep(0.01)
        if plugin.state() == TrackerState(0, 0, 0):
            break
    assert plugin.state() == TrackerState(0, 0, 0)
    assert plugin.internal_errors == 0


# --- faults -----------------------------------------------------------------------


class _BrokenMeterProvider(metrics.MeterProvider):
    """An application's meter provider whose instruments all raise."""

    def get_meter(self, name: str, version: str | None = None, schema_url: str | None = None,
                  attributes: Any = None) -> metrics.Meter:
        real = MeterProvider().get_meter(name, version)

        class Broken:
            def add(self, *a: Any, **k: Any) -> None:
                raise RuntimeError("meter down")

            record = add

        class M:
            def __getattr__(self, attr: str) -> Any:
                if attr.startswith("create_"):
                    return lambda *a, **k: Broken()
                return getattr(real, attr)

        return M()  # type: ignore[return-value]


async def test_meter_that_raises_does_not_break_the_run(telemetry: Telemetry) -> None:
    plugin = TaskTelemetryPlugin(tracer_provider=telemetry.tracer_provider,
                                 meter_provider=_BrokenMeterProvider())
    run = await run_scenario("parallel_calls", [plugin])
    await run.probe.cleanup()
    assert run.error is None
    assert sorted(run.probe.tasks) == ["call-1", "call-2", "call-3"]
    assert plugin.internal_errors > 0  # counted and logged, not raised


async def test_max_open_tasks_overflow(telemetry: Telemetry,
                                       caplog: pytest.LogCaptureFixture) -> None:
    plugin = telemetry.plugin(max_open_tasks=2)
    run = await run_scenario("parallel_calls", [plugin])
    await run.probe.cleanup()
    assert run.error is None
    assert len(telemetry.tool_spans()) == 2
    m = telemetry.metrics()
    assert _sum(m[sc.METRIC_OVERFLOW]) == 1
    assert any("max_open_tasks" in r.getMessage() for r in caplog.records)
    assert plugin.open_tasks() == []


SHUTDOWN_SCRIPT = textwrap.dedent("""
    import asyncio, json, sys
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.metrics import MeterProvider

    class Out(SpanExporter):
        def export(self, spans):
            for s in spans:
                if s.name.startswith("tool_task"):
                    print(json.dumps({"call": s.attributes["gen_ai.tool.call.id"],
                        "outcome": s.attributes.get("adk.tool_task.outcome"),
                        "events": [[e.name, dict(e.attributes)] for e in s.events
                                   if e.name == "orphaned_task"]}), flush=True)
            return SpanExportResult.SUCCESS

    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(Out()))
    from adk_task_telemetry import TaskTelemetryPlugin
    from adk_task_telemetry.testing import (
        Harness, Probe, ScenarioRun, call, scenario_tools, scripted_agent)

    plugin = TaskTelemetryPlugin(tracer_provider=tp, meter_provider=MeterProvider())

    async def start():
        run = ScenarioRun("exit", Probe())
        h = Harness([plugin], run.probe, run)
        t = scenario_tools(run.probe)
        agent = scripted_agent("clerk", [[call("slow_search", "call-inflight", query="x")]],
                               [t["slow_search"]])
        asyncio.ensure_future(h.run_async(agent))
        await run.probe.wait_started("call-inflight")

    loop = asyncio.new_event_loop()
    loop.run_until_complete(start())
    print("exiting", flush=True)
    sys.exit(0)  # a run is still in flight
""")


def test_process_exit_reports_runs_in_flight(tmp_path: Any) -> None:
    script = tmp_path / "exit.py"
    script.write_text(SHUTDOWN_SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    assert "exiting" in out.stdout, out.stderr[-2000:]
    (span,) = lines
    assert span["call"] == "call-inflight" and span["outcome"] == "orphaned"
    (event,) = span["events"]
    assert event[1][sc.ADK_RUN_END_TRIGGER] == "shutdown"


# --- bad input --------------------------------------------------------------------


class _CustomTool:
    """Not a FunctionTool: a custom BaseTool-like object with odd attributes."""

    def __init__(self, name: Any) -> None:
        self.name = name
        self.is_long_running = False


def _ctx(invocation_id: Any, call_id: Any) -> Any:
    inv = SimpleNamespace(invocation_id=invocation_id, app_name="fuzz",
                          agent=SimpleNamespace(name="fuzzer"),
                          session=SimpleNamespace(id="s-1"), live_request_queue=None)
    return SimpleNamespace(_invocation_context=inv, function_call_id=call_id)


names = st.one_of(st.none(), st.text(max_size=300), st.integers())
ids = st.one_of(st.none(), st.just(""), st.sampled_from(["c-1", "c-2"]), st.text(max_size=50))
args = st.recursive(st.one_of(st.none(), st.integers(), st.text(max_size=20), st.binary(
    max_size=8), st.floats(allow_nan=True)), lambda c: st.lists(c, max_size=3) | st.dictionaries(
    st.text(max_size=8), c, max_size=3), max_leaves=8)
steps = st.lists(st.tuples(
    st.sampled_from(["before_run", "before_tool", "after_tool", "error", "after_run", "close"]),
    st.sampled_from(["e-1", "e-2", None]), ids, names, args), max_size=25)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps, capture=st.booleans())
def test_fuzz_callbacks_never_raise_or_answer(steps: list[Any], capture: bool) -> None:
    async def go() -> None:
        plugin = TaskTelemetryPlugin(capture_arguments=capture, meter_provider=MeterProvider())
        # The callbacks run in a task of their own, as a caller's request would: once
        # it is over, close() knows those runs are no longer running.
        await asyncio.get_running_loop().create_task(drive(plugin), context=contextvars.Context())
        # The runner's close comes from outside any tool task.
        await asyncio.get_running_loop().create_task(plugin.close(), context=contextvars.Context())
        assert [t for t in plugin.open_tasks() if not t.orphaned] == []
        assert plugin.state().runs == 0

    async def drive(plugin: TaskTelemetryPlugin) -> None:
        for step, inv, call_id, name, arg in steps:
            tool = _CustomTool(name)
            tc = _ctx(inv, call_id)
            if step == "before_run":
                r = await plugin.before_run_callback(invocation_context=tc._invocation_context)
            elif step == "before_tool":
                r = await plugin.before_tool_callback(tool=tool, tool_args=arg, tool_context=tc)
            elif step == "after_tool":
                r = await plugin.after_tool_callback(tool=tool, tool_args=arg, tool_context=tc,
                                                     result=arg)
            elif step == "error":
                r = await plugin.on_tool_error_callback(tool=tool, tool_args=arg,
                                                        tool_context=tc, error=ValueError("x"))
            elif step == "after_run":
                r = await plugin.after_run_callback(invocation_context=tc._invocation_context)
            else:
                r = await plugin.close()
            assert r is None
    asyncio.run(go())


# --- privacy ----------------------------------------------------------------------

SECRET = "hunter2-SECRET-4111111111111111"


async def _run_with_secret(telemetry: Telemetry, plugin: TaskTelemetryPlugin) -> str:
    """Runs one call whose arguments hold a secret; returns everything we exported."""
    from google.adk.agents import LlmAgent

    from adk_task_telemetry.scenarios import ScriptedLlm, call
    from adk_task_telemetry.scenarios.library import Harness, Probe, ScenarioRun

    async def pay(card_number: str, note: str) -> dict[str, str]:
        """Charges a card."""
        return {"status": "paid", "echo": note}

    run = ScenarioRun("secret", Probe())
    h = Harness([plugin], run.probe, run)
    await h.run_async(LlmAgent(name="cashier", model=ScriptedLlm(turns=[[call(
        "pay", "call-pay", card_number=SECRET, note=f"note {SECRET} " + "x" * 5000)]]),
        instruction="scripted", tools=[pay]))
    ours = [s for s in telemetry.spans.get_finished_spans()
            if s.instrumentation_scope is not None
            and s.instrumentation_scope.name == sc.SCOPE_NAME]
    assert ours
    return "\n".join(s.to_json() for s in ours) + json.dumps(
        [[dict(p.attributes) for p in pts] for pts in telemetry.metrics().values()])


async def test_secret_in_arguments_reaches_no_exporter_by_default(
        telemetry: Telemetry, caplog: pytest.LogCaptureFixture) -> None:
    exported = await _run_with_secret(telemetry, telemetry.plugin())
    assert SECRET not in exported
    assert sc.GEN_AI_TOOL_CALL_ARGUMENTS not in exported
    assert all(SECRET not in r.getMessage() for r in caplog.records
               if r.name.startswith("adk_task_telemetry"))


async def test_capture_arguments_is_redacted_and_truncated(telemetry: Telemetry) -> None:
    plugin = telemetry.plugin(capture_arguments=True, max_argument_length=200)
    await _run_with_secret(telemetry, plugin)
    (span,) = telemetry.tool_spans()
    attrs = dict(span.attributes or {})
    captured = str(attrs[sc.GEN_AI_TOOL_CALL_ARGUMENTS])
    assert len(captured) <= 200 and captured.endswith("\u2026")
    assert json.dumps(REDACTED) in captured  # card_number masked by the default redactor
    assert "4111111111111111" not in captured.split('"note"')[0]
    result = str(attrs[sc.GEN_AI_TOOL_CALL_RESULT])
    assert result.startswith('{"echo": "note ') and len(result) <= 200


async def test_redaction_hook_can_be_replaced(telemetry: Telemetry) -> None:
    seen: list[str] = []

    def redact(tool: str, value: Any) -> Any:
        seen.append(tool)
        return {"kept": sorted(value)} if isinstance(value, dict) else None

    plugin = telemetry.plugin(capture_arguments=True, redact=redact)
    exported = await _run_with_secret(telemetry, plugin)
    assert SECRET not in exported
    (span,) = telemetry.tool_spans()
    attrs = dict(span.attributes or {})
    assert json.loads(str(attrs[sc.GEN_AI_TOOL_CALL_ARGUMENTS])) == {
        "kept": ["card_number", "note"]}
    assert "pay" in seen


# --- strict mode and cancel_orphans -----------------------------------------------


async def test_fire_and_forget_invisible_without_strict_mode(telemetry: Telemetry) -> None:
    plugin = telemetry.plugin()
    run = await run_scenario("fire_and_forget", [plugin])
    try:
        assert run.probe.pending() == ["call-upload/upload"]  # it really leaked
        assert [str((s.attributes or {})[sc.ADK_TOOL_TASK_OUTCOME])
                for s in telemetry.tool_spans()] == ["ok"]
        assert plugin.open_tasks() == []
    finally:
        await run.probe.cleanup()


async def test_strict_mode_reports_spawned_task_as_orphan_of_its_call(
        telemetry: Telemetry) -> None:
    plugin = telemetry.plugin(track_spawned_tasks=True)
    run = await run_scenario("fire_and_forget", [plugin])
    try:
        spans = telemetry.tool_spans()
        (spawned,) = [s for s in spans if (s.attributes or {}).get(sc.ADK_TOOL_TASK_SPAWNED)]
        (call_span,) = [s for s in spans if s is not spawned]
        attrs = dict(spawned.attributes or {})
        assert attrs[sc.GEN_AI_TOOL_CALL_ID] == "call-upload"
        assert attrs[sc.ADK_TOOL_TASK_OUTCOME] == "orphaned"
        assert spawned.parent is not None
        assert spawned.parent.span_id == call_span.context.span_id
        (event,) = [e for e in spawned.events if e.name == sc.EVENT_ORPHANED_TASK]
        assert "upload" in str((event.attributes or {})[sc.CODE_STACKTRACE])
        assert run.probe.pending() == ["call-upload/upload"]
        (open_task,) = plugin.open_tasks()
        assert open_task.orphaned and open_task.call_id == "call-upload"
        m = telemetry.metrics()
        assert _sum(m[sc.METRIC_ORPHANED]) == 1
        assert _sum(m[sc.METRIC_STARTED]) == sum(p.count for p in m[sc.METRIC_DURATION]) + 1
    finally:
        await run.probe.cleanup()
    await asyncio.sleep(0)
    assert plugin.open_tasks() == []


async def test_cancel_orphans_cancels_spawned_task(telemetry: Telemetry) -> None:
    plugin = telemetry.plugin(track_spawned_tasks=True, cancel_orphans=True)
    run = await run_scenario("fire_and_forget", [plugin])
    try:
        task = run.probe.tasks["call-upload/upload"]
        # The positive signal: the spawned task ended (it sleeps 30 s unless cancelled).
        await asyncio.wait([task], timeout=10)
        assert task.cancelled()
        (spawned,) = [s for s in telemetry.tool_spans()
                      if (s.attributes or {}).get(sc.ADK_TOOL_TASK_SPAWNED)]
        (cancel,) = [e for e in spawned.events if e.name == sc.EVENT_CANCELLED]
        assert (cancel.attributes or {})[sc.ADK_TOOL_TASK_CANCEL_CAUSE] == "orphan_cancelled"
        (life,) = telemetry.metrics()[sc.METRIC_ORPHAN_LIFETIME]
        assert life.attributes[sc.ADK_TOOL_TASK_OUTCOME] == "cancelled"
        assert plugin.open_tasks() == []
    finally:
        await run.probe.cleanup()


async def test_cancel_orphans_on_the_seed_bug(telemetry: Telemetry) -> None:
    plugin = telemetry.plugin(cancel_orphans=True)
    run = await run_scenario("live_stubborn_tool", [plugin])
    try:
        span = telemetry.by_call()["call-feed"]
        names = [e.name for e in span.events]
        assert names[-2:] == [sc.EVENT_ORPHANED_TASK, sc.EVENT_CANCELLED]
        # This tool ignores cancellation: it is still running, and still counted.
        await asyncio.sleep(0.05)
        assert run.probe.pending() == ["call-feed"]
        assert _sum(telemetry.metrics()[sc.METRIC_ORPHANS_ALIVE]) == 1
    finally:
        await run.probe.cleanup()
    await asyncio.sleep(0)
    assert _sum(telemetry.metrics()[sc.METRIC_ORPHANS_ALIVE]) == 0


async def test_strict_mode_chains_an_existing_task_factory(telemetry: Telemetry) -> None:
    loop = asyncio.get_running_loop()
    made: list[str] = []
    previous = loop.get_task_factory()

    def app_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> Any:
        made.append(getattr(coro, "__qualname__", "?"))
        return asyncio.Task(coro, loop=loop, **kw)

    loop.set_task_factory(app_factory)
    try:
        plugin = telemetry.plugin(track_spawned_tasks=True)
        run = await run_scenario("fire_and_forget", [plugin])
        await run.probe.cleanup()
        assert any("upload" in m for m in made)  # the application's factory still runs
        assert any((s.attributes or {}).get(sc.ADK_TOOL_TASK_SPAWNED)
                   for s in telemetry.tool_spans())
    finally:
        loop.set_task_factory(previous)


def test_strict_mode_under_uvloop() -> None:
    import uvloop  # a dev dependency: strict mode must work on it
    code = textwrap.dedent("""
        import asyncio, uvloop
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from adk_task_telemetry import TaskTelemetryPlugin
        from adk_task_telemetry.scenarios import run_scenario
        exp = InMemorySpanExporter(); tp = TracerProvider()
        tp.add_span_processor(SimpleSpanProcessor(exp))
        async def main():
            p = TaskTelemetryPlugin(tracer_provider=tp, track_spawned_tasks=True)
            run = await run_scenario("fire_and_forget", [p])
            await run.probe.cleanup()
            print(type(asyncio.get_running_loop()).__module__,
                  sum(1 for s in exp.get_finished_spans()
                      if s.attributes.get("adk.tool_task.spawned")))
        uvloop.run(main())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split() == ["uvloop", "1"], out.stderr[-2000:]
    assert uvloop is not None


async def test_open_child_span_is_reported_at_run_end(
        telemetry: Telemetry, caplog: pytest.LogCaptureFixture) -> None:
    from adk_task_telemetry.signals.span_processors import OpenSpanProcessor

    processor = OpenSpanProcessor()
    telemetry.tracer_provider.add_span_processor(processor)
    try:
        run = await run_scenario("unended_span", [telemetry.plugin()])
        await run.probe.cleanup()
        (log,) = [r for r in caplog.records if "still open" in r.getMessage()]
        assert "GET /a" in log.getMessage()
        # On the run's own span (ADK's invocation span, where one is recording).
        (event,) = [e for s in telemetry.spans.get_finished_spans() for e in s.events
                    if e.name == sc.EVENT_OPEN_SPAN]
        assert (event.attributes or {})[sc.OPEN_SPAN_NAME] == "GET /a"
        assert (event.attributes or {})[sc.ADK_RUN_END_TRIGGER] == "after_run"
        # A clean run reports nothing.
        caplog.clear()
        run = await run_scenario("single_call", [telemetry.plugin()])
        assert not [r for r in caplog.records if "still open" in r.getMessage()]
    finally:
        processor.shutdown()


async def test_custom_base_tool_subclass_and_odd_arguments(telemetry: Telemetry) -> None:
    """A tool that is not a FunctionTool, called with odd argument types and a very
    long name, through the real Runner."""
    from google.adk.agents import LlmAgent
    from google.adk.tools.base_tool import BaseTool
    from google.genai import types

    from adk_task_telemetry.scenarios import ScriptedLlm, call
    from adk_task_telemetry.scenarios.library import Harness, Probe, ScenarioRun

    long_name = "lookup_" + "x" * 400

    class Lookup(BaseTool):
        def __init__(self) -> None:
            super().__init__(name=long_name, description="Looks things up.")

        def _get_declaration(self) -> types.FunctionDeclaration:
            return types.FunctionDeclaration(name=self.name, description=self.description)

        async def run_async(self, *, args: dict[str, Any], tool_context: Any) -> Any:
            return {"got": sorted(args)}

    plugin = telemetry.plugin(capture_arguments=True)
    run = ScenarioRun("custom", Probe())
    h = Harness([plugin], run.probe, run)
    await h.run_async(LlmAgent(name="clerk", instruction="scripted", tools=[Lookup()],
                               model=ScriptedLlm(turns=[[call(
                                   long_name, "call-odd", nested={"a": [1, None, 2.5]},
                                   flag=True, empty=[])]])))
    (span,) = telemetry.tool_spans()
    attrs = dict(span.attributes or {})
    assert attrs[sc.GEN_AI_TOOL_TYPE] == "Lookup"
    assert attrs[sc.ADK_TOOL_TASK_OUTCOME] == "ok"
    assert len(str(attrs[sc.GEN_AI_TOOL_NAME])) == 256  # long names are cut, not refused
    assert json.loads(str(attrs[sc.GEN_AI_TOOL_CALL_ARGUMENTS]))["nested"] == {
        "a": [1, None, 2.5]}
    assert plugin.internal_errors == 0


@pytest.mark.skipif(not _has_workflows(), reason="workflow nodes (NodeTool) exist only in "
                    "google-adk 2.x; this version has none to observe")
async def test_workflow_node_tool(telemetry: Telemetry) -> None:
    from google.adk.agents import LlmAgent
    from google.adk.tools._node_tool import NodeTool
    from google.adk.workflow._function_node import FunctionNode

    from adk_task_telemetry.scenarios import ScriptedLlm, call
    from adk_task_telemetry.scenarios.library import Harness, Probe, ScenarioRun

    async def double(x: int) -> int:
        """Doubles x."""
        return 2 * x

    tool = NodeTool(FunctionNode(func=double))
    run = ScenarioRun("node", Probe())
    h = Harness([telemetry.plugin()], run.probe, run)
    await h.run_async(LlmAgent(name="planner", instruction="scripted", tools=[tool],
                               model=ScriptedLlm(turns=[[call(tool.name, "call-node", x=3)]])))
    (span,) = telemetry.tool_spans()
    attrs = dict(span.attributes or {})
    assert (attrs[sc.GEN_AI_TOOL_TYPE], attrs[sc.ADK_TOOL_TASK_OUTCOME]) == ("NodeTool", "ok")
    responses = [p.function_response.response for e in run.events if e.content
                 and e.content.parts for p in e.content.parts if p.function_response]
    assert responses == [{"result": 6}]


async def test_invented_tool_names_do_not_explode_metric_cardinality(
        telemetry: Telemetry, caplog: pytest.LogCaptureFixture) -> None:
    """Past 2,000 attribute sets, metrics name the tool `_other`; spans keep the name."""
    plugin = telemetry.plugin()
    # Called from one task, as a run whose calls run in its own task: each call
    # then ends at its after_tool callback.
    await plugin.before_run_callback(invocation_context=_ctx("e-many", None)._invocation_context)
    for i in range(2005):
        tc = _ctx("e-many", f"c-{i}")
        await plugin.before_tool_callback(tool=_CustomTool(f"made_up_{i}"), tool_args={},
                                          tool_context=tc)
        await plugin.after_tool_callback(tool=_CustomTool(f"made_up_{i}"), tool_args={},
                                         tool_context=tc, result={})
    await plugin.after_run_callback(invocation_context=_ctx("e-many", None)._invocation_context)
    started = telemetry.metrics()[sc.METRIC_STARTED]
    assert len(started) == 2001
    (other,) = [p for p in started if p.attributes[sc.GEN_AI_TOOL_NAME] == "_other"]
    assert other.value == 5
    names = {str((s.attributes or {})[sc.GEN_AI_TOOL_NAME]) for s in telemetry.tool_spans()}
    assert "made_up_2004" in names and "_other" not in names
    assert {str((s.attributes or {})[sc.ADK_TOOL_TASK_OUTCOME])
            for s in telemetry.tool_spans()} == {"ok"}
    assert any("combinations" in r.getMessage() for r in caplog.records)
    assert plugin.internal_errors == 0
