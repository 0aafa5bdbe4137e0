"""Reading one scenario's results back from the OpenTelemetry SDK it ran on.

The harness hands over what the SDK received (finished spans, a metric reader); this
module turns them into the results model. Only telemetry is read, never the plugin's
own state: what the CLI shows is what a user's backend would get.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import semconv as sc
from .results import ENDED_OUTCOMES, Orphan, Result, Stuck, Task, Unanswered

#: (started, ended per outcome, orphaned, orphans alive)
Totals = tuple[int, dict[str, int], int, int]


def metric_totals(reader: Any) -> Totals:
    """(started, ended per outcome, orphaned, orphans alive) from one collection."""
    started = orphaned = alive = 0
    ended = dict.fromkeys(ENDED_OUTCOMES, 0)
    data = reader.get_metrics_data()
    for rm in getattr(data, "resource_metrics", None) or ():
        for sm in rm.scope_metrics:
            if sm.scope.name != sc.SCOPE_NAME:
                continue
            for m in sm.metrics:
                for dp in m.data.data_points:
                    if m.name == sc.METRIC_STARTED:
                        started += int(dp.value)
                    elif m.name == sc.METRIC_ORPHANED:
                        orphaned += int(dp.value)
                    elif m.name == sc.METRIC_ORPHANS_ALIVE:
                        alive += int(dp.value)
                    elif m.name == sc.METRIC_DURATION:
                        outcome = str((dp.attributes or {}).get(sc.ADK_TOOL_TASK_OUTCOME, ""))
                        ended[outcome] = ended.get(outcome, 0) + int(dp.count)
    return started, ended, orphaned, alive


def tasks_from_spans(spans: Sequence[Any], pending: set[str], probed: set[str]) -> list[Task]:
    """The ``tool_task`` spans of one run, with their ``orphaned_task`` events.

    ``probed``: the call ids the scenario's own probe knows; ``pending``: those of them
    still running now (an orphan's ``still_running`` is None for a call not probed)."""
    tasks = []
    for s in spans:
        if not s.name.startswith(sc.SPAN_NAME_PREFIX):
            continue
        a = s.attributes or {}
        call_id = str(a.get(sc.GEN_AI_TOOL_CALL_ID, ""))
        task = Task(
            call_id=call_id,
            tool=str(a.get(sc.GEN_AI_TOOL_NAME, s.name[len(sc.SPAN_NAME_PREFIX):])),
            kind=str(a.get(sc.ADK_TOOL_TASK_KIND, "")),
            outcome=str(a.get(sc.ADK_TOOL_TASK_OUTCOME, "")),
            start_ns=int(s.start_time or 0),
            end_ns=int(s.end_time or s.start_time or 0),
            invocation_id=str(a.get(sc.ADK_INVOCATION_ID, "")),
            error_type=str(a[sc.ERROR_TYPE]) if sc.ERROR_TYPE in a else None,
        )
        for e in s.events:
            ea = e.attributes or {}
            if e.name == "exception" and task.error_type is None:
                task.error_type = str(ea.get("exception.type", "")) or None
            elif e.name == sc.EVENT_CANCELLED:
                cause = ea.get(sc.ADK_TOOL_TASK_CANCEL_CAUSE)
                task.cancel_cause = str(cause) if cause else None
            elif e.name == sc.EVENT_STUCK_TASK:
                age = ea.get(sc.ADK_TOOL_TASK_AGE, 0.0)
                report = ea.get(sc.ADK_TOOL_TASK_STUCK_REPORT, 0)
                task.stuck.append(Stuck(
                    report=int(report) if isinstance(report, int) else 0,
                    age_s=float(age) if isinstance(age, (int, float)) else 0.0,
                    state=str(ea.get(sc.ADK_TOOL_TASK_STATE, "")),
                    stacktrace=str(ea.get(sc.CODE_STACKTRACE, ""))))
            elif e.name == sc.EVENT_ORPHANED_TASK:
                age = ea.get(sc.ADK_TOOL_TASK_AGE, 0.0)
                task.orphan = Orphan(
                    trigger=str(ea.get(sc.ADK_RUN_END_TRIGGER, "")),
                    age_s=float(age) if isinstance(age, (int, float)) else 0.0,
                    at_ns=int(e.timestamp),
                    stacktrace=str(ea.get(sc.CODE_STACKTRACE, "")),
                    still_running=(call_id in pending) if call_id in probed else None,
                )
        tasks.append(task)
    return tasks


def unanswered_from_spans(spans: Sequence[Any]) -> list[Unanswered]:
    """The ``unanswered_call`` events of one run (on ADK's run span or on ours)."""
    out = []
    for s in spans:
        for e in s.events:
            if e.name == sc.EVENT_UNANSWERED_CALL:
                a = e.attributes or {}
                out.append(Unanswered(
                    call_id=str(a.get(sc.GEN_AI_TOOL_CALL_ID, "")),
                    tool=str(a.get(sc.GEN_AI_TOOL_NAME, "")),
                    reason=str(a.get(sc.ADK_TOOL_CALL_UNANSWERED_REASON, "")),
                    invocation_id=str(a.get(sc.ADK_INVOCATION_ID, ""))))
    return out


def span_totals(tasks: Sequence[Task]) -> Totals:
    """The same totals as ``metric_totals``, from spans: for --otlp, where the metrics
    go to the exporter's reader and not to ours."""
    ended = dict.fromkeys(ENDED_OUTCOMES, 0)
    orphaned = alive = 0
    for t in tasks:
        if t.orphan is not None or t.outcome == sc.Outcome.ORPHANED:
            orphaned += 1
            alive += bool(t.orphan is not None and t.orphan.still_running)
        else:
            ended[t.outcome] = ended.get(t.outcome, 0) + 1
    return len(tasks), ended, orphaned, alive


def fill(result: Result, spans: Sequence[Any], reader: Any | None, pending: set[str],
         probed: set[str]) -> None:
    """Puts what the SDK received into ``result``: tasks and unanswered calls from the
    spans, totals from the metric reader (from the spans when there is none)."""
    result.tasks = tasks_from_spans(spans, pending, probed)
    result.unanswered = unanswered_from_spans(spans)
    result.started, result.ended, result.orphaned, result.orphans_alive = (
        metric_totals(reader) if reader is not None else span_totals(result.tasks))
