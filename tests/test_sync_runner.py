"""ADK's synchronous ``Runner.run()``: the async run goes on in a thread of ADK's own.

Many scripts and notebooks use it. ADK runs ``run_async`` there under its own event
loop, so the plugin's callbacks run on that thread's loop. Three ways a caller uses
the generator: reads it to the end, stops after the first event (``gen.close()``),
raises inside its ``for`` loop while two slow calls run. What ADK does with the run
then differs (2.x cancels it, 1.x lets it finish in its thread): the tools record
how their bodies really ended, and the telemetry must say the same.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from adk_task_telemetry import TaskTelemetryPlugin, TrackerState
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.scenarios.model import ScriptedLlm, call, text

from .conftest import Telemetry

CALLS = ("call-a", "call-b")
#: A safety net only: every wait below ends on a signal long before it.
LIMIT = 30.0


class Slow:
    """Two calls of one slow tool; each waits until ``release`` is set (or it is
    cancelled) and records how its body ended: the oracle."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: dict[str, threading.Event] = {c: threading.Event() for c in CALLS}
        self.ended: dict[str, str] = {}
        self.lock = threading.Lock()

    async def slow_lookup(self, key: str, tool_context: Any) -> dict[str, str]:
        """Looks a key up slowly."""
        call_id = str(tool_context.function_call_id)
        self.started[call_id].set()
        try:
            while not self.release.is_set():
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            self._end(call_id, "cancelled")
            raise
        self._end(call_id, "ok")
        return {"key": key}

    def _end(self, call_id: str, how: str) -> None:
        with self.lock:
            self.ended[call_id] = how

    def wait_started(self) -> None:
        for call_id in CALLS:
            assert self.started[call_id].wait(LIMIT), f"{call_id} never started"

    def wait_ended(self, plugin: TaskTelemetryPlugin) -> None:
        """Until both bodies ended and the plugin holds nothing (ADK 1.x goes on in
        its thread after the caller left)."""
        deadline = time.monotonic() + LIMIT
        while time.monotonic() < deadline:
            with self.lock:
                both = len(self.ended) == len(CALLS)
            if both and plugin.state() == TrackerState(0, 0, 0):
                return
            time.sleep(0.01)
        raise AssertionError(f"bodies ended: {self.ended}; plugin holds {plugin.state()}")


@pytest.fixture
def slow() -> Iterator[Slow]:
    tools = Slow()
    yield tools
    tools.release.set()  # whatever the test did, nothing keeps running after it


def _runner(slow: Slow, plugin: TaskTelemetryPlugin) -> tuple[Runner, str]:
    model = ScriptedLlm(turns=[[call("slow_lookup", c, key=c) for c in CALLS], [text("done")]])
    agent = LlmAgent(name="sync_agent", model=model, instruction="scripted",
                     tools=[slow.slow_lookup])
    runner = Runner(app=App(name="sync_app", root_agent=agent, plugins=[plugin]),
                    session_service=InMemorySessionService())
    session = asyncio.run(runner.session_service.create_session(app_name="sync_app",
                                                                user_id="u"))
    return runner, str(session.id)


def _run(runner: Runner, session_id: str) -> Iterator[Any]:
    return runner.run(user_id="u", session_id=session_id,
                      new_message=types.Content(role="user", parts=[types.Part(text="go")]))


def _check(telemetry: Telemetry, slow: Slow) -> dict[str, str]:
    """Each call's span agrees with its body; a cancelled one says why. Returns the
    outcomes."""
    spans = telemetry.by_call()
    assert set(spans) == set(CALLS), sorted(spans)
    outcomes = {}
    for call_id, span in spans.items():
        attrs = span.attributes or {}
        outcome = str(attrs[sc.ADK_TOOL_TASK_OUTCOME])
        assert outcome == slow.ended[call_id], (call_id, outcome, slow.ended)
        causes = [(e.attributes or {}).get(sc.ADK_TOOL_TASK_CANCEL_CAUSE)
                  for e in span.events if e.name == sc.EVENT_CANCELLED]
        if outcome == sc.Outcome.CANCELLED:
            # The caller left: nothing else cancelled them.
            assert causes == [sc.CancelCause.CALLER_CANCELLED], (call_id, causes)
        else:
            assert causes == [], (call_id, causes)
        outcomes[call_id] = outcome
    return outcomes


def test_read_to_the_end(telemetry: Telemetry, slow: Slow) -> None:
    plugin = telemetry.plugin()
    runner, sid = _runner(slow, plugin)
    slow.release.set()
    events = list(_run(runner, sid))
    assert events and events[-1].content.parts[0].text == "done"
    slow.wait_ended(plugin)
    assert _check(telemetry, slow) == dict.fromkeys(CALLS, sc.Outcome.OK)


def test_the_caller_closes_after_the_first_event(telemetry: Telemetry, slow: Slow) -> None:
    plugin = telemetry.plugin()
    runner, sid = _runner(slow, plugin)
    gen = _run(runner, sid)
    next(gen)
    slow.wait_started()
    gen.close()  # 2.x cancels the run (and waits for its thread); 1.x lets it go on
    slow.release.set()
    slow.wait_ended(plugin)
    _check(telemetry, slow)


def test_the_caller_raises_in_its_loop(telemetry: Telemetry, slow: Slow) -> None:
    plugin = telemetry.plugin()
    runner, sid = _runner(slow, plugin)

    def consume() -> None:
        for _event in _run(runner, sid):
            slow.wait_started()
            raise KeyError("the caller's own error")

    with pytest.raises(KeyError):
        consume()
    slow.release.set()
    slow.wait_ended(plugin)
    _check(telemetry, slow)
