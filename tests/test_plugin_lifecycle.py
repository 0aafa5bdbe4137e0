"""Every kind of tool task, to every kind of end, on the real Runner and OTel SDK."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from adk_task_telemetry import TrackerState
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.scenarios import SCENARIOS, run_scenario
from adk_task_telemetry.scenarios.library import APP_NAME

from .conftest import Telemetry, has_seed_bug

# call id -> (tool, kind, outcome, cancel cause or error type)
EXPECTED: dict[str, dict[str, tuple[str, str, str, str | None]]] = {
    "single_call": {"call-1": ("lookup_order", "call", "ok", None)},
    "parallel_calls": {
        "call-1": ("lookup_order", "call", "ok", None),
        "call-2": ("lookup_order", "call", "ok", None),
        "call-3": ("add_numbers", "call", "ok", None),
    },
    "parallel_one_fails": {
        "call-fail": ("flaky_api", "call", "error", "ConnectionError"),
        "call-s1": ("slow_search", "call", "cancelled", "sibling_failed"),
        "call-s2": ("slow_search", "call", "cancelled", "sibling_failed"),
    },
    "recovered_error": {"call-fail": ("flaky_api", "call", "recovered", None)},
    "long_running": {"call-ticket": ("open_ticket", "long_running", "ok", None)},
    "agent_tool": {
        "call-agent": ("researcher", "call", "ok", None),
        "call-child": ("lookup_order", "call", "ok", None),
        "call-sibling": ("wait_briefly", "call", "ok", None),
    },
    "caller_timeout": {"call-slow": ("slow_search", "call", "cancelled", "caller_cancelled")},
    **({"caller_abort": {"call-slow": ("slow_search", "call", "cancelled", "caller_cancelled")}}
       if "caller_abort" in SCENARIOS else {}),
    "consumer_cancelled": {
        "call-slow": ("slow_search", "call", "cancelled", "caller_cancelled")},
    "live_stream_teardown": {
        "call-goog": ("monitor_stock", "streaming", "cancelled", "run_teardown")},
    "live_stop_streaming": {
        "call-goog": ("monitor_stock", "streaming", "cancelled", "stop_streaming"),
        "call-stop": ("stop_streaming", "call", "ok", None),
    },
    "live_non_blocking": {"call-report": ("send_report", "non_blocking", "ok", None)},
    # Application bugs: orphaned on every ADK version (ADK 2.13 only logs these).
    "live_stubborn_tool": {"call-feed": ("stubborn_feed", "streaming", "orphaned", None)},
    # Without strict mode the run looks clean.
    "fire_and_forget": {"call-upload": ("start_upload", "call", "ok", None)},
    "unended_span": {"call-fetch": ("fetch_page", "call", "ok", None)},
    "seed_bug": (
        {
            "call-goog": ("monitor_stock", "streaming", "orphaned", None),
            "call-msft": ("monitor_stock", "streaming", "cancelled", "run_teardown"),
        }
        if has_seed_bug()
        else {
            "call-goog": ("monitor_stock", "streaming", "cancelled", "run_teardown"),
            "call-msft": ("monitor_stock", "streaming", "cancelled", "run_teardown"),
        }
    ),
}

ALLOWED_METRIC_KEYS = {
    sc.GEN_AI_TOOL_NAME, sc.GEN_AI_AGENT_NAME, sc.ADK_TOOL_TASK_KIND, sc.ADK_APP_NAME,
    sc.ADK_TOOL_TASK_OUTCOME, sc.ERROR_TYPE, sc.ADK_RUN_END_TRIGGER,
    sc.ADK_TOOL_TASK_CANCEL_CAUSE,
}


def test_every_scenario_has_expectations() -> None:
    assert set(EXPECTED) == set(SCENARIOS)
    # Abort exists from ADK 2.x on: the library offers it exactly where ADK can.
    from adk_task_telemetry.adk_compat import ADK_VERSION
    if ADK_VERSION < (2, 0, 0):
        assert "caller_abort" not in SCENARIOS
    elif ADK_VERSION >= (2, 12, 0):
        assert "caller_abort" in SCENARIOS


def _events(span: ReadableSpan, name: str) -> list[Any]:
    return [e for e in span.events if e.name == name]


def _sum(points: list[Any]) -> float:
    return sum(p.value for p in points)


@pytest.mark.parametrize("name", list(EXPECTED))
async def test_scenario_spans_and_metrics(telemetry: Telemetry, name: str) -> None:
    plugin = telemetry.plugin()
    run = await run_scenario(name, [plugin])
    try:
        spans = telemetry.by_call()
        expected = EXPECTED[name]
        assert set(spans) == set(expected), f"one span per tool task in {name}"
        every = {s.context.span_id: s for s in telemetry.spans.get_finished_spans()}
        for call_id, (tool, kind, outcome, detail) in expected.items():
            span = spans[call_id]
            attrs = dict(span.attributes or {})
            assert span.name == f"tool_task {tool}"
            assert span.kind is SpanKind.INTERNAL
            assert attrs[sc.GEN_AI_TOOL_NAME] == tool
            assert attrs[sc.GEN_AI_TOOL_TYPE] in ("FunctionTool", "LongRunningFunctionTool",
                                                   "AgentTool")
            assert attrs[sc.ADK_TOOL_TASK_KIND] == kind, call_id
            assert attrs[sc.ADK_TOOL_TASK_OUTCOME] == outcome, call_id
            assert attrs[sc.ADK_APP_NAME] == APP_NAME
            assert str(attrs[sc.ADK_INVOCATION_ID]).startswith("e-")
            assert attrs[sc.GEN_AI_CONVERSATION_ID]
            assert attrs[sc.GEN_AI_AGENT_NAME]
            # Parent: ADK's own execute_tool span for this call.
            assert span.parent is not None
            parent = every.get(span.parent.span_id)
            assert parent is not None and parent.name == f"execute_tool {tool}", call_id
            failed = outcome in ("error", "orphaned")
            assert (span.status.status_code is StatusCode.ERROR) == failed, call_id
            if outcome == "cancelled":
                (event,) = _events(span, sc.EVENT_CANCELLED)
                assert event.attributes[sc.ADK_TOOL_TASK_CANCEL_CAUSE] == detail
            else:
                assert not _events(span, sc.EVENT_CANCELLED)
            if outcome == "error":
                assert attrs[sc.ERROR_TYPE] == detail
            if outcome in ("error", "recovered"):
                (exc,) = _events(span, "exception")
                assert exc.attributes["exception.type"] == "ConnectionError"
            else:
                assert sc.ERROR_TYPE not in attrs
            assert bool(_events(span, sc.EVENT_ORPHANED_TASK)) == (outcome == "orphaned")

        m = telemetry.metrics()
        durations = sum(p.count for p in m.get(sc.METRIC_DURATION, []))
        orphaned = _sum(m.get(sc.METRIC_ORPHANED, []))
        started = _sum(m[sc.METRIC_STARTED])
        assert started == len(expected)
        assert started == durations + orphaned
        assert _sum(m[sc.METRIC_ACTIVE]) == 0
        for points in m.values():
            for p in points:
                assert set(p.attributes) <= ALLOWED_METRIC_KEYS
        outcomes = sorted(
            p.attributes[sc.ADK_TOOL_TASK_OUTCOME]
            for p in m.get(sc.METRIC_DURATION, []) for _ in range(p.count))
        assert outcomes == sorted(o for (_, _, o, _) in expected.values() if o != "orphaned")
        # A cancelled task's duration point says why (the five bounded causes only).
        causes = sorted(
            str(p.attributes[sc.ADK_TOOL_TASK_CANCEL_CAUSE])
            for p in m.get(sc.METRIC_DURATION, []) for _ in range(p.count)
            if p.attributes[sc.ADK_TOOL_TASK_OUTCOME] == "cancelled")
        assert causes == sorted(str(d) for (_, _, o, d) in expected.values() if o == "cancelled")
        assert plugin.internal_errors == 0
    finally:
        await run.probe.cleanup()
    await asyncio.sleep(0)
    assert plugin.open_tasks() == []
    assert plugin.state() == TrackerState(0, 0, 0)


async def test_seed_bug_orphan_is_real(telemetry: Telemetry, caplog: pytest.LogCaptureFixture
                                       ) -> None:
    """The seed: ADK < 2.13 loses the first of two calls to one streaming tool."""
    from opentelemetry import trace

    seen_in_span: list[bool] = []

    class SpanContextFilter:
        def filter(self, record: Any) -> bool:
            seen_in_span.append(trace.get_current_span().get_span_context().is_valid)
            return True

    import logging
    log = logging.getLogger("adk_task_telemetry")
    flt = SpanContextFilter()
    log.addFilter(flt)  # type: ignore[arg-type]
    plugin = telemetry.plugin()
    try:
        with caplog.at_level(logging.WARNING, logger="adk_task_telemetry"):
            run = await run_scenario("seed_bug", [plugin])
    finally:
        log.removeFilter(flt)  # type: ignore[arg-type]
    try:
        orphans = [s for s in telemetry.tool_spans() if _events(s, sc.EVENT_ORPHANED_TASK)]
        warnings = [r for r in caplog.records if r.name == "adk_task_telemetry"
                    and r.levelname == "WARNING"]
        m = telemetry.metrics()
        if not has_seed_bug():
            assert orphans == [] and warnings == []
            assert run.probe.pending() == []
            assert plugin.open_tasks() == []
            return
        (orphan,) = orphans
        (event,) = _events(orphan, sc.EVENT_ORPHANED_TASK)
        ea = dict(event.attributes or {})
        assert ea[sc.GEN_AI_TOOL_CALL_ID] == "call-goog"
        assert ea[sc.GEN_AI_TOOL_NAME] == "monitor_stock"
        assert ea[sc.ADK_RUN_END_TRIGGER] in ("run_task_done", "live_teardown", "after_run")
        assert float(ea[sc.ADK_TOOL_TASK_AGE]) > 0
        assert "monitor_stock" in str(ea[sc.CODE_STACKTRACE])  # where it is stuck
        # The orphan is real: its asyncio task is still running.
        assert run.probe.pending() == ["call-goog"]
        (open_task,) = plugin.open_tasks()
        assert (open_task.call_id, open_task.orphaned, open_task.kind) == (
            "call-goog", True, "streaming")
        assert len(warnings) == 1 and "call-goog" in warnings[0].getMessage()
        assert seen_in_span == [True]
        assert _sum(m[sc.METRIC_ORPHANED]) == 1
        assert _sum(m[sc.METRIC_ORPHANS_ALIVE]) == 1
        (point,) = m[sc.METRIC_ORPHANED]
        assert point.attributes[sc.ADK_RUN_END_TRIGGER] == ea[sc.ADK_RUN_END_TRIGGER]
    finally:
        await run.probe.cleanup()
    await asyncio.sleep(0)
    # The orphan finally ended: it leaves orphans_alive and records its lifetime.
    m = telemetry.metrics()
    assert _sum(m[sc.METRIC_ORPHANS_ALIVE]) == 0
    (life,) = m[sc.METRIC_ORPHAN_LIFETIME]
    assert life.count == 1 and life.attributes[sc.ADK_TOOL_TASK_OUTCOME] == "cancelled"
    assert plugin.open_tasks() == []
    assert plugin.state() == TrackerState(0, 0, 0)


async def test_streaming_span_lasts_as_long_as_the_background_task(
        telemetry: Telemetry) -> None:
    """Not the few-millisecond dispatch: the span ends when the tool's work ends."""
    plugin = telemetry.plugin()
    run = await run_scenario("live_stream_teardown", [plugin])
    await run.probe.cleanup()
    span = telemetry.by_call()["call-goog"]
    dispatch = next(s for s in telemetry.spans.get_finished_spans()
                    if s.name == "execute_tool monitor_stock")
    assert span.end_time is not None and dispatch.end_time is not None
    # The scenario lets the tool stream for 0.1 s after the dispatch returned.
    assert span.end_time - dispatch.end_time >= 100_000_000


async def test_nested_agent_tool_has_its_own_invocation(telemetry: Telemetry) -> None:
    plugin = telemetry.plugin()
    run = await run_scenario("agent_tool", [plugin])
    await run.probe.cleanup()
    spans = telemetry.by_call()
    inv = {c: (s.attributes or {})[sc.ADK_INVOCATION_ID] for c, s in spans.items()}
    assert inv["call-agent"] == inv["call-sibling"] != inv["call-child"]
    # The child's span sits inside the AgentTool call's trace.
    assert spans["call-child"].context.trace_id == spans["call-agent"].context.trace_id
