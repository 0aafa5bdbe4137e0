"""Tool tasks that run too long, found while they still run: the sweep and the stuck record.

One sweep per event loop that serves runs (in practice one per process): a timer on
that loop, armed by a run's start (``arm``: a dictionary lookup per run, nothing per
task) and re-armed by each sweep only while some tracker holds a run or an orphan. It
walks the records of the tasks still running (``Tracker.open_records``, read, never
written) and, for a task whose age passed ``stuck_after`` x 1, 2, 4, ... (at most
``MAX_REPORTS`` times), tells where it waits now:

- a ``stuck_task`` event on the task's ``tool_task`` span (made now, with its real
  start time, where the trace is sampled: the span the task's end will end, so it keeps
  its span id and Jaeger shows the event on the task's final span, never a second span);
- one WARNING log record through the plugin's logger, emitted in that span's context, so
  that a logs bridge links it to the trace and span (trace id and span id) while the
  task still runs. Logs are not tail-sampled: the record reaches the logs store even
  when the trace is later dropped.

Where it waits is the same form as the orphan report (``code.stacktrace``: the
suspended task's frames, or the pool thread's for a synchronous tool on ADK's tool
thread pool). The sweep runs on the loop whose tasks it reads (a record's span is made
only there), never on a task's start or end: the per-task cost is nil.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import trace

from .. import semconv as sc
from ..signals.stacks import (
    display_path,
    import_roots,
    innermost_user_frame,
    suspended_stack,
    thread_stack,
)
from . import pool_calls as threadwork
from .records import OPEN, ORPHANED, TaskRecord, TrackerState

if TYPE_CHECKING:
    from ..signals.task_spans import TaskSpans


class Tracker(Protocol):
    """A tracker as the sweep and the live view see it (tracker.Tracker implements it):
    what it holds, the records of the tasks running now, and their spans."""

    spans: TaskSpans

    def state(self) -> TrackerState: ...

    def open_records(self) -> list[TaskRecord]: ...

logger = logging.getLogger(sc.LOGGER_NAME)

#: Reports of one task at most (ages stuck_after x 1, 2, 4, ... 128).
MAX_REPORTS = 8
#: Stacks captured per sweep at most (each stuck task is still reported).
STACKS_PER_SWEEP = 100
#: Reports per sweep at most (about 50 us each, 100 us with a stack): 10,000 tasks stuck
#: at once must not stall the loop for long in one turn; the rest are due still and go
#: out at the next sweeps.
REPORTS_PER_SWEEP = 250
#: The sweep's period: a quarter of the threshold, within these bounds (seconds).
MIN_PERIOD_S = 0.05
MAX_PERIOD_S = 15.0


@dataclass(frozen=True)
class Watch:
    """What the sweep and the live view know of one plugin's tracker."""

    stuck_after: float  # 0: no stuck records for this tracker
    capture: bool  # capture_arguments: the live view may show its arguments


_watched: weakref.WeakKeyDictionary[Tracker, Watch] = weakref.WeakKeyDictionary()
#: The loops whose sweep is armed, weakly: nothing here keeps a closed loop alive (its
#: pending timer refers to the loop, so it is not kept here either).
_armed: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
#: Reports made so far of each task still running that was reported (pruned each sweep).
_reported: dict[TaskRecord, int] = {}
_sweeps = 0


def watch(tracker: Tracker, stuck_after: float, capture: bool) -> None:
    """A plugin's tracker, swept and listed from now on (held weakly)."""
    _watched[tracker] = Watch(stuck_after, capture)


def watched() -> list[tuple[Tracker, Watch]]:
    """Every tracker watched now, with its options."""
    return list(_watched.items())


def sweeps() -> int:
    """Sweeps done so far in this process: a positive signal for tests and benchmarks."""
    return _sweeps


def period() -> float:
    """Seconds between sweeps: a quarter of the smallest threshold, within bounds."""
    afters = [w.stuck_after for _, w in watched() if w.stuck_after > 0]
    if not afters:
        return MAX_PERIOD_S
    return min(max(min(afters) / 4, MIN_PERIOD_S), MAX_PERIOD_S)


def arm() -> None:
    """A run starts on this loop: the loop's sweep runs from now on, if it does not yet.
    Called once per run; never raises."""
    try:
        loop = asyncio.get_running_loop()
        if loop in _armed:
            return
        loop.call_later(period(), _tick, loop)
        _armed.add(loop)
    except Exception:  # no running loop, or one that cannot be weakly referenced
        return


def _tick(loop: asyncio.AbstractEventLoop) -> None:
    try:
        busy = sweep(loop)
    except Exception:
        logger.exception("adk_task_telemetry: internal error in the stuck sweep (ignored)")
        busy = True
    if busy and not loop.is_closed():
        loop.call_later(period(), _tick, loop)
    else:
        _armed.discard(loop)


def sweep(loop: asyncio.AbstractEventLoop | None = None) -> bool:
    """One sweep of the tasks of ``loop`` (None: of every loop, for benchmarks): reports
    those due. Returns whether any watched tracker still holds a run or an orphan
    (the timer goes on only then)."""
    global _reported, _sweeps
    _sweeps += 1
    now = time.time_ns()
    reported: dict[TaskRecord, int] = {}
    stacks_left = STACKS_PER_SWEEP
    reports_left = REPORTS_PER_SWEEP
    roots: list[str] | None = None  # import roots, for the text's path: once a sweep
    busy = False
    for tracker, w in watched():
        state = tracker.state()
        if not (state.runs or state.orphans):
            continue
        busy = True
        if w.stuck_after <= 0:
            continue
        first_ns = int(w.stuck_after * 1e9)
        for record in tracker.open_records():
            n = _reported.get(record, 0)
            if n >= MAX_REPORTS:
                reported[record] = n
                continue
            age_ns = now - record.start_ns
            if age_ns < first_ns << n or reports_left <= 0:
                if n:
                    reported[record] = n
                continue
            task = task_of(record)
            if loop is not None and task is not None and task.get_loop() is not loop:
                if n:
                    reported[record] = n
                continue  # another loop's sweep reports it, on its own thread
            n += 1
            while n < MAX_REPORTS and age_ns >= first_ns << n:
                n += 1  # a sweep came late (the loop was busy): one report for the lot
            reported[record] = n
            reports_left -= 1
            with_stack = stacks_left > 0
            stacks_left -= with_stack
            if with_stack and roots is None:
                roots = import_roots()
            _report(tracker, record, task, age_ns / 1e9, n, with_stack, roots or [])
    _reported = reported if busy else {}
    return busy


def task_of(record: TaskRecord) -> asyncio.Task[Any] | None:
    """The asyncio task the record's call runs in (its own, or its run's)."""
    return record.task if record.task is not None else record.run.driver


def state_of(record: TaskRecord) -> str:
    """running, cancel_requested (its task was asked to stop and has not), orphaned."""
    if record.state == ORPHANED:
        return sc.TaskState.ORPHANED
    task = task_of(record)
    if record.waiting_for_work or (task is not None and task.done()):
        return sc.TaskState.CANCEL_REQUESTED  # its task ended; its pool thread runs on
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None and cancelling():
        return sc.TaskState.CANCEL_REQUESTED
    return sc.TaskState.RUNNING


def stack_of(record: TaskRecord) -> str:
    """Where the task waits now, as the orphan report says it: the pool thread's stack
    for a synchronous call on ADK's tool thread pool, else the suspended task's."""
    work = record.work
    if work is not None and threadwork.working(record):
        stack = thread_stack(work)
        if stack:
            return stack
    task = task_of(record)
    return suspended_stack(task) if task is not None and not task.done() else ""


def _report(tracker: Tracker, record: TaskRecord, task: asyncio.Task[Any] | None,
            age: float, n: int, with_stack: bool, roots: list[str]) -> None:
    if record.state not in (OPEN, ORPHANED):
        return
    run = record.run
    stack = stack_of(record) if with_stack else ""
    state = state_of(record)
    span = tracker.spans.span_of(record)  # the task's own span: its end ends this one
    attrs: dict[str, Any] = {
        sc.GEN_AI_TOOL_NAME: record.tool_name,
        sc.GEN_AI_TOOL_CALL_ID: record.call_id,
        sc.ADK_INVOCATION_ID: run.invocation_id,
        sc.ADK_TOOL_TASK_AGE: round(age, 6),
        sc.ADK_TOOL_TASK_STUCK_REPORT: n,
        sc.ADK_TOOL_TASK_STATE: state,
    }
    if stack:
        attrs[sc.CODE_STACKTRACE] = stack
    if span.is_recording():
        span.add_event(sc.EVENT_STUCK_TASK, attrs)
    frame = innermost_user_frame(stack) if stack else None
    log_attrs = {**attrs, sc.GEN_AI_AGENT_NAME: record.identity.agent_name,
                 sc.ADK_APP_NAME: run.app_name}
    if run.conversation_id:
        log_attrs[sc.GEN_AI_CONVERSATION_ID] = run.conversation_id
    with contextlib.suppress(Exception), trace.use_span(span, end_on_exit=False):
        logger.warning(
            "stuck tool task: tool=%s call_id=%s invocation=%s session=%s age=%.3fs "
            "state=%s report=%d waits at %s", record.tool_name, record.call_id,
            run.invocation_id, run.conversation_id or "-", age, state, n,
            f"{display_path(frame.file, roots)}:{frame.line} in {frame.func}"
            if frame is not None else "(no stack)",
            # The logs bridge (LoggingHandler) turns a record's extra fields into
            # log-record attributes: the record carries them, not only its text.
            extra=log_attrs)
