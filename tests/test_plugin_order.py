"""The plugin registered after another plugin that answers tool callbacks.

ADK stops at the first plugin that returns a value: registered after ADK's own
``ReflectAndRetryToolPlugin`` (or any plugin that answers ``on_tool_error_callback``),
ours never heard of a tool's error and reported the failed call ``ok``. The plugin
now moves itself first at its first run, says so once, and calls no other plugin's
callback twice; the tools record what really happened.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from adk_task_telemetry import TaskTelemetryPlugin, plugin_order
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.scenarios.model import ScriptedLlm, call, text

from .conftest import Telemetry

try:  # ADK's own error-answering plugin (from 1.16)
    from google.adk.plugins.reflect_retry_tool_plugin import ReflectAndRetryToolPlugin
except ImportError:  # older ADK: the test's own plugin below answers the same way
    ReflectAndRetryToolPlugin = None  # type: ignore[assignment,misc]


class Counting(BasePlugin):
    """Counts its callbacks per invocation; its before_run suspends (as one doing I/O
    would), so two runs' plugin loops interleave; it answers a tool error."""

    def __init__(self) -> None:
        super().__init__(name="counting_answers_errors")
        self.calls: Counter[tuple[str, str]] = Counter()

    async def before_run_callback(self, *, invocation_context: Any) -> None:
        self.calls["before_run", str(invocation_context.invocation_id)] += 1
        await asyncio.sleep(0)

    async def before_tool_callback(self, *, tool: Any, tool_args: Any,
                                   tool_context: Any) -> None:
        self.calls["before_tool", str(tool_context.invocation_id)] += 1

    async def on_tool_error_callback(self, *, tool: Any, tool_args: Any, tool_context: Any,
                                     error: Exception) -> dict[str, str]:
        self.calls["on_tool_error", str(tool_context.invocation_id)] += 1
        return {"error": "answered by the plugin"}


def _answering_plugins() -> list[Any]:
    out: list[Any] = [pytest.param(Counting, id="an_app_plugin")]
    if ReflectAndRetryToolPlugin is not None:
        out.append(pytest.param(ReflectAndRetryToolPlugin, id="ReflectAndRetryToolPlugin"))
    return out


class _CallsOnce(ScriptedLlm):
    """Calls the tool once per run, then says "done": by what the request holds, so
    concurrent runs of one agent each get the same turns."""

    async def generate_content_async(self, llm_request: Any, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1] if llm_request.contents else None
        answered = any(p.function_response for p in (last.parts or [])) if last else False
        part = text("done") if answered else call("flaky_lookup", "call-1", key="a")
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def _app(first: BasePlugin, ours: TaskTelemetryPlugin, raised: list[str]) -> Runner:
    async def flaky_lookup(key: str, tool_context: Any) -> dict[str, str]:
        """Looks a key up; the backend refuses."""
        raised.append(str(tool_context.function_call_id))
        raise ConnectionError("backend refused")

    agent = LlmAgent(name="agent", model=_CallsOnce(), instruction="scripted", tools=[flaky_lookup])
    return Runner(app=App(name="order_app", root_agent=agent, plugins=[first, ours]),
                  session_service=InMemorySessionService())


async def _run(runner: Runner) -> None:
    session = await runner.session_service.create_session(app_name="order_app", user_id="u")
    msg = types.Content(role="user", parts=[types.Part(text="go")])
    async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=msg):
        pass


@pytest.mark.parametrize("answering", _answering_plugins())
async def test_a_plugin_registered_after_one_that_answers_errors_still_sees_them(
        answering: type[BasePlugin], telemetry: Telemetry,
        caplog: pytest.LogCaptureFixture) -> None:
    ours, raised = telemetry.plugin(), []
    first = answering()
    runner = _app(first, ours, raised)
    with caplog.at_level(logging.INFO, logger=sc.LOGGER_NAME):
        await _run(runner)
        await _run(runner)
    assert raised == ["call-1", "call-1"]  # the tool raised in both runs
    spans = telemetry.tool_spans()
    assert len(spans) == 2
    for span in spans:
        attrs = span.attributes or {}
        # It raised, and a plugin's answer became the call's result.
        assert attrs[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.RECOVERED, attrs
        exceptions = [e for e in span.events if e.name == "exception"]
        assert [(e.attributes or {}).get("exception.type") for e in exceptions] == [
            "ConnectionError"], span.events
    assert runner.plugin_manager.plugins == [ours, first]
    lines = [r for r in caplog.records if "moved itself first" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]  # once, not per run
    assert lines[0].levelno == logging.INFO and repr(first.name) in lines[0].getMessage()
    assert ours.state().runs == 0 and ours.internal_errors == 0


async def test_moving_first_calls_no_other_plugin_twice_in_concurrent_runs(
        telemetry: Telemetry) -> None:
    """Two runs of a new Runner start together; the plugin ahead suspends in its
    before_run, so both runs' plugin loops are in flight when ours moves."""
    ours, raised = telemetry.plugin(), []
    first = Counting()
    runner = _app(first, ours, raised)
    await asyncio.gather(_run(runner), _run(runner))
    invocations = {inv for (_cb, inv) in first.calls}
    assert len(invocations) == 2
    assert first.calls == Counter({(cb, inv): 1 for inv in invocations
                                   for cb in ("before_run", "before_tool", "on_tool_error")})
    outcomes = [(s.attributes or {})[sc.ADK_TOOL_TASK_OUTCOME] for s in telemetry.tool_spans()]
    assert outcomes == [sc.Outcome.RECOVERED] * 2 and raised == ["call-1"] * 2


async def test_registered_first_nothing_moves_and_nothing_is_logged(
        telemetry: Telemetry, caplog: pytest.LogCaptureFixture) -> None:
    ours, raised = telemetry.plugin(), []
    runner = _app(ours, Counting(), raised)  # ours first, as the README says
    before = runner.plugin_manager.plugins
    with caplog.at_level(logging.INFO, logger=sc.LOGGER_NAME):
        await _run(runner)
    assert runner.plugin_manager.plugins is before
    assert not [r for r in caplog.records if "TaskTelemetryPlugin" in r.getMessage()]
    [span] = telemetry.tool_spans()
    assert (span.attributes or {})[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.RECOVERED


class _FixedOrder:
    """A plugin manager whose list cannot be replaced (no ADK has one today): the
    plugin must then say what it cannot see instead of staying silent."""

    def __init__(self, plugins: list[Any]) -> None:
        self._plugins = plugins

    @property
    def plugins(self) -> list[Any]:
        return self._plugins


class _Context:
    def __init__(self, manager: Any) -> None:
        self.plugin_manager = manager


def test_where_it_cannot_move_it_warns_once_naming_what_it_cannot_see(
        telemetry: Telemetry, caplog: pytest.LogCaptureFixture) -> None:
    ours, first = telemetry.plugin(), Counting()
    ctx = _Context(_FixedOrder([first, ours]))
    with caplog.at_level(logging.INFO, logger=sc.LOGGER_NAME):
        plugin_order.take_first_place(ours, ctx)
        plugin_order.take_first_place(ours, ctx)
    [record] = [r for r in caplog.records if "TaskTelemetryPlugin" in r.getMessage()]
    message = record.getMessage()
    assert record.levelno == logging.WARNING
    assert "'counting_answers_errors'" in message
    assert "on_tool_error_callback answered by 'counting_answers_errors'" in message
    assert "reported ok" in message and "before_tool_callback" in message
