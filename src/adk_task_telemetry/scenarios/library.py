"""Named tool-task lifecycle scenarios (``SCENARIOS``), run through the real ADK Runner,
and the runs of them the CLI demo, the audit, the tests and the benchmarks make.

Each scenario drives one kind of tool task to one kind of end. Its tools (``tools``)
record the asyncio task that runs their body in a :class:`Probe`, so a caller can check
that an orphan reported by the plugin is really still running; the Harness that runs a
scenario, and what its run recorded, are ``runs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig  # type: ignore[attr-defined]
from google.adk.apps import App
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.agent_tool import AgentTool
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from .. import adk_compat as compat
from .model import RUN_TAG, PerRunLlm, ScriptedLlm, call, text
from .probe import Probe
from .runs import APP_NAME, USER_ID, Harness, Scenario, ScenarioRun, responses_stored
from .tools import live_agent, scenario_tools, scripted_agent

# --- the scenarios ------------------------------------------------------------


async def _seed_bug(h: Harness) -> None:
    """ADK issue 7058: two calls to one streaming tool in one live response."""
    t = scenario_tools(h.probe)
    agent, model = live_agent("trader", [t["monitor_stock"]])
    async with h.live(agent) as agen:
        model.say_live(call("monitor_stock", "call-goog", symbol="GOOG"),
                       call("monitor_stock", "call-msft", symbol="MSFT"))
        await h.live_until(agen, responses_stored(h.run, "call-goog", "call-msft"))
        await h.probe.wait_started("call-goog", "call-msft")
    # leaving the block: the caller walks away from the live run


async def _caller_abort(h: Harness) -> None:
    t = scenario_tools(h.probe)
    agent = scripted_agent("clerk", [[call("slow_search", "call-slow", query="x")]],
                           [t["slow_search"]])
    abort = asyncio.Event()
    run = asyncio.ensure_future(h.run_async(agent, abort_signal=abort))
    await h.probe.wait_started("call-slow")
    abort.set()  # the caller aborts the invocation (ADK 2.x)
    await run


async def _live_stream_teardown(h: Harness) -> None:
    t = scenario_tools(h.probe)
    agent, model = live_agent("trader", [t["monitor_stock"]])
    async with h.live(agent) as agen:
        model.say_live(call("monitor_stock", "call-goog", symbol="GOOG"))
        await h.live_until(agen, responses_stored(h.run, "call-goog"))
        await h.probe.wait_started("call-goog")
        await asyncio.sleep(0.1)


async def _live_stop_streaming(h: Harness) -> None:
    t = scenario_tools(h.probe)
    agent, model = live_agent("trader", [t["monitor_stock"], t["stop_streaming"]])
    async with h.live(agent) as agen:
        model.say_live(call("monitor_stock", "call-goog", symbol="GOOG"))
        await h.live_until(agen, responses_stored(h.run, "call-goog"))
        await h.probe.wait_started("call-goog")
        model.say_live(call("stop_streaming", "call-stop", function_name="monitor_stock"))
        await h.live_until(agen, responses_stored(h.run, "call-stop"))


async def _live_non_blocking(h: Harness) -> None:
    t = scenario_tools(h.probe)
    from google.adk.tools.function_tool import FunctionTool

    tool = FunctionTool(t["send_report"])
    tool.behavior = types.Behavior.NON_BLOCKING  # type: ignore[attr-defined]
    tool.response_scheduling = types.FunctionResponseScheduling.WHEN_IDLE  # type: ignore[attr-defined]
    agent, model = live_agent("reporter", [tool])
    async with h.live(agent) as agen:
        model.say_live(call("send_report", "call-report", topic="sales"))
        # ADK 1.x does not yield a non-blocking tool's response: consume events
        # until the tool body has finished instead.
        await h.live_while(agen, h.probe.wait_finished("call-report"), timeout=10)


async def _live_stubborn_tool(h: Harness) -> None:
    t = scenario_tools(h.probe)
    agent, model = live_agent("ticker", [t["stubborn_feed"]])
    async with h.live(agent) as agen:
        model.say_live(call("stubborn_feed", "call-feed"))
        await h.live_until(agen, responses_stored(h.run, "call-feed"))
        await h.probe.wait_started("call-feed")


async def _one_call(h: Harness, agent: str, tool: str, call_id: str, **args: Any) -> None:
    """A run_async whose model makes one call to ``tool``."""
    t = scenario_tools(h.probe)
    await h.run_async(scripted_agent(agent, [[call(tool, call_id, **args)]], [t[tool]]))


async def _fire_and_forget(h: Harness) -> None:
    await _one_call(h, "uploader", "start_upload", "call-upload", file="a.csv")


async def _unended_span(h: Harness) -> None:
    await _one_call(h, "browser", "fetch_page", "call-fetch", url="/a")


async def _single_call(h: Harness) -> None:
    await _one_call(h, "clerk", "lookup_order", "call-1", order_id="A1")


async def _parallel_calls(h: Harness) -> None:
    t = scenario_tools(h.probe)
    turns = [[call("lookup_order", "call-1", order_id="A1"),
              call("lookup_order", "call-2", order_id="A2"),
              call("add_numbers", "call-3", a=1, b=2)]]
    await h.run_async(scripted_agent("clerk", turns, [t["lookup_order"], t["add_numbers"]]))


async def _parallel_one_fails(h: Harness) -> None:
    t = scenario_tools(h.probe)
    turns = [[call("flaky_api", "call-fail"),
              call("slow_search", "call-s1", query="a"),
              call("slow_search", "call-s2", query="b")]]
    try:
        await h.run_async(scripted_agent("clerk", turns, [t["flaky_api"], t["slow_search"]]))
    except ConnectionError as e:
        h.run.error = e


class _RecoverPlugin(BasePlugin):
    """Turns a tool error into a result, as an application's error policy would."""

    def __init__(self) -> None:
        super().__init__(name="recover_errors")

    async def on_tool_error_callback(self, *, tool: Any, tool_args: Any, tool_context: Any,
                                     error: Exception) -> dict[str, str] | None:
        if isinstance(error, ConnectionError):
            return {"error": "temporarily unavailable"}
        return None


async def _recovered_error(h: Harness) -> None:
    t = scenario_tools(h.probe)
    h.plugins.append(_RecoverPlugin())
    await h.run_async(scripted_agent("clerk", [[call("flaky_api", "call-fail")]], [t["flaky_api"]]))


async def _long_running(h: Harness) -> None:
    t = scenario_tools(h.probe)
    tool = LongRunningFunctionTool(t["open_ticket"])
    await h.run_async(scripted_agent(
        "helpdesk", [[call("open_ticket", "call-ticket", issue="login")]], [tool]))


async def _overlapping_runs(h: Harness) -> None:
    """Run A calls a long-running tool and waits in its next model turn; the client
    answers that call, which starts run B in the same session (ADK 2.x gives B run
    A's invocation id); B's tool is still running when A ends. Nothing is orphaned."""
    t = scenario_tools(h.probe)
    b_started, a_done = asyncio.Event(), asyncio.Event()

    async def confirm_order(order_id: str, tool_context: ToolContext) -> dict[str, str]:
        """Confirms an order once the earlier run has finished."""
        h.probe.enter(tool_context)
        b_started.set()
        await a_done.wait()
        return {"order_id": order_id, "status": "confirmed"}

    async def first() -> list[types.Part]:
        return [call("open_ticket", "call-ticket", issue="refund"),
                call("lookup_order", "call-a1", order_id="A1")]

    async def after_b_started() -> list[types.Part]:
        await b_started.wait()
        return [text("ticket opened")]

    async def confirm() -> list[types.Part]:
        return [call("confirm_order", "call-b1", order_id="A1")]

    model = PerRunLlm({"A": [first, after_b_started], "B": [confirm]})
    agent = LlmAgent(name="helpdesk", model=model, instruction="scripted", tools=[
        LongRunningFunctionTool(t["open_ticket"]), t["lookup_order"], confirm_order])
    runner = h.runner(agent)
    sid = await h._session(runner)

    async def consume(tag: str, message: types.Content) -> None:
        RUN_TAG.set(tag)
        async with contextlib.aclosing(runner.run_async(
                user_id=USER_ID, session_id=sid, new_message=message)) as agen:
            async for event in agen:
                h.run.events.append(event)

    run_a = asyncio.ensure_future(consume("A", types.Content(role="user", parts=[
        types.Part(text="refund A1")])))
    try:
        await h.until_stored(runner, sid, "call-ticket", responses=("call-a1",))
        answer = types.Content(role="user", parts=[types.Part(
            function_response=types.FunctionResponse(id="call-ticket", name="open_ticket",
                                                     response={"status": "approved"}))])
        run_b = asyncio.ensure_future(consume("B", answer))
        await run_a
        a_done.set()
        await run_b
    finally:
        a_done.set()
        run_a.cancel()


async def _agent_tool(h: Harness) -> None:
    t = scenario_tools(h.probe)
    child = scripted_agent("researcher", [[call("lookup_order", "call-child", order_id="C1")]],
                   [t["lookup_order"]], description="Looks up orders.")
    # A sibling outlasts the nested run: ADK 1.x closes the nested runner (and so
    # the shared plugin) while it still runs, which must not sweep it.
    turns = [[call("researcher", "call-agent", request="find C1"),
              call("wait_briefly", "call-sibling")]]
    await h.run_async(scripted_agent("manager", turns, [AgentTool(child), t["wait_briefly"]]))


async def _caller_timeout(h: Harness) -> None:
    t = scenario_tools(h.probe)
    turns = [[call("slow_search", "call-slow", query="x"),
              call("lookup_order", "call-quick", order_id="Q1")]]
    agent = scripted_agent("clerk", turns, [t["slow_search"], t["lookup_order"]])
    run = asyncio.ensure_future(h.run_async(agent))
    # The clock starts once the quick call has returned and the slow one runs: the
    # cut then always leaves both calls without a stored response.
    await h.probe.wait_finished("call-quick")
    await h.probe.wait_started("call-slow")
    try:
        await asyncio.wait_for(run, 0.2)
    except asyncio.TimeoutError as e:
        h.run.error = e


async def _consumer_cancelled(h: Harness) -> None:
    t = scenario_tools(h.probe)
    agent = scripted_agent("clerk", [[call("slow_search", "call-slow", query="x")]],
                           [t["slow_search"]])
    task = asyncio.create_task(h.run_async(agent))
    await h.probe.wait_started("call-slow")
    task.cancel()
    try:
        await task
    except asyncio.CancelledError as e:
        h.run.error = e


def _pool_config() -> RunConfig:
    from google.adk.agents.run_config import ToolThreadPoolConfig  # type: ignore[attr-defined]

    return RunConfig(tool_thread_pool_config=ToolThreadPoolConfig())


async def _thread_pool_call(h: Harness) -> None:
    t = scenario_tools(h.probe)
    agent = scripted_agent("analyst", [[call("crunch_numbers", "call-crunch", seconds=0.05)]],
                   [t["crunch_numbers"]])
    await h.run_async(agent, run_config=_pool_config())


async def _thread_pool_timeout(h: Harness) -> None:
    t = scenario_tools(h.probe)
    agent = scripted_agent("analyst", [[call("crunch_numbers", "call-crunch", seconds=1.0)]],
                   [t["crunch_numbers"]])
    run = asyncio.ensure_future(h.run_async(agent, run_config=_pool_config()))
    await h.probe.wait_blocked("call-crunch")
    h.probe.times["timeout_from"] = time.monotonic()
    try:
        await asyncio.wait_for(run, 0.3)
    except asyncio.TimeoutError as e:
        h.run.error = e
    h.probe.times["run_left"] = time.monotonic()  # the caller has left the run


async def _live_thread_pool(h: Harness) -> None:
    from google.adk.agents.run_config import ToolThreadPoolConfig  # type: ignore[attr-defined]

    t = scenario_tools(h.probe)
    agent, model = live_agent("analyst", [t["crunch_numbers"]])
    async with h.live(agent, tool_thread_pool_config=ToolThreadPoolConfig()) as agen:
        model.say_live(call("crunch_numbers", "call-crunch", seconds=30.0))
        await h.live_while(agen, h.probe.wait_blocked("call-crunch"), timeout=30)
    # leaving the block: the caller walks away while the thread still crunches


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("seed_bug", "live: two calls to one streaming tool, then the caller leaves "
             "(ADK issue 7058)", "live", _seed_bug),
    Scenario("single_call", "one async tool call", "async", _single_call),
    Scenario("parallel_calls", "three parallel calls, sync and async tools", "async",
             _parallel_calls),
    Scenario("parallel_one_fails", "three parallel calls; one raises, its siblings are "
             "cancelled", "async", _parallel_one_fails),
    Scenario("recovered_error", "a tool raises and an error callback answers for it",
             "async", _recovered_error),
    Scenario("long_running", "a LongRunningFunctionTool", "async", _long_running),
    Scenario("overlapping_runs", "a client answers a long-running call while its run "
             "still works: two runs of one session overlap (one invocation id on ADK 2.x)",
             "async", _overlapping_runs),
    Scenario("agent_tool", "an AgentTool: a nested run with its own tool call, beside a "
             "slower sibling", "async",
             _agent_tool),
    Scenario("caller_timeout", "a timeout around run_async cancels a slow tool after its "
             "quick sibling returned", "async",
             _caller_timeout),
    Scenario("consumer_cancelled", "the task consuming run_async is cancelled", "async",
             _consumer_cancelled),
    Scenario("caller_abort", "the caller aborts the run with run_async(abort_signal=...) "
             "(ADK 2.x)", "async", _caller_abort, available=compat.runner_accepts_abort_signal),
    Scenario("live_stream_teardown", "live: one streaming call, then the caller leaves",
             "live", _live_stream_teardown),
    Scenario("live_stop_streaming", "live: a streaming call stopped by stop_streaming",
             "live", _live_stop_streaming),
    Scenario("live_non_blocking", "live: a non-blocking tool", "live", _live_non_blocking),
    Scenario("live_stubborn_tool", "live: a streaming tool that ignores cancellation (an "
             "application bug: orphaned on every ADK version)", "live", _live_stubborn_tool,
             audit=False),
    Scenario("thread_pool_call", "a synchronous tool that ADK runs on its tool thread pool "
             f"({compat.HOLDS_ON['run_async_tool_thread_pool']})", "async", _thread_pool_call,
             available=lambda: compat.RUN_ASYNC_USES_TOOL_THREAD_POOL),
    Scenario("thread_pool_timeout", "a timeout around run_async cuts a synchronous tool on "
             "ADK's thread pool; its thread runs on (a thread cannot be cancelled: orphaned "
             "on every ADK that uses the pool)", "async", _thread_pool_timeout, audit=False,
             available=lambda: compat.RUN_ASYNC_USES_TOOL_THREAD_POOL),
    Scenario("live_thread_pool", "live: the caller leaves while a synchronous tool runs on "
             f"ADK's thread pool ({compat.HOLDS_ON['tool_thread_pool']}); its thread runs on",
             "live", _live_thread_pool,
             audit=False, available=lambda: compat.HAS_TOOL_THREAD_POOL),
    Scenario("fire_and_forget", "a tool spawns a task and returns (seen only in strict "
             "mode)", "async", _fire_and_forget, audit=False),
    Scenario("unended_span", "a tool opens a span and never ends it (seen with "
             "OpenSpanProcessor)", "async", _unended_span, audit=False),
] if s.available()}


async def run_scenario(name: str, plugins: Sequence[BasePlugin],
                       *, close_runner: bool = True) -> ScenarioRun:
    """Runs one scenario with ``plugins``. Body tasks still running are left to the
    caller (``run.probe.cleanup()``), so that it can check what is still alive."""
    scenario = SCENARIOS[name]
    run = ScenarioRun(name, Probe())
    harness = Harness(plugins, run.probe, run)
    await scenario.body(harness)
    # Let done-callbacks of tasks that ended at teardown run.
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    if close_runner:
        await harness.close()
    return run




async def run_parallel_calls(plugins: Sequence[BasePlugin], *, runs: int, calls: int) -> int:
    """``runs`` runs, one after another on one Runner, each with ``calls`` parallel calls.

    The workload of the scale tests and the benchmarks. Returns the number of tool
    bodies that ran.
    """
    counter = [0]

    async def fetch(item: int) -> dict[str, int]:
        """Fetches one item."""
        counter[0] += 1
        await asyncio.sleep(0)
        return {"item": item}

    turn = [call("fetch", f"call-{i}", item=i) for i in range(calls)]
    model = ScriptedLlm(turns=[turn, [text("done")]], repeat=True)
    agent = LlmAgent(name="worker", model=model, instruction="scripted", tools=[fetch])
    app = App(name=APP_NAME, root_agent=agent, plugins=list(plugins))
    runner = Runner(app=app, session_service=InMemorySessionService())
    content = types.Content(role="user", parts=[types.Part(text="go")])
    for _ in range(runs):
        session = await runner.session_service.create_session(app_name=APP_NAME,
                                                              user_id=USER_ID)
        async with contextlib.aclosing(runner.run_async(
                user_id=USER_ID, session_id=session.id, new_message=content)) as agen:
            async for _event in agen:
                pass
    await runner.close()
    return counter[0]


async def run_concurrent_mixed(plugins: Sequence[BasePlugin], *, runs: int, calls: int,
                               fail_every: int = 4) -> list[BaseException | None]:
    """``runs`` concurrent runs with ``calls`` parallel calls each; every
    ``fail_every``-th run has one call that raises, so its siblings are cancelled.

    The load test's workload. Returns what each run raised (None for success).
    """
    async def work(item: int, fail: bool) -> dict[str, int]:
        """Does one item of work."""
        await asyncio.sleep(0.001 * (item % 5))
        if fail:
            raise ValueError(f"item {item} failed")
        return {"item": item}

    async def one(r: int) -> BaseException | None:
        failing = fail_every > 0 and r % fail_every == 0
        turn = [call("work", f"call-{r}-{i}", item=i, fail=failing and i == 0)
                for i in range(calls)]
        agent = LlmAgent(name="worker", model=ScriptedLlm(turns=[turn]),
                         instruction="scripted", tools=[work])
        runner = Runner(app=App(name=APP_NAME, root_agent=agent, plugins=list(plugins)),
                        session_service=InMemorySessionService())
        session = await runner.session_service.create_session(app_name=APP_NAME,
                                                              user_id=USER_ID)
        content = types.Content(role="user", parts=[types.Part(text="go")])
        try:
            async for _event in runner.run_async(user_id=USER_ID, session_id=session.id,
                                                 new_message=content):
                pass
        except ValueError as e:
            return e
        return None

    return list(await asyncio.gather(*(one(r) for r in range(runs))))


__all__ = ["SCENARIOS", "Harness", "Probe", "Scenario", "ScenarioRun", "run_concurrent_mixed",
           "run_parallel_calls", "run_scenario", "scenario_tools", "scripted_agent"]


# --- stuck_upstream (issue 33): a call caught stuck while it runs ----------------------
# Kept at the end of the module: the captured outputs in the docs name lines above.

#: How late stuck_upstream's upstream answers, and the threshold the CLI's plugin takes
#: for it: stuck records at 0.3, 0.6 and 1.2 s while the call waits, then it returns.
STUCK_UPSTREAM_S = 1.5
STUCK_AFTER_DEMO_S = 0.3
#: Plugin options the CLI's plugin takes per scenario (the others: the defaults).
PLUGIN_OPTIONS: dict[str, dict[str, Any]] = {
    "stuck_upstream": {"stuck_after": STUCK_AFTER_DEMO_S}}


def _ledger_tool(probe: Probe) -> Callable[..., Any]:
    async def query_ledger(account: str, tool_context: ToolContext) -> dict[str, str]:
        """Queries a ledger service that answers late (the tool sets no timeout)."""
        probe.enter(tool_context)
        await asyncio.sleep(STUCK_UPSTREAM_S)  # the upstream answers late
        return {"account": account, "balance": "42"}

    return query_ledger


async def _stuck_upstream(h: Harness) -> None:
    agent = scripted_agent("bookkeeper", [[call("query_ledger", "call-ledger",
                                                account="ACME-7")]], [_ledger_tool(h.probe)])
    await h.run_async(agent)


SCENARIOS["stuck_upstream"] = Scenario(
    "stuck_upstream", f"a tool whose upstream answers after {STUCK_UPSTREAM_S:g} s: caught "
    f"stuck while it runs (stuck_after {STUCK_AFTER_DEMO_S:g} s)", "async", _stuck_upstream,
    audit=False)
