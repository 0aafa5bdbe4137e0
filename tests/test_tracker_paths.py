"""The tracker's ways in that the scenarios do not take by themselves, on the real Runner.

A plugin that hears a run's tool calls without having heard its start (added to the
plugin manager while the run goes on) still tracks them: ``tool_started`` finds no
run, the plugin starts it from the call's invocation context (``RunUnknown``), and
the calls' spans carry what the run's start would have given them.
"""

from __future__ import annotations

from typing import Any

from google.adk.agents.invocation_context import InvocationContext

from adk_task_telemetry import TaskTelemetryPlugin, TrackerState
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.scenarios import run_scenario
from adk_task_telemetry.scenarios.library import APP_NAME

from .conftest import Telemetry


class _AddedMidRun(TaskTelemetryPlugin):
    """Our plugin as one added after the run started: it never hears ``before_run``."""

    async def before_run_callback(self, *, invocation_context: InvocationContext) -> None:
        return None


async def test_calls_of_a_run_never_seen_starting_are_tracked(telemetry: Telemetry) -> None:
    plugin = _AddedMidRun(tracer_provider=telemetry.tracer_provider,
                          meter_provider=telemetry.meter_provider)
    run = await run_scenario("parallel_calls", [plugin])
    await run.probe.cleanup()
    assert run.error is None
    spans = telemetry.by_call()
    assert sorted(spans) == ["call-1", "call-2", "call-3"]
    sessions = {sid for _runner, sid in run.sessions}
    for span in spans.values():
        attrs: dict[str, Any] = dict(span.attributes or {})
        assert attrs[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.OK
        assert attrs[sc.ADK_APP_NAME] == APP_NAME
        assert attrs[sc.GEN_AI_CONVERSATION_ID] in sessions
    assert plugin.internal_errors == 0
    assert plugin.state() == TrackerState(0, 0, 0)  # after_run ended the run it started
