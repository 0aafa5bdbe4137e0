"""Every kind of tool task, to every kind of end, on the real Runner and OTel SDK."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from adk_task_telemetry import TrackerState
from adk_task_telemetry import adk_compat as compat
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.scenarios import SCENARIOS, run_scenario
from adk_task_telemetry.scenarios.library import APP_NAME

from .conftest import Telemetry

# What the installed ADK really does differs on old minors; each difference is probed by
# feature in adk_compat (docs/versions.md: where each one changes).
TEARDOWN_CANCELS = compat.LIVE_TEARDOWN_CANCELS_BACKGROUND_TOOLS  # 1.39, 2.8 on
SIBLINGS_CANCELLED = compat.FAILED_CALL_CANCELS_SIBLINGS    # 1.32 on
FIXED_7058 = compat.HAS_BACKGROUND_TOOL_REGISTRY            # 2.13 on

#: The oracle: per scenario, the calls whose body task is still running when the
#: scenario ends (the tools' own ground truth, Probe.pending()). The plugin must report
#: exactly these as orphans, where it sees the calls at all.
RUNNING_AT_END: dict[str, set[str]] = {
    "seed_bug": (set() if FIXED_7058 else {"call-goog"} if TEARDOWN_CANCELS
                 else {"call-goog", "call-msft"}),
    "live_stream_teardown": set() if TEARDOWN_CANCELS else {"call-goog"},
    "live_stubborn_tool": {"call-feed"},
    "parallel_one_fails": set() if SIBLINGS_CANCELLED else {"call-s1", "call-s2"},
    # A thread cannot be cancelled: the callable runs on after its caller's timeout, or
    # after the caller left the live run.
    "thread_pool_timeout": {"call-crunch"},
    "live_thread_pool": {"call-crunch"},
}


def _teardown(call_id: str, scenario: str) -> tuple[str, str, str, str | None]:
    if call_id in RUNNING_AT_END[scenario]:
        return ("monitor_stock", "streaming", "orphaned", None)
    return ("monitor_stock", "streaming", "cancelled", "run_teardown")


def _sibling(call_id: str) -> tuple[str, str, str, str | None]:
    if call_id in RUNNING_AT_END["parallel_one_fails"]:
        return ("slow_search", "call", "orphaned", None)
    return ("slow_search", "call", "cancelled", "sibling_failed")


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
        "call-s1": _sibling("call-s1"),
        "call-s2": _sibling("call-s2"),
    },
    "recovered_error": {"call-fail": ("flaky_api", "call", "recovered", None)},
    "long_running": {"call-ticket": ("open_ticket", "long_running", "ok", None)},
    "agent_tool": {
        "call-agent": ("researcher", "call", "ok", None),
        "call-child": ("lookup_order", "call", "ok", None),
        "call-sibling": ("wait_briefly", "call", "ok", None),
    },
    "overlapping_runs": {
        "call-ticket": ("open_ticket", "long_running", "ok", None),
        "call-a1": ("lookup_order", "call", "ok", None),
        "call-b1": ("confirm_order", "call", "ok", None),
    },
    "caller_timeout": {
        "call-slow": ("slow_search", "call", "cancelled", "caller_cancelled"),
        "call-quick": ("lookup_order", "call", "ok", None),
    },
    **({"caller_abort": {"call-slow": ("slow_search", "call", "cancelled", "caller_cancelled")}}
       if "caller_abort" in SCENARIOS else {}),
    "consumer_cancelled": {
        "call-slow": ("slow_search", "call", "cancelled", "caller_cancelled")},
    "live_stream_teardown": {"call-goog": _teardown("call-goog", "live_stream_teardown")},
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
    # A synchronous tool on ADK's tool thread pool (run_async, 2.11 on). Cut by its
    # caller's timeout, it is orphaned and its span still says why its task was
    # cancelled (the detail of an orphan is that cause).
    **({"thread_pool_call": {"call-crunch": ("crunch_numbers", "call", "ok", None)},
        "thread_pool_timeout": {
            "call-crunch": ("crunch_numbers", "call", "orphaned", "caller_cancelled")}}
       if compat.RUN_ASYNC_USES_TOOL_THREAD_POOL else {}),
    **({"live_thread_pool": {
        "call-crunch": ("crunch_numbers", "call", "orphaned", "caller_cancelled")}}
       if compat.HAS_TOOL_THREAD_POOL else {}),
    "seed_bug": {c: _teardown(c, "seed_bug") for c in ("call-goog", "call-msft")},
    # Stuck while it runs (a stuck record, tests/test_stuck.py), then it returns.
    "stuck_upstream": {"call-ledger": ("query_ledger", "call", "ok", None)},
}


def test_expectations_agree_with_the_oracle() -> None:
    """An orphan is expected exactly where a call's body is expected to keep running."""
    for name, calls in EXPECTED.items():
        orphans = {c for c, (_, _, o, _) in calls.items() if o == "orphaned"}
        if calls:
            assert orphans == RUNNING_AT_END.get(name, set()), name
ALLOWED_METRIC_KEYS = {
    sc.GEN_AI_TOOL_NAME, sc.GEN_AI_AGENT_NAME, sc.ADK_TOOL_TASK_KIND, sc.ADK_APP_NAME,
    sc.ADK_TOOL_TASK_OUTCOME, sc.ERROR_TYPE, sc.ADK_RUN_END_TRIGGER,
    sc.ADK_TOOL_TASK_CANCEL_CAUSE, sc.ADK_TOOL_CALL_UNANSWERED_REASON,
}


def test_every_scenario_has_expectations() -> None:
    assert set(EXPECTED) == set(SCENARIOS)
    # The library offers the abort scenario exactly where ADK's Runner takes the signal.
    from google.adk.runners import Runner
    has_abort = "abort_signal" in inspect.signature(Runner.run_async).parameters
    assert ("caller_abort" in SCENARIOS) == has_abort


def _events(span: ReadableSpan, name: str) -> list[Any]:
    return [e for e in span.events if e.name == name]


def _sum(points: list[Any]) -> float:
    return sum(p.value for p in points)


@pytest.mark.parametrize("name", list(EXPECTED))
async def test_scenario_spans_and_metrics(telemetry: Telemetry, name: str) -> None:
    plugin = telemetry.plugin()
    run = await run_scenario(name, [plugin])
    try:
        # The ground truth first: what ADK really left running.
        pending = {c for c in run.probe.pending() if "/" not in c}
        assert pending == RUNNING_AT_END.get(name, set()), f"still running in {name}"
        spans = telemetry.by_call()
        expected = EXPECTED[name]
        assert set(spans) == set(expected), f"one span per tool task in {name}"
        every = {s.context.span_id: s for s in telemetry.spans.get_finished_spans()}
        open_parents: dict[int, tuple[str, str]] = {}
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
            # The app ADK ran the call's invocation under (a nested AgentTool run's is
            # the child agent's name before ADK 1.17).
            assert attrs[sc.ADK_APP_NAME] == run.probe.app_names.get(call_id, APP_NAME)
            assert str(attrs[sc.ADK_INVOCATION_ID]).startswith("e-")
            assert attrs[sc.GEN_AI_CONVERSATION_ID]
            assert attrs[sc.GEN_AI_AGENT_NAME]
            # Parent: ADK's own execute_tool span for this call. An orphan's may still be
            # open (its body still runs): checked once the body has ended, below.
            assert span.parent is not None
            parent = every.get(span.parent.span_id)
            if parent is None and outcome == "orphaned":
                open_parents[span.parent.span_id] = (tool, call_id)
            else:
                assert parent is not None and parent.name == f"execute_tool {tool}", call_id
            failed = outcome in ("error", "orphaned")
            assert (span.status.status_code is StatusCode.ERROR) == failed, call_id
            if outcome == "cancelled" or (outcome == "orphaned" and detail):
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
        started = _sum(m.get(sc.METRIC_STARTED, []))
        assert started == len(expected)
        assert started == durations + orphaned
        assert _sum(m.get(sc.METRIC_ACTIVE, [])) == 0
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
    every = {s.context.span_id: s for s in telemetry.spans.get_finished_spans()}
    for span_id, (tool, call_id) in open_parents.items():
        parent = every.get(span_id)
        assert parent is not None and parent.name == f"execute_tool {tool}", call_id
    assert plugin.open_tasks() == []
    assert plugin.state() == TrackerState(0, 0, 0)


async def test_seed_bug_orphan_is_real(telemetry: Telemetry, caplog: pytest.LogCaptureFixture
                                       ) -> None:
    """The seed: ADK < 2.13 loses the first of two calls to one streaming tool; before
    1.39 and 2.8 live teardown cancels no streaming tool, so the second is lost too."""
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
    lost = RUNNING_AT_END["seed_bug"]
    try:
        # The ground truth: which calls' bodies are really still running.
        assert set(run.probe.pending()) == lost
        orphans = [s for s in telemetry.tool_spans() if _events(s, sc.EVENT_ORPHANED_TASK)]
        warnings = [r for r in caplog.records if r.name == "adk_task_telemetry"
                    and r.levelname == "WARNING"]
        m = telemetry.metrics()
        if not lost:
            assert orphans == [] and warnings == []
            assert plugin.open_tasks() == []
            return
        # The orphans reported are exactly the calls still running.
        assert {str((s.attributes or {})[sc.GEN_AI_TOOL_CALL_ID]) for s in orphans} == lost
        # How the plugin learned that the run ended, as soon as it did (not at
        # Runner.close()): ADK's own live task ended (2.8 on), else the hook on the
        # live run's end (1.14 to 1.39, 2.0 to 2.7).
        triggers = {"run_task_done"} if compat.LIVE_RUN_HAS_OWN_TASK else {"live_teardown"}
        for orphan in orphans:
            (event,) = _events(orphan, sc.EVENT_ORPHANED_TASK)
            ea = dict(event.attributes or {})
            assert ea[sc.GEN_AI_TOOL_NAME] == "monitor_stock"
            assert ea[sc.ADK_RUN_END_TRIGGER] in triggers
            assert float(ea[sc.ADK_TOOL_TASK_AGE]) > 0
            assert "monitor_stock" in str(ea[sc.CODE_STACKTRACE])  # where it is stuck
        open_tasks = plugin.open_tasks()
        assert {(t.call_id, t.orphaned, t.kind) for t in open_tasks} == {
            (c, True, "streaming") for c in lost}
        assert len(warnings) == len(lost)
        assert {c for c in lost if any(c in w.getMessage() for w in warnings)} == lost
        assert seen_in_span == [True] * len(lost)
        assert _sum(m[sc.METRIC_ORPHANED]) == len(lost)
        assert _sum(m[sc.METRIC_ORPHANS_ALIVE]) == len(lost)
        (point,) = m[sc.METRIC_ORPHANED]
        assert point.attributes[sc.ADK_RUN_END_TRIGGER] in triggers
    finally:
        await run.probe.cleanup()
    await asyncio.sleep(0)
    # The orphans finally ended: they leave orphans_alive and record their lifetime.
    m = telemetry.metrics()
    assert _sum(m[sc.METRIC_ORPHANS_ALIVE]) == 0
    (life,) = m[sc.METRIC_ORPHAN_LIFETIME]
    assert life.count == len(lost)
    assert life.attributes[sc.ADK_TOOL_TASK_OUTCOME] == "cancelled"
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
