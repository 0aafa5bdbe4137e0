"""Causes, reasons and call ids at the edges users reach (issue 23, items 1, 2 and 5;
issue 25's long-id callbacks).

Each test drives the real ADK Runner with the scripted model and the real OTel SDK,
and judges the plugin by what the tools themselves saw (a :class:`Probe` holds the
asyncio task of each call's body). Only public API and exported telemetry are read.

* A tool that raises ``CancelledError`` by itself (no one called ``cancel()`` on its
  task; ADK issue 7172 is this shape) has no cancel cause: none of the documented
  ones happened. ADK 2.x then cancels its working sibling because a call of the step
  ended badly: that sibling's cause is ``sibling_failed``, never ``caller_cancelled``.
* A function-call id is a join key: whole on the span and on the ``unanswered_call``
  event, however long, and the call's after_tool / on_tool_error are still its own.
* A caller that closes the stream before any tool ran cut the run: its unanswered
  calls say ``caller_cancelled`` on every version (2.x calls ``after_run`` then).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from opentelemetry.sdk.trace import ReadableSpan

from adk_task_telemetry import TaskTelemetryPlugin, TrackerState
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.scenarios import Probe, ScriptedLlm, call, text

from .conftest import Telemetry

APP = "edges"
USER = "user"


def _message() -> types.Content:
    return types.Content(role="user", parts=[types.Part(text="go")])


def _runner(plugin: TaskTelemetryPlugin, model: ScriptedLlm, tools: list[Any],
            *more: BasePlugin) -> Runner:
    agent = LlmAgent(name="clerk", model=model, instruction="scripted", tools=tools)
    return Runner(app=App(name=APP, root_agent=agent, plugins=[plugin, *more]),
                  session_service=InMemorySessionService())


async def _consume(runner: Runner) -> BaseException | None:
    """Reads the whole run; returns what it raised (the run's own failure)."""
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    try:
        async with contextlib.aclosing(runner.run_async(
                user_id=USER, session_id=str(session.id), new_message=_message())) as agen:
            async for _ in agen:
                pass
    except asyncio.CancelledError as e:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise  # this test's task was cancelled: not the run's own ending
        return e  # the run ended by a CancelledError a tool raised (ADK 1.x lets it out)
    except Exception as e:
        return e
    return None


def _cause(span: ReadableSpan) -> Any:
    events = [e for e in span.events if e.name == sc.EVENT_CANCELLED]
    assert len(events) == 1, f"{span.name}: {len(events)} cancelled events"
    return (events[0].attributes or {}).get(sc.ADK_TOOL_TASK_CANCEL_CAUSE)


def _outcome(span: ReadableSpan) -> Any:
    return (span.attributes or {}).get(sc.ADK_TOOL_TASK_OUTCOME)


def _unanswered(telemetry: Telemetry) -> dict[str, str]:
    """Call id -> reason of each ``unanswered_call`` event (one per call)."""
    out: dict[str, str] = {}
    for span in telemetry.spans.get_finished_spans():
        for e in span.events:
            if e.name == sc.EVENT_UNANSWERED_CALL:
                a = e.attributes or {}
                call_id = str(a[sc.GEN_AI_TOOL_CALL_ID])
                assert call_id not in out, f"{call_id} reported unanswered twice"
                out[call_id] = str(a[sc.ADK_TOOL_CALL_UNANSWERED_REASON])
    return out


def _duration_causes(telemetry: Telemetry) -> set[Any]:
    return {(p.attributes or {}).get(sc.ADK_TOOL_TASK_CANCEL_CAUSE)
            for p in telemetry.metrics().get(sc.METRIC_DURATION, [])
            if (p.attributes or {}).get(sc.ADK_TOOL_TASK_OUTCOME) == sc.Outcome.CANCELLED}


def _assert_idle(plugin: TaskTelemetryPlugin) -> None:
    assert plugin.state() == TrackerState(0, 0, 0)
    assert plugin.internal_errors == 0


# --- 1. a tool that cancels itself ------------------------------------------------


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Python 3.10 has no Task.cancelling(): "
                    "a task that cancelled itself cannot be told from one cancelled (documented)")
async def test_a_tool_that_cancels_itself_names_no_cause_and_its_sibling_failed(
        telemetry: Telemetry) -> None:
    """Call A raises CancelledError by itself (a client library cancelling its own
    future) while its sibling B works; nobody cancels the caller.

    A's cancellation has none of the documented causes: its ``cancelled`` event and
    duration point carry no cause, and its unanswered reason is ``error`` (its tool
    raised and nothing answered). ADK 2.x cancels B because its sibling ended badly:
    ``sibling_failed``. ADK 1.x lets B run on past the run: an orphan. No record
    says ``caller_cancelled``: the caller did not cut anything.
    """
    probe = Probe()

    async def gives_up(tool_context: ToolContext) -> dict[str, str]:
        """Cancels itself: its library's future was cancelled under it."""
        probe.enter(tool_context)
        await asyncio.sleep(0.01)
        raise asyncio.CancelledError

    async def works(tool_context: ToolContext) -> dict[str, str]:
        """Works for a long while (cleanup() cancels it)."""
        probe.enter(tool_context)
        await asyncio.sleep(30.0)
        return {"status": "done"}

    plugin = telemetry.plugin()
    model = ScriptedLlm(turns=[[call("gives_up", "call-a"), call("works", "call-b")],
                               [text("done")]])
    runner = _runner(plugin, model, [gives_up, works])
    try:
        await _consume(runner)
        b_ran_on = not probe.tasks["call-b"].done()  # ADK 1.x: B outlives its run
        # B's span ends when the plugin reports it (an orphan the moment the run
        # ends: nothing cancelled it) or when B ends: wait for it, a positive signal.
        deadline = asyncio.get_running_loop().time() + 10.0
        while "call-b" not in telemetry.by_call() and \
                asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
    finally:
        await probe.cleanup()
        await runner.close()
    assert probe.tasks["call-a"].cancelled()
    spans = telemetry.by_call()
    assert _outcome(spans["call-a"]) == sc.Outcome.CANCELLED
    assert _cause(spans["call-a"]) is None
    if b_ran_on:
        assert _outcome(spans["call-b"]) == sc.Outcome.ORPHANED
    else:
        assert _outcome(spans["call-b"]) == sc.Outcome.CANCELLED
        assert _cause(spans["call-b"]) == sc.CancelCause.SIBLING_FAILED
    assert sc.CancelCause.CALLER_CANCELLED not in _duration_causes(telemetry)
    reasons = _unanswered(telemetry)
    assert reasons == {"call-a": sc.UnansweredReason.ERROR,
                       "call-b": (sc.UnansweredReason.ORPHANED if b_ran_on
                                  else sc.CancelCause.SIBLING_FAILED)}
    _assert_idle(plugin)


# --- 2. call ids longer than 256 characters -----------------------------------------

_LONG_ID = "call-" + "x" * 300 + "-end"


async def test_a_long_call_id_is_whole_on_the_span_and_on_the_unanswered_call(
        telemetry: Telemetry) -> None:
    """One call with a 309-character id whose tool raises: the span carries the id the
    model gave (the join key to the session's call), and the ``unanswered_call`` event
    of that call says ``error``, as with a short id (one call: no sibling failed)."""
    probe = Probe()

    async def breaks(tool_context: ToolContext) -> dict[str, str]:
        """Raises."""
        probe.enter(tool_context)
        raise ValueError("the backend said no")

    plugin = telemetry.plugin()
    runner = _runner(plugin, ScriptedLlm(turns=[[call("breaks", _LONG_ID)], [text("x")]]),
                     [breaks])
    try:
        error = await _consume(runner)
    finally:
        await probe.cleanup()
        await runner.close()
    assert isinstance(error, ValueError)
    assert list(probe.tasks) == [_LONG_ID]  # ADK handed the tool the whole id
    span = telemetry.by_call()[_LONG_ID]
    assert _outcome(span) == sc.Outcome.ERROR
    assert _unanswered(telemetry) == {_LONG_ID: sc.UnansweredReason.ERROR}
    _assert_idle(plugin)


class _Recover(BasePlugin):
    """An application's error policy: answers for a ConnectionError."""

    def __init__(self) -> None:
        super().__init__(name="recover")

    async def on_tool_error_callback(self, *, tool: Any, tool_args: Any, tool_context: Any,
                                     error: Exception) -> dict[str, str] | None:
        if isinstance(error, ConnectionError):
            return {"error": "temporarily unavailable"}
        return None


async def test_a_long_call_id_keeps_its_callbacks(telemetry: Telemetry) -> None:
    """Issue 25: with ids longer than 256 characters (and odd ones beside them), each
    call's on_tool_error and after_tool are still its own: a flaky call a callback
    answers for is ``recovered`` with its captured result, an ok one carries its
    result, each span under the id the model gave."""
    probe = Probe()

    async def flaky(tool_context: ToolContext) -> dict[str, str]:
        """Raises an error a callback answers for."""
        probe.enter(tool_context)
        await asyncio.sleep(0.01)
        raise ConnectionError("refused")

    async def fine(tool_context: ToolContext) -> dict[str, str]:
        """Returns."""
        probe.enter(tool_context)
        await asyncio.sleep(0.02)
        return {"status": "fine"}

    ids = {"flaky": _LONG_ID, "fine": "é " + "y" * 400, "fine2": "z#2", "fine3": "z"}
    plugin = telemetry.plugin(capture_arguments=True)
    model = ScriptedLlm(turns=[[call("flaky", ids["flaky"]), call("fine", ids["fine"]),
                                call("fine", ids["fine2"]), call("fine", ids["fine3"])],
                               [text("done")]])
    runner = _runner(plugin, model, [flaky, fine], _Recover())
    try:
        assert await _consume(runner) is None
    finally:
        await probe.cleanup()
        await runner.close()
    spans = telemetry.by_call()
    assert set(spans) == set(ids.values())
    assert _outcome(spans[ids["flaky"]]) == sc.Outcome.RECOVERED
    assert "temporarily unavailable" in str(
        (spans[ids["flaky"]].attributes or {})[sc.GEN_AI_TOOL_CALL_RESULT])
    for key in ("fine", "fine2", "fine3"):
        attrs = spans[ids[key]].attributes or {}
        assert attrs[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.OK
        assert "fine" in str(attrs[sc.GEN_AI_TOOL_CALL_RESULT])
    assert _unanswered(telemetry) == {}
    _assert_idle(plugin)


# --- 5. the caller closes the stream before any tool ran ------------------------------


async def _close_at_first_call(runner: Runner, *, explicit: bool) -> list[str]:
    """A consumer that returns from ``async for`` on the first event holding a function
    call: closing the generator (``aclose``), or abandoning it to the garbage
    collector (asyncio's finaliser closes it). Returns the calls it saw."""
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    agen = runner.run_async(user_id=USER, session_id=str(session.id), new_message=_message())
    seen: list[str] = []

    async def read() -> None:
        async for event in agen:
            calls = event.get_function_calls()
            if calls:
                seen.extend(str(c.id) for c in calls)
                return

    if explicit:
        async with contextlib.aclosing(agen):
            await read()
    else:
        await read()
        del agen
        gc.collect()  # the finaliser schedules aclose() on the loop
    return seen


async def _wait_for_unanswered(telemetry: Telemetry, n: int) -> dict[str, str]:
    """The ledger reports when ADK's closing of the run reaches the plugin."""
    for _ in range(2000):
        reasons = _unanswered(telemetry)
        if len(reasons) >= n:
            return reasons
        await asyncio.sleep(0.005)
    return _unanswered(telemetry)


async def _closed_early(telemetry: Telemetry, *, explicit: bool) -> None:
    probe = Probe()

    async def lookup(tool_context: ToolContext) -> dict[str, str]:
        """Looks something up."""
        probe.enter(tool_context)
        await asyncio.sleep(0.05)
        return {"status": "found"}

    plugin = telemetry.plugin()
    model = ScriptedLlm(turns=[[call("lookup", "call-1"), call("lookup", "call-2")],
                               [text("done")]])
    runner = _runner(plugin, model, [lookup])
    try:
        seen = await _close_at_first_call(runner, explicit=explicit)
        assert seen == ["call-1", "call-2"]
        reasons = await _wait_for_unanswered(telemetry, 2)
    finally:
        await probe.cleanup()
        await runner.close()
    assert reasons == {"call-1": sc.CancelCause.CALLER_CANCELLED,
                       "call-2": sc.CancelCause.CALLER_CANCELLED}
    _assert_idle(plugin)


async def test_closing_the_stream_before_any_tool_ran_is_the_caller_cutting_the_run(
        telemetry: Telemetry) -> None:
    """``aclose()`` on the first event holding a function call: the calls never got an
    answer because the caller cut the run (ADK 2.x calls after_run for it)."""
    await _closed_early(telemetry, explicit=True)


async def test_abandoning_the_stream_before_any_tool_ran_is_the_caller_cutting_the_run(
        telemetry: Telemetry) -> None:
    """The same consumer without ``aclosing``: asyncio's finaliser closes the abandoned
    generator, and that too is the caller cutting the run."""
    await _closed_early(telemetry, explicit=False)
