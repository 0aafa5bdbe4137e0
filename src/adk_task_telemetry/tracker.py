"""The tool-task state machine: every transition of every record goes through here.

::

    opened ──► OPEN ──returned / raised / cancelled (its task ended)──► ENDED
                 │                                                      ▲
                 └──run ended while its task runs──► ORPHANED ──task ended──┘

A record leaves OPEN exactly once, through ``_leave()``: it ends (``_end``) or is
orphaned (``_orphan``), never both, never twice. A record is OPEN exactly while it
is in its run's ``tasks``; the open count is changed only by ``_opened`` and
``_leave``. When a run has ended is decided in ``_end_run`` alone, with the rule
of each trigger in ``adk_compat.kinds_ended_by``. Knows OpenTelemetry, not ADK:
the plugin turns ADK callbacks into these verbs.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import logging
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from . import adk_compat as compat
from . import observe, strict
from . import semconv as sc
from . import spans as open_spans
from .calls import report_unanswered, unanswered_calls
from .metrics import NAME_CHARS, Metrics, Series
from .orphans import error_type, report_open_spans, report_orphan
from .records import (
    ENDED,
    OPEN,
    ORPHANED,
    OpenTask,
    RunRecord,
    TaskRecord,
    TaskSeen,
    TrackerState,
)
from .stacks import thread_stack
from .version import __version__

logger = logging.getLogger(sc.LOGGER_NAME)

#: Stacks captured per sweep at most: a sweep of thousands of orphans must not stall
#: the event loop walking every one (each orphan is still reported).
STACKS_PER_SWEEP = 100
_FAILURES_LOGGED = 10


@dataclass(frozen=True)
class Options:
    cancel_orphans: bool = False
    track_spawned_tasks: bool = False
    max_open_tasks: int = 10_000


class Tracker:
    """The records of one plugin instance, and the verbs that move them."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: metrics.MeterProvider | None = None,
                 options: Options | None = None) -> None:
        self.options = options or Options()
        self.tracer = trace.get_tracer(sc.SCOPE_NAME, __version__, tracer_provider=tracer_provider)
        self.metrics = Metrics(meter_provider, self._open_series)
        self._runs: dict[str, RunRecord] = {}
        self._orphans: set[TaskRecord] = set()  # ORPHANED records: their tasks still run
        self._open = 0  # OPEN records, i.e. the sum of len(run.tasks)
        self._overflowed = 0
        self._stacks_left = STACKS_PER_SWEEP
        #: Failures inside the plugin and the tracker (swallowed, logged), counted once.
        self.failures = 0
        # The record of the tool call whose task is running. before/after/error
        # callbacks of one call run in that call's task, so they all see it; tasks
        # a tool body creates inherit it (strict mode).
        self._current: contextvars.ContextVar[list[TaskRecord | None] | None] = (
            contextvars.ContextVar(f"adk_task_telemetry_{id(self):x}", default=None))
        _TRACKERS.add(self)

    # --- views ----------------------------------------------------------------------

    def current(self) -> TaskRecord | None:
        """The open record of the tool call running in this context, if any."""
        holder = self._current.get()
        return holder[0] if holder else None

    def open_tasks(self) -> list[OpenTask]:
        now = time.monotonic()
        out = [OpenTask(r.invocation_id, r.call_id, r.tool_name, r.kind, now - r.start, False)
               for r in self._open_records()]
        out.extend(OpenTask(r.invocation_id, r.call_id, r.tool_name, r.kind, now - r.start, True)
                   for r in list(self._orphans))
        return out

    def state(self) -> TrackerState:
        return TrackerState(len(self._runs), self._open, len(self._orphans))

    def _open_records(self) -> Iterator[TaskRecord]:
        for run in list(self._runs.values()):
            yield from list(run.tasks.values())

    def _open_series(self) -> Iterator[Series]:
        return (r.series for r in self._open_records())

    def _tell(self, seen: observe.Seen) -> None:
        for observer in list(observe.observers):
            try:
                observer(seen)
            except Exception:
                self.failed("observer")

    def failed(self, where: str) -> None:
        self.failures += 1
        if self.failures <= _FAILURES_LOGGED:
            logger.exception("adk_task_telemetry: internal error in %s (ignored)", where)

    # --- runs -----------------------------------------------------------------------

    def run_started(self, invocation_id: str, app_name: str, span: Span | None,
                    task: asyncio.Task[Any] | None, owner: Any) -> None:
        run = self._run(invocation_id, app_name, owner)
        is_run = compat.is_adk_task(task)
        if span is not None and span.get_span_context().is_valid:
            run.trace_id = span.get_span_context().trace_id
        if span is not None and span.is_recording() and run.span is None:
            run.span = span
            if not is_run:  # ADK's own run task ends with the run: that signal is exact
                open_spans.watch_run_span(span, partial(_run_span_ended, weakref.ref(self),
                                                        invocation_id))
        self._drive(run, task, is_run)
        if self.options.track_spawned_tasks:
            strict.install_on_running_loop()

    def run_step(self, invocation_id: str, task: asyncio.Task[Any] | None) -> None:
        """The run's reader is ``task`` now (it just got an event).

        A caller may hand the run's generator from task to task (a request handler
        to a worker; ``wait_for`` around every ``anext``): the run goes on in the
        task reading it, not in the one that started it.
        """
        run = self._runs.get(invocation_id)
        if run is not None and not run.driver_is_run:
            self._drive(run, task, False)

    def _run(self, invocation_id: str, app_name: str, owner: Any = None) -> RunRecord:
        run = self._runs.get(invocation_id)
        if run is None:  # also a tool task seen without its before_run (plugin added mid-run)
            run = self._runs[invocation_id] = RunRecord(invocation_id, app_name)
        if owner is not None and run.context_ref is None and self.current() is None:
            # Not for a run started inside one of our tool tasks (an AgentTool's
            # sub-agent): its session is thrown away with it; the AgentTool's own
            # call is the one the user's session keeps.
            with contextlib.suppress(TypeError):
                run.context_ref = weakref.ref(owner)
        if owner is not None and run.finalizer is None:
            # Backstop for runs that end with no signal at all (a run_async that
            # fails on ADK 1.x): drop the record, if idle, once ADK lets go of the
            # invocation context.
            try:
                run.finalizer = weakref.finalize(
                    owner, _drop_idle_run, weakref.ref(self), invocation_id)
                run.finalizer.atexit = False
            except TypeError:
                run.finalizer = None
        return run

    def _drive(self, run: RunRecord, task: asyncio.Task[Any] | None, is_run: bool) -> None:
        if task is run.driver:
            return
        run.driver_ref = weakref.ref(task) if task is not None else None
        run.driver_is_run = is_run
        if run.tasks:
            self._watch(run)

    def _watch(self, run: RunRecord) -> None:
        """Keeps ``on_driver_done`` on the current driver: ADK's own run task for the
        run's whole life (it ends with the run), a caller's task only while the run has
        open tasks (it may serve thousands of runs)."""
        watched = run.watched_ref() if run.watched_ref is not None else None
        task = run.driver if run.tasks or run.driver_is_run else None
        if watched is task:
            return
        if watched is not None and run.on_driver_done is not None:
            watched.remove_done_callback(run.on_driver_done)
        run.watched_ref = None
        if task is not None and not task.done():
            if run.on_driver_done is None:
                run.on_driver_done = partial(self._driver_done, run.invocation_id)
            task.add_done_callback(run.on_driver_done)
            run.watched_ref = weakref.ref(task)

    def _driver_done(self, invocation_id: str, task: asyncio.Task[Any]) -> None:
        try:
            run = self._runs.get(invocation_id)
            if run is None:
                return
            if run.watched_ref is not None and run.watched_ref() is task:
                run.watched_ref = None
            if task is run.driver:
                self._end_run(run, sc.EndTrigger.RUN_TASK_DONE)
        except Exception:
            self.failed("run-task end")

    def run_ended(self, invocation_id: str, trigger: str) -> None:
        """ADK said the run ended (after_run, run_error, live teardown)."""
        run = self._runs.get(invocation_id)
        if run is not None:
            self._end_run(run, trigger)

    def closed(self) -> bool:
        """The plugin is closed: ends the runs that are no longer running. A Runner's
        close() does not stop runs in progress, and one plugin may serve many Runners.
        Returns whether any run is still in progress."""
        if self.current() is not None:
            # Closed from inside one of our tool tasks: a nested AgentTool runner
            # (ADK 1.x closes it when its run is over); the runs around it go on.
            return True
        busy = False
        for run in list(self._runs.values()):
            if run.still_running():
                busy = True
            else:
                self._end_run(run, sc.EndTrigger.PLUGIN_CLOSE)
        return busy

    def shutdown(self) -> int:
        """The process exits: every run ends now. Returns the number of orphans."""
        before = len(self._orphans)
        for run in list(self._runs.values()):
            self._end_run(run, sc.EndTrigger.SHUTDOWN)
        return len(self._orphans) - before

    def _end_run(self, run: RunRecord, trigger: str) -> None:
        """The one place a run ends: each open task ends or becomes an orphan."""
        kinds = compat.kinds_ended_by(trigger, run.driver_is_run)
        self._stacks_left = STACKS_PER_SWEEP
        for record in list(run.tasks.values()):
            if kinds is None or record.kind in kinds:
                self._settle(record, trigger)
        if kinds is not None and run.tasks:
            self._watch(run)  # the rest goes on with the run (and maybe another driver)
            return
        if self._runs.get(run.invocation_id) is run:
            del self._runs[run.invocation_id]
        run.driver_ref = None
        self._watch(run)  # detaches from the driver
        if run.finalizer is not None:
            run.finalizer.detach()
        if run.spawned:
            strict.end_spawned(self, run, trigger)
        self._unanswered(run, trigger)
        report_open_spans(run, trigger)
        if run.span is not None and trigger != sc.EndTrigger.RUN_SPAN_END:
            open_spans.forget_run_span(run.span)
        run.span = None

    def _unanswered(self, run: RunRecord, trigger: str) -> None:
        """The call ledger, once per run at its end (calls.py)."""
        try:
            found = unanswered_calls(run, trigger)
            if found:
                report_unanswered(run, found, self.tracer, self.metrics)
                if observe.observers:
                    for call, _author in found:
                        self._tell(call)
        except Exception:
            self.failed("call ledger")

    def _settle(self, record: TaskRecord, trigger: str) -> None:
        """At its run's end: a task that has ended is ended, one still running is orphaned."""
        task = record.task
        if _working(record):  # its thread still runs the callable: nothing stops that
            if task is not None and task.done():
                self._waits_for_work(record, task)
            self._orphan(record, trigger, task)
        elif task is None:  # the call runs (ran) in the run's driving task
            if record.error is not None or record.returned:
                self._end_returned(record)
            elif record.run.still_running():
                self._orphan(record, trigger, record.run.driver)
            else:
                self._end(record, sc.Outcome.CANCELLED)
        elif task.done():  # its done-callback has not run yet
            self._end_from_task(record, task)
        else:
            self._orphan(record, trigger, task)

    # --- tasks ----------------------------------------------------------------------

    def opened(self, invocation_id: str, app_name: str, owner: Any, call_id: str,
               tool_name: str, tool_type: str, agent_name: str, conversation_id: str | None,
               kind: str, task: asyncio.Task[Any] | None,
               extra: dict[str, str] | None = None) -> TaskRecord | None:
        """A tool task was created; its span starts now. None when not tracked."""
        run = self._run(invocation_id, app_name, owner)
        series = self.metrics.series_for(tool_name, agent_name, kind, run.app_name, tool_type)
        tool_name = tool_name[:NAME_CHARS]
        if self._open >= self.options.max_open_tasks:
            self._overflow(series)
            return None
        attrs = series.span_attrs.copy()
        if series.attrs[sc.GEN_AI_TOOL_NAME] != tool_name:  # the series is _other's
            attrs[sc.GEN_AI_TOOL_NAME] = tool_name
        attrs[sc.GEN_AI_TOOL_CALL_ID] = call_id[:NAME_CHARS]
        attrs[sc.ADK_INVOCATION_ID] = run.invocation_id
        if conversation_id:
            attrs[sc.GEN_AI_CONVERSATION_ID] = conversation_id
        if extra:
            attrs.update(extra)
        span = self.tracer.start_span(
            sc.SPAN_NAME_PREFIX + tool_name, kind=SpanKind.INTERNAL, attributes=attrs)
        if not run.trace_id:
            run.trace_id = span.get_span_context().trace_id
        key = call_id
        if key in run.tasks:  # a duplicate id: keep both, each ends on its own
            n = 2
            while f"{call_id}#{n}" in run.tasks:
                n += 1
            key = f"{call_id}#{n}"
            logger.info("adk_task_telemetry: function-call id %r seen twice in invocation %s",
                        call_id, run.invocation_id)
        record = TaskRecord(run, key, call_id, tool_name, kind, span, series, self._task_done)
        run.tasks[key] = record
        self._open += 1
        series.started += 1
        self._current.set(record.holder)
        # A call that runs in its run's own task has no task of its own: its
        # callbacks end it.
        self._bind(record, None if task is run.driver else task)
        if run.watched_ref is None and record.state == OPEN:  # the run's first open task
            self._watch(run)
        return record

    def _overflow(self, series: Series) -> None:
        self._overflowed += 1
        self.metrics.overflow(series)
        if self._overflowed == 1 or self._overflowed % 1000 == 0:
            logger.warning("adk_task_telemetry: %d open tool tasks reached max_open_tasks; %d "
                           "tool tasks not tracked so far", self._open, self._overflowed)

    def moved(self, record: TaskRecord, task: asyncio.Task[Any] | None) -> None:
        """The call's work goes on in ``task`` (a live streaming tool's background task)."""
        record.returned = True
        if task is not None:
            self._bind(record, task)

    def _bind(self, record: TaskRecord, task: asyncio.Task[Any] | None) -> None:
        if record.state != OPEN or task is record.task:
            return
        if record.task is not None:
            record.task.remove_done_callback(record)
        record.task = task
        if task is None:
            return
        if self.options.track_spawned_tasks:
            strict.note_tool_task(task)
        if task.done():
            self._end_from_task(record, task)
            return
        task.add_done_callback(record)

    def returned(self, record: TaskRecord) -> None:
        """after_tool_callback: the call produced a result (maybe a callback's answer
        for an error it raised)."""
        if record.state != OPEN:
            return
        record.returned = True
        if record.task is None:
            self._end_returned(record)

    def raised(self, record: TaskRecord, error: BaseException) -> None:
        """on_tool_error_callback: the tool raised. A later plugin may still answer
        for it, so a record bound to its task waits for the task's end."""
        if record.state != OPEN or not compat.is_tool_error(error):
            return
        record.error = error
        if record.task is None:
            self._end(record, sc.Outcome.ERROR, error)

    def stop_requested(self, invocation_id: str, tool_name: str) -> None:
        """A live ``stop_streaming`` call asks to stop ``tool_name``: that is why its
        background task will be cancelled."""
        run = self._runs.get(invocation_id)
        if run is None:
            return
        for record in run.tasks.values():
            if record.tool_name == tool_name and compat.works_in_background(record.kind):
                record.cancel_cause = sc.CancelCause.STOP_STREAMING

    def _task_done(self, record: TaskRecord, task: asyncio.Task[Any]) -> None:
        try:
            if record.state == OPEN:
                if task is record.task and (record.work is None
                                            or not self._waits_for_work(record, task)):
                    self._end_from_task(record, task)
            elif record.state == ORPHANED and not _working(record):
                self._orphan_ended(record, task)
        except Exception:
            self.failed("tool-task end")

    def _end_from_task(self, record: TaskRecord, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self._end(record, sc.Outcome.CANCELLED)
            return
        exc = task.exception()
        if exc is not None:
            self._end(record, sc.Outcome.ERROR, exc)
        else:
            self._end_returned(record)

    def _end_returned(self, record: TaskRecord) -> None:
        """The call finished without raising out of its task: ok, or recovered (a
        callback answered for an error), or error (ADK swallowed it, nobody answered)."""
        if record.error is None:
            self._end(record, sc.Outcome.OK)
        elif record.returned:
            self._end(record, sc.Outcome.RECOVERED, record.error)
        else:
            self._end(record, sc.Outcome.ERROR, record.error)

    # --- thread work (a synchronous callable on ADK's tool thread pool) ----------------

    def bind_thread_work(self, record: TaskRecord, work: Future[Any]) -> None:
        """The call's synchronous callable runs in a pool thread as ``work``.

        Called on the loop's thread, from the call's own task, right after ADK
        submitted the callable. From then on the record ends only once both its task
        and ``work`` are done: a thread cannot be cancelled, so a call whose task is
        cancelled while its callable runs stays open (the ``cancelled`` event is added
        at that moment) and is orphaned if its run ends first, with the thread's stack.
        """
        if record.state != OPEN:
            return
        try:
            loop = asyncio.get_running_loop()
            task = asyncio.current_task()
        except RuntimeError:  # a pool thread (a nested call): not the call's own task
            return
        if task is None or task is not (record.task or record.run.driver):
            return
        record.work = work
        work.add_done_callback(partial(self._work_done_in_thread, record, loop))

    def _work_done_in_thread(self, record: TaskRecord, loop: asyncio.AbstractEventLoop,
                             work: Future[Any]) -> None:
        """``work``'s done-callback, on the pool thread: handed to the loop only when
        the record waits for it. While its task still awaits the result, the record
        lets go of the work and the task's own end comes next, as for any call. (The
        loop learns of the result only after this callback: ADK's wrapper of the
        future registered its own callback later, so nothing on the loop touches
        ``record.work`` meanwhile.)"""
        task = record.task
        if record.state == OPEN and task is not None and not task.done():
            if record.work is work:
                record.work = None
            return
        try:
            loop.call_soon_threadsafe(self._work_done, record, work)
        except RuntimeError:  # its loop is closed (asyncio.run returned): ends here
            self._work_done(record, work)

    def _work_done(self, record: TaskRecord, work: Future[Any]) -> None:
        try:
            task = record.task
            if record.work is not work or (task is not None and not task.done()):
                return  # another callable's, or its task's own end follows
            if record.state == OPEN and task is not None:
                self._end_from_task(record, task)
            elif record.state == ORPHANED:
                self._orphan_ended(record, task)
        except Exception:
            self.failed("thread work end")

    def _waits_for_work(self, record: TaskRecord, task: asyncio.Task[Any]) -> bool:
        """``task`` has ended: whether its thread work still runs (the record waits).
        A cancelled task's ``cancelled`` event is told now, when it happened."""
        if not _working(record):
            return False
        if not record.waiting_for_work:
            record.waiting_for_work = True
            if task.cancelled():
                cause = record.cancel_cause = record.cancel_cause or compat.cancel_cause(
                    record.kind, record.run.sibling_failed)
                record.span.add_event(sc.EVENT_CANCELLED, {sc.ADK_TOOL_TASK_CANCEL_CAUSE: cause})
        return True

    # --- the transitions --------------------------------------------------------------

    def _leave(self, record: TaskRecord, state: str) -> bool:
        """OPEN -> ``state``; False if the record had already left OPEN."""
        if record.state != OPEN:
            return False
        record.state = state
        run = record.run
        if run.tasks.get(record.key) is record:
            del run.tasks[record.key]
        self._open -= 1
        if state == ENDED:
            record.holder[0] = None
            record.task = None
            record.work = None
        if not run.tasks:
            self._watch(run)
        return True

    def _end(self, record: TaskRecord, outcome: str, error: BaseException | None = None
             ) -> None:
        """OPEN -> ENDED, inside its run: the span ends with its outcome."""
        run = record.run
        if not self._leave(record, ENDED):
            return
        span = record.span
        span.set_attribute(sc.ADK_TOOL_TASK_OUTCOME, outcome)
        etype = cause = None
        if error is not None:
            span.record_exception(error)
            if outcome == sc.Outcome.ERROR:
                etype = error_type(error)
                span.set_attribute(sc.ERROR_TYPE, etype)
                span.set_status(Status(StatusCode.ERROR, etype))
                if compat.marks_sibling_failure(record.kind):
                    run.sibling_failed = True
        elif outcome == sc.Outcome.CANCELLED:
            cause = record.cancel_cause or compat.cancel_cause(record.kind, run.sibling_failed)
            if not record.waiting_for_work:  # else told when its task was cancelled
                span.add_event(sc.EVENT_CANCELLED, {sc.ADK_TOOL_TASK_CANCEL_CAUSE: cause})
        if outcome in (sc.Outcome.ERROR, sc.Outcome.CANCELLED):
            _note_unhappy(run, record.call_id, cause or sc.UnansweredReason.ERROR)
        span.end()
        self.metrics.ended(record.series, time.monotonic() - record.start, outcome, span,
                           etype, cause)
        if observe.observers:
            self._tell(TaskSeen(run.invocation_id, run.app_name, record.call_id,
                                record.tool_name, record.kind, outcome, cause, etype))

    def _orphan(self, record: TaskRecord, trigger: str, task: asyncio.Task[Any] | None) -> None:
        """OPEN -> ORPHANED: its run ended while ``task`` still runs."""
        if not self._leave(record, ORPHANED):
            return
        now = time.monotonic()
        record.orphaned_at = now
        with_stack = self._stacks_left > 0
        self._stacks_left -= with_stack
        run = record.run
        _note_unhappy(run, record.call_id, sc.UnansweredReason.ORPHANED)
        work = record.work if _working(record) else None
        stack = report_orphan(record, trigger, now - record.start, task, self.metrics,
                              with_stack=with_stack, cancel=self.options.cancel_orphans,
                              stack=None if work is None else
                              thread_stack(work) if with_stack else "")
        record.run = DETACHED  # the run is over: hold nothing of it
        if observe.observers:
            self._tell(TaskSeen(run.invocation_id, run.app_name, record.call_id,
                                record.tool_name, record.kind, sc.Outcome.ORPHANED,
                                record.cancel_cause if record.waiting_for_work else None,
                                trigger=trigger, stacktrace=stack))
        self._watch_orphan(record, task)

    def adopt_orphan(self, record: TaskRecord, trigger: str, task: asyncio.Task[Any]) -> None:
        """Strict mode: a task a tool body spawned is reported as an orphan of its call."""
        record.task = None
        record.run.tasks[record.key] = record  # enters OPEN the one way records do
        self._open += 1
        record.series.started += 1
        self._orphan(record, trigger, task)

    def _watch_orphan(self, record: TaskRecord, task: asyncio.Task[Any] | None) -> None:
        """Keeps the orphan until ``task`` ends (its done-callback is the record), and
        its thread work if it has any."""
        if task is None or task.done():
            if not _working(record):
                self._orphan_ended(record, task)
                return
        elif record.task is not task:
            if record.task is not None:
                record.task.remove_done_callback(record)
            task.add_done_callback(record)
            record.task = task
        self._orphans.add(record)

    def _orphan_ended(self, record: TaskRecord, task: asyncio.Task[Any] | None) -> None:
        """ORPHANED -> ENDED: the orphan's task finally ended."""
        if record.state != ORPHANED:
            return
        record.state = ENDED
        self._orphans.discard(record)
        work, record.work = record.work, None
        if work is not None and (task is None or task.cancelled()):
            outcome = _outcome_of(work)  # what the thread, which outlived it, did
        elif task is None or task.cancelled():
            outcome = sc.Outcome.CANCELLED
        elif task.exception() is not None:
            outcome = sc.Outcome.ERROR
        else:
            outcome = sc.Outcome.OK
        self.metrics.orphan_ended(record.series, time.monotonic() - record.orphaned_at,
                                  outcome, record.span)
        if task is not None:
            task.remove_done_callback(record)
        record.task = None
        record.holder[0] = None

    def _drop_if_idle(self, invocation_id: str) -> None:
        run = self._runs.get(invocation_id)
        if run is not None and not run.tasks:
            del self._runs[invocation_id]
            run.driver_ref = None
            self._watch(run)
            if run.finalizer is not None:
                run.finalizer.detach()


def _working(record: TaskRecord) -> bool:
    """The record's thread work is still queued or running."""
    work = record.work
    return work is not None and not work.done()


def _outcome_of(work: Future[Any]) -> str:
    if work.cancelled():
        return sc.Outcome.CANCELLED
    return sc.Outcome.ERROR if work.exception() is not None else sc.Outcome.OK


def _note_unhappy(run: RunRecord, call_id: str, reason: str) -> None:
    """How a task that did not end well ended: its call's reason, if unanswered."""
    if run is DETACHED:
        return
    if run.unhappy is None:
        run.unhappy = {}
    run.unhappy[call_id] = reason


DETACHED = RunRecord("", "")
_TRACKERS: weakref.WeakSet[Tracker] = weakref.WeakSet()


def shutdown_all() -> int:
    """Ends every run of every tracker with the ``shutdown`` trigger (process exit)."""
    total = 0
    for tracker in list(_TRACKERS):
        with contextlib.suppress(Exception):
            total += tracker.shutdown()
    return total


def trackers() -> list[Tracker]:
    return list(_TRACKERS)


def _run_span_ended(tracker_ref: weakref.ref[Tracker], invocation_id: str) -> None:
    tracker = tracker_ref()
    if tracker is not None:
        try:
            tracker.run_ended(invocation_id, sc.EndTrigger.RUN_SPAN_END)
        except Exception:
            tracker.failed("run-span end")


def _drop_idle_run(tracker_ref: weakref.ref[Tracker], invocation_id: str) -> None:
    tracker = tracker_ref()
    if tracker is not None:
        with contextlib.suppress(Exception):  # runs from the garbage collector
            tracker._drop_if_idle(invocation_id)


def register_shutdown() -> None:
    """Process exit runs shutdown_all first, then flushes (exit.py's ordered list)."""
    atexit.unregister(shutdown_all)
    from .exit import install

    install()
