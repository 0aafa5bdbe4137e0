"""Synchronous tools on ADK's tool thread pool: a task's life is its thread's life.

With ``RunConfig.tool_thread_pool_config`` ADK runs a synchronous ``FunctionTool`` on a
ThreadPoolExecutor (run_async calls from 2.11, live calls from 1.24). A thread cannot be
cancelled: when the caller times out, the awaiting task ends at once and the callable
runs on. The oracle is the pool's own future of the call (``Probe.enter_thread``) and
the moments the tool and the scenario note (``Probe.times``), never the plugin.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from adk_task_telemetry import TrackerState
from adk_task_telemetry import adk_compat as compat
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.signals.stacks import innermost_user_frame
from adk_task_telemetry.testing import (
    Harness,
    Probe,
    ScenarioRun,
    call,
    run_scenario,
    scenario_tools,
    scripted_agent,
)

from .conftest import Telemetry

pytest_plugins = ["pytester"]

ON_POOL = compat.RUN_ASYNC_USES_TOOL_THREAD_POOL
#: Live calls go to the pool from 1.24, and the plugin sees live calls from 1.27.
LIVE_ON_POOL = compat.HAS_TOOL_THREAD_POOL and compat.LIVE_CALLS_RUN_PLUGIN_CALLBACKS
#: The scenarios where a thread outlives its run, on this ADK.
CUT = [n for n, on in (("thread_pool_timeout", ON_POOL), ("live_thread_pool", LIVE_ON_POOL))
       if on]
needs_pool = pytest.mark.skipif(not ON_POOL, reason=(
    "this google-adk runs a run_async call to a synchronous tool on the event loop, "
    "pool or not (only 2.11 on use the pool there): there is no thread to outlive a run"))
BLOCKING_LINE = "probe.stop.wait(seconds)"


def _sum(points: list[Any]) -> float:
    return sum(p.value for p in points)


def _events(span: Any, name: str) -> list[Any]:
    return [e for e in span.events if e.name == name]


def _pool_config(max_workers: int = 4) -> Any:
    from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig

    return RunConfig(tool_thread_pool_config=ToolThreadPoolConfig(max_workers=max_workers))


async def _until(done: Any) -> None:
    while not done():
        await asyncio.sleep(0.01)


async def _truth(run: ScenarioRun, call_id: str) -> asyncio.Future[Any]:
    """The pool's future of ``call_id``, once the tool has entered its thread."""
    await run.probe.wait_started(call_id)
    return run.probe.tasks[call_id]


@needs_pool
async def test_a_cut_thread_is_an_orphan_until_it_returns(
        telemetry: Telemetry, caplog: pytest.LogCaptureFixture) -> None:
    """The issue's trial: 1 s of blocking work, a caller's timeout of 0.3 s."""
    plugin = telemetry.plugin()
    with caplog.at_level(logging.WARNING, logger=sc.LOGGER_NAME):
        run = await run_scenario("thread_pool_timeout", [plugin])
    work = await _truth(run, "call-crunch")
    try:
        assert isinstance(run.error, asyncio.TimeoutError)
        assert not work.done(), "the thread should still run its callable"  # ground truth
        # While it runs, the plugin holds it as an orphan.
        assert plugin.state() == TrackerState(0, 0, 1)
        (span,) = telemetry.tool_spans()
        attrs = dict(span.attributes or {})
        assert attrs[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.ORPHANED
        # The awaiting side: cancelled by its caller, said as for an async tool.
        (cancelled,) = _events(span, sc.EVENT_CANCELLED)
        assert cancelled.attributes[sc.ADK_TOOL_TASK_CANCEL_CAUSE] == "caller_cancelled"
        (event,) = _events(span, sc.EVENT_ORPHANED_TASK)
        ea = dict(event.attributes or {})
        assert ea[sc.GEN_AI_TOOL_CALL_ID] == "call-crunch"
        assert ea[sc.ADK_RUN_END_TRIGGER]
        assert float(ea[sc.ADK_TOOL_TASK_AGE]) > 0
        assert cancelled.timestamp <= event.timestamp
        # The stack is the pool thread's, and names the tool's blocking line.
        stack = str(ea[sc.CODE_STACKTRACE])
        frame = innermost_user_frame(stack)
        assert frame is not None
        assert (frame.func, frame.code) == ("crunch_numbers", BLOCKING_LINE), stack
        assert frame.file.endswith("tools.py")
        assert "concurrent/futures/thread.py" in stack  # the worker's frames, not the task's
        m = telemetry.metrics()
        assert _sum(m[sc.METRIC_ORPHANED]) == 1
        assert _sum(m[sc.METRIC_ORPHANS_ALIVE]) == 1
        assert sum(p.count for p in m.get(sc.METRIC_DURATION, [])) == 0
        (warning,) = [r for r in caplog.records if r.name == sc.LOGGER_NAME
                      and r.getMessage().startswith("orphaned tool task")]
        assert "call-crunch" in warning.getMessage()
        (point,) = m[sc.METRIC_ORPHANED]
        assert point.attributes[sc.ADK_RUN_END_TRIGGER] == ea[sc.ADK_RUN_END_TRIGGER]
        # Let the thread run its second to the end: nothing cuts it short.
        await asyncio.wait_for(asyncio.shield(work), 10)
        seen_done = time.monotonic()  # the plugin's end came before (its callback is first)
    finally:
        await run.probe.cleanup()
    await asyncio.sleep(0)
    assert plugin.state() == TrackerState(0, 0, 0)
    m = telemetry.metrics()
    assert _sum(m[sc.METRIC_ORPHANS_ALIVE]) == 0
    (life,) = m[sc.METRIC_ORPHAN_LIFETIME]
    assert life.count == 1
    assert life.attributes[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.OK  # the callable returned
    # How long it ran past its run: the run ended between the timeout's start + 0.3 s
    # and the caller's leaving; the callable returned at "returned", seen ended later.
    times = run.probe.times
    returned = times["call-crunch/returned"]
    assert returned - times["run_left"] <= life.sum
    assert life.sum <= seen_done - (times["timeout_from"] + 0.3) + 0.01
    assert plugin.internal_errors == 0


@pytest.mark.skipif(not LIVE_ON_POOL, reason=(
    "a google-adk without the pool (before 1.24) or that calls no plugin callback for a "
    "live tool call (before 1.27)"))
async def test_a_live_run_left_while_its_thread_works_has_a_thread_orphan(
        telemetry: Telemetry) -> None:
    plugin = telemetry.plugin()
    run = await run_scenario("live_thread_pool", [plugin])
    work = await _truth(run, "call-crunch")
    try:
        assert not work.done()  # ground truth: the thread still crunches
        assert plugin.state() == TrackerState(0, 0, 1)
        (span,) = telemetry.tool_spans()
        (event,) = _events(span, sc.EVENT_ORPHANED_TASK)
        frame = innermost_user_frame(str(event.attributes[sc.CODE_STACKTRACE]))
        assert frame is not None and (frame.func, frame.code) == ("crunch_numbers",
                                                                  BLOCKING_LINE)
        assert _sum(telemetry.metrics()[sc.METRIC_ORPHANS_ALIVE]) == 1
    finally:
        await run.probe.cleanup()  # ends the blocking wait: the callable returns
    assert work.done()
    await asyncio.sleep(0)
    assert plugin.state() == TrackerState(0, 0, 0)
    m = telemetry.metrics()
    assert _sum(m[sc.METRIC_ORPHANS_ALIVE]) == 0
    (life,) = m[sc.METRIC_ORPHAN_LIFETIME]
    assert life.count == 1 and life.attributes[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.OK


@needs_pool
async def test_a_thread_that_returns_inside_its_run_reports_nothing(
        telemetry: Telemetry, caplog: pytest.LogCaptureFixture) -> None:
    plugin = telemetry.plugin()
    with caplog.at_level(logging.WARNING, logger=sc.LOGGER_NAME):
        run = await run_scenario("thread_pool_call", [plugin])
    work = await _truth(run, "call-crunch")
    assert work.done() and work.result() == {"status": "crunched"}  # it ran on the pool
    assert plugin.state() == TrackerState(0, 0, 0)  # at once: no cleanup needed
    (span,) = telemetry.tool_spans()
    assert (span.attributes or {})[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.OK
    assert not _events(span, sc.EVENT_ORPHANED_TASK) and not _events(span, sc.EVENT_CANCELLED)
    assert [r for r in caplog.records if r.name == sc.LOGGER_NAME] == []
    m = telemetry.metrics()
    assert sc.METRIC_ORPHANED not in m
    (duration,) = m[sc.METRIC_DURATION]
    assert duration.count == 1
    # What ADK did is unchanged: the callable's result is the call's response.
    responses = [p.function_response.response for e in await run.stored_events()
                 if e.content and e.content.parts for p in e.content.parts
                 if p.function_response is not None]
    assert responses == [{"status": "crunched"}]


@needs_pool
async def test_pool_saturation_is_busy_queued_and_max_workers(telemetry: Telemetry) -> None:
    """Three blocking calls on a pool of two: two threads busy, one call waiting."""
    plugin = telemetry.plugin()
    run = ScenarioRun("saturated", Probe())
    h = Harness([plugin], run.probe, run)
    t = scenario_tools(run.probe)
    turns = [[call("crunch_numbers", f"call-{i}", seconds=30.0) for i in range(3)]]
    agent = scripted_agent("analyst", turns, [t["crunch_numbers"]])
    runner = asyncio.ensure_future(h.run_async(agent, run_config=_pool_config(max_workers=2)))

    def gauges() -> tuple[float, float, float]:
        m = telemetry.metrics()
        return tuple(_sum(m.get(n, [])) for n in (  # type: ignore[return-value]
            sc.METRIC_POOL_BUSY, sc.METRIC_POOL_QUEUED, sc.METRIC_POOL_MAX_WORKERS))

    try:
        await asyncio.wait_for(_until(lambda: len(run.probe.tasks) >= 2), 15)
        assert len(run.probe.tasks) == 2  # the third waits for a thread (ground truth)
        busy, queued, workers = gauges()
        assert (busy, queued) == (2, 1)
        assert workers >= 2  # this loop's pool (pools of earlier tests' loops may live on)
        units = {m.name: m.unit for rm in telemetry.reader.get_metrics_data().resource_metrics
                 for sm in rm.scope_metrics for m in sm.metrics}
        assert units[sc.METRIC_POOL_BUSY] == units[sc.METRIC_POOL_MAX_WORKERS] == "{thread}"
        assert units[sc.METRIC_POOL_QUEUED] == "{call}"
    finally:
        run.probe.stop.set()  # every body returns at once, the third too
        await asyncio.wait_for(runner, 15)
        await h.close()
    assert sorted(run.probe.tasks) == ["call-0", "call-1", "call-2"]
    await asyncio.wait(list(run.probe.tasks.values()), timeout=10)
    assert gauges()[:2] == (0, 0)
    assert plugin.state() == TrackerState(0, 0, 0)


@pytest.mark.skipif(ON_POOL or not compat.HAS_TOOL_THREAD_POOL, reason=(
    "for a google-adk with the pool setting whose run_async ignores it (1.24 to 2.10)"))
async def test_where_run_async_ignores_the_pool_nothing_changes(telemetry: Telemetry) -> None:
    plugin = telemetry.plugin()
    run = ScenarioRun("no_pool", Probe())
    h = Harness([plugin], run.probe, run)
    t = scenario_tools(run.probe)
    agent = scripted_agent("analyst", [[call("crunch_numbers", "call-crunch", seconds=0.0)]],
                           [t["crunch_numbers"]])
    await h.run_async(agent, run_config=_pool_config())
    await h.close()
    # ADK ran it on the event loop: its body's task is the loop's, not a pool future.
    assert isinstance(run.probe.tasks["call-crunch"], asyncio.Task)
    (span,) = telemetry.tool_spans()
    assert (span.attributes or {})[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.OK
    assert plugin.state() == TrackerState(0, 0, 0)


#: In a fresh interpreter: no plugin of another test holds the hooks.
RESTORE_SCRIPT = textwrap.dedent('''
    import asyncio, gc, json, sys
    from adk_task_telemetry import TaskTelemetryPlugin, observe
    from adk_task_telemetry.scenarios import run_scenario
    import google.adk.runners  # noqa: F401  (ADK's modules, as an app imports them)

    NAME = "_get_tool_thread_pool"

    def holders():
        return {n: getattr(m, NAME) for n, m in list(sys.modules.items())
                if n.startswith("google.adk") and hasattr(m, NAME)}

    original = holders()
    getter = next(iter(original.values()))
    out = {"modules": sorted(original),
           "one_getter": len({id(f) for f in original.values()}) == 1}

    def state(pool):
        now = holders()
        return {"hooked": all(f is not getter and getattr(f, "__wrapped__", None) is getter
                              for f in now.values()),
                "restored": all(f is getter for f in now.values()),
                "modules": sorted(now),
                "pool_submit_patched": "submit" in vars(pool)}

    def pool_now():
        """ADK's pool of this loop, through whatever getter ADK's module holds now."""
        return getattr(sys.modules[getter.__module__], NAME)(4)

    SCENARIO, OUTCOME = sys.argv[1:3]

    async def scenario(plugin):
        run = await run_scenario(SCENARIO, [plugin], close_runner=False)
        await run.probe.cleanup()

    async def main():
        seen = []
        observe.add_observer(seen.append)
        p1, p2 = TaskTelemetryPlugin(), TaskTelemetryPlugin()
        pool = pool_now()
        out["installed"] = state(pool)
        await scenario(p1)
        out["ran_tracked"] = [(s.call_id, s.outcome) for s in seen
                              if hasattr(s, "outcome")] == [("call-crunch", OUTCOME)]
        await p1.close()
        out["one_closed"] = state(pool)
        await p2.close()
        out["all_closed"] = state(pool)  # closed, not gone: an App may run them again
        del p1, p2
        gc.collect()
        out["all_gone"] = state(pool)
        out["same_pool"] = pool_now() is pool
        # A new plugin hooks the pool again; its end undoes it again.
        p3 = TaskTelemetryPlugin()
        await scenario(p3)
        out["reopened"] = state(pool)
        await p3.close()
        del p3
        gc.collect()
        out["gone_again"] = state(pool)

    asyncio.run(main())
    print(json.dumps(out))
''')


@pytest.mark.skipif(not CUT, reason=(
    "the restore is shown with a call the plugin sees on the pool (ADK 1.27 on)"))
def test_the_hooks_are_undone_when_the_last_plugin_is_gone() -> None:
    """Kept while any plugin lives, closed or not (a Runner per request must not undo
    and redo them, issue 24); undone by identity once the last one is collected."""
    scenario = ("thread_pool_call", "ok") if ON_POOL else ("live_thread_pool", "orphaned")
    proc = subprocess.run([sys.executable, "-c", RESTORE_SCRIPT, *scenario], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ),
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["one_getter"] and out["modules"]
    assert out["installed"]["hooked"] and out["installed"]["pool_submit_patched"]
    assert out["ran_tracked"]
    assert out["one_closed"]["hooked"] and out["one_closed"]["pool_submit_patched"]
    assert out["all_closed"]["hooked"] and out["all_closed"]["pool_submit_patched"]
    # Restored by identity: ADK's own function in every module, ADK's own submit.
    assert out["all_gone"]["restored"] and not out["all_gone"]["pool_submit_patched"]
    assert out["all_gone"]["modules"] == out["modules"]
    assert out["same_pool"]
    assert out["reopened"]["hooked"] and out["reopened"]["pool_submit_patched"]
    assert out["gone_again"]["restored"] and not out["gone_again"]["pool_submit_patched"]


def test_nothing_is_hooked_where_adk_has_no_pool() -> None:
    """Below 1.24 there is no pool setting and no getter: no listener, no hook."""
    from google.adk.agents import run_config

    has_setting = hasattr(run_config, "ToolThreadPoolConfig")
    assert has_setting == compat.HAS_TOOL_THREAD_POOL
    assert compat.features()["tool_thread_pool"] == has_setting
    if not has_setting:
        compat.add_thread_work_listener(object())  # would fail if it tried to hook
        assert compat.tool_pool_usage() == []


# --- the CLI audit, the pytest gate ------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "TERM")}
    env.update({"COLUMNS": "110", "PYTHONIOENCODING": "utf-8"})
    return subprocess.run([sys.executable, "-m", "adk_task_telemetry.cli", *args],
                          capture_output=True, text=True, timeout=180, env=env,
                          stdin=subprocess.DEVNULL)


@pytest.mark.skipif(not CUT, reason=(
    "no call the plugin sees runs on a pool thread on this google-adk (1.27 on: live)"))
def test_the_audit_names_the_thread_orphan_and_where_it_blocks() -> None:
    clean = ["thread_pool_call"] if ON_POOL else []
    proc = _cli("audit", "-q", "--json", *(a for n in CUT + clean for a in ("-s", n)))
    assert proc.returncode == 1, proc.stderr  # an orphan fails the audit
    doc = json.loads(proc.stdout)
    by_name = {s["name"]: s for s in doc["scenarios"]}
    for name in clean:
        assert by_name[name]["verdict"] == "clean" and by_name[name]["ended"]["ok"] == 1
    for name in CUT:
        cut = by_name[name]
        assert cut["verdict"] == "orphaned" and cut["in_corpus"] is False
        (orphan,) = cut["orphans"]
        assert orphan["call_id"] == "call-crunch" and orphan["tool"] == "crunch_numbers"
        assert orphan["still_running"] is True  # the pool's future, read before cleanup
        assert orphan["stuck_at"]["function"] == "crunch_numbers"
        assert orphan["stuck_at"]["file"].endswith("tools.py")
        assert orphan["stuck_at"]["code"] == BLOCKING_LINE
        (task,) = cut["tasks"]
        assert task["outcome"] == "orphaned" and task["cancel_cause"] == "caller_cancelled"
        assert cut["started"] == cut["orphaned"] == 1 and cut["unaccounted"] == 0


GATE_TEST = '''
import asyncio

from adk_task_telemetry.scenarios import run_scenario


def test_sync_tool_cut_by_its_caller():
    async def main():
        run = await run_scenario("{cut}", [])
        await run.probe.cleanup()
    asyncio.run(main())


def test_sync_tool_that_returns():
    asyncio.run(run_scenario("{clean}", []))
'''


@pytest.mark.skipif(not CUT, reason=(
    "no call the plugin sees runs on a pool thread on this google-adk (1.27 on: live)"))
def test_the_pytest_gate_fails_a_test_whose_thread_outlives_its_run(
        pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    clean = "thread_pool_call" if ON_POOL else "single_call"
    pytester.makepyfile(test_inner=GATE_TEST.format(cut=CUT[0], clean=clean))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-ra",
                                           "--adk-fail-on-orphans", timeout=240)
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    assert "1 tool task orphaned during call" in out, out
    assert "crunch_numbers call-crunch (call): run ended by" in out, out
    assert "in crunch_numbers" in out and BLOCKING_LINE in out, out
    result.stdout.fnmatch_lines(["FAILED test_inner.py::test_sync_tool_cut_by_its_caller *"])



def test_thread_stack_is_empty_for_work_no_thread_runs() -> None:
    """A queued or finished call has no thread to read a stack from."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from adk_task_telemetry.signals.stacks import thread_stack

    assert thread_stack(Future()) == ""
    gate = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(gate.wait, 10)
        queued = pool.submit(gate.wait, 10)
        while not running.running():
            gate.wait(0.005)
        assert "gate.wait" not in thread_stack(queued) and thread_stack(queued) == ""
        assert "threading.py" in thread_stack(running)
        gate.set()
    assert thread_stack(running) == ""


@pytest.mark.skipif(not CUT, reason=(
    "no call the plugin sees runs on a pool thread on this google-adk (1.27 on: live)"))
def test_the_html_report_draws_the_thread_orphan_still_running(
        tmp_path: Path) -> None:
    from .test_html_report import READ_REPORT_JS, Chromium, _assert_same_stack, _chromium_binary

    out = tmp_path / "report.html"
    proc = _cli("audit", "-q", "--json", "--html", str(out),
                *(a for n in CUT for a in ("-s", n)))
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    (tmp_path / "profile").mkdir()
    browser = Chromium(_chromium_binary(), tmp_path / "profile")
    try:
        report = browser.load(out.as_uri()).eval(READ_REPORT_JS)
    finally:
        browser.close()
    for want, got in zip(doc["scenarios"], report["scenarios"], strict=True):
        assert got["name"] == want["name"] and got["verdict"] == "orphaned"
        (row,) = got["tasks"]
        assert (row["call_id"], row["outcome"]) == ("call-crunch", "orphaned")
        assert "ORPHANED still running" in row["cells"][4]
        assert row["tail"] is not None and row["tail"]["width"] > 20  # past its run's end
        (json_orphan,), (shown,) = want["orphans"], got["orphans"]
        _assert_same_stack(shown["stack"], json_orphan["stacktrace"])
        mark, code = shown["stuck"]
        assert mark.endswith(f'line {json_orphan["stuck_at"]["line"]}, in crunch_numbers')
        assert code.strip() == BLOCKING_LINE
