"""Regression tests for three wrong answers of the lifecycle engine (issue 10).

Each drives the real ADK Runner with the scripted model and compares what the
plugin reports with what the tools themselves saw: every tool records the
asyncio task running its body (a :class:`Probe`), so "still running when the run
ended" is read from the task, never from the plugin. Only the public API is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.apps import App
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from opentelemetry.sdk.trace import ReadableSpan

from adk_task_telemetry import TaskTelemetryPlugin, TrackerState
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.scenarios import Probe, ScriptedLlm, call, text

from .conftest import Telemetry

APP = "regressions"
USER = "user"


def _message(value: str = "go") -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=value)])


async def _session(runner: Runner) -> str:
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    return str(session.id)


def _orphan_events(span: ReadableSpan) -> list[Any]:
    return [e for e in span.events if e.name == sc.EVENT_ORPHANED_TASK]


def _outcome(span: ReadableSpan) -> Any:
    return (span.attributes or {}).get(sc.ADK_TOOL_TASK_OUTCOME)


def _sum(telemetry: Telemetry, name: str) -> float:
    return sum(p.value for p in telemetry.metrics().get(name, []))


def _how_it_ended(task: asyncio.Task[Any]) -> str:
    if task.cancelled():
        return "cancelled"
    return "error" if task.exception() is not None else "ok"


async def _settle() -> None:
    """Lets done-callbacks of tasks that just ended run."""
    for _ in range(3):
        await asyncio.sleep(0)


def _cancel_tools(probe: Probe) -> tuple[Any, Any]:
    """Two tools that wait: one stops at once when cancelled, one cleans up for 100 ms."""

    async def quick_to_cancel(tool_context: ToolContext) -> dict[str, str]:
        """Waits; stops at once when cancelled."""
        probe.enter(tool_context)
        await asyncio.sleep(30)
        return {"status": "done"}

    async def slow_to_cancel(tool_context: ToolContext) -> dict[str, str]:
        """Waits; cleans up for 100 ms when cancelled, then stops."""
        probe.enter(tool_context)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0.1)
            raise
        return {"status": "done"}

    return quick_to_cancel, slow_to_cancel


def _assert_idle(plugin: TaskTelemetryPlugin, telemetry: Telemetry) -> None:
    assert plugin.open_tasks() == []
    assert plugin.state() == TrackerState(0, 0, 0)
    assert _sum(telemetry, sc.METRIC_ACTIVE) == 0
    assert _sum(telemetry, sc.METRIC_ORPHANS_ALIVE) == 0
    assert plugin.internal_errors == 0


# --- 2. a plugin shared by several Runners ---------------------------------------


async def test_closing_one_runner_does_not_orphan_another_runners_run(
        telemetry: Telemetry) -> None:
    """A web framework builds a Runner per request on one App (one plugin instance).

    Runner.close() does not stop runs in progress, so closing the Runner of a
    finished request is not the end of another request's run: its running tool
    must not be reported orphaned, and its span must end as the task did (ok).
    """
    probe = Probe()

    async def lookup(delay: float, tool_context: ToolContext) -> dict[str, str]:
        """Looks something up, taking ``delay`` seconds."""
        probe.enter(tool_context)
        await asyncio.sleep(delay)
        return {"status": "found"}

    plugin = telemetry.plugin()
    model = ScriptedLlm(turns=[[call("lookup", "call-a", delay=0.0)], [text("a done")],
                               [call("lookup", "call-b", delay=0.3)], [text("b done")]])
    agent = LlmAgent(name="clerk", model=model, instruction="scripted", tools=[lookup])
    app = App(name=APP, root_agent=agent, plugins=[plugin])
    sessions = InMemorySessionService()
    runner_a = Runner(app=app, session_service=sessions)
    runner_b = Runner(app=app, session_service=sessions)

    async def serve(runner: Runner) -> None:
        sid = await _session(runner)
        async with contextlib.aclosing(runner.run_async(
                user_id=USER, session_id=sid, new_message=_message())) as agen:
            async for _ in agen:
                pass

    await serve(runner_a)  # request A is served and done
    request_b = asyncio.ensure_future(serve(runner_b))
    try:
        await probe.wait_started("call-b")
        await runner_a.close()  # request A's Runner is closed while B's tool runs
        assert probe.pending() == ["call-b"], "ground truth: B's tool is still running"
        await asyncio.wait_for(request_b, 5)
    finally:
        request_b.cancel()
        await probe.cleanup()
        await runner_b.close()
    await _settle()
    assert _how_it_ended(probe.tasks["call-b"]) == "ok"
    spans = telemetry.by_call()
    assert _orphan_events(spans["call-b"]) == [], "a running tool of a live run was orphaned"
    assert _outcome(spans["call-b"]) == "ok"
    assert _outcome(spans["call-a"]) == "ok"
    assert _sum(telemetry, sc.METRIC_ORPHANED) == 0
    _assert_idle(plugin, telemetry)


# --- 3. per-event timeout: a sibling that outlives the cancelled step ------------


async def test_per_event_timeout_sibling_still_running_at_run_end_is_an_orphan(
        telemetry: Telemetry) -> None:
    """The caller reads each event with ``wait_for(anext(...))`` and times out.

    ADK 1.x gathers the step's tool tasks and returns at the first cancelled
    child, so a sibling that cleans up for 100 ms before honouring the
    cancellation is still running when the caller's consumption ends: a real
    orphan. ADK 2.x waits for cancelled siblings, so there it has ended. Either
    way the plugin must agree with the tool's own record.
    """
    probe = Probe()
    quick_to_cancel, slow_to_cancel = _cancel_tools(probe)

    plugin = telemetry.plugin()
    model = ScriptedLlm(turns=[[call("quick_to_cancel", "call-quick"),
                                call("slow_to_cancel", "call-slow")]])
    agent = LlmAgent(name="clerk", model=model, instruction="scripted",
                     tools=[quick_to_cancel, slow_to_cancel])
    runner = Runner(app=App(name=APP, root_agent=agent, plugins=[plugin]),
                    session_service=InMemorySessionService())
    sid = await _session(runner)
    agen = runner.run_async(user_id=USER, session_id=sid, new_message=_message())
    timed_out = False
    try:
        while True:
            # Generous enough that the events before the tools never time out on
            # a loaded machine; the tools then wait 30 s, so this step does.
            await asyncio.wait_for(agen.__anext__(), 0.5)
    except asyncio.TimeoutError:
        timed_out = True
    except StopAsyncIteration:
        pass
    assert timed_out, "the caller must time out while the tools run"
    assert set(probe.tasks) == {"call-quick", "call-slow"}, "both tools started"
    await agen.aclose()
    # The run has ended: the caller's consumption ended and ADK's teardown is over.
    await _settle()
    real_orphans = set(probe.pending())
    seen = {t.call_id: t.orphaned for t in plugin.open_tasks()}
    try:
        for call_id in real_orphans:
            assert seen.get(call_id) is True, (
                f"{call_id} is still running after its run ended but the plugin shows "
                f"{'it as a live task of a run' if call_id in seen else 'nothing'}")
        assert not (set(seen) - real_orphans), "the plugin shows tasks that have ended"
    finally:
        await probe.cleanup()
        await runner.close()
    await _settle()
    spans = telemetry.by_call()
    assert set(spans) == {"call-quick", "call-slow"}
    for call_id, task in probe.tasks.items():
        if call_id in real_orphans:
            assert _outcome(spans[call_id]) == "orphaned", call_id
            assert len(_orphan_events(spans[call_id])) == 1, call_id
        else:
            assert _outcome(spans[call_id]) == _how_it_ended(task), call_id
            assert _orphan_events(spans[call_id]) == [], call_id
    assert _sum(telemetry, sc.METRIC_ORPHANED) == len(real_orphans)
    _assert_idle(plugin, telemetry)


# --- 1. a partial sweep, then the full one ----------------------------------------


class _HandedOverLiveRun:
    """A live run whose first reader is a caller's own task that hands it on.

    Task A (a request handler, say) starts reading ``run_live``; once a streaming
    call runs, the model asks for two parallel calls and A hands the generator to
    a task that reads on, and ends. That reader is then cancelled: ADK 1.x's
    gather returns at the first cancelled call, so the run tears down (stopping
    the streaming tool) while the call that cleans up for 100 ms still runs. On
    2.x the live run has a task of its own, so the same caller is harmless.
    """

    def __init__(self, telemetry: Telemetry) -> None:
        self.probe = Probe()
        probe = self.probe

        async def watch_prices(tool_context: ToolContext) -> AsyncGenerator[str, None]:
            """Streams price ticks (a live streaming tool)."""
            probe.enter(tool_context)
            while True:
                await asyncio.sleep(0.02)
                yield "tick"

        quick_to_cancel, slow_to_cancel = _cancel_tools(probe)

        self.plugin = telemetry.plugin()
        self.model = ScriptedLlm()
        agent = LlmAgent(name="trader", model=self.model, instruction="scripted",
                         tools=[watch_prices, quick_to_cancel, slow_to_cancel])
        self.runner = Runner(app=App(name=APP, root_agent=agent, plugins=[self.plugin]),
                             session_service=InMemorySessionService())
        self.queue = LiveRequestQueue()
        self.step: asyncio.Future[Any] | None = None
        self.real_orphans: set[str] = set()
        self.seen_after_handoff: list[Any] = []
        self.seen_at_end: list[Any] = []

    async def _handler(self, agen: AsyncGenerator[Any, None]) -> None:
        """Task A: reads until the stream runs, then hands the generator on."""
        self.model.say_live(call("watch_prices", "call-stream"))
        async for event in agen:
            ids = {p.function_response.id for p in (event.content.parts or [])
                   if event.content and p.function_response is not None}
            if "call-stream" in ids:
                break
        await self.probe.wait_started("call-stream")
        self.model.say_live(call("quick_to_cancel", "call-quick"),
                            call("slow_to_cancel", "call-slow"))
        self.step = asyncio.ensure_future(self._read_on(agen))
        await self.probe.wait_started("call-quick", "call-slow")

    async def _read_on(self, agen: AsyncGenerator[Any, None]) -> None:
        """The task the handler hands the generator to: it reads on."""
        async for _ in agen:
            pass

    async def run(self) -> None:
        sid = await _session(self.runner)
        config = RunConfig(streaming_mode=StreamingMode.BIDI,
                           response_modalities=[types.Modality.TEXT])
        agen = self.runner.run_live(user_id=USER, session_id=sid,
                                    live_request_queue=self.queue, run_config=config)
        await asyncio.wait_for(asyncio.ensure_future(self._handler(agen)), 10)
        await _settle()  # task A has ended
        self.seen_after_handoff = self.plugin.open_tasks()
        assert self.step is not None
        self.step.cancel()
        with contextlib.suppress(BaseException):
            await self.step
        with contextlib.suppress(RuntimeError):
            await agen.aclose()
        self.queue.close()
        # The run has ended: its reader was cancelled and ADK's teardown is over.
        await _settle()
        self.real_orphans = set(self.probe.pending())
        self.seen_at_end = self.plugin.open_tasks()

    async def cleanup(self) -> None:
        await self.probe.cleanup()
        await self.runner.close()
        await _settle()


async def test_partial_then_full_sweep_reports_each_orphan_once(
        telemetry: Telemetry, caplog: pytest.LogCaptureFixture) -> None:
    """One orphan report per task however many sweeps see it; counts return to 0."""
    scenario = _HandedOverLiveRun(telemetry)
    with caplog.at_level(logging.WARNING):
        try:
            await scenario.run()
        finally:
            await scenario.cleanup()
    assert set(scenario.probe.tasks) == {"call-stream", "call-quick", "call-slow"}
    reports: dict[str, int] = {}
    for r in caplog.records:
        if r.name == sc.LOGGER_NAME and r.getMessage().startswith("orphaned tool task:"):
            cid = r.getMessage().split("call_id=")[1].split()[0]
            reports[cid] = reports.get(cid, 0) + 1
    twice = {cid: n for cid, n in reports.items() if n > 1}
    assert not twice, f"reported orphaned more than once: {twice}"
    spans = telemetry.tool_spans()
    assert sorted(str((s.attributes or {})[sc.GEN_AI_TOOL_CALL_ID]) for s in spans) == [
        "call-quick", "call-slow", "call-stream"], "one span per task"
    assert all(len(_orphan_events(s)) <= 1 for s in spans)
    assert _sum(telemetry, sc.METRIC_ORPHANED) == len(reports)
    for when, snapshot in (("after the handoff", scenario.seen_after_handoff),
                           ("at run end", scenario.seen_at_end)):
        keys = [(t.invocation_id, t.call_id) for t in snapshot]
        assert len(keys) == len(set(keys)), f"open_tasks() {when} lists a task twice: {keys}"
    assert not [r for r in caplog.records if "on an ended span" in r.getMessage()]
    _assert_idle(scenario.plugin, telemetry)


async def test_handed_over_run_orphans_are_the_real_ones(telemetry: Telemetry) -> None:
    """Orphans are exactly the tasks still running when the run ended.

    The caller's task ending is not the run's end when it handed the generator
    on: the quick call is cancelled and ends before the run does, so it is
    ``cancelled``, not ``orphaned``; the slow one is the real orphan (ADK 1.x).
    """
    scenario = _HandedOverLiveRun(telemetry)
    try:
        await scenario.run()
    finally:
        await scenario.cleanup()
    spans = telemetry.by_call()
    assert set(spans) == set(scenario.probe.tasks)
    for call_id, task in scenario.probe.tasks.items():
        if call_id in scenario.real_orphans:
            assert _outcome(spans[call_id]) == "orphaned", call_id
        else:
            assert _outcome(spans[call_id]) == _how_it_ended(task), call_id
            assert _orphan_events(spans[call_id]) == [], (
                f"{call_id} was reported orphaned but ended before its run did")
    _assert_idle(scenario.plugin, telemetry)


# --- 4. a tool that cancels itself, its caller catches it (issue 31) ------------------


class _SelfCancelThenWork:
    """The model calls two tools in parallel. A awaits a future that its client library
    cancels on shutdown, so A raises ``CancelledError`` by itself (nobody cancelled its
    task: ADK issue 7172's shape); B works 0.5 s and returns. The caller of ``run_async``
    catches what the run raises (``reraise=False``: a retry loop, a server that maps it
    to a response) and goes on in the same task, or lets it out of its task."""

    B_WORKS = 0.5

    def __init__(self) -> None:
        self.probe = Probe()
        self.seen_end_ns = 0  # when the caller saw the run end (it raised or finished)
        self.b_running_at_end = False
        self.saw_end = asyncio.Event()
        #: Set by the test once it has looked: until then the caller works on.
        self.work_done = asyncio.Event()
        probe = self.probe

        async def uses_client(tool_context: ToolContext) -> dict[str, str]:
            """Awaits a reply that its client library cancels on shutdown."""
            probe.enter(tool_context)
            reply: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_later(0.01, reply.cancel)  # the library's doing
            return await reply

        async def works(tool_context: ToolContext) -> dict[str, str]:
            """Works for B_WORKS, then answers."""
            probe.enter(tool_context)
            await asyncio.sleep(self.B_WORKS)
            return {"status": "done"}

        self.tools = [uses_client, works]

    async def consume(self, runner: Runner, *, reraise: bool) -> None:
        sid = await _session(runner)
        try:
            async with contextlib.aclosing(runner.run_async(
                    user_id=USER, session_id=sid, new_message=_message())) as agen:
                async for _ in agen:
                    pass
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is None or me.cancelling():
                raise  # this test's own task was cancelled
            self._saw_end()
            if reraise:
                raise
        else:
            self._saw_end()
        # The caller goes on with its work in this same task (the run is over for it).
        await self.work_done.wait()

    def _saw_end(self) -> None:
        self.seen_end_ns = time.time_ns()
        b = self.probe.tasks.get("call-b")
        self.b_running_at_end = b is not None and not b.done()
        self.saw_end.set()


def _hist_count(telemetry: Telemetry, name: str) -> int:
    return sum(p.count for p in telemetry.metrics().get(name, []))


@pytest.mark.parametrize("reraise", [False, True], ids=["caller_catches", "caller_reraises"])
async def test_a_sibling_of_a_self_cancelled_tool_that_outlives_its_run_is_an_orphan(
        reraise: bool, telemetry: Telemetry) -> None:
    """Issue 31. ADK 1.x's ``gather`` lets A's ``CancelledError`` out of the run and
    leaves B running: B outlives its run by about 0.45 s, so it is an orphan at the
    moment the caller saw the run end (its ``orphaned_task`` event dated before B's own
    end, counted, and its ``orphan_lifetime`` recorded when it ends), however the caller
    handles the error; nothing cancelled B, so no grace for an unwinding cancellation
    applies to it. ADK 2.x cancels B because its sibling ended badly: ``cancelled``,
    ``sibling_failed``. A is never ``ok``. Once B has ended the plugin holds nothing:
    ``state()`` is back to (0, 0, 0) without another run or a close."""
    scenario = _SelfCancelThenWork()
    plugin = telemetry.plugin()
    model = ScriptedLlm(turns=[[call("uses_client", "call-a"), call("works", "call-b")],
                               [text("done")]])
    agent = LlmAgent(name="clerk", model=model, instruction="scripted", tools=scenario.tools)
    runner = Runner(app=App(name=APP, root_agent=agent, plugins=[plugin]),
                    session_service=InMemorySessionService())
    caller = asyncio.ensure_future(scenario.consume(runner, reraise=reraise))
    try:
        # The caller's task goes on after the run unless it re-raised: wait for the
        # moment it saw the run end, then for B's own end, positive signals both.
        await asyncio.wait([caller, asyncio.ensure_future(scenario.saw_end.wait())],
                           timeout=10.0, return_when=asyncio.FIRST_COMPLETED)
        assert scenario.seen_end_ns, "the caller never saw the run end"
        b_task = scenario.probe.tasks["call-b"]
        await asyncio.wait([b_task], timeout=10.0)
        assert b_task.done()
        await _settle()
        b_ended_ns = time.time_ns()
        # Freed once B ended: no other run, no close needed.
        assert plugin.state() == TrackerState(0, 0, 0)
        if not reraise:
            assert not caller.done(), "the caller goes on in the task that drove the run"
    finally:
        scenario.work_done.set()
        await asyncio.gather(caller, return_exceptions=True)
        await scenario.probe.cleanup()
        await runner.close()
    spans = telemetry.by_call()
    assert set(spans) == {"call-a", "call-b"}
    assert _outcome(spans["call-a"]) == "cancelled"  # never ok
    if scenario.b_running_at_end:  # ADK 1.x: the step's gather left B running
        assert _outcome(spans["call-b"]) == "orphaned"
        reports = _orphan_events(spans["call-b"])
        assert len(reports) == 1
        # Reported while B still ran (by B's own record of its end), not after.
        b_truth = [t for t in scenario.probe.records if t.call_id == "call-b"]
        assert b_truth[0].ended_ns is not None
        assert reports[0].timestamp <= b_truth[0].ended_ns <= b_ended_ns
        assert _sum(telemetry, sc.METRIC_ORPHANED) == 1
        assert _hist_count(telemetry, sc.METRIC_ORPHAN_LIFETIME) == 1
    else:  # ADK 2.x: ADK cancelled B because A ended badly
        assert _outcome(spans["call-b"]) == "cancelled"
        causes = [(e.attributes or {}).get(sc.ADK_TOOL_TASK_CANCEL_CAUSE)
                  for e in spans["call-b"].events if e.name == sc.EVENT_CANCELLED]
        assert causes == [sc.CancelCause.SIBLING_FAILED]
        assert _orphan_events(spans["call-b"]) == []
        assert _sum(telemetry, sc.METRIC_ORPHANED) == 0
    _assert_idle(plugin, telemetry)


async def test_a_run_whose_caller_swallows_its_cancellation_goes_when_its_last_task_ends(
        telemetry: Telemetry) -> None:
    """Issue 31, item 2. The caller's task is cancelled while the step's two tools run,
    catches the cancellation and goes on in that task. ADK 1.x's ``gather`` returns at
    the first cancelled child, so the run's span ends while the tool that cleans up for
    100 ms still unwinds its cancellation: the run waits for it (the grace covers a
    task with a cancellation in flight), and it ends inside its run, ``cancelled``.
    Once it has ended nothing is left to wait for: ``state()`` is (0, 0, 0) at that
    moment, not a grace later or at another run's start or a close."""
    probe = Probe()
    quick_to_cancel, slow_to_cancel = _cancel_tools(probe)
    plugin = telemetry.plugin()
    model = ScriptedLlm(turns=[[call("quick_to_cancel", "call-quick"),
                                call("slow_to_cancel", "call-slow")], [text("done")]])
    agent = LlmAgent(name="clerk", model=model, instruction="scripted",
                     tools=[quick_to_cancel, slow_to_cancel])
    runner = Runner(app=App(name=APP, root_agent=agent, plugins=[plugin]),
                    session_service=InMemorySessionService())
    sid = await _session(runner)
    saw_end, go_on = asyncio.Event(), asyncio.Event()

    async def caller() -> None:
        try:
            async with contextlib.aclosing(runner.run_async(
                    user_id=USER, session_id=sid, new_message=_message())) as agen:
                async for _ in agen:
                    pass
        except asyncio.CancelledError:
            pass  # swallowed: the caller goes on in this task
        saw_end.set()
        await go_on.wait()

    consumer = asyncio.ensure_future(caller())
    try:
        await probe.wait_started("call-quick", "call-slow")
        consumer.cancel()
        await asyncio.wait_for(saw_end.wait(), 10.0)
        await probe.wait_finished("call-quick", "call-slow")
        await _settle()
        assert not consumer.done(), "the caller goes on in the task that drove the run"
        assert plugin.state() == TrackerState(0, 0, 0)
    finally:
        go_on.set()
        await asyncio.gather(consumer, return_exceptions=True)
        await probe.cleanup()
        await runner.close()
    spans = telemetry.by_call()
    assert _outcome(spans["call-quick"]) == "cancelled"
    # It ended inside its run: cancelled. (Only a loop stalled for most of the 1 s bound
    # while it slept its 100 ms could let the bound pass first: then it was an orphan.)
    assert _outcome(spans["call-slow"]) in ("cancelled", "orphaned")
    _assert_idle(plugin, telemetry)
