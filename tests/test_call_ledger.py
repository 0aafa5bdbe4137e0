"""The call ledger on the real Runner: function calls left without a response.

The oracle is what ADK's session service stored, read after the run and counted
here, not by the plugin: a call is unanswered when its invocation holds its
``function_call`` and no ``function_response`` (ADK marks long-running calls, which
a later invocation answers). The plugin's events, log records and counter must name
exactly those calls.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import pytest

from adk_task_telemetry import observe
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.engine.records import UnansweredCall
from adk_task_telemetry.scenarios import run_scenario
from adk_task_telemetry.scenarios.library import SCENARIOS

from .conftest import Telemetry
from .lifecycle_oracle import stored_unanswered

# The scenarios that leave calls without answers on every ADK version: a call that
# raises (its siblings are cancelled on the versions that do so), a caller that
# times out mid-tool, a consumer task cancelled mid-tool.
UNANSWERED = ("parallel_one_fails", "caller_timeout", "consumer_cancelled")


def reported_events(telemetry: Telemetry) -> list[dict[str, Any]]:
    """Every ``unanswered_call`` event, on ADK's run span or on a span of ours."""
    return [dict(e.attributes or {}) for s in telemetry.spans.get_finished_spans()
            for e in s.events if e.name == sc.EVENT_UNANSWERED_CALL]


def counted(telemetry: Telemetry) -> Counter[str]:
    """adk.tool_call.unanswered by reason."""
    out: Counter[str] = Counter()
    for p in telemetry.metrics().get(sc.METRIC_UNANSWERED, []):
        out[str(p.attributes[sc.ADK_TOOL_CALL_UNANSWERED_REASON])] += int(p.value)
    return out


@pytest.fixture
def seen() -> Any:
    found: list[Any] = []
    observe.add_observer(found.append)
    yield found
    observe.remove_observer(found.append)


@pytest.mark.parametrize("name", sorted(n for n in SCENARIOS if SCENARIOS[n].audit))
async def test_unanswered_calls_match_the_session(
        name: str, telemetry: Telemetry, seen: list[Any],
        caplog: pytest.LogCaptureFixture) -> None:
    plugin = telemetry.plugin()
    caplog.set_level(logging.WARNING, logger=sc.LOGGER_NAME)
    run = await run_scenario(name, [plugin])
    await run.probe.cleanup()
    truth = stored_unanswered(await run.stored_events())

    events = reported_events(telemetry)
    got = Counter((str(e[sc.ADK_INVOCATION_ID]), str(e[sc.GEN_AI_TOOL_CALL_ID])) for e in events)
    assert got == truth, f"{name}: reported {dict(got)}, the session says {dict(truth)}"
    observed = Counter((u.invocation_id, u.call_id) for u in seen
                       if isinstance(u, UnansweredCall))
    assert observed == truth
    assert sum(counted(telemetry).values()) == sum(truth.values())
    logged = [r for r in caplog.records if r.getMessage().startswith("unanswered function call")]
    assert len(logged) == sum(truth.values())
    assert all(r.levelno == logging.WARNING for r in logged)
    if name in UNANSWERED:
        assert truth, f"{name} should leave a call without an answer on this ADK"
    assert plugin.internal_errors == 0
    assert plugin.state().runs == 0


async def test_the_reason_is_what_became_of_the_calls_task(
        telemetry: Telemetry, seen: list[Any]) -> None:
    """A call that raised, its cancelled siblings; each event names its tool and why."""
    plugin = telemetry.plugin()
    run = await run_scenario("parallel_one_fails", [plugin])
    await run.probe.cleanup()
    by_call = {str(e[sc.GEN_AI_TOOL_CALL_ID]): e for e in reported_events(telemetry)}
    tool_spans = telemetry.by_call()
    assert by_call["call-fail"][sc.GEN_AI_TOOL_NAME] == "flaky_api"
    assert by_call["call-fail"][sc.ADK_TOOL_CALL_UNANSWERED_REASON] == sc.UnansweredReason.ERROR
    for sibling in ("call-s1", "call-s2"):
        if sibling not in by_call:
            continue  # the ADK let this sibling finish and answer
        span = tool_spans[sibling]
        outcome = (span.attributes or {})[sc.ADK_TOOL_TASK_OUTCOME]
        causes = [(e.attributes or {}).get(sc.ADK_TOOL_TASK_CANCEL_CAUSE)
                  for e in span.events if e.name == sc.EVENT_CANCELLED]
        want = {sc.Outcome.CANCELLED: causes[0] if causes else None,
                sc.Outcome.ORPHANED: sc.UnansweredReason.ORPHANED,  # ADK < 1.32 lets it run
                }.get(outcome, sc.CancelCause.SIBLING_FAILED)  # it ended well: the run did not
        assert by_call[sibling][sc.ADK_TOOL_CALL_UNANSWERED_REASON] == want
    # The counter has the bounded attributes only: no call or invocation id.
    for p in telemetry.metrics()[sc.METRIC_UNANSWERED]:
        assert set(p.attributes) == {sc.GEN_AI_TOOL_NAME, sc.GEN_AI_AGENT_NAME, sc.ADK_APP_NAME,
                                     sc.ADK_TOOL_CALL_UNANSWERED_REASON}
        assert p.attributes[sc.GEN_AI_AGENT_NAME] == "clerk"


async def test_a_call_that_ended_well_takes_the_reason_of_its_runs_end(
        telemetry: Telemetry, seen: list[Any]) -> None:
    """The caller's timeout cuts the run after the quick call returned: neither call's
    response is stored. The quick call's task explains nothing (it ended ``ok``), so its
    reason is what ended the run first: the caller (``caller_cancelled``), not
    ``unknown``."""
    plugin = telemetry.plugin()
    run = await run_scenario("caller_timeout", [plugin])
    await run.probe.cleanup()
    truth = stored_unanswered(await run.stored_events())
    assert {call for _inv, call in truth} == {"call-slow", "call-quick"}
    assert telemetry.by_call()["call-quick"].attributes[sc.ADK_TOOL_TASK_OUTCOME] == "ok"
    reasons = {u.call_id: u.reason for u in seen if isinstance(u, UnansweredCall)}
    assert reasons == {"call-slow": sc.CancelCause.CALLER_CANCELLED,
                       "call-quick": sc.CancelCause.CALLER_CANCELLED}


async def test_the_event_lands_in_the_runs_trace(telemetry: Telemetry) -> None:
    """On ADK's run span while it records, else on an ``unanswered_call`` span of
    ours under it: either way the run's trace shows the call."""
    plugin = telemetry.plugin()
    run = await run_scenario("caller_timeout", [plugin])
    await run.probe.cleanup()
    spans = telemetry.spans.get_finished_spans()
    carriers = [s for s in spans if any(e.name == sc.EVENT_UNANSWERED_CALL for e in s.events)]
    assert carriers
    tool = telemetry.by_call()["call-slow"]
    for carrier in carriers:
        assert carrier.context.trace_id == tool.context.trace_id
        if carrier.name == sc.SPAN_UNANSWERED_CALL:
            assert carrier.parent is not None and carrier.status.status_code.name == "ERROR"
        else:
            assert carrier.name.startswith("invo")  # ADK's run span


async def test_a_clean_run_reports_nothing_and_a_long_running_call_is_not_unanswered(
        telemetry: Telemetry, seen: list[Any]) -> None:
    plugin = telemetry.plugin()
    for name in ("single_call", "parallel_calls", "long_running"):
        run = await run_scenario(name, [plugin])
        await run.probe.cleanup()
    assert reported_events(telemetry) == []
    assert not [u for u in seen if isinstance(u, UnansweredCall)]
    assert sc.METRIC_UNANSWERED not in telemetry.metrics()


async def test_an_observer_that_raises_never_reaches_adk(telemetry: Telemetry) -> None:
    def broken(_seen: Any) -> None:
        raise RuntimeError("observer bug")

    observe.add_observer(broken)
    try:
        plugin = telemetry.plugin()
        run = await run_scenario("caller_timeout", [plugin])
        await run.probe.cleanup()
        await asyncio.sleep(0)
    finally:
        observe.remove_observer(broken)
    assert plugin.internal_errors >= 1  # counted and swallowed
    assert len(reported_events(telemetry)) == 2  # the reports themselves went out
