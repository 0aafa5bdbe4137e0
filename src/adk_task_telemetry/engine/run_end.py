"""The run-end rules: when a run ends, the unwinding grace, and the plugin's close.

A run ends once, in ``RunEnds.end_run``, at the first of the signals the ADK at hand
gives (``adk_compat.kinds_ended_by`` says what each ends): ADK's ``after_run`` and
``on_run_error`` (``run_ended``), the end of the task that drove it (``driver_done``,
the run record being that task's done-callback: drivers.py), the end of ADK's run span
(``run_span_ended``), the plugin's close (``closed``), the process's exit
(``shutdown``), and ADK letting go of the run's invocation context (``owner_gone``).
At that moment each of the run's tasks that has ended is ended, and each one still
running is an orphan (``_settle``); the call ledger and the open spans are reported.

Where a cancellation unwinds the task driving the run while some of the run's tool
tasks still unwind a cancellation of their own (ADK 1.x's step ``gather`` returns at
its first cancelled child), the end waits for that driving task, for the last of
those tasks, or for ``UNWIND_GRACE_S``; a task nothing cancelled is an orphan at once
(``_end_when_unwound``; docs/telemetry.md, *When a cut run ends* and *Time to report*).

This module decides; it moves no record itself. Every transition is the tracker's,
reached through the small protocol it implements (``RunEndOwner``): the tracker
imports this module, never the other way round.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterator
from typing import Any, Protocol

from opentelemetry import trace

from .. import adk_compat as compat
from .. import observe
from .. import semconv as sc
from ..signals import span_processors as run_spans
from ..signals.ledger_report import report_unanswered, unanswered_calls
from ..signals.metrics import Metrics
from ..signals.orphan_report import report_open_spans
from ..signals.task_spans import TaskSpans
from . import pool_calls as threadwork
from . import run_drivers as drivers
from . import strict_mode as strict
from .records import RunRecord, TaskRecord, TrackerState

#: At most this long after ADK's run span ended with a cancellation unwinding in the
#: run's driving task, the run ends even if that task goes on; only tool tasks with a
#: cancellation in flight are waited for (docs/telemetry.md, *When a cut run ends*).
UNWIND_GRACE_S = 1.0


class RunEndOwner(Protocol):
    """The tracker, as the run-end rules see it: its books and its transitions."""

    spans: TaskSpans
    metrics: Metrics

    def all_runs(self) -> Iterator[RunRecord]: ...

    def state(self) -> TrackerState: ...

    def current(self) -> TaskRecord | None: ...

    def failed(self, where: str) -> None: ...

    def tell(self, seen: observe.Seen) -> None: ...

    def forget_run(self, run: RunRecord) -> None: ...

    def new_sweep(self) -> None: ...

    def end_task(self, record: TaskRecord, outcome: str, error: BaseException | None = None,
                 *, self_cancelled: bool = False) -> None: ...

    def end_from_task(self, record: TaskRecord, task: asyncio.Task[Any]) -> None: ...

    def end_returned(self, record: TaskRecord) -> None: ...

    def waits_for_work(self, record: TaskRecord, task: asyncio.Task[Any]) -> bool: ...

    def orphan(self, record: TaskRecord, trigger: str,
               task: asyncio.Task[Any] | None) -> None: ...

    def enter(self, record: TaskRecord) -> None: ...


class RunEnds:
    """The run-end rules of one tracker (``owner``)."""

    def __init__(self, owner: RunEndOwner) -> None:
        self.owner = owner

    def driver_done(self, run: RunRecord, task: asyncio.Task[Any]) -> None:
        try:
            if run.watched_ref is not None and run.watched_ref() is task:
                run.watched_ref = None
            if task is run.driver and not run.ended:
                self.end_run(run, run.end_due_trigger if run.span_end_due is not None
                              else sc.EndTrigger.RUN_TASK_DONE)
        except Exception:
            self.owner.failed("run-task end")

    def run_span_ended(self, run: RunRecord, error: BaseException | None) -> None:
        """ADK's own run span ended (spans.watch_end), with ``error`` passing through
        it: the run is over; whether the caller cut it is adk_compat's rule
        (``span_end_cut_run``).

        Where a cancellation passes through it, in the task driving the run, while a
        task of the run is still unwinding a cancellation of its own
        (``compat.cancellation_unwinds_step``: a step's ``gather`` may return at its
        first cancelled child, the others still unwinding), the run is over when that
        driving task is: its caller sees the run end then (``_end_when_unwound``)."""
        try:
            run.span_watched = None
            if run.ended:
                return
            run.cut_by_caller = compat.span_end_cut_run(error)
            if compat.cancellation_unwinds_step(error) and self._end_when_unwound(
                    run, sc.EndTrigger.RUN_SPAN_END):
                return
            self.end_run(run, sc.EndTrigger.RUN_SPAN_END)
        except Exception:
            self.owner.failed("run-span end")

    def _end_when_unwound(self, run: RunRecord, trigger: str) -> bool:
        """The run's end was signalled in the task driving it while a cancellation
        unwinds that task (``compat.cancellation_unwinds_step``; some releases also
        call after_run from that same unwinding). Only a tool task with a cancellation
        in flight (``compat.cancellation_in_flight``, or a cancel the plugin saw
        asked for: ``stop_streaming``) is part of that unwinding: the run ends, with
        ``trigger``, when the driving task is done (its caller sees the run end then),
        when the last such task has ended, or after ``UNWIND_GRACE_S``, whichever
        comes first. A task still running that nothing cancelled is an orphan now
        (a sibling of a tool that raised CancelledError by itself, whose caller
        caught the error and goes on in the driving task).
        False where no task unwinds: end the run now."""
        here = drivers.current_task()
        if here is None:
            return False
        running = [(r, r.task) for r in run.tasks.values()
                   if r.task is not None and not r.task.done()]
        left = [(r, t) for r, t in running
                if r.cancel_cause is None and not compat.cancellation_in_flight(t)]
        if len(left) == len(running):
            return False  # nothing unwinds: the run ends now
        self.owner.new_sweep()
        for record, task in left:
            self.owner.orphan(record, trigger, task)
        # The end comes in the run's generator: this task drives the run now (a
        # wait_for around each event reads it in a task not seen yet).
        if here is not run.driver:
            drivers.drive(run, here, run.driver_is_run)
        run.end_due_trigger = trigger
        run.span_end_due = here.get_loop().call_later(UNWIND_GRACE_S, self._span_end_due,
                                                      run)
        drivers.watch(run)  # its done-callback ends the run
        return True

    def _span_end_due(self, run: RunRecord) -> None:
        try:
            if not run.ended:
                self.end_run(run, run.end_due_trigger or sc.EndTrigger.RUN_SPAN_END)
        except Exception:
            self.owner.failed("run-span end")

    def run_ended(self, run: RunRecord, trigger: str, cut_by_caller: bool = False, *,
                  unwinding: bool = False) -> None:
        """ADK said the run ended (after_run, run_error, live teardown);
        ``cut_by_caller``: because its caller closed it (``compat.caller_closed_run``);
        ``unwinding``: a cancellation is in flight in ADK's callback
        (``compat.cancellation_unwinds_step``, read there by the plugin)."""
        if not run.ended:
            if cut_by_caller:
                run.cut_by_caller = True
                if run.span_end_due is not None:
                    return  # already waiting for the driving task to finish unwinding
                if unwinding and self._end_when_unwound(run, trigger):
                    return
            self.end_run(run, trigger)

    def closed(self) -> bool:
        """The plugin is closed: ends the runs that are no longer running, as the
        ``plugin_close`` rule says (``compat.kinds_ended_by``). Returns whether any
        run is still in progress."""
        if self.owner.current() is not None:
            # Closed from inside one of our tool tasks: a nested AgentTool runner
            # (some releases close it when its run is over); the runs around it go on.
            return True
        busy = False
        for run in list(self.owner.all_runs()):
            if run.still_running():
                busy = True
            else:
                self.end_run(run, sc.EndTrigger.PLUGIN_CLOSE)
        return busy

    def shutdown(self) -> int:
        """The process exits: every run ends now. Returns the number of orphans."""
        before = self.owner.state().orphans
        for run in list(self.owner.all_runs()):
            self.end_run(run, sc.EndTrigger.SHUTDOWN)
        return self.owner.state().orphans - before

    def owner_gone(self, ref: weakref.ref[Any]) -> None:
        """ADK let go of a run's invocation context and no signal had ended the run
        (runs that ended drop this reference first, so it does not fire for them)."""
        try:
            for run in list(self.owner.all_runs()):
                if run.owner_ref is ref and not run.tasks:
                    self.end_run(run, None)
        except Exception:  # runs from the garbage collector
            self.owner.failed("run dropped")

    def end_run(self, run: RunRecord, trigger: str | None) -> None:
        """The one place a run ends: each open task ends or becomes an orphan. A run
        ADK dropped (``trigger`` None) had nothing open and reports nothing."""
        if run.span_end_due is not None:  # a deferred end (_end_when_unwound): it is now
            run.span_end_due.cancel()
            run.span_end_due = None
        if trigger is not None:
            kinds = compat.kinds_ended_by(trigger, run.driver_is_run)
            self.owner.new_sweep()
            for record in list(run.tasks.values()):
                if kinds is None or record.kind in kinds:
                    self._settle(record, trigger)
            if kinds is not None and run.tasks:
                drivers.watch(run)  # the rest goes on with the run (maybe another driver)
                return
            if compat.caller_cut_run(trigger):
                run.cut_by_caller = True
        self.owner.forget_run(run)
        drivers.release(run)
        if trigger is not None:
            if run.spawned:
                spawned, run.spawned = run.spawned, []
                for task, parent, spawned_ns in strict.left_running(spawned):
                    self._adopt_spawned(parent, task, spawned_ns, trigger)
            if run.calls and not run.nested:
                self._unanswered(run, trigger)
            report_open_spans(run, trigger)
        if run.span_watched is not None:
            run_spans.unwatch_end(run.span_watched)
            run.span_watched = None
        run.span = None
        run.owner_ref = None
        run.parent_task = None

    def _adopt_spawned(self, parent: TaskRecord, task: asyncio.Task[Any], spawned_ns: int,
                       trigger: str) -> None:
        """Strict mode: a task a tool body spawned is reported as an orphan of its call,
        on a span of its own under the call's span (a record entered and orphaned by
        the tracker's transitions)."""
        parent_span = self.owner.spans.span_of(parent)  # made early: the spawned span's parent
        record = TaskRecord(parent.run, parent.identity, parent.series, parent.call_id,
                            f"{parent.key}/spawned-{id(task):x}",
                            trace.set_span_in_context(parent_span), spawned_ns)
        record.extra = {sc.ADK_TOOL_TASK_SPAWNED: True}  # type: ignore[dict-item]
        self.owner.enter(record)
        self.owner.orphan(record, trigger, task)

    def _unanswered(self, run: RunRecord, trigger: str) -> None:
        """The call ledger, at the end of a run that left calls without a response."""
        try:
            found = unanswered_calls(run, trigger)
            if found:
                report_unanswered(run, found, self.owner.spans.tracer_for(run), self.owner.metrics)
                if observe.observers:
                    for call, _author in found:
                        self.owner.tell(call)
        except Exception:
            self.owner.failed("call ledger")
        run.calls = None

    def _settle(self, record: TaskRecord, trigger: str) -> None:
        """At its run's end: a task that has ended is ended, one still running is orphaned."""
        task = record.task
        if threadwork.working(record):  # its thread still runs the callable: nothing stops it
            if task is not None and task.done():
                self.owner.waits_for_work(record, task)
            self.owner.orphan(record, trigger, task)
        elif task is None:  # the call runs (ran) in the run's driving task
            if record.error is not None or record.returned:
                self.owner.end_returned(record)
            elif record.run.still_running():
                self.owner.orphan(record, trigger, record.run.driver)
            else:
                self.owner.end_task(record, sc.Outcome.CANCELLED)
        elif task.done():  # its done-callback has not run yet
            self.owner.end_from_task(record, task)
        else:
            self.owner.orphan(record, trigger, task)
