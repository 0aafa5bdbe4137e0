"""The tool-task state machine: every transition of every record goes through here.

::

    opened ──► OPEN ──returned / raised / cancelled (its task ended)──► ENDED
                 │                                                      ▲
                 └──run ended while its task runs──► ORPHANED ──task ended──┘

A record enters OPEN in ``_enter`` (``tool_started`` has it inline) and leaves it
exactly once, in ``_leave``: it ends (``end_task``) or is orphaned (``orphan``), never
both, never twice. The counts behind ``started`` and ``active`` and the open total
change only in those two. A
run is the unit: one ``RunRecord`` per ``run_async``/``run_live`` call. When it ends
is the run-end rules' (run_end.py: ``RunEnds.end_run``, which applies each trigger's
rule as adk_compat states it, the unwinding grace, the plugin's close); they move
records only through this tracker's transitions (``run_end.RunEndOwner``).

Beside it, one concern a module and each looking only down, is what changes no
state: a task's span and the sampler (task_spans.py), the run index and the context
variable that finds a run (runindex.py), the run's done-callback on the task that
drives it (drivers.py), the binding of a call to its pool thread (threadwork.py),
and the process-wide registry with its exit sweep (registry.py). The reporters
(orphans.py, calls.py, strict.py) tell what happened and never call back: strict.py
returns the tasks left running (``strict.left_running``) for the tracker to adopt.
The records and threadwork.py hand a record back through a small protocol the
tracker implements (``records.RecordOwner``, ``threadwork.WorkOwner``).

A tool call's way in: the plugin's ``before_tool_callback`` turns ADK's objects into
the tracker's values in one pass (adk_compat reads them: the call id, the tool's
``ToolIdentity`` and series, worked out once per tool), then calls one verb,
``tool_started``; the tracker finds the call's run (runindex), makes its record
(records), enters it and makes the record its task's done-callback (and, for the
run's first open task, the run its driver's: drivers). Plugin, adk_compat, plugin,
tracker, runindex, tracker, records, tracker, drivers: each step down but the
returns of the lookups. The tracker never goes back to ADK's objects: what it asks
adk_compat is a rule on its own values (a kind, a trigger). Only a call whose run
it never saw start (a plugin added mid-run) takes a second turn: ``RunUnknown``,
then ``run_started`` and ``tool_started`` again.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from .. import adk_compat as compat
from .. import observe
from .. import semconv as sc
from ..signals import span_processors as run_spans
from ..signals.metrics import Metrics
from ..signals.orphan_report import error_type, report_orphan
from ..signals.stacks import thread_stack
from ..signals.task_spans import TaskSpans, read_run_start
from . import pool_calls as threadwork
from . import run_drivers as drivers
from . import strict_mode as strict
from . import trackers as registry
from .records import (
    ENDED,
    OPEN,
    ORPHANED,
    OpenTask,
    RunRecord,
    RunStart,
    Series,
    TaskRecord,
    TaskSeen,
    ToolIdentity,
    TrackerState,
)
from .run_end import RunEnds
from .run_index import RunIndex

logger = logging.getLogger(sc.LOGGER_NAME)

#: Stacks captured per sweep at most: a sweep of thousands of orphans must not stall
#: the event loop walking every one (each orphan is still reported).
STACKS_PER_SWEEP = 100
_FAILURES_LOGGED = 10

class RunUnknown(LookupError):
    """A tool call of a run the tracker never saw start (``Tracker.tool_started``)."""


@dataclass(frozen=True)
class Options:
    cancel_orphans: bool = False
    track_spawned_tasks: bool = False
    max_open_tasks: int = 10_000


class Tracker:
    """The records of one plugin instance, and the verbs that move them."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: Any = None, options: Options | None = None) -> None:
        self.options = options or Options()
        self.spans = TaskSpans(tracer_provider)
        self.metrics = Metrics(meter_provider)
        self._runs = RunIndex(f"adk_task_telemetry_run_{id(self):x}")
        #: Runs started inside a tool task of ours and not ended (AgentTool runs): few.
        self._nested: set[RunRecord] = set()
        self._orphans: set[TaskRecord] = set()  # ORPHANED records: their tasks still run
        self._open = 0  # OPEN records (what max_open_tasks bounds)
        self._overflowed = 0
        self._stacks_left = STACKS_PER_SWEEP
        #: Failures inside the plugin and the tracker (swallowed, logged), counted once.
        self.failures = 0
        # The record of the tool task running now, set in each tool task of its own:
        # its after_tool/on_tool_error find it here; a run started here is a nested one
        # (an AgentTool's), a close here a nested runner's; tasks created here inherit
        # it (strict mode). A finished task ADK keeps holds only the record's shell.
        self._task_var: contextvars.ContextVar[TaskRecord | None] = contextvars.ContextVar(
            f"adk_task_telemetry_task_{id(self):x}", default=None)
        self.ends = RunEnds(self)
        self._owner_gone_cb = self.ends.owner_gone
        self.metrics.running = self.open_records  # oldest_age, read at collection
        registry.add(self)

    # --- views ----------------------------------------------------------------------

    def all_runs(self) -> Iterator[RunRecord]:
        return iter(self._runs)

    def open_tasks(self) -> list[OpenTask]:
        now = time.time_ns()
        out = [OpenTask(r.run.invocation_id, r.call_id, r.tool_name, r.kind,
                        (now - r.start_ns) / 1e9, False)
               for run in self.all_runs() for r in list(run.tasks.values())]
        out.extend(OpenTask(r.run.invocation_id, r.call_id, r.tool_name, r.kind,
                            (now - r.start_ns) / 1e9, True) for r in list(self._orphans))
        return out

    def open_records(self) -> list[TaskRecord]:
        """The records of every task running now, OPEN then ORPHANED: read (never
        written) by the metrics' collection, the stuck sweep and the live view; safe
        from another thread (each list is copied in one step)."""
        out = [r for run in self.all_runs() for r in list(run.tasks.values())]
        out.extend(list(self._orphans))
        return out

    def state(self) -> TrackerState:
        return TrackerState(sum(1 for _ in self.all_runs()), self._open, len(self._orphans))

    def current(self) -> TaskRecord | None:
        """The open record of the tool task running in this context, if any."""
        record = self._task_var.get()
        return record if record is not None and record.state == OPEN else None

    def tell(self, seen: observe.Seen) -> None:
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

    def run_started(self, start: RunStart) -> RunRecord:
        """before_run: a new run, the one this context and its tool tasks belong to."""
        run = self._new_run(start)
        span = start.span
        if read_run_start(run, span) and not start.task_is_run:
            # ADK's own run task ends with the run: that signal is exact. Else the
            # run span's end, sampled or not (a valid context: a span of its own).
            run.span_watched = run_spans.watch_end(span, run, self.run_span_ended)
        drivers.drive(run, start.task, start.task_is_run)
        if self.options.track_spawned_tasks:
            strict.install_on_running_loop(self, self._task_var)
        return run

    def _new_run(self, start: RunStart) -> RunRecord:
        run = RunRecord(self, start.invocation_id, start.app_name, start.conversation_id)
        self._runs.add(run)
        # A run started inside a tool task of ours (an AgentTool's sub-agent): its
        # session is thrown away with it; the AgentTool's own call is the one the
        # user's session keeps. Not ledgered.
        run.parent_task = self.current()
        run.nested = run.parent_task is not None
        if run.nested:
            self._nested.add(run)
        if start.owner is not None:
            # Also the backstop for runs that end with no signal at all (a run_async
            # that fails where ADK calls no plugin hook and no run span is watched):
            # dropped when ADK lets go of the invocation context.
            with contextlib.suppress(TypeError):
                run.owner_ref = weakref.ref(start.owner, self._owner_gone_cb)
        return run

    def run_of(self, invocation_id: str) -> RunRecord | None:
        """The run of invocation ``invocation_id`` that the calling code belongs to."""
        return self._runs.of(invocation_id)

    def event_seen(self, invocation_id: str, task: asyncio.Task[Any] | None,
                   parts: tuple[list[str], list[str]] | None) -> None:
        """on_event: an event of invocation ``invocation_id`` read in ``task``, with its
        function parts (``compat.function_parts``: call ids, response ids; None for
        none). One verb: the run's step (``run_step``) and its calls (``calls_seen``)."""
        run = self._runs.of(invocation_id)
        if run is not None:
            self.run_step(run, task)
            if parts is not None:
                self.calls_seen(run, parts[0], parts[1])

    def run_step(self, run: RunRecord, task: asyncio.Task[Any] | None) -> None:
        """The run's reader is ``task`` now (it just got an event).

        A caller may hand the run's generator from task to task (a request handler
        to a worker; ``wait_for`` around every ``anext``): the run goes on in the
        task reading it, not in the one that started it.
        """
        if not run.driver_is_run and task is not run.driver:
            drivers.drive(run, task, False)
        self._runs.enter(run)  # tool tasks of this step find their run

    def calls_seen(self, run: RunRecord, calls: list[str], answered: list[str]) -> None:
        """An event of the run made these function calls and carried these responses
        (ids): the ledger's count of what this run asked and saw no answer to."""
        pending = run.calls
        if calls:
            if pending is None:
                pending = run.calls = {}
            for call_id in calls:
                pending[call_id] = pending.get(call_id, 0) + 1
        if answered and pending:
            for call_id in answered:
                left = pending.get(call_id)
                if left is not None:
                    if left > 1:
                        pending[call_id] = left - 1
                    else:
                        del pending[call_id]

    # --- the run-end rules (run_end.py) ------------------------------------------------

    def driver_done(self, run: RunRecord, task: asyncio.Task[Any]) -> None:
        self.ends.driver_done(run, task)

    def run_span_ended(self, run: RunRecord, error: BaseException | None) -> None:
        self.ends.run_span_ended(run, error)

    def run_ended(self, run: RunRecord, trigger: str, cut_by_caller: bool = False, *,
                  unwinding: bool = False) -> None:
        self.ends.run_ended(run, trigger, cut_by_caller, unwinding=unwinding)

    def closed(self) -> bool:
        return self.ends.closed()

    def shutdown(self) -> int:
        return self.ends.shutdown()

    def forget_run(self, run: RunRecord) -> None:
        """The run ended (``RunEnds.end_run``): no lookup finds it any more."""
        self._runs.forget(run)
        self._nested.discard(run)

    def new_sweep(self) -> None:
        """A run-end sweep begins: it may capture STACKS_PER_SWEEP stacks again."""
        self._stacks_left = STACKS_PER_SWEEP


    # --- tasks ----------------------------------------------------------------------

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
            self._overflow(series)
            return None
        tasks = run.tasks
        key = call_id if call_id not in tasks else _free_key(run, call_id)
        record = TaskRecord(run, identity, series, call_id, key, otel_context.get_current(),
                            time.time_ns())
        record.extra = extra
        if not run.trace_id:
            run.trace_id = trace.get_current_span(record.parent).get_span_context().trace_id
        tasks[key] = record  # _enter, inline: once per task
        series.started += 1
        series.open += 1
        self._open += 1
        driver = run.driver_ref
        if task is not None and (driver is None or driver() is not task):
            self._task_var.set(record)
            if self.options.track_spawned_tasks:
                strict.note_tool_task(task)
            record.task = task
            task.add_done_callback(record)
            if run.watched_ref is None:  # the run's first open task
                drivers.watch(run)
        # else: a call that runs in its run's own task has no task of its own; its
        # callbacks end it.
        return record

    def _enter(self, record: TaskRecord) -> None:
        """-> OPEN (``tool_started`` does the same inline)."""
        record.run.tasks[record.key] = record
        record.series.started += 1
        record.series.open += 1
        self._open += 1

    def record_here(self, run: RunRecord, call_id: str) -> TaskRecord | None:
        """The open record of a call of ``run`` that runs in the run's own task (no
        record in the context): the first open one of that id."""
        record = run.tasks.get(call_id)
        return record if record is not None and record.task is None else None

    def _overflow(self, series: Series) -> None:
        self._overflowed += 1
        self.metrics.overflow(series)
        if self._overflowed == 1 or self._overflowed % 1000 == 0:
            logger.warning("adk_task_telemetry: %d open tool tasks reached max_open_tasks; %d "
                           "tool tasks not tracked so far", self._open, self._overflowed)

    def moved(self, record: TaskRecord, task: asyncio.Task[Any] | None,
              result: dict[str, str] | None = None) -> None:
        """The call's work goes on in ``task`` (a live streaming tool's background task)."""
        record.returned = True
        if result:
            record.extra = {**(record.extra or {}), **result}
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
            self.end_from_task(record, task)
            return
        task.add_done_callback(record)

    def returned(self, record: TaskRecord, result: dict[str, str] | None = None) -> None:
        """after_tool_callback: the call produced a result (maybe a callback's answer
        for an error it raised); ``result``: its captured attribute (opt-in)."""
        if record.state != OPEN:
            return
        record.returned = True
        if result:
            record.extra = {**(record.extra or {}), **result}
        if record.task is None:
            self.end_returned(record)

    def raised(self, record: TaskRecord, error: BaseException) -> None:
        """on_tool_error_callback: the tool raised ``error`` (a real error: the plugin
        leaves out what ``compat.is_tool_error`` says is not one). A later plugin may
        still answer for it, so a record bound to its task waits for the task's end."""
        if record.state != OPEN:
            return
        record.error = error
        if record.task is None:
            self.end_task(record, sc.Outcome.ERROR, error)

    def _stop_requested(self, run: RunRecord, tool_name: str) -> None:
        """A live ``stop_streaming`` call asks to stop ``tool_name``: that is why its
        background task will be cancelled."""
        for record in run.tasks.values():
            if record.tool_name == tool_name and compat.works_in_background(record.kind):
                record.cancel_cause = sc.CancelCause.STOP_STREAMING

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
        if task.cancelled():
            self.end_task(record, sc.Outcome.CANCELLED, self_cancelled=_cancelled_itself(task))
            return
        exc = task.exception()
        if exc is not None:
            self.end_task(record, sc.Outcome.ERROR, exc)
        elif record.error is None:
            self.end_task(record, sc.Outcome.OK)
        else:
            self.end_returned(record)

    def end_returned(self, record: TaskRecord) -> None:
        """The call finished without raising out of its task: ok, or recovered (a
        callback answered for an error), or error (ADK swallowed it, nobody answered)."""
        if record.error is None:
            self.end_task(record, sc.Outcome.OK)
        elif record.returned:
            self.end_task(record, sc.Outcome.RECOVERED, record.error)
        else:
            self.end_task(record, sc.Outcome.ERROR, record.error)

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
                cause = record.cancel_cause = record.cancel_cause or compat.cancel_cause(
                    record.kind, record.run.sibling_failed)
                if cause == sc.CancelCause.CALLER_CANCELLED:
                    record.run.cut_by_caller = True
                self.spans.span_of(record).add_event(sc.EVENT_CANCELLED,
                                                     {sc.ADK_TOOL_TASK_CANCEL_CAUSE: cause})
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
        record.series.open -= 1
        self._open -= 1
        if not run.tasks:
            drivers.watch(run)
        return True

    def end_task(self, record: TaskRecord, outcome: str, error: BaseException | None = None,
                 *, self_cancelled: bool = False) -> None:
        """OPEN -> ENDED, inside its run: the span ends with its outcome.

        ``self_cancelled``: the task raised CancelledError by itself (nothing called its
        ``cancel()``): none of the cancel causes happened, so it has none; for its
        siblings and its call's ledger reason it is a call that ended badly."""
        if not self._leave(record, ENDED):
            return
        end_ns = time.time_ns()
        run = record.run
        etype = cause = None
        unhappy = None
        if error is not None and outcome == sc.Outcome.ERROR:
            etype = error_type(error)
            if compat.marks_sibling_failure(record.kind):
                run.sibling_failed = True
        elif self_cancelled:
            unhappy = sc.UnansweredReason.ERROR  # its tool raised; nothing answered
            if compat.marks_sibling_failure(record.kind):
                run.sibling_failed = True  # ADK cancels the rest of the step
        elif outcome == sc.Outcome.CANCELLED:
            cause = record.cancel_cause or compat.cancel_cause(record.kind, run.sibling_failed)
            if cause == sc.CancelCause.CALLER_CANCELLED:
                run.cut_by_caller = True  # whatever signal ends the run (after_run may)
        if etype is not None or cause is not None or unhappy is not None:
            _note_unhappy(run, record.call_id, cause or unhappy or sc.UnansweredReason.ERROR)
        # None where no span is made (an unsampled trace): nothing to build or end.
        span = self.spans.made(record, outcome, etype)
        if span is not None:
            if error is not None or cause is not None or self_cancelled:
                if error is not None:
                    span.record_exception(error)
                if etype is not None:
                    span.set_status(Status(StatusCode.ERROR, etype))
                if self_cancelled:
                    span.add_event(sc.EVENT_CANCELLED)  # no cause: none of them happened
                elif cause is not None and not record.waiting_for_work:  # else told already
                    span.add_event(sc.EVENT_CANCELLED, {sc.ADK_TOOL_TASK_CANCEL_CAUSE: cause})
            span.end(end_time=end_ns)
        took = end_ns - record.start_ns
        self.metrics.ended(record.series, (took if took > 0 else 0) / 1e9, outcome, span,
                           etype, cause)
        # _shed, inline (once per task)
        record.task = record.work = record.parent = record.error = record.extra = None
        if not self.options.track_spawned_tasks:
            record.span = None
        if observe.observers:
            self.tell(TaskSeen(run.invocation_id, run.app_name, record.call_id,
                                record.tool_name, record.kind, outcome, cause, etype))
        if run.span_end_due is not None and not run.tasks:
            # The last task a deferred end waited for has ended: nothing is left to
            # wait for, the run's state goes now (not at the bound, nor at a close).
            self.ends.end_run(run, run.end_due_trigger or sc.EndTrigger.RUN_SPAN_END)

    def orphan(self, record: TaskRecord, trigger: str, task: asyncio.Task[Any] | None) -> None:
        """OPEN -> ORPHANED: its run ended while ``task`` still runs."""
        if not self._leave(record, ORPHANED):
            return
        now = time.time_ns()
        record.orphaned_ns = now
        span = self.spans.span_of(record, sc.Outcome.ORPHANED)
        with_stack = self._stacks_left > 0 and (span.is_recording() or bool(observe.observers))
        self._stacks_left -= with_stack
        run = record.run
        _note_unhappy(run, record.call_id, sc.UnansweredReason.ORPHANED)
        work = record.work if threadwork.working(record) else None
        stack = report_orphan(record, span, trigger, (now - record.start_ns) / 1e9, task,
                              self.metrics, with_stack=with_stack,
                              cancel=self.options.cancel_orphans,
                              stack=None if work is None else
                              thread_stack(work) if with_stack else "")
        if observe.observers:
            self.tell(TaskSeen(run.invocation_id, run.app_name, record.call_id,
                                record.tool_name, record.kind, sc.Outcome.ORPHANED,
                                record.cancel_cause if record.waiting_for_work else None,
                                trigger=trigger, stacktrace=stack))
        self._watch_orphan(record, task)
        self._end_nested(record, trigger)

    def _end_nested(self, record: TaskRecord, trigger: str) -> None:
        """Runs started inside ``record``'s task (an AgentTool's nested run) that still go
        on when it is orphaned end with it (same trigger): they belong to the run that
        left it behind, and their tasks still running are its orphans too."""
        for run in [r for r in self._nested if r.parent_task is record and not r.ended]:
            self.ends.end_run(run, trigger)

    def adopt_spawned(self, parent: TaskRecord, task: asyncio.Task[Any], spawned_ns: int,
                      trigger: str) -> None:
        """Strict mode: a task a tool body spawned is reported as an orphan of its call,
        on a span of its own under the call's span."""
        parent_span = self.spans.span_of(parent)  # made early: the spawned span's parent
        run = parent.run
        record = TaskRecord(run, parent.identity, parent.series, parent.call_id,
                            f"{parent.key}/spawned-{id(task):x}",
                            trace.set_span_in_context(parent_span), spawned_ns)
        record.extra = {sc.ADK_TOOL_TASK_SPAWNED: True}  # type: ignore[dict-item]
        self._enter(record)
        self.orphan(record, trigger, task)

    def _watch_orphan(self, record: TaskRecord, task: asyncio.Task[Any] | None) -> None:
        """Keeps the orphan until ``task`` ends (its done-callback is the record), and
        its thread work if it has any."""
        if task is None or task.done():
            if not threadwork.working(record):
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


def _shed(record: TaskRecord, keep_span: bool = False) -> None:
    """An ended record keeps no span, context, error or task: a finished asyncio task
    that ADK keeps around (its context holds the record) keeps nothing through it.
    Strict mode keeps the span until the run ends: a spawned task's span is its child."""
    record.task = None
    record.work = None
    if not keep_span:
        record.span = None
    record.parent = None
    record.error = None
    record.extra = None


def _cancelled_itself(task: asyncio.Task[Any]) -> bool:
    """A cancelled ``task`` whose ``cancel()`` nobody called: its own code raised
    CancelledError (a client library cancelling its own future, ADK issue 7172).
    ``Task.cancelling()`` counts the requests (Python 3.11+); on 3.10, which cannot
    tell, every cancellation counts as requested (the cause rule of adk_compat)."""
    cancelling = getattr(task, "cancelling", None)
    return cancelling is not None and cancelling() == 0


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
