"""The tool-task state machine: every transition of every record goes through here.

::

    opened ──► OPEN ──returned / raised / cancelled (its task ended)──► ENDED
                 │                                                      ▲
                 └──run ended while its task runs──► ORPHANED ──task ended──┘

A record enters OPEN in ``enter`` and leaves it exactly once, in ``_leave``: it ends
(``end_task``) or is orphaned (``orphan``), never both, never twice; an orphan ends in
``_orphan_ended``. The counts behind ``started`` and ``active`` and the open total
change only in ``enter`` and ``_leave``. What a tracker holds, the views of it and
the verbs on runs are its base class's (run_book.py); when a run ends is the run-end
rules' (run_end.py), which move records only through these transitions
(``run_end.RunEndOwner``).

A tool call's way goes down. The plugin turns ADK's objects into values (the call id,
the tool's ``ToolIdentity`` and series, what is captured, a streaming call's
background task) and calls one verb a callback: ``tool_started``, ``returned_here``,
``raised_here``. The tracker decides how the task ended (outcome, error type, cancel
cause) and hands that down once to each signal: the span (task_spans.py's ``end_span``),
the ``duration`` point (metrics.py), the observers (observe.py); none calls back. Where
it was the last task a deferred run end waited for, the run ends then (run_end.py). A
call whose run it never saw start (a plugin added mid-run) takes a second turn:
``RunUnknown``, then ``run_started`` and ``tool_started`` again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Future
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from .. import adk_compat as compat
from .. import observe
from .. import semconv as sc
from ..signals.metrics import Metrics
from ..signals.orphan_report import report_orphan
from ..signals.task_spans import TaskSpans
from . import pool_calls as threadwork
from . import run_drivers as drivers
from . import strict_mode as strict
from . import trackers as registry
from .records import (
    ENDED,
    OPEN,
    ORPHANED,
    Options,
    RunRecord,
    Series,
    TaskRecord,
    TaskSeen,
    ToolIdentity,
)
from .run_book import FAILURES_LOGGED, RunBook
from .run_end import RunEnds

logger = logging.getLogger(sc.LOGGER_NAME)


class RunUnknown(LookupError):
    """A tool call of a run the tracker never saw start (``Tracker.tool_started``)."""


class Tracker(RunBook):
    """The records of one plugin instance, and the verbs that move them."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: Any = None, options: Options | None = None) -> None:
        super().__init__(options or Options())
        self.spans = TaskSpans(tracer_provider)
        self.metrics = Metrics(meter_provider)
        self.ends = RunEnds(self)
        self._owner_gone_cb = self.ends.owner_gone
        self.metrics.running = self.open_records  # oldest_age, read at collection
        registry.add(self)

    # --- a tool call's verbs ----------------------------------------------------------

    def tool_started(self, invocation_id: str, call_id: str, identity: ToolIdentity,
                     series: Series, task: asyncio.Task[Any] | None,
                     extra: dict[str, str] | None = None, stops: str | None = None
                     ) -> TaskRecord | None:
        """before_tool_callback: a tool task was created, running in ``task`` (its end is
        the call's end; None: a call that runs in its run's own task, which its
        callbacks end); ``extra``: its captured arguments (opt-in); ``stops``: the tool
        a ``stop_streaming`` call asks to stop. Its run is the one this context belongs
        to, else the newest of its invocation id; ``RunUnknown`` where there is none
        (no before_run seen: a plugin added mid-run), which ``run_started`` fixes.
        None when not tracked (max_open_tasks).

        ``call_id`` is kept whole, however long: it is the join key between the span,
        the session's function call and response, and the call ledger, so every record
        of the call carries the same string (the one ADK holds: no copy is made, and
        records are bounded by ``max_open_tasks``)."""
        run = self._runs.of(invocation_id)
        if run is None:
            raise RunUnknown(invocation_id)
        if stops is not None:
            self._stop_requested(run, stops)
        if self._open >= self.options.max_open_tasks:
            self.metrics.overflow(series, self._open)
            return None
        key = call_id if call_id not in run.tasks else _free_key(run, call_id)
        record = TaskRecord(run, identity, series, call_id, key, otel_context.get_current(),
                            time.time_ns())
        record.extra = extra
        if not run.trace_id:
            run.trace_id = trace.get_current_span(record.parent).get_span_context().trace_id
        self.enter(record)
        driver = run.driver_ref
        if task is not None and (driver is None or driver() is not task):
            self._task_var.set(record)
            self._bind(record, task)
            if run.watched_ref is None:  # the run's first open task
                drivers.watch(run)
        # (else: a call that runs in its run's own task: its callbacks end it)
        return record

    def returned_here(self, invocation_id: str, call_id: str,
                      result: dict[str, str] | None = None, moves: bool = False,
                      moved_to: asyncio.Task[Any] | None = None) -> None:
        """after_tool_callback of call ``call_id`` (``_here`` finds its record)."""
        record = self._here(invocation_id, call_id)
        if record is not None:
            self.returned(record, result, moves, moved_to)

    def returned(self, record: TaskRecord, result: dict[str, str] | None = None,
                 moves: bool = False, moved_to: asyncio.Task[Any] | None = None) -> None:
        """The call produced a result (maybe a callback's answer for an error it
        raised); ``result``: its captured attribute (opt-in). ``moves``: a live
        streaming dispatch, whose work goes on in ``moved_to`` (its background task)."""
        if record.state != OPEN:
            return
        record.returned = True
        if result:
            record.extra = {**(record.extra or {}), **result}
        if moves:
            if moved_to is not None:
                self._bind(record, moved_to)
        elif record.task is None:
            self.end_returned(record)

    def raised_here(self, invocation_id: str, call_id: str, error: BaseException) -> None:
        """on_tool_error_callback: the tool raised ``error`` (a real error: the plugin
        leaves out what ``compat.is_tool_error`` says is not one). A later plugin may
        still answer for it, so a record bound to its task waits for the task's end."""
        record = self._here(invocation_id, call_id)
        if record is not None and record.state == OPEN:
            record.error = error
            if record.task is None:
                self.end_task(record, sc.Outcome.ERROR, error)

    def _here(self, invocation_id: str, call_id: str) -> TaskRecord | None:
        """The open record of call ``call_id``: the one of this context (the call's own
        task holds it), else the first open one of that id in its run that runs in
        the run's own task (no record in the context)."""
        record = self.current()
        if record is not None and record.call_id == call_id:
            return record
        run = self._runs.of(invocation_id)
        record = None if run is None else run.tasks.get(call_id)
        return record if record is not None and record.task is None else None

    def _stop_requested(self, run: RunRecord, tool_name: str) -> None:
        """A live ``stop_streaming`` call asks to stop ``tool_name``: that is why its
        background task will be cancelled."""
        for record in run.tasks.values():
            if record.tool_name == tool_name and compat.works_in_background(record.kind):
                record.cancel_cause = sc.CancelCause.STOP_STREAMING

    def _bind(self, record: TaskRecord, task: asyncio.Task[Any]) -> None:
        """The record's end is ``task``'s end from now on (it is its done-callback)."""
        if record.state != OPEN or task is record.task:
            return
        _rebind(record, task)
        if self.options.track_spawned_tasks:
            strict.note_tool_task(task)
        if task.done():
            self.end_from_task(record, task)
        else:
            task.add_done_callback(record)

    def task_done(self, record: TaskRecord, task: asyncio.Task[Any]) -> None:
        """The done-callback of a record's task."""
        try:
            if record.state == OPEN:
                if task is record.task:
                    if record.work is not None and self.waits_for_work(record, task):
                        return  # its thread still runs the callable
                    if record.error is None and not task.cancelled() and task.exception() is None:
                        self.end_task(record, sc.Outcome.OK)
                    else:
                        self.end_from_task(record, task)
            elif record.state == ORPHANED and not threadwork.working(record):
                self._orphan_ended(record, task)
        except Exception:
            self.failed("tool-task end")

    def end_from_task(self, record: TaskRecord, task: asyncio.Task[Any]) -> None:
        """``task`` ended: cancelled, raised out of it, or returned (``end_returned``)."""
        cancelled = task.cancelled()
        error = None if cancelled else task.exception()
        if cancelled or error is not None:
            self.end_task(record, sc.Outcome.CANCELLED if cancelled else sc.Outcome.ERROR, error,
                          self_cancelled=cancelled and compat.cancelled_itself(task))
        else:
            self.end_returned(record)

    def end_returned(self, record: TaskRecord) -> None:
        """The call finished without raising out of its task: ok, or recovered (a
        callback answered for an error), or error (ADK swallowed it, nobody answered)."""
        error = record.error
        self.end_task(record, sc.Outcome.OK if error is None else
                      sc.Outcome.RECOVERED if record.returned else sc.Outcome.ERROR, error)

    # --- thread work (a synchronous callable on ADK's tool thread pool) ----------------

    def bind_thread_work(self, record: TaskRecord, work: Future[Any]) -> None:
        """The call's synchronous callable runs in a pool thread as ``work``
        (threadwork.bind: only a submission from the call's own task).

        From then on the record ends only once both its task and ``work`` are done:
        a thread cannot be cancelled, so a call whose task is cancelled while its
        callable runs stays open (the ``cancelled`` event is added at that moment) and
        is orphaned if its run ends first, with the thread's stack.
        """
        if record.state == OPEN:
            threadwork.bind(self, record, work)

    def work_done(self, record: TaskRecord, work: Future[Any]) -> None:
        """``work`` finished and its record waited for it (on the loop's thread)."""
        try:
            task = record.task
            if record.work is not work or (task is not None and not task.done()):
                return  # another callable's, or its task's own end follows
            if record.state == OPEN and task is not None:
                self.end_from_task(record, task)
            elif record.state == ORPHANED:
                self._orphan_ended(record, task)
        except Exception:
            self.failed("thread work end")

    def waits_for_work(self, record: TaskRecord, task: asyncio.Task[Any]) -> bool:
        """``task`` has ended: whether its thread work still runs (the record waits).
        A cancelled task's ``cancelled`` event is told now, when it happened (the span
        is made for it now)."""
        if not threadwork.working(record):
            return False
        if not record.waiting_for_work:
            record.waiting_for_work = True
            if task.cancelled():
                cause = record.cancel_cause = _cancel_cause(record)
                self.spans.span_of(record).add_event(sc.EVENT_CANCELLED,
                                                     {sc.ADK_TOOL_TASK_CANCEL_CAUSE: cause})
        return True

    # --- the transitions --------------------------------------------------------------

    def enter(self, record: TaskRecord) -> None:
        """-> OPEN: the record is one of its run's open tasks, and counted."""
        record.run.tasks[record.key] = record
        record.series.started += 1
        record.series.open += 1
        self._open += 1

    def _leave(self, record: TaskRecord, state: str) -> bool:
        """OPEN -> ``state``; False if the record had already left OPEN. The caller
        then lets the run's driver go if this was its last open task (``_let_go``)."""
        if record.state != OPEN:
            return False
        record.state = state
        run = record.run
        if run.tasks.get(record.key) is record:
            del run.tasks[record.key]
        record.series.open -= 1
        self._open -= 1
        return True

    def end_task(self, record: TaskRecord, outcome: str, error: BaseException | None = None,
                 *, self_cancelled: bool = False) -> None:
        """OPEN -> ENDED, inside its run: decided here, then handed down once to the
        span, the ``duration`` point and the observers.

        ``self_cancelled``: the task raised CancelledError by itself (nothing called its
        ``cancel()``): none of the cancel causes happened, so it has none; for its
        siblings and its call's ledger reason it is a call that ended badly."""
        if not self._leave(record, ENDED):
            return
        end_ns = time.time_ns()
        run = record.run
        etype = cause = None
        if error is not None and outcome == sc.Outcome.ERROR:
            etype = error_type(error)
        elif outcome == sc.Outcome.CANCELLED and not self_cancelled:
            cause = _cancel_cause(record)
        if (etype is not None or self_cancelled) and compat.marks_sibling_failure(record.kind):
            run.sibling_failed = True  # ADK cancels the rest of the step
        if etype is not None or cause is not None or self_cancelled:
            # its tool raised (or cancelled itself) and nothing answered; or its cause
            _note_unhappy(run, record.call_id, cause or sc.UnansweredReason.ERROR)
        _shed(record)
        _let_go(run)
        # Handed down once each; none of them calls back. The span is None where none
        # is made (an unsampled trace): nothing built or ended.
        span = self.spans.end_span(record, outcome, end_ns, error=error, etype=etype,
                                   cause=cause, self_cancelled=self_cancelled,
                                   keep=self.options.track_spawned_tasks)
        took = end_ns - record.start_ns
        self.metrics.ended(record.series, (took if took > 0 else 0) / 1e9, outcome, span,
                           etype, cause)
        if observe.observers:
            self.failures += observe.tell(
                TaskSeen(run.invocation_id, run.app_name, record.call_id, record.tool_name,
                         record.kind, outcome, cause, etype), FAILURES_LOGGED - self.failures)
        if run.span_end_due is not None and not run.tasks:
            # The last task a deferred end waited for has ended: nothing is left to
            # wait for, the run's state goes now (not at the bound, nor at a close).
            self.ends.end_run(run, run.end_due_trigger or sc.EndTrigger.RUN_SPAN_END)

    def orphan(self, record: TaskRecord, trigger: str, task: asyncio.Task[Any] | None) -> None:
        """OPEN -> ORPHANED: its run ended while ``task`` still runs."""
        if not self._leave(record, ORPHANED):
            return
        now = record.orphaned_ns = time.time_ns()
        run = record.run
        _let_go(run)
        _note_unhappy(run, record.call_id, sc.UnansweredReason.ORPHANED)
        span = self.spans.span_of(record, sc.Outcome.ORPHANED)
        with_stack = self._stacks_left > 0 and (span.is_recording() or bool(observe.observers))
        self._stacks_left -= with_stack
        stack = report_orphan(record, span, trigger, (now - record.start_ns) / 1e9, task,
                              self.metrics, with_stack=with_stack,
                              cancel=self.options.cancel_orphans,
                              work=record.work if threadwork.working(record) else None)
        if observe.observers:
            self.tell(TaskSeen(run.invocation_id, run.app_name, record.call_id,
                               record.tool_name, record.kind, sc.Outcome.ORPHANED,
                               record.cancel_cause if record.waiting_for_work else None,
                               trigger=trigger, stacktrace=stack))
        # Kept until ``task`` ends (its done-callback is the record), and its thread
        # work if it has any.
        if task is not None and not task.done():
            if record.task is not task:
                _rebind(record, task)
                task.add_done_callback(record)
            self._orphans.add(record)
        elif threadwork.working(record):
            self._orphans.add(record)
        else:
            self._orphan_ended(record, task)
        self.end_nested(record, trigger)

    def _orphan_ended(self, record: TaskRecord, task: asyncio.Task[Any] | None) -> None:
        """ORPHANED -> ENDED: the orphan's task (and thread work) finally ended."""
        if record.state != ORPHANED:
            return
        record.state = ENDED
        self._orphans.discard(record)
        work = record.work
        if work is not None and (task is None or task.cancelled()):
            outcome = threadwork.outcome_of(work)  # what the thread, which outlived it, did
        elif task is None or task.cancelled():
            outcome = sc.Outcome.CANCELLED
        elif task.exception() is not None:
            outcome = sc.Outcome.ERROR
        else:
            outcome = sc.Outcome.OK
        span = record.span if record.span is not None else trace.INVALID_SPAN
        self.metrics.orphan_ended(record.series, (time.time_ns() - record.orphaned_ns) / 1e9,
                                  outcome, span)
        if task is not None:
            task.remove_done_callback(record)
        _shed(record)
        record.span = record.parent = record.extra = None  # its span ended at its report


def error_type(error: BaseException) -> str:
    """``error.type`` of a task that raised ``error``: its class, qualified by its module
    unless builtin."""
    cls = type(error)
    mod = cls.__module__
    return cls.__qualname__ if mod in ("builtins", "__main__") else f"{mod}.{cls.__qualname__}"


def _cancel_cause(record: TaskRecord) -> str:
    """Why ``record``'s task was cancelled: what the plugin saw asked for, else
    adk_compat's rule. A caller's cancellation cuts the run, whatever signal ends it
    (after_run may)."""
    run = record.run
    cause = record.cancel_cause or compat.cancel_cause(record.kind, run.sibling_failed)
    if cause == sc.CancelCause.CALLER_CANCELLED:
        run.cut_by_caller = True
    return cause


def _rebind(record: TaskRecord, task: asyncio.Task[Any]) -> None:
    """``task`` is the record's task now; its old one no longer calls it back."""
    if record.task is not None:
        record.task.remove_done_callback(record)
    record.task = task


def _shed(record: TaskRecord) -> None:
    """An ended record keeps no task, thread work or error: a finished asyncio task
    that ADK keeps around (its context holds the record) keeps nothing through it. Its
    span's parts go where the span ends (``TaskSpans.end_span``; an orphan's at its end)."""
    record.task = None
    record.work = None
    record.error = None


def _let_go(run: RunRecord) -> None:
    """A record of ``run`` left OPEN: with none left, a caller's task that drives the
    run no longer carries it as done-callback (run_drivers.py)."""
    if not run.tasks:
        drivers.watch(run)


def _free_key(run: RunRecord, call_id: str) -> str:
    n = 2
    while f"{call_id}#{n}" in run.tasks:
        n += 1
    logger.info("adk_task_telemetry: function-call id %r seen twice in invocation %s",
                call_id, run.invocation_id)
    return f"{call_id}#{n}"


def _note_unhappy(run: RunRecord, call_id: str, reason: str) -> None:
    """How a task that did not end well ended: its call's reason, if unanswered."""
    if run.unhappy is None:
        run.unhappy = {}
    run.unhappy[call_id] = reason
