"""Live runs on every ADK since 1.14, through the hooks adk_compat puts on the releases
that tell plugins nothing on their live path (1.14 to 1.39, 2.0 to 2.7).

The seed bug's orphans are reported when the live run ends (the caller leaves, or
closes the queue), not at ``Runner.close()``; only the invocation's own listener
plugins are called; a failing listener never breaks the run; and every hook is undone
when the last plugin is gone (a Runner's close undoes nothing: issue 24), the very
original put back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig, StreamingMode  # type: ignore[attr-defined]
from google.adk.apps import App
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import errors, types

from adk_task_telemetry import TaskTelemetryPlugin, TrackerState
from adk_task_telemetry import adk_compat as compat
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.scenarios import run_scenario
from adk_task_telemetry.scenarios.model import ScriptedLiveConnection, ScriptedLlm, call

from .conftest import Telemetry

V = compat.ADK_VERSION
#: The oracle, by the bisected minors (tests/test_adk_compat.py holds the probes to
#: them): where each hook is needed, so where it must be in place.
EXPECTED_HOOKS = sorted(
    (["BaseAgent.run_live"] if V < (2, 8, 0) else [])
    + (["google.adk.flows.llm_flows.functions._process_function_live_helper"]
       if V < (1, 27, 0) else []))
#: The thread-pool hook (tests/test_thread_pool.py) wraps ADK's pool getter in the
#: functions module too, where ADK has the pool (1.24 on, by the same kind of oracle).
POOL_HOOKS = (["google.adk.flows.llm_flows.functions._get_tool_thread_pool"]
              if V >= (1, 24, 0) else [])
#: How the plugin learns that a live run ended: ADK's own live task ends (2.8 on),
#: else the hook on the run's end.
TRIGGER = "run_task_done" if V >= (2, 8, 0) else "live_teardown"
#: Which of the seed's two calls really keep running once the live run is over.
LOST = (set() if V >= (2, 13, 0)
        else {"call-goog"} if V >= (2, 8, 0) or (1, 39, 0) <= V < (2, 0, 0)
        else {"call-goog", "call-msft"})


def _orphans(telemetry: Telemetry) -> dict[str, str]:
    """call id -> the run-end trigger of its orphan report."""
    out = {}
    for span in telemetry.tool_spans():
        for event in span.events:
            if event.name == sc.EVENT_ORPHANED_TASK:
                attrs = dict(event.attributes or {})
                out[str(attrs[sc.GEN_AI_TOOL_CALL_ID])] = str(attrs[sc.ADK_RUN_END_TRIGGER])
    return out


async def test_seed_bug_reported_when_the_caller_leaves(telemetry: Telemetry) -> None:
    """Reported at the caller's aclose() of run_live, with the runner still open."""
    plugin = telemetry.plugin()
    run = await run_scenario("seed_bug", [plugin], close_runner=False)
    try:
        assert set(run.probe.pending()) == LOST  # the ground truth
        assert _orphans(telemetry) == dict.fromkeys(LOST, TRIGGER)
        assert plugin.state() == TrackerState(0, 0, len(LOST))  # the run is over
        assert plugin.internal_errors == 0
    finally:
        await run.probe.cleanup()
        for runner, _ in run.sessions:
            await runner.close()


class _EndsWhenClosed(ScriptedLiveConnection):
    """Once closed, receive() raises what google-genai raises when the live socket
    closes normally (APIError 1000): ADK closes the connection when the caller closes
    the live request queue."""

    async def receive(self) -> AsyncGenerator[LlmResponse, None]:
        async for response in super().receive():  # ends once closed (ends_on_close)
            yield response
        raise errors.APIError(1000, {"error": {"message": "closed", "status": "OK"}})


async def test_seed_bug_reported_when_the_queue_closes(telemetry: Telemetry) -> None:
    """The caller closes the LiveRequestQueue and reads on: when ADK ends the run (its
    generator stops or raises), the orphans have been reported."""
    plugin = telemetry.plugin()
    bodies: dict[str, asyncio.Task[Any]] = {}
    both = asyncio.Event()

    async def monitor_stock(symbol: str) -> AsyncGenerator[str, None]:
        """Streams price changes of a stock symbol."""
        task = asyncio.current_task()
        assert task is not None
        bodies[symbol] = task
        if len(bodies) == 2:
            both.set()
        while True:
            await asyncio.sleep(0.05)
            yield f"{symbol} +1"

    model = ScriptedLlm(live_ends_on_close=True, live_connection=_EndsWhenClosed)
    agent = LlmAgent(name="trader", model=model, instruction="scripted", tools=[monitor_stock])
    runner = Runner(app=App(name="queue_close", root_agent=agent, plugins=[plugin]),
                    session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="queue_close", user_id="u")
    queue = LiveRequestQueue()
    agen = runner.run_live(user_id="u", session_id=session.id, live_request_queue=queue,
                           run_config=RunConfig(streaming_mode=StreamingMode.BIDI,
                                                response_modalities=[types.Modality.TEXT]))
    model.say_live(call("monitor_stock", "call-goog", symbol="GOOG"),
                   call("monitor_stock", "call-msft", symbol="MSFT"))
    ids = {"GOOG": "call-goog", "MSFT": "call-msft"}

    async def read_until_the_run_ends() -> None:
        with contextlib.suppress(errors.APIError):  # how some releases end it
            async for _event in agen:
                if both.is_set() and not closed:
                    closed.append(True)
                    queue.close()  # the caller is done; it reads on until the end

    closed: list[bool] = []

    try:
        await asyncio.wait_for(read_until_the_run_ends(), 15)
        # The run is over by ADK's own doing: what it left running is reported now.
        left = {ids[s] for s, t in bodies.items() if not t.done()}
        assert set(bodies) == {"GOOG", "MSFT"}
        assert left == LOST
        orphans = _orphans(telemetry)
        assert set(orphans) == LOST
        assert plugin.state() == TrackerState(0, 0, len(LOST))
        # How ADK ends a live run whose connection closed: cleanly from 2.8 on (its
        # plugins hear after_run); before that with the connection's error, which the
        # hook sees leave the root agent before ADK tells plugins (run_error, 2.5 on).
        trigger = "after_run" if V >= (2, 8, 0) else "live_teardown"
        assert set(orphans.values()) == ({trigger} if LOST else set())
        assert plugin.internal_errors == 0
    finally:
        await agen.aclose()
        for task in bodies.values():
            task.cancel()
        await asyncio.gather(*bodies.values(), return_exceptions=True)
        await runner.close()


async def test_only_the_invocations_own_plugins_hear_the_hooks(telemetry: Telemetry) -> None:
    """A plugin that exists but is not registered on this runner records nothing."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    elsewhere = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(elsewhere))
    bystander = TaskTelemetryPlugin(tracer_provider=provider, meter_provider=MeterProvider())
    plugin = telemetry.plugin()
    run = await run_scenario("seed_bug", [plugin])
    try:
        assert {s.name for s in telemetry.tool_spans()} == {"tool_task monitor_stock"}
        assert elsewhere.get_finished_spans() == ()
        assert bystander.state() == TrackerState(0, 0, 0)
    finally:
        await run.probe.cleanup()
        await bystander.close()


class _FailsAtTheEnd(TaskTelemetryPlugin):
    """Fails in what the run-end hook calls."""

    def live_run_ended(self, invocation_context: Any) -> None:
        raise RuntimeError("listener fails at the live run's end")


class _FailsEverywhere(_FailsAtTheEnd):
    """Fails in what the tool-call hook calls too (ADK itself calls these from 1.27 on,
    and lets a plugin's exception abort the run: not the hook's to change)."""

    async def before_tool_callback(self, **kwargs: Any) -> None:
        raise RuntimeError("listener fails before a live call")

    async def after_tool_callback(self, **kwargs: Any) -> None:
        raise RuntimeError("listener fails after a live call")


@pytest.mark.skipif(not compat.LIVE_RUN_END_HOOK, reason=(
    "no hook on this ADK: it calls plugins itself on its live path"))
async def test_a_failing_listener_never_breaks_the_live_run(telemetry: Telemetry) -> None:
    failing = _FailsEverywhere if compat.LIVE_TOOL_HOOK else _FailsAtTheEnd
    plugin = failing(tracer_provider=telemetry.tracer_provider,
                     meter_provider=telemetry.meter_provider)
    run = await run_scenario("seed_bug", [plugin])  # would raise if a hook let it through
    try:
        assert set(run.probe.tasks) == {"call-goog", "call-msft"}  # both tools ran
        assert set(run.probe.pending()) == LOST
    finally:
        await run.probe.cleanup()


#: Run in a fresh interpreter: no plugin of another test can be listening there. Every
#: attribute of ADK's live path (classes and modules) is compared, by identity, with
#: what it was before the first plugin existed.
_UNDO = textwrap.dedent('''
    import asyncio, gc, importlib, json
    from adk_task_telemetry import TaskTelemetryPlugin, adk_compat

    owners = []
    for module, cls in [
            ("google.adk.runners", "Runner"), ("google.adk.runners", None),
            ("google.adk.flows.llm_flows.base_llm_flow", "BaseLlmFlow"),
            ("google.adk.flows.llm_flows.base_llm_flow", None),
            ("google.adk.flows.llm_flows.functions", None),
            ("google.adk.agents.base_agent", "BaseAgent"),
            ("google.adk.agents.llm_agent", "LlmAgent"),
            ("google.adk.plugins.plugin_manager", "PluginManager"),
            ("google.adk.live._flow_utils", None), ("google.adk.live._runner_utils", None),
            ("google.adk.live._live_llm_flow", None)]:
        try:
            owner = importlib.import_module(module)
        except ImportError:  # a layout this ADK does not have
            continue
        owners.append(getattr(owner, cls) if cls else owner)
    before = {id(o): dict(vars(o)) for o in owners}

    def changed():
        out = []
        for o in owners:
            now, then = vars(o), before[id(o)]
            out += [f"{o.__name__}.{k}" for k in set(now) | set(then)
                    if now.get(k) is not then.get(k) and not k.startswith("__")]
        return sorted(out)

    def wraps_original():
        return sorted(f"{o.__name__}.{k}" for o in owners for k, f in vars(o).items()
                      if k in before[id(o)] and f is not before[id(o)][k]
                      and getattr(f, "__wrapped__", None) is before[id(o)][k])

    async def main():
        out = {"idle": adk_compat.live_hooks()}
        first, second = TaskTelemetryPlugin(), TaskTelemetryPlugin()
        out["listening"] = adk_compat.live_hooks()
        out["changed"] = changed()
        out["wraps_original"] = wraps_original()
        await first.close()
        await first.close()  # Runner.close() may close a plugin twice
        out["one_closed"] = changed()
        await second.close()
        out["all_closed"] = changed()  # closed, not gone: an App may run them again
        del first, second
        gc.collect()
        out["all_gone"] = changed()
        third = TaskTelemetryPlugin()
        out["again"] = changed()
        await third.close()
        del third
        gc.collect()
        out["gone_again"] = changed()
        print(json.dumps(out))

    asyncio.run(main())
''')


#: A plugin that a Runner closed (the last listener: every hook stays while it lives)
#: and that runs again: it hears that run.
_REUSE = textwrap.dedent('''
    import asyncio, json
    from adk_task_telemetry import TaskTelemetryPlugin, adk_compat
    from adk_task_telemetry.scenarios import run_scenario

    async def main():
        plugin = TaskTelemetryPlugin()
        await plugin.close()  # what Runner.close() does (1.19 on)
        closed = adk_compat.live_hooks()
        run = await run_scenario("seed_bug", [plugin], close_runner=False)
        orphans = sorted((t.call_id, t.orphaned) for t in plugin.open_tasks())
        out = {"closed": closed, "running": sorted(run.probe.pending()),
               "orphans": orphans, "runs": plugin.state().runs}
        await run.probe.cleanup()
        for runner, _ in run.sessions:
            await runner.close()
        print(json.dumps(out))

    asyncio.run(main())
''')


def test_a_closed_plugin_used_again_hears_its_next_live_run() -> None:
    done = subprocess.run([sys.executable, "-c", _REUSE], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["closed"] == EXPECTED_HOOKS
    assert set(out["running"]) == LOST
    assert out["orphans"] == [[c, True] for c in sorted(LOST)]  # reported at the run's end
    assert out["runs"] == 0


def test_every_hook_is_undone_by_identity() -> None:
    """While a plugin lives, exactly the hooks this ADK needs are in place, each
    wrapping the original, closed or not; once every plugin is gone, every attribute of
    ADK's live path is the very object it was before (issues 17, 24)."""
    done = subprocess.run([sys.executable, "-c", _UNDO], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    every = sorted(EXPECTED_HOOKS + POOL_HOOKS)
    assert out["idle"] == []
    assert out["listening"] == EXPECTED_HOOKS
    assert out["changed"] == every == out["wraps_original"]
    assert out["one_closed"] == every  # another plugin still listens
    assert out["all_closed"] == every  # a Runner's close undoes nothing (issue 24)
    assert out["all_gone"] == []
    assert out["again"] == every
    assert out["gone_again"] == []


#: A Runner per request (issue 24), the App's plugin shared: the process-wide hooks are
#: the very same objects from the plugin's creation to its end, whatever Runners start
#: and close meanwhile, beside another plugin instance or not; then undone by identity.
_PER_REQUEST = textwrap.dedent('''
    import asyncio, gc, json, sys
    from google.adk.agents import LlmAgent
    from google.adk.agents.base_agent import BaseAgent
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types
    import google.adk.flows.llm_flows.functions  # noqa: F401  (as a run imports it)
    from adk_task_telemetry import TaskTelemetryPlugin, adk_compat
    from adk_task_telemetry.scenarios.model import ScriptedLlm, call, text

    NAMES = ("_get_tool_thread_pool", "_process_function_live_helper")

    def snapshot():
        """Every object a process-wide hook may replace: in each ADK module, and on
        BaseAgent."""
        out = {f"{n}.{k}": d[k] for n, m in list(sys.modules.items())
               if n.startswith("google.adk") for d in [getattr(m, "__dict__", {})]
               for k in NAMES if k in d}
        out["BaseAgent.run_live"] = vars(BaseAgent)["run_live"]
        return out

    def differs(a, b):
        return sorted(k for k in set(a) | set(b) if a.get(k) is not b.get(k))

    async def fetch(item: int) -> dict:
        """Fetches one item."""
        return {"item": item}

    def app(name, plugin):
        model = ScriptedLlm(turns=[[call("fetch", "c1", item=1), call("fetch", "c2", item=2)],
                                   [text("done")]], repeat=True)
        agent = LlmAgent(name="worker", model=model, instruction="scripted", tools=[fetch])
        return App(name=name, root_agent=agent, plugins=[plugin])

    async def run(runner, name):
        session = await runner.session_service.create_session(app_name=name, user_id="u")
        message = types.Content(role="user", parts=[types.Part(text="go")])
        async for _ in runner.run_async(user_id="u", session_id=session.id,
                                        new_message=message):
            pass

    async def main():
        out = {}
        original = snapshot()
        service = InMemorySessionService()
        shared = TaskTelemetryPlugin()
        first = app("first", shared)
        hooked = snapshot()
        out["hooked"] = differs(original, hooked)
        out["listed"] = adk_compat.live_hooks()
        same = []
        for _ in range(3):  # a Runner made and closed per request, one at a time
            runner = Runner(app=first, session_service=service)
            await run(runner, "first")
            same.append(differs(hooked, snapshot()))
            await runner.close()
            same.append(differs(hooked, snapshot()))
        # Two Runners of the App alive: one closes while the other goes on.
        one, two = (Runner(app=first, session_service=service) for _ in range(2))
        await run(one, "first")
        await one.close()
        same.append(differs(hooked, snapshot()))
        await run(two, "first")
        await two.close()
        same.append(differs(hooked, snapshot()))
        # Another plugin instance, its own Runner per request; then the first one goes.
        other = TaskTelemetryPlugin()
        second = app("second", other)
        runner = Runner(app=second, session_service=service)
        await run(runner, "second")
        await runner.close()
        same.append(differs(hooked, snapshot()))
        del shared, first, one, two
        gc.collect()
        same.append(differs(hooked, snapshot()))
        out["same"] = same
        out["runs_seen"] = other.state().runs == 0 and other.internal_errors == 0
        # The last plugin goes: every hook undone, the very original objects back.
        del other, second, runner
        gc.collect()
        out["gone"] = differs(original, snapshot())
        out["listed_gone"] = adk_compat.live_hooks()
        print(json.dumps(out))

    asyncio.run(main())
''')


def test_a_runner_per_request_never_installs_or_undoes_a_hook() -> None:
    """Issue 24: a Runner's start and close leave ADK's process-wide hooks (the very
    same objects) in place while any plugin lives; the last plugin's end undoes them."""
    done = subprocess.run([sys.executable, "-c", _PER_REQUEST], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    every = sorted(EXPECTED_HOOKS + POOL_HOOKS)
    assert out["listed"] == EXPECTED_HOOKS
    # Each hook this ADK needs; the pool getter also where other modules hold it by name.
    assert set(every) <= set(out["hooked"])
    assert all(k in every or k.endswith("._get_tool_thread_pool") for k in out["hooked"])
    assert out["same"] == [[]] * len(out["same"])
    assert out["runs_seen"]
    assert out["gone"] == [] and out["listed_gone"] == []
