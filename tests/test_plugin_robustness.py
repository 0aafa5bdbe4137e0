"""The plugin never breaks the run, never answers for ADK, and keeps nothing behind."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from adk_task_telemetry import TrackerState, testing
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.engine.records import RunRecord, TaskRecord
from adk_task_telemetry.scenarios import ScriptedLlm, call, run_parallel_calls, run_scenario

from .conftest import Telemetry


def _live_records() -> int:
    gc.collect()
    return sum(isinstance(o, (TaskRecord, RunRecord)) for o in gc.get_objects())


async def test_thousand_tasks_over_hundred_runs_leave_nothing(telemetry: Telemetry) -> None:
    plugin = telemetry.plugin()
    before = _live_records()
    ran = await run_parallel_calls([plugin], runs=100, calls=10)
    assert ran == 1000
    assert plugin.open_tasks() == []
    assert plugin.state() == TrackerState(0, 0, 0)
    # No record of any ended run is still reachable (records of earlier tests' runs
    # may be freed meanwhile: not more than before, not exactly as many).
    assert _live_records() <= before
    m = telemetry.metrics()
    assert sum(p.value for p in m[sc.METRIC_STARTED]) == 1000
    assert sum(p.count for p in m[sc.METRIC_DURATION]) == 1000
    assert sum(p.value for p in m[sc.METRIC_ACTIVE]) == 0
    assert len(telemetry.tool_spans()) == 1000
    assert plugin.internal_errors == 0


class _Recorder(BasePlugin):
    """Registered after ours: it sees a callback only if ours returned None."""

    def __init__(self) -> None:
        super().__init__(name="recorder")
        self.seen: list[str] = []

    async def before_run_callback(self, *, invocation_context: Any) -> None:
        self.seen.append("before_run")

    async def before_tool_callback(self, *, tool: Any, tool_args: Any, tool_context: Any
                                   ) -> None:
        self.seen.append(f"before_tool {tool_context.function_call_id}")

    async def after_tool_callback(self, *, tool: Any, tool_args: Any, tool_context: Any,
                                  result: Any) -> None:
        self.seen.append(f"after_tool {tool_context.function_call_id}")

    async def on_tool_error_callback(self, *, tool: Any, tool_args: Any, tool_context: Any,
                                     error: Exception) -> None:
        self.seen.append(f"on_tool_error {tool_context.function_call_id}")

    async def after_run_callback(self, *, invocation_context: Any) -> None:
        self.seen.append("after_run")


async def test_callbacks_return_none_so_later_plugins_run(telemetry: Telemetry) -> None:
    recorder = _Recorder()
    run = await run_scenario("parallel_calls", [telemetry.plugin(), recorder])
    await run.probe.cleanup()
    for cid in ("call-1", "call-2", "call-3"):
        assert f"before_tool {cid}" in recorder.seen
        assert f"after_tool {cid}" in recorder.seen
    assert recorder.seen[0] == "before_run" and recorder.seen[-1] == "after_run"
    recorder.seen.clear()
    run = await run_scenario("parallel_one_fails", [telemetry.plugin(), recorder])
    await run.probe.cleanup()
    assert "on_tool_error call-fail" in recorder.seen


class _Broken(Exception):
    pass


async def test_internal_error_in_plugin_does_not_break_the_run(
        telemetry: Telemetry, caplog: pytest.LogCaptureFixture) -> None:
    """Force a failure inside the plugin's own code: the run still completes."""
    plugin = telemetry.plugin()
    with testing.failing_tracker(_Broken("forced")):
        run = await run_scenario("parallel_calls", [plugin])
    await run.probe.cleanup()
    assert run.error is None
    assert sorted(run.probe.tasks) == ["call-1", "call-2", "call-3"]
    responses = [p.function_response for e in run.events if e.content and e.content.parts
                 for p in e.content.parts if p.function_response]
    assert len(responses) == 3  # the agent got every tool result
    assert plugin.internal_errors >= 4  # at least the three before_tool and after_run
    assert any("internal error" in r.getMessage() for r in caplog.records)


class _RaisingProcessor(SpanProcessor):
    """A user's span processor that fails on every span: a real SDK fault."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise RuntimeError("processor down")

    def on_end(self, span: Any) -> None:
        raise RuntimeError("processor down")


async def test_failing_span_processor_does_not_break_the_run(telemetry: Telemetry) -> None:
    tp = TracerProvider()
    tp.add_span_processor(_RaisingProcessor())
    from adk_task_telemetry import TaskTelemetryPlugin

    plugin = TaskTelemetryPlugin(tracer_provider=tp, meter_provider=telemetry.meter_provider)
    run = await run_scenario("parallel_one_fails", [plugin])
    await run.probe.cleanup()
    assert isinstance(run.error, ConnectionError)  # the tool's own error, nothing of ours
    assert plugin.open_tasks() == []
    assert plugin.state() == TrackerState(0, 0, 0)


async def test_old_runner_plugins_argument(telemetry: Telemetry) -> None:
    """Runner(plugins=[...]) is deprecated in 2.x but still works."""
    plugin = telemetry.plugin()

    async def lookup(order_id: str) -> dict[str, str]:
        """Looks up an order."""
        return {"order_id": order_id}

    agent = LlmAgent(name="clerk", model=ScriptedLlm([[call("lookup", "c-1", order_id="1")]]),
                     instruction="scripted", tools=[lookup])
    with pytest.warns(DeprecationWarning) if _deprecated_plugins() else _nothing():
        runner = Runner(app_name="old", agent=agent, plugins=[plugin],
                        session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="old", user_id="u")
    msg = types.Content(role="user", parts=[types.Part(text="go")])
    async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=msg):
        pass
    (span,) = telemetry.tool_spans()
    assert span.attributes is not None
    assert span.attributes[sc.ADK_TOOL_TASK_OUTCOME] == "ok"
    assert span.attributes[sc.ADK_APP_NAME] == "old"


def _deprecated_plugins() -> bool:
    from adk_task_telemetry.adk_compat import ADK_VERSION
    return ADK_VERSION >= (2, 0, 0)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: Any) -> None:
        return None


async def test_close_leaves_runs_in_progress_alone_and_is_idempotent(
        telemetry: Telemetry) -> None:
    """Runner.close() may call close() twice, or while a run is still going: a run in
    progress is not over (close does not stop it), so nothing is reported."""
    plugin = telemetry.plugin()
    probe = testing.Probe()

    async def slow(tool_context: Any = None) -> dict[str, str]:
        """Runs until the test cancels it."""
        probe.enter(tool_context, "slow")
        await asyncio.Event().wait()
        return {}

    agent = LlmAgent(name="clerk", model=ScriptedLlm([[call("slow", "c-slow")]]),
                     instruction="scripted", tools=[slow])
    from google.adk.apps import App
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]),
                    session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    msg = types.Content(role="user", parts=[types.Part(text="go")])

    async def consume() -> None:
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=msg):
            pass

    task = asyncio.create_task(consume())
    await probe.wait_started("c-slow", timeout=120)  # a bound for a stuck run only
    await plugin.close()
    await plugin.close()
    assert telemetry.tool_spans() == []
    (open_task,) = plugin.open_tasks()
    assert (open_task.call_id, open_task.orphaned) == ("c-slow", False)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.sleep(0)
    (span,) = telemetry.tool_spans()  # ended exactly once, by its own end
    assert span.attributes is not None
    assert span.attributes[sc.ADK_TOOL_TASK_OUTCOME] == "cancelled"
    assert not [e for e in span.events if e.name == sc.EVENT_ORPHANED_TASK]
    assert plugin.open_tasks() == []
    assert plugin.state() == TrackerState(0, 0, 0)


@pytest.mark.parametrize("name", ["seed_bug", "parallel_one_fails", "live_stop_streaming"])
async def test_two_plugin_instances_do_not_mix_their_records(telemetry: Telemetry,
                                                            name: str) -> None:
    """Two plugins (two telemetry pipelines) on one runner each see every task right."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from adk_task_telemetry import TaskTelemetryPlugin

    other_spans = InMemorySpanExporter()
    other_tp = TracerProvider()
    other_tp.add_span_processor(SimpleSpanProcessor(other_spans))
    first = telemetry.plugin()
    second = TaskTelemetryPlugin(name="second", tracer_provider=other_tp,
                                 meter_provider=telemetry.meter_provider)
    run = await run_scenario(name, [first, second])
    await run.probe.cleanup()

    def outcomes(spans: Any) -> dict[str, str]:
        return {str(s.attributes[sc.GEN_AI_TOOL_CALL_ID]): str(
            s.attributes[sc.ADK_TOOL_TASK_OUTCOME]) for s in spans
            if s.name.startswith("tool_task ")}

    from .test_plugin_lifecycle import EXPECTED

    mine = outcomes(telemetry.tool_spans())
    assert mine == outcomes(other_spans.get_finished_spans())
    assert mine == {c: o for c, (_, _, o, _) in EXPECTED[name].items()}


async def test_two_plugins_on_one_meter_provider_both_count(telemetry: Telemetry) -> None:
    """Two agents in one process (two plugins, one MeterProvider): the SDK keeps an
    observable instrument's first callbacks only, so both must be observed by one."""
    from google.adk.apps import App

    async def lookup(order_id: str) -> dict[str, str]:
        """Looks up an order."""
        return {"order_id": order_id}

    plugins = [telemetry.plugin(), telemetry.plugin()]
    for i, plugin in enumerate(plugins, start=1):
        agent = LlmAgent(name="clerk", model=ScriptedLlm([[call("lookup", f"c-{i}",
                                                                 order_id="1")]]),
                         instruction="scripted", tools=[lookup])
        runner = Runner(app=App(name=f"app{i}", root_agent=agent, plugins=[plugin]),
                        session_service=InMemorySessionService())
        session = await runner.session_service.create_session(app_name=f"app{i}", user_id="u")
        msg = types.Content(role="user", parts=[types.Part(text="go")])
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=msg):
            pass
        await runner.close()
    m = telemetry.metrics()
    for name in (sc.METRIC_STARTED, sc.METRIC_ACTIVE, sc.METRIC_DURATION):
        apps = sorted(str(p.attributes[sc.ADK_APP_NAME]) for p in m[name])
        assert apps == ["app1", "app2"], name
    assert sum(p.value for p in m[sc.METRIC_STARTED]) == 2
    assert sum(p.value for p in m[sc.METRIC_ACTIVE]) == 0
