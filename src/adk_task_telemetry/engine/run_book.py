"""A tracker's books: what it holds, what reads it, and the verbs on runs.

``Tracker`` (tracker.py) is built on ``RunBook``. Here is what a tracker holds (its run
index, the nested runs, the orphans still running, the open count, the context
variable that names the tool task running now, its failures, the stacks a run-end
sweep may still capture) and the views of it
(``state``, ``open_tasks``, ``open_records``, ``current``); and the verbs on runs, which
move no task record: a run's start (``run_started``), its steps (``event_seen``,
``run_step``), the calls its events made (``calls_seen``: the call ledger's count), the
lookup (``run_of``). When a run ends is the run-end rules' (run_end.py's ``RunEnds``,
reached through the delegators below, which the plugin, the records, the run span's
watch and the exit sweep call). Every transition of a task record is tracker.py's:
nothing here changes a record's state or the open count.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, cast

from .. import observe
from .. import semconv as sc
from ..signals import span_processors as run_spans
from ..signals.task_spans import read_run_start
from . import run_drivers as drivers
from . import strict_mode as strict
from .records import (
    OPEN,
    OpenTask,
    Options,
    RecordOwner,
    RunRecord,
    RunStart,
    TaskRecord,
    TrackerState,
)
from .run_end import RunEnds
from .run_index import RunIndex

logger = logging.getLogger(sc.LOGGER_NAME)

#: Failures inside the plugin logged per tracker (every one is counted).
FAILURES_LOGGED = 10
#: Stacks captured per sweep at most: a sweep of thousands of orphans must not stall
#: the event loop walking every one (each orphan is still reported).
STACKS_PER_SWEEP = 100


class RunBook:
    """What one tracker holds, the views of it, and its verbs on runs."""

    ends: RunEnds  # the run-end rules, set by the tracker (their owner)
    _owner_gone_cb: Callable[[weakref.ref[Any]], None]  # ``ends.owner_gone``, made once

    def __init__(self, options: Options) -> None:
        self.options = options
        self._runs = RunIndex(f"adk_task_telemetry_run_{id(self):x}")
        #: Runs started inside a tool task of ours and not ended (AgentTool runs): few.
        self._nested: set[RunRecord] = set()
        self._orphans: set[TaskRecord] = set()  # ORPHANED records: their tasks still run
        self._open = 0  # OPEN records (what max_open_tasks bounds)
        self._stacks_left = STACKS_PER_SWEEP  # stacks an orphan report may still capture
        #: Failures inside the plugin and the tracker (swallowed, logged), counted once.
        self.failures = 0
        # The record of the tool task running now, set in each tool task of its own:
        # its after_tool/on_tool_error find it here; a run started here is a nested one
        # (an AgentTool's), a close here a nested runner's; tasks created here inherit
        # it (strict mode). A finished task ADK keeps holds only the record's shell.
        self._task_var: contextvars.ContextVar[TaskRecord | None] = contextvars.ContextVar(
            f"adk_task_telemetry_task_{id(self):x}", default=None)

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
        """Tells the observers; what one raises is counted (and logged) as ours."""
        self.failures += observe.tell(seen, FAILURES_LOGGED - self.failures)

    def failed(self, where: str) -> None:
        self.failures += 1
        if self.failures <= FAILURES_LOGGED:
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
        # The tracker built on this book is what a run's done-callback hands it to.
        run = RunRecord(cast("RecordOwner", self), start.invocation_id, start.app_name,
                        start.conversation_id)
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

    def new_sweep(self) -> None:
        """A run-end sweep begins: it may capture STACKS_PER_SWEEP stacks again."""
        self._stacks_left = STACKS_PER_SWEEP

    def forget_run(self, run: RunRecord) -> None:
        """The run ended (``RunEnds.end_run``): no lookup finds it any more."""
        self._runs.forget(run)
        self._nested.discard(run)

    def end_nested(self, record: TaskRecord, trigger: str) -> None:
        """Runs started inside ``record``'s task (an AgentTool's nested run) that still go
        on when it is orphaned end with it (same trigger): they belong to the run that
        left it behind, and their tasks still running are its orphans too."""
        for run in [r for r in self._nested if r.parent_task is record and not r.ended]:
            self.ends.end_run(run, trigger)
