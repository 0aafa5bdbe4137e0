"""The oracle of the randomized lifecycle test: the plugin's telemetry vs the tools' truth.

Everything it knows about what really happened comes from ``Outcome`` (the tool
bodies' own records, see ``tests/lifecycle_generator.py``); everything it checks is
public: tool_task spans, the contract's metrics, ``open_tasks()``, ``state()``,
``internal_errors``, and the OTel SDK's own warnings.

Strict, whatever the timing:
  * one ``tool_task`` span per tool body that ran (matched by call id and tool;
    a duplicate id of one tool by start order);
  * a task still pending once the run and ADK's teardown were over (a real
    orphan) is reported orphaned, exactly once;
  * a task that ended before the caller ended the run is not reported orphaned, nor
    one already done when the task the caller cut (its timeout's, its cancelled
    consumer) was: the caller sees the run end then (``Outcome.done_at_cut``);
  * no orphan report is dated after the task's own record of its end (the
    task's done-callback, so at or after its real end): the plugin reported a
    task that had already ended;
  * every span that is not orphaned has the outcome the task really had;
  * started = spans = bodies; started = duration count + orphaned; orphaned
    = orphaned spans; active, orphans_alive, open_tasks(), state() back to 0
    after cleanup; no internal error; no "end() on an ended span" warning.

The call ledger, against what the session service stored (read after cleanup):
every call stored without a response is reported ``unanswered_call`` once, and
every report names a call of that invocation; a report whose call has a stored
response now is accepted only if that response was stored after the report
(a live non-blocking tool may answer after its run ended).

Causes and reasons name what happened (issue 23), whatever the timing:
  * a body that raised CancelledError by itself has a ``cancelled`` event without a
    cause, and its call's unanswered reason (when unanswered) is ``error``, as is that
    of a call whose only body raised inside the run and nothing answered;
  * a caller that never cut its run (``consume``, ``consume_catch``,
    ``consume_reraise``) is never named: no ``caller_cancelled`` cause or reason;
  * a caller that closed the stream (``break``, ``break_aclosing``) of a run where no
    call raised or cancelled itself: every unanswered reason is ``caller_cancelled``
    (or ``orphaned``, for a call whose task outlived the run).

Ambiguous, so either answer is accepted: a task that ended while the run was
ending (after the caller acted, before ADK's teardown was over) and whose orphan
report, if any, is dated before the end of the task: the sweep saw it running.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from adk_task_telemetry import TaskTelemetryPlugin, TrackerState
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.scenarios import TaskTruth

from .conftest import Telemetry
from .lifecycle_generator import Outcome


def _sum(points: list[Any]) -> float:
    return sum(p.value for p in points)


def _orphan_events(span: Any) -> list[Any]:
    return [e for e in span.events if e.name == sc.EVENT_ORPHANED_TASK]


def _causes(span: Any) -> list[Any]:
    return [(e.attributes or {}).get(sc.ADK_TOOL_TASK_CANCEL_CAUSE)
            for e in span.events if e.name == sc.EVENT_CANCELLED]


def _shown(call_id: str) -> str:
    """A call id for a problem's line (ids of thousands of characters are drawn)."""
    return call_id if len(call_id) <= 40 else f"{call_id[:24]}...[{len(call_id)}]"


#: Callers that never cut their run, and those that close its stream.
_NEVER_CUTS = frozenset({"consume", "consume_catch", "consume_reraise"})
_CLOSES = frozenset({"break", "break_aclosing"})


def check_spans(outcome: Outcome, telemetry: Telemetry) -> list[str]:
    """Every tool task's span against the tool's own record of it."""
    problems: list[str] = []
    spans: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for span in telemetry.tool_spans():
        attrs = span.attributes or {}
        key = (str(attrs.get(sc.GEN_AI_TOOL_CALL_ID, "")), str(attrs.get(sc.GEN_AI_TOOL_NAME)))
        spans[key].append(span)
    bodies: dict[tuple[str, str], list[TaskTruth]] = defaultdict(list)
    for t in outcome.truth.records:
        bodies[(t.call_id, t.tool)].append(t)
    real = {id(t) for t in outcome.real_orphans}
    for key in sorted(set(spans) | set(bodies)):
        got = sorted(spans.get(key, []), key=lambda s: s.start_time or 0)
        want = sorted(bodies.get(key, []), key=lambda t: t.started_ns)
        where = f"{_shown(key[0])} ({key[1]})"
        if len(got) != len(want):
            problems.append(f"{where}: {len(got)} spans for {len(want)} tool tasks")
            continue
        for span, task in zip(got, want, strict=True):
            said = (span.attributes or {}).get(sc.ADK_TOOL_TASK_OUTCOME)
            causes = _causes(span)
            if task.self_cancelled and causes != [None]:
                problems.append(f"{where}: cancelled itself, but its cancelled events say "
                                f"{causes}")
            if (outcome.spec.caller in _NEVER_CUTS
                    and sc.CancelCause.CALLER_CANCELLED in causes):
                problems.append(f"{where}: cause caller_cancelled, but the caller never "
                                "cut the run")
            reports = _orphan_events(span)
            if len(reports) > 1:
                problems.append(f"{where}: {len(reports)} orphaned_task events")
            if id(task) in real:
                if said != "orphaned":
                    problems.append(f"{where}: still running after its run ended, but the "
                                    f"span says {said!r} (it really ended {task.outcome!r} "
                                    "later)")
                continue
            assert task.ended_ns is not None
            if said == "orphaned" or reports:
                if task.ended_ns < outcome.end_begin_ns:
                    problems.append(f"{where}: reported orphaned but it ended "
                                    f"{(outcome.end_begin_ns - task.ended_ns) / 1e6:.1f} ms "
                                    f"before the caller ended the run ({task.outcome})")
                elif any(t is task for t in outcome.done_at_cut):
                    problems.append(f"{where}: reported orphaned but it was done when the "
                                    f"caller saw its run end ({task.outcome}; reported "
                                    f"{(outcome.cut_seen_ns - reports[0].timestamp) / 1e6:.2f}"
                                    " ms before)" if reports else
                                    f"{where}: reported orphaned but it was done when the "
                                    f"caller saw its run end ({task.outcome})")
                elif reports and reports[0].timestamp > task.ended_ns:
                    problems.append(f"{where}: reported orphaned "
                                    f"{(reports[0].timestamp - task.ended_ns) / 1e6:.1f} ms "
                                    f"after its task had ended ({task.outcome})")
                continue  # ended while its run was ending: an orphan or not, both hold
            if said != task.outcome:
                problems.append(f"{where}: span says {said!r}, the task ended {task.outcome!r}")
    return problems


def check_counts(outcome: Outcome, telemetry: Telemetry,
                 plugin: TaskTelemetryPlugin) -> list[str]:
    """Metrics add up and nothing is left open after cleanup."""
    problems: list[str] = []
    m = telemetry.metrics()
    started = _sum(m.get(sc.METRIC_STARTED, []))
    durations = sum(p.count for p in m.get(sc.METRIC_DURATION, []))
    orphaned = _sum(m.get(sc.METRIC_ORPHANED, []))
    orphan_spans = sum(1 for s in telemetry.tool_spans()
                       if (s.attributes or {}).get(sc.ADK_TOOL_TASK_OUTCOME) == "orphaned")
    bodies = len(outcome.truth.records)
    if started != bodies:
        problems.append(f"started={started:g} for {bodies} tool tasks")
    if started != durations + orphaned:
        problems.append(f"started={started:g} != duration count {durations} + "
                        f"orphaned {orphaned:g}")
    if orphaned != orphan_spans:
        problems.append(f"orphaned metric {orphaned:g} != {orphan_spans} orphaned spans")
    for name in (sc.METRIC_ACTIVE, sc.METRIC_ORPHANS_ALIVE):
        value = _sum(m.get(name, []))
        if value != 0:
            problems.append(f"{name}={value:g} after cleanup")
    left = plugin.open_tasks()
    if left:
        problems.append(f"open_tasks() after cleanup: "
                        f"{[(t.call_id, t.kind, t.orphaned) for t in left]}")
    if plugin.state() != TrackerState(0, 0, 0):
        problems.append(f"state() after cleanup: {plugin.state()}")
    if plugin.internal_errors:
        problems.append(f"internal_errors={plugin.internal_errors}")
    return problems


CallKey = tuple[str, str]  # (invocation id, call id)


def stored_calls(events: list[Any]) -> tuple[Counter[CallKey], Counter[CallKey],
                                              dict[CallKey, float]]:
    """From the session's own events: calls (minus long-running ones, which a later
    invocation answers), responses, and when each call's last response was stored."""
    calls: Counter[CallKey] = Counter()
    responses: Counter[CallKey] = Counter()
    answered_at: dict[CallKey, float] = {}
    later: set[CallKey] = set()
    for e in events:
        inv = str(e.invocation_id)
        later.update((inv, i) for i in (e.long_running_tool_ids or ()))
        for part in (e.content.parts or []) if e.content else []:
            if part.function_call is not None:
                calls[(inv, str(part.function_call.id))] += 1
            if part.function_response is not None:
                key = (inv, str(part.function_response.id))
                responses[key] += 1
                answered_at[key] = float(e.timestamp)
    return Counter({k: n for k, n in calls.items() if k not in later}), responses, answered_at


def stored_unanswered(events: list[Any]) -> Counter[CallKey]:
    """(invocation id, call id) of every stored call without a stored response."""
    calls, responses, _ = stored_calls(events)
    return calls - responses


def check_ledger(stored: list[Any], telemetry: Telemetry,
                 outcome: Outcome | None = None) -> list[str]:
    problems: list[str] = []
    reports: dict[CallKey, list[float]] = defaultdict(list)
    reasons: dict[CallKey, list[str]] = defaultdict(list)
    for s in telemetry.spans.get_finished_spans():
        for e in s.events:
            if e.name == sc.EVENT_UNANSWERED_CALL:
                a = e.attributes or {}
                key = (str(a.get(sc.ADK_INVOCATION_ID)), str(a.get(sc.GEN_AI_TOOL_CALL_ID)))
                reports[key].append(e.timestamp / 1e9)
                reasons[key].append(str(a.get(sc.ADK_TOOL_CALL_UNANSWERED_REASON)))
    calls, responses, answered_at = stored_calls(stored)
    unanswered = calls - responses
    for key, n in unanswered.items():
        if len(reports.get(key, [])) != n:
            problems.append(f"{_shown(key[1])}: stored without a response {n}x, reported "
                            f"unanswered {len(reports.get(key, []))}x")
    for key, times in reports.items():
        if key in unanswered:
            continue
        if key not in calls:
            problems.append(f"{_shown(key[1])}: reported unanswered, but the session has no "
                            "such call")
        elif answered_at[key] < min(times):
            problems.append(f"{_shown(key[1])}: reported unanswered, but its response was stored "
                            "before the report")
    if outcome is not None:
        problems += _check_reasons(outcome, reasons)
    return problems


def _check_reasons(outcome: Outcome, reasons: dict[CallKey, list[str]]) -> list[str]:
    """The reasons the tools' own record can settle (the module's docstring)."""
    problems: list[str] = []
    bodies: dict[str, list[TaskTruth]] = defaultdict(list)
    for t in outcome.truth.records:
        bodies[t.call_id].append(t)
    caller = outcome.spec.caller
    failed = any(t.self_cancelled or t.outcome == "error" for t in outcome.truth.records)
    for (_inv, call_id), said in sorted(reasons.items()):
        where = f"{_shown(call_id)}: unanswered reason {said}"
        mine = bodies.get(call_id, [])
        if len(mine) == 1 and len(said) == 1:  # one call of that id: its body is its own
            body = mine[0]
            ended_inside = body.ended_ns is not None and body.ended_ns < outcome.end_begin_ns
            if ended_inside and (body.self_cancelled or body.outcome == "error") \
                    and said[0] != sc.UnansweredReason.ERROR:
                problems.append(f"{where}, but its tool raised inside the run "
                                f"({'cancelled itself' if body.self_cancelled else 'error'})")
        if caller in _NEVER_CUTS and sc.CancelCause.CALLER_CANCELLED in said:
            problems.append(f"{where}, but the caller never cut the run")
        if caller in _CLOSES and not failed and not set(said) <= {
                sc.CancelCause.CALLER_CANCELLED, sc.UnansweredReason.ORPHANED}:
            problems.append(f"{where}, but the caller closed the stream and no call "
                            "failed")
    return problems


def check(outcome: Outcome, telemetry: Telemetry, plugin: TaskTelemetryPlugin,
          sdk_warnings: list[str], stored: list[Any] | None = None) -> list[str]:
    problems = check_spans(outcome, telemetry) + check_counts(outcome, telemetry, plugin)
    if stored is not None:
        problems += check_ledger(stored, telemetry, outcome)
    ended_twice = [w for w in sdk_warnings if "on an ended span" in w]
    if ended_twice:
        problems.append(f"the SDK warned {len(ended_twice)}x: {ended_twice[0]!r}")
    return problems
