"""Stuck now (issue 33): a tool task that runs too long is found while it still runs.

The real Runner with a scripted model runs a tool that waits on an event nobody sets
(an upstream that never answers). The oracle is the tool's own code (the line it
waits on) and the spans the SDK exports when the task finally ends, never the plugin's
state: the stuck record must carry the trace id and span id of that final span, and
the line of the tool's code. The live view is read over a real socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import socket
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from google.adk.tools.tool_context import ToolContext

from adk_task_telemetry import TaskTelemetryPlugin, debug_endpoint
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.cli.dispatch import main as cli_main
from adk_task_telemetry.engine import stuck_sweep
from adk_task_telemetry.signals.stacks import innermost_user_frame
from adk_task_telemetry.testing import (
    Harness,
    Probe,
    ScenarioRun,
    call,
    run_scenario,
    scripted_agent,
    stuck_sweeps,
    sweep_stuck,
)

from .conftest import Telemetry

STUCK_AFTER = 0.2
WAIT_LINE = "await upstream.wait()"
STUCK = "stuck tool task:"


@pytest.fixture(autouse=True)
def no_endpoint() -> Iterator[None]:
    debug_endpoint.stop()
    yield
    debug_endpoint.stop()


async def _until(done: Any, timeout: float = 60.0) -> None:
    """Polls for a positive signal (bounded only so that a broken build fails)."""
    async def poll() -> None:
        while not done():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(poll(), timeout)


class Upstream:
    """A tool whose upstream never answers until the test says so."""

    def __init__(self) -> None:
        self.upstream = asyncio.Event()
        self.started = asyncio.Event()

    def tool(self) -> Any:
        upstream, started = self.upstream, self.started

        async def fetch_quote(symbol: str, tool_context: ToolContext) -> dict[str, str]:
            """Fetches a quote from an upstream that may never answer."""
            started.set()
            await upstream.wait()
            return {"symbol": symbol, "price": "1"}

        return fetch_quote


@contextlib.asynccontextmanager
async def _running(plugin: TaskTelemetryPlugin, up: Upstream, call_id: str = "call-quote"
                   ) -> AsyncIterator[asyncio.Task[None]]:
    """A run whose tool call hangs until ``up.upstream`` is set; ended on leaving."""
    probe = Probe()
    harness = Harness([plugin], probe, ScenarioRun("stuck", probe))
    agent = scripted_agent("trader", [[call("fetch_quote", call_id, symbol="GOOG")]],
                           [up.tool()])
    run = asyncio.ensure_future(harness.run_async(agent))
    try:
        await _until(up.started.is_set)
        yield run
    finally:
        up.upstream.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(run, 30)
        await harness.close()


def _attrs(record: Any) -> dict[str, Any]:
    return dict(record.attributes or {})


async def test_a_stuck_task_is_reported_while_it_runs_with_its_trace_and_line(
        telemetry: Telemetry) -> None:
    plugin = telemetry.plugin(stuck_after=STUCK_AFTER)
    up = Upstream()
    async with _running(plugin, up) as run:
        await _until(lambda: len(telemetry.log_records(STUCK)) >= 3)
        assert not run.done(), "the stuck records must come while the task runs"
        assert telemetry.tool_spans() == []  # the task's span is not exported yet
        records = telemetry.log_records(STUCK)[:3]
    await run
    (span,) = telemetry.tool_spans()
    ctx = span.get_span_context()
    for n, record in enumerate(records, start=1):
        a = _attrs(record)
        # The same trace and the same span as the task's final span: one span, not two.
        assert (record.trace_id, record.span_id) == (ctx.trace_id, ctx.span_id)
        assert a[sc.GEN_AI_TOOL_CALL_ID] == "call-quote"
        assert a[sc.GEN_AI_TOOL_NAME] == "fetch_quote"
        assert a[sc.ADK_INVOCATION_ID] == span.attributes[sc.ADK_INVOCATION_ID]
        assert a[sc.GEN_AI_CONVERSATION_ID] == span.attributes[sc.GEN_AI_CONVERSATION_ID]
        assert a[sc.ADK_TOOL_TASK_STATE] == sc.TaskState.RUNNING
        # Doubling: the n-th report at an age of at least stuck_after x 2^(n-1).
        assert a[sc.ADK_TOOL_TASK_STUCK_REPORT] == n
        assert a[sc.ADK_TOOL_TASK_AGE] >= STUCK_AFTER * 2 ** (n - 1)
        frame = innermost_user_frame(a[sc.CODE_STACKTRACE])
        assert frame is not None and (frame.func, frame.code) == ("fetch_quote", WAIT_LINE)
        assert frame.file == __file__
        assert "waits at" in str(record.body) and "fetch_quote" in str(record.body)
    # The final span carries the same findings as events, before its end.
    events = [e for e in span.events if e.name == sc.EVENT_STUCK_TASK]
    assert len(events) >= 3
    assert all(e.timestamp <= (span.end_time or 0) for e in events)
    assert span.attributes[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.OK


async def test_none_after_it_ended(telemetry: Telemetry) -> None:
    plugin = telemetry.plugin(stuck_after=STUCK_AFTER)
    up = Upstream()
    async with _running(plugin, up):
        await _until(lambda: telemetry.log_records(STUCK))
    (span,) = telemetry.tool_spans()
    before = len(telemetry.log_records(STUCK))
    sweeps = stuck_sweeps()
    sweep_stuck()  # a sweep after the end: the task is not running, nothing is told
    assert stuck_sweeps() == sweeps + 1
    assert len(telemetry.log_records(STUCK)) == before
    assert all(r.timestamp <= (span.end_time or 0) for r in telemetry.log_records(STUCK))
    assert plugin.open_tasks() == []


async def test_reports_are_bounded(telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
                                   ) -> None:
    monkeypatch.setattr(stuck_sweep, "MAX_REPORTS", 2)
    plugin = telemetry.plugin(stuck_after=STUCK_AFTER / 4)
    up = Upstream()
    async with _running(plugin, up):
        await _until(lambda: len(telemetry.log_records(STUCK)) >= 2)
        # A third would be due from 4x the threshold: wait past it, and for a sweep.
        await _until(lambda: plugin.open_tasks()[0].age > STUCK_AFTER * 2)
        sweeps = stuck_sweeps()
        await _until(lambda: stuck_sweeps() > sweeps)
        assert len(telemetry.log_records(STUCK)) == 2


async def test_off_with_zero(telemetry: Telemetry) -> None:
    plugin = telemetry.plugin(stuck_after=0)
    up = Upstream()
    async with _running(plugin, up):
        await _until(lambda: plugin.open_tasks() and plugin.open_tasks()[0].age > 0.3)
        sweeps = stuck_sweeps()
        sweep_stuck()
        assert stuck_sweeps() > sweeps
        assert telemetry.log_records(STUCK) == []


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


async def test_the_live_view_lists_it_with_the_same_line(telemetry: Telemetry) -> None:
    plugin = telemetry.plugin(stuck_after=STUCK_AFTER, debug_port=0)
    address = debug_endpoint.address()
    assert address is not None and address[0] == "127.0.0.1"  # loopback by default
    url = f"http://{address[0]}:{address[1]}{debug_endpoint.PATH}"
    up = Upstream()
    async with _running(plugin, up):
        await _until(lambda: telemetry.log_records(STUCK))
        record = telemetry.log_records(STUCK)[0]
        doc = await asyncio.to_thread(_get, url)
        (task,) = [t for t in doc["tasks"] if t["call_id"] == "call-quote"]
        assert task["tool"] == "fetch_quote" and task["agent"] == "trader"
        assert task["state"] == "running" and task["age_s"] >= STUCK_AFTER
        assert task["stuck_at"]["code"] == WAIT_LINE
        assert task["stuck_at"]["function"] == "fetch_quote"
        assert task["trace_id"] == format(record.trace_id, "032x")
        assert task["span_id"] == format(record.span_id, "016x")
        assert task["invocation_id"] == _attrs(record)[sc.ADK_INVOCATION_ID]
        assert "captured" not in task  # capture is off
        # The command reads the same endpoint.
        out = await asyncio.to_thread(_cli, ["tasks", "--port", str(address[1]), "--json"])
        (cli_task,) = [t for t in out["processes"][0]["tasks"] if t["call_id"] == "call-quote"]
        assert cli_task["stuck_at"] == task["stuck_at"]
        text = await asyncio.to_thread(_cli_text, ["tasks", "--port", str(address[1])])
        assert "fetch_quote" in text and "call-quote" in text and WAIT_LINE in text
    doc = await asyncio.to_thread(_get, url)
    assert [t for t in doc["tasks"] if t["call_id"] == "call-quote"] == []


async def test_captured_arguments_only_with_capture(telemetry: Telemetry) -> None:
    plugin = telemetry.plugin(stuck_after=STUCK_AFTER, debug_port=0, capture_arguments=True)
    address = debug_endpoint.address()
    assert address is not None
    up = Upstream()
    async with _running(plugin, up):
        doc = await asyncio.to_thread(
            _get, f"http://127.0.0.1:{address[1]}{debug_endpoint.PATH}")
        (task,) = doc["tasks"]
        assert "GOOG" in task["captured"][sc.GEN_AI_TOOL_CALL_ARGUMENTS]


def _cli(argv: list[str]) -> Any:
    return json.loads(_cli_text(argv))


def _cli_text(argv: list[str]) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli_main(argv) == 0
    return buf.getvalue()


def test_the_endpoint_is_off_by_default(telemetry: Telemetry,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ADK_TASK_TELEMETRY_DEBUG_PORT", "ADK_TASK_TELEMETRY_DEBUG_HOST"):
        monkeypatch.delenv(name, raising=False)
    plugin = telemetry.plugin()
    assert plugin.options.debug_port is None
    assert debug_endpoint.address() is None


def test_the_endpoint_from_the_environment(telemetry: Telemetry,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADK_TASK_TELEMETRY_DEBUG_PORT", "0")
    monkeypatch.setenv("ADK_TASK_TELEMETRY_STUCK_AFTER", "30")
    plugin = telemetry.plugin()
    assert plugin.options.stuck_after == 30
    address = debug_endpoint.address()
    assert address is not None and address[0] == "127.0.0.1"
    assert _get(f"http://127.0.0.1:{address[1]}{debug_endpoint.PATH}")["tasks"] == []


def test_a_taken_port_is_a_clear_error(telemetry: Telemetry,
                                       caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(debug_endpoint.DebugPortTaken, match=f"127.0.0.1:{port}.*taken"):
            debug_endpoint.serve(str(port))
        # The plugin logs it and the agent runs on, without the live view.
        with caplog.at_level(logging.ERROR, logger=sc.LOGGER_NAME):
            telemetry.plugin(debug_port=port)
        (error,) = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert f"{port}" in error.getMessage() and "taken" in error.getMessage()
        assert debug_endpoint.address() is None
        # A range: each process (uvicorn worker) takes the first free port of it.
        _host, bound = debug_endpoint.serve(f"{port}-{port + 20}")
        assert port < bound <= port + 20


async def test_a_thread_orphan_stays_stuck_after_its_run_with_the_threads_stack(
        telemetry: Telemetry) -> None:
    """A synchronous tool on ADK's tool thread pool, in a live run the caller left:
    its thread runs on past its run (an orphan), reported stuck with the thread's
    stack and listed as orphaned."""
    plugin = telemetry.plugin(stuck_after=STUCK_AFTER, debug_port=0)
    address = debug_endpoint.address()
    assert address is not None
    run = await run_scenario("live_thread_pool", [plugin])
    try:
        def orphaned() -> list[Any]:
            return [r for r in telemetry.log_records(STUCK)
                    if _attrs(r)[sc.ADK_TOOL_TASK_STATE] == sc.TaskState.ORPHANED]
        await _until(orphaned)
        assert not run.probe.tasks["call-crunch"].done()  # the thread still works
        a = _attrs(orphaned()[0])
        stack = a[sc.CODE_STACKTRACE]
        frame = innermost_user_frame(stack)
        assert frame is not None
        assert (frame.func, frame.code) == ("crunch_numbers", "probe.stop.wait(seconds)")
        assert "concurrent/futures/thread.py" in stack  # the worker thread's frames
        doc = await asyncio.to_thread(
            _get, f"http://127.0.0.1:{address[1]}{debug_endpoint.PATH}")
        (task,) = [t for t in doc["tasks"] if t["call_id"] == "call-crunch"]
        assert task["state"] == "orphaned"
        assert task["stuck_at"]["code"] == "probe.stop.wait(seconds)"
    finally:
        await run.probe.cleanup()
    (span,) = telemetry.tool_spans()
    assert span.attributes[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.ORPHANED
    ctx = span.get_span_context()
    assert {(r.trace_id, r.span_id) for r in telemetry.log_records(STUCK)} == {
        (ctx.trace_id, ctx.span_id)}


async def test_the_oldest_age_gauge(telemetry: Telemetry) -> None:
    plugin = telemetry.plugin(stuck_after=0)
    up = Upstream()
    async with _running(plugin, up):
        await _until(lambda: plugin.open_tasks()[0].age > 0.1)
        points = telemetry.metrics()[sc.METRIC_OLDEST_AGE]
        (point,) = [p for p in points if p.attributes[sc.GEN_AI_TOOL_NAME] == "fetch_quote"]
        assert point.value > 0.1
        assert point.attributes[sc.GEN_AI_AGENT_NAME] == "trader"
        assert point.value <= plugin.open_tasks()[0].age
    (point,) = [p for p in telemetry.metrics()[sc.METRIC_OLDEST_AGE]
                if p.attributes[sc.GEN_AI_TOOL_NAME] == "fetch_quote"]
    assert point.value == 0  # nothing runs: 0, not the last age


def test_the_demo_shows_a_task_caught_while_it_is_stuck() -> None:
    """`make demo` runs `demo -s stuck_upstream`: the task's stuck_task events, read back
    from the exported span, with the line its tool waits on."""
    text = _cli_text(["demo", "-s", "stuck_upstream", "--color", "never", "-q"])
    assert "! stuck query_ledger call-ledger (call): caught while it ran" in text
    assert "in query_ledger" in text
    assert "await asyncio.sleep(STUCK_UPSTREAM_S)" in text

