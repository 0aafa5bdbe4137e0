"""How an orphan is told: span event and status, the run span's event, the WARNING
log record (emitted in the task span's context, so a logs bridge links it to the
trace), the metrics, and opt-in cancellation. Also spans left open under a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from .. import semconv as sc
from . import span_processors as open_spans
from .stacks import suspended_stack, thread_stack

if TYPE_CHECKING:
    from concurrent.futures import Future

    from opentelemetry.trace import Span

    from ..engine.records import RunRecord, TaskRecord
    from .metrics import Metrics

logger = logging.getLogger(sc.LOGGER_NAME)

#: Seconds an orphan cancelled by ``cancel_orphans`` gets before we say it ignored it.
CANCEL_GRACE_S = 5.0


def report_orphan(record: TaskRecord, span: Span, trigger: str, age: float,
                  task: asyncio.Task[Any] | None, metrics: Metrics, *, with_stack: bool,
                  cancel: bool, work: Future[Any] | None = None) -> str:
    """Tells everything about one orphan, then ends its span (its end is the report;
    ``span`` carries the outcome already). ``work``: the call's callable still running
    on a pool thread, where it is stuck then (not in ``task``). Returns the stack it
    reported ("" if none)."""
    run = record.run
    stack = None if work is None else thread_stack(work) if with_stack else ""
    event_attrs: dict[str, Any] = {
        sc.GEN_AI_TOOL_CALL_ID: record.call_id,
        sc.GEN_AI_TOOL_NAME: record.tool_name,
        sc.ADK_INVOCATION_ID: run.invocation_id,
        sc.ADK_RUN_END_TRIGGER: trigger,
        sc.ADK_TOOL_TASK_AGE: round(age, 6),
    }
    if stack is None:
        stack = suspended_stack(task) if task is not None and with_stack else ""
    if stack:
        event_attrs[sc.CODE_STACKTRACE] = stack
    span.add_event(sc.EVENT_ORPHANED_TASK, event_attrs)
    span.set_status(Status(StatusCode.ERROR, f"still running when its run ended ({trigger})"))
    if run.span is not None and run.span.is_recording():
        run.span.add_event(sc.EVENT_ORPHANED_TASK, event_attrs)
    cancelled = cancel and task is not None and not task.done()
    if cancelled and task is not None:
        task.cancel()
        span.add_event(sc.EVENT_CANCELLED,
                       {sc.ADK_TOOL_TASK_CANCEL_CAUSE: sc.CancelCause.ORPHAN_CANCELLED})
        _check_cancel_later(task, record.tool_name, record.call_id)
    span.end()
    metrics.orphaned(record.series, trigger, span)
    with trace.use_span(span, end_on_exit=False):
        # The event's attributes ride on the record too (a logs bridge exports a
        # record's extras as its attributes): a logs store finds it by tool and call id
        # as fields, not only by words of its message.
        logger.warning(
            "orphaned tool task: tool=%s call_id=%s invocation=%s trigger=%s age=%.3fs%s",
            record.tool_name, record.call_id, run.invocation_id, trigger, age,
            " (cancelled by cancel_orphans)" if cancelled else "",
            extra={k: v for k, v in event_attrs.items() if k != sc.CODE_STACKTRACE})
    return stack


def report_open_spans(run: RunRecord, trigger: str) -> None:
    """Spans a tool (or a library under it) opened in this run and never ended."""
    if not run.trace_id or not open_spans.has_processors():
        return
    now = time.time_ns()
    for child in open_spans.open_child_spans(run.trace_id, run.start_ns):
        age = (now - (child.start_time or now)) / 1e9
        attrs = {
            sc.OPEN_SPAN_NAME: child.name,
            sc.OPEN_SPAN_ID: format(child.get_span_context().span_id, "016x"),
            sc.ADK_INVOCATION_ID: run.invocation_id,
            sc.ADK_RUN_END_TRIGGER: trigger,
            sc.ADK_TOOL_TASK_AGE: round(age, 6),
        }
        if run.span is not None and run.span.is_recording():
            run.span.add_event(sc.EVENT_OPEN_SPAN, attrs)
        with trace.use_span(child, end_on_exit=False):
            logger.warning("span still open when its run ended: name=%s invocation=%s "
                           "trigger=%s age=%.3fs", child.name, run.invocation_id, trigger, age)


def _check_cancel_later(task: asyncio.Task[Any], tool: str, call_id: str) -> None:
    def check() -> None:
        if not task.done():
            logger.warning("orphaned tool task ignored cancellation: tool=%s call_id=%s",
                           tool, call_id)
    with contextlib.suppress(RuntimeError):  # the loop is closed (shutdown)
        task.get_loop().call_later(CANCEL_GRACE_S, check)
