"""Per-invocation tool-task records: start, finish, sweep. Knows OTel, not ADK.

A record lives from the moment a tool task is created until that task ends. A
run's records live in its RunRecord until the run-end sweep; a task still running
at the sweep becomes an orphan and stays (only) in ``_orphans`` until it really
ends. Nothing is kept for a run once its sweep is done and its tasks have ended.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import logging
import time
import traceback
import types
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from . import semconv as sc
from . import spans as _spans
from .version import __version__

logger = logging.getLogger(sc.LOGGER_NAME)

OPEN, ORPHANED, ENDED = 0, 1, 2
_STACK_FRAMES = 12
# Stacks captured per sweep at most: a sweep of thousands of orphans must not stall
# the event loop walking every one (each orphan is still reported).
_STACKS_PER_SWEEP = 100
# Metric attribute sets kept at most; beyond, the tool name becomes _OTHER.
_MAX_SERIES = 2000
_OTHER = "_other"
_STACK_CHARS = 4096
_NAME_CHARS = 256
_ORPHAN_CANCEL_GRACE = 5.0


@dataclass(frozen=True)
class OpenTask:
    """A tool task the plugin sees running now."""

    invocation_id: str
    call_id: str
    tool_name: str
    kind: str
    age: float
    orphaned: bool


@dataclass(frozen=True)
class TrackerState:
    """What the plugin holds right now: the supported test hook.

    ``runs``: runs not yet ended; ``open``: tool tasks open inside them;
    ``orphans``: orphaned tasks still running. All zero when nothing runs.
    """

    runs: int
    open: int
    orphans: int


@dataclass(frozen=True)
class LedgerOptions:
    cancel_orphans: bool = False
    track_spawned_tasks: bool = False
    max_open_tasks: int = 10_000


class TaskRecord:
    __slots__ = (
        "after_seen", "bound_to_callbacks", "call_id", "cancel_cause",
        "error", "holder", "invocation_id", "key", "kind", "ledger", "orphaned_at", "run",
        "series", "span", "start",
        "state", "task", "tool_name",
    )

    def __init__(self, ledger: Ledger, run: RunRecord, call_id: str, tool_name: str, kind: str,
                 span: Span, series: _Series) -> None:
        self.ledger = ledger
        self.series = series
        self.run = run
        self.invocation_id = run.invocation_id
        self.call_id = call_id
        self.key = call_id  # in run.tasks (differs for a duplicate id)
        self.tool_name = tool_name
        self.kind = kind
        self.span = span
        self.start = time.monotonic()
        self.task: asyncio.Task[Any] | None = None
        self.error: BaseException | None = None
        self.after_seen = False
        self.cancel_cause: str | None = None
        self.state = OPEN
        self.orphaned_at = 0.0
        # True when no task of its own could be found: the record then ends at
        # after_tool/on_tool_error instead of at a task's done-callback.
        self.bound_to_callbacks = False
        # What the plugin's context variable holds: emptied when the record ends,
        # so a finished asyncio task that ADK keeps around does not keep it.
        self.holder: list[TaskRecord | None] = [self]

    def __call__(self, task: asyncio.Task[Any]) -> None:
        """The done-callback of the task it is bound to (no partial per task)."""
        self.ledger._on_task_done(self, task)


class RunRecord:
    __slots__ = (
        "app_name", "cb", "finalizer", "invocation_id", "sibling_failed", "span", "spawned",
        "start_ns", "trace_id",
        "task_is_run", "task_ref", "tasks", "track_spawned", "watching",
    )

    def __init__(self, invocation_id: str, app_name: str) -> None:
        self.invocation_id = invocation_id
        self.app_name = app_name
        self.span: Span | None = None
        self.start_ns = time.time_ns()
        self.trace_id = 0  # of the run's spans, once known
        # Weak: a finished caller task can hold (through its result) the frames
        # that keep ADK's invocation context, and so this record, alive.
        self.task_ref: weakref.ref[asyncio.Task[Any]] | None = None
        # True when the task exists only to run this run (ADK's own live task),
        # False when it is a caller's task that merely started it.
        self.task_is_run = False
        self.tasks: dict[str, TaskRecord] = {}
        self.watching = False  # done-callback attached to self.task
        self.sibling_failed = False
        self.finalizer: weakref.finalize | None = None  # type: ignore[type-arg]
        self.cb: Any = None
        # Strict mode: tasks a tool body created, with who created them and when.
        self.track_spawned = False
        self.spawned: list[tuple[asyncio.Task[Any], TaskRecord, int]] = []

    @property
    def task(self) -> asyncio.Task[Any] | None:
        """The task that started the run, while it exists."""
        return self.task_ref() if self.task_ref is not None else None


class _Series:
    """One set of metric attributes (tool, agent, kind, app): its attribute dicts,
    built once, and its started/active counts, kept as plain integers and read by
    observable instruments at collection, so a tool task costs no SDK measurement
    for them."""

    __slots__ = ("active", "attrs", "by_outcome", "span_attrs", "started")

    def __init__(self, attrs: dict[str, str], tool_type: str) -> None:
        self.attrs = attrs
        self.span_attrs = {**attrs, sc.GEN_AI_TOOL_TYPE: tool_type}
        # The duration histogram's attributes per outcome (no error.type).
        self.by_outcome = {o: {**attrs, sc.ADK_TOOL_TASK_OUTCOME: o} for o in (
            sc.Outcome.OK, sc.Outcome.RECOVERED, sc.Outcome.CANCELLED)}
        self.started = 0
        self.active = 0


class Ledger:
    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        options: LedgerOptions | None = None,
    ) -> None:
        self.options = options or LedgerOptions()
        self._tracer = trace.get_tracer(sc.SCOPE_NAME, __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter(sc.SCOPE_NAME, __version__, meter_provider=meter_provider)
        self._series: dict[tuple[str, str, str, str, str], _Series] = {}
        meter.create_observable_counter(
            sc.METRIC_STARTED, [self._observe_started], sc.UNIT_TASK, "Tool tasks created.")
        meter.create_observable_up_down_counter(
            sc.METRIC_ACTIVE, [self._observe_active], sc.UNIT_TASK,
            "Tool tasks running inside their run.")
        self._duration = meter.create_histogram(
            sc.METRIC_DURATION, sc.UNIT_SECONDS,
            "Tool task lifetime, creation to end, for tasks that ended inside their run.",
            explicit_bucket_boundaries_advisory=list(sc.DURATION_BUCKETS))
        self._orphaned = meter.create_counter(
            sc.METRIC_ORPHANED, sc.UNIT_TASK, "Tool tasks still running when their run ended.")
        self._orphans_alive = meter.create_up_down_counter(
            sc.METRIC_ORPHANS_ALIVE, sc.UNIT_TASK, "Orphaned tool tasks still running.")
        self._orphan_lifetime = meter.create_histogram(
            sc.METRIC_ORPHAN_LIFETIME, sc.UNIT_SECONDS,
            "How long an orphaned tool task ran past the end of its run.",
            explicit_bucket_boundaries_advisory=list(sc.DURATION_BUCKETS))
        self._overflow = meter.create_counter(
            sc.METRIC_OVERFLOW, sc.UNIT_TASK,
            "Tool tasks not tracked because max_open_tasks records were open.")
        self._runs: dict[str, RunRecord] = {}
        self._orphans: set[TaskRecord] = set()
        self._open = 0
        self._overflowed = 0
        self._tool_tasks: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        self._series_capped = False
        self._stacks_left = _STACKS_PER_SWEEP
        #: Failures inside the ledger's own callbacks (swallowed, logged).
        self.failures = 0
        _LEDGERS.add(self)

    def _observe_started(self, _options: Any) -> list[metrics.Observation]:
        # list() copies in one step: the event loop may add a series while the
        # reader's thread collects.
        return [metrics.Observation(x.started, x.attrs) for x in list(self._series.values())]

    def _observe_active(self, _options: Any) -> list[metrics.Observation]:
        return [metrics.Observation(x.active, x.attrs) for x in list(self._series.values())]

    def _series_for(self, tool_name: str, agent_name: str, kind: str, app_name: str,
                    tool_type: str) -> _Series:
        key = (tool_name, agent_name, kind, app_name, tool_type)
        series = self._series.get(key)
        if series is None and len(self._series) >= _MAX_SERIES:
            # A model that invents tool names (ADK answers "tool not found" with a
            # tool of that name) must not explode metric cardinality.
            if not self._series_capped:
                self._series_capped = True
                logger.warning("adk_task_telemetry: more than %d (tool, agent, kind, app) "
                               "combinations; further ones are counted as tool %r",
                               _MAX_SERIES, _OTHER)
            key = (_OTHER, agent_name, kind, app_name, tool_type)
            tool_name = _OTHER
            series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series({
                sc.GEN_AI_TOOL_NAME: tool_name[:_NAME_CHARS],
                sc.GEN_AI_AGENT_NAME: agent_name[:_NAME_CHARS],
                sc.ADK_TOOL_TASK_KIND: kind,
                sc.ADK_APP_NAME: app_name[:_NAME_CHARS],
            }, tool_type[:_NAME_CHARS])
        return series

    # --- runs -------------------------------------------------------------------

    def begin_run(self, invocation_id: str, app_name: str, span: Span | None,
                  task: asyncio.Task[Any] | None, task_is_run: bool, owner: Any) -> None:
        run = self.run_for(invocation_id, app_name, owner)
        run.span = span if span is not None and span.is_recording() else None
        if span is not None and span.get_span_context().is_valid:
            run.trace_id = span.get_span_context().trace_id
        run.task_ref = weakref.ref(task) if task is not None else None
        run.task_is_run = task_is_run
        if run.tasks and task is not None:
            self._watch(run)

    def run_for(self, invocation_id: str, app_name: str, owner: Any = None) -> RunRecord:
        run = self._runs.get(invocation_id)
        if run is None:  # also a tool task seen without its before_run (plugin added mid-run)
            run = self._runs[invocation_id] = RunRecord(invocation_id, app_name)
            run.track_spawned = self.options.track_spawned_tasks
        if owner is not None and run.finalizer is None:
            # Backstop for runs that end with no signal at all (a run_async that
            # fails or is cancelled on ADK 1.x): drop the record, if idle, once
            # ADK lets go of the invocation context.
            try:
                run.finalizer = weakref.finalize(
                    owner, _drop_idle_run, weakref.ref(self), invocation_id)
                run.finalizer.atexit = False
            except TypeError:
                run.finalizer = None
        return run

    def _watch(self, run: RunRecord) -> None:
        # Attached only while the run has open tasks: the run task may be a
        # caller's task that serves thousands of runs.
        task = run.task
        if not run.watching and task is not None and not task.done():
            if run.cb is None:
                run.cb = partial(self._on_run_task_done, run.invocation_id)
            task.add_done_callback(run.cb)
            run.watching = True

    def _unwatch(self, run: RunRecord) -> None:
        task = run.task
        if run.watching and task is not None:
            task.remove_done_callback(run.cb)
        run.watching = False

    def _on_run_task_done(self, invocation_id: str, _task: asyncio.Task[Any]) -> None:
        try:
            run = self._runs.get(invocation_id)
            if run is None:
                return
            run.watching = False
            if run.task_is_run:
                self.sweep(invocation_id, sc.EndTrigger.RUN_TASK_DONE)
            else:
                # A caller's task may hand the run's generator on to another task
                # (wait_for(anext(...)) per event does): only calls, which run
                # inside one step of the generator, cannot outlive it legitimately.
                self.sweep(invocation_id, sc.EndTrigger.RUN_TASK_DONE, only=_STEP_KINDS)
        except Exception:
            self._failed("run-task sweep")

    # --- tasks ------------------------------------------------------------------

    def open_task(
        self, run: RunRecord, call_id: str, tool_name: str, tool_type: str, agent_name: str,
        conversation_id: str | None, kind: str, extra: dict[str, str] | None = None,
    ) -> TaskRecord | None:
        series = self._series_for(tool_name, agent_name, kind, run.app_name, tool_type)
        tool_name = tool_name[:_NAME_CHARS]
        if self._open >= self.options.max_open_tasks:
            self._overflowed += 1
            self._overflow.add(1, series.attrs)
            if self._overflowed == 1 or self._overflowed % 1000 == 0:
                logger.warning(
                    "adk_task_telemetry: %d open tool tasks reached max_open_tasks; %d tool "
                    "tasks not tracked so far", self._open, self._overflowed)
            return None
        span_attrs = series.span_attrs.copy()
        if series.attrs[sc.GEN_AI_TOOL_NAME] != tool_name:  # the series is _OTHER's
            span_attrs[sc.GEN_AI_TOOL_NAME] = tool_name
        span_attrs[sc.GEN_AI_TOOL_CALL_ID] = call_id[:_NAME_CHARS]
        span_attrs[sc.ADK_INVOCATION_ID] = run.invocation_id
        if conversation_id:
            span_attrs[sc.GEN_AI_CONVERSATION_ID] = conversation_id
        if extra:
            span_attrs.update(extra)
        span = self._tracer.start_span(
            sc.SPAN_NAME_PREFIX + tool_name, kind=SpanKind.INTERNAL, attributes=span_attrs)
        record = TaskRecord(self, run, call_id, tool_name, kind, span, series)
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
        record.key = key
        run.tasks[key] = record
        self._open += 1
        series.started += 1
        series.active += 1
        return record

    def bind(self, record: TaskRecord, task: asyncio.Task[Any] | None) -> None:
        """Ties the record's end to ``task``'s end (replacing an earlier binding)."""
        if record.state != OPEN:
            return
        old = record.task
        if old is not None and old is not task:
            old.remove_done_callback(record)
        record.task = task
        record.bound_to_callbacks = task is None
        if task is None or old is task:
            return
        if self.options.track_spawned_tasks:
            self._tool_tasks.add(task)
        if task.done():
            self._finish_from_task(record, task)
            return
        task.add_done_callback(record)
        if not record.run.watching:
            self._watch(record.run)

    def mark_stop_requested(self, invocation_id: str, tool_name: str) -> None:
        run = self._runs.get(invocation_id)
        if run is None:
            return
        for record in run.tasks.values():
            if record.tool_name == tool_name and record.kind == sc.Kind.STREAMING:
                record.cancel_cause = sc.CancelCause.STOP_STREAMING

    def _on_task_done(self, record: TaskRecord, task: asyncio.Task[Any]) -> None:
        try:
            if record.state == OPEN:
                self._finish_from_task(record, task)
            elif record.state == ORPHANED:
                self._orphan_ended(record, task)
        except Exception:
            self._failed("tool-task end")

    def _finish_from_task(self, record: TaskRecord, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self.finish(record, sc.Outcome.CANCELLED)
            return
        exc = task.exception()
        if exc is not None:
            self.finish(record, sc.Outcome.ERROR, exc)
        else:
            self.finish_returned(record)

    def finish_returned(self, record: TaskRecord) -> None:
        """The task returned: ok, or recovered/error if the tool had raised."""
        if record.error is None:
            self.finish(record, sc.Outcome.OK)
        elif record.after_seen:  # a callback turned the error into a result
            self.finish(record, sc.Outcome.RECOVERED, record.error)
        else:  # ADK swallowed it (a background tool) and no callback answered
            self.finish(record, sc.Outcome.ERROR, record.error)

    def finish(self, record: TaskRecord, outcome: str, error: BaseException | None = None) -> None:
        if record.state != OPEN:
            return
        record.state = ENDED
        run = record.run
        # Bookkeeping first: a provider that raises below must not leave a record.
        self._forget(record)
        record.series.active -= 1
        span = record.span
        span.set_attribute(sc.ADK_TOOL_TASK_OUTCOME, outcome)
        attrs = record.series.by_outcome.get(outcome)
        if attrs is None:
            attrs = {**record.series.attrs, sc.ADK_TOOL_TASK_OUTCOME: outcome}
        if error is not None:
            span.record_exception(error)
            if outcome == sc.Outcome.ERROR:
                etype = _error_type(error)
                span.set_attribute(sc.ERROR_TYPE, etype)
                span.set_status(Status(StatusCode.ERROR, etype))
                attrs = {**attrs, sc.ERROR_TYPE: etype}
                if record.kind == sc.Kind.CALL:
                    run.sibling_failed = True
        elif outcome == sc.Outcome.CANCELLED:
            cause = record.cancel_cause or self._infer_cause(record)
            span.add_event(sc.EVENT_CANCELLED, {sc.ADK_TOOL_TASK_CANCEL_CAUSE: cause})
        span.end()
        self._duration.record(time.monotonic() - record.start, attrs,
                              context=trace.set_span_in_context(span))

    def _infer_cause(self, record: TaskRecord) -> str:
        if record.kind in (sc.Kind.STREAMING, sc.Kind.NON_BLOCKING):
            return sc.CancelCause.RUN_TEARDOWN
        if record.run.sibling_failed:
            return sc.CancelCause.SIBLING_FAILED
        return sc.CancelCause.CALLER_CANCELLED

    def _forget(self, record: TaskRecord) -> None:
        run = record.run
        if run.tasks.get(record.key) is record:
            del run.tasks[record.key]
        self._open -= 1
        record.task = None
        record.holder[0] = None
        if not run.tasks:
            self._unwatch(run)

    # --- run end ----------------------------------------------------------------

    def sweep(self, invocation_id: str, trigger: str,
              only: frozenset[str] | None = None) -> int:
        """Ends the run: every task still running becomes an orphan. Idempotent.

        With ``only``, ends just the tasks of those kinds, and keeps the run if
        others remain. Returns the number of orphans.
        """
        run = self._runs.get(invocation_id)
        if run is None:
            return 0
        records = list(run.tasks.values())
        if only is not None:
            records = [r for r in records if r.kind in only]
            if len(records) < len(run.tasks):
                return self._end_tasks(records, trigger)
        del self._runs[invocation_id]
        self._unwatch(run)
        if run.finalizer is not None:
            run.finalizer.detach()
        orphans = self._end_tasks(records, trigger)
        if run.spawned:
            orphans += self._end_spawned(run, trigger)
        if run.trace_id and _spans._processors:
            self._report_open_spans(run, trigger)
        run.tasks.clear()
        run.span = None
        run.task_ref = None
        return orphans

    def _end_tasks(self, records: list[TaskRecord], trigger: str) -> int:
        self._stacks_left = _STACKS_PER_SWEEP
        orphans = 0
        for record in records:
            task = record.task
            if record.bound_to_callbacks:
                if record.after_seen:
                    self.finish_returned(record)
                else:
                    self._orphan(record, trigger)
                    orphans += 1
            elif task is None or task.done():
                # Finished, but its done-callback has not run yet: not an orphan.
                if task is not None:
                    self._finish_from_task(record, task)
                else:
                    self.finish(record, sc.Outcome.CANCELLED)
            else:
                self._orphan(record, trigger)
                orphans += 1
        return orphans

    def sweep_all(self, trigger: str) -> int:
        return sum(self.sweep(inv, trigger) for inv in list(self._runs))

    def _orphan(self, record: TaskRecord, trigger: str) -> None:
        run = record.run
        record.state = ORPHANED
        self._open -= 1
        now = time.monotonic()
        record.orphaned_at = now
        age = now - record.start
        task = None if record.bound_to_callbacks else record.task
        record.series.active -= 1
        self._report_orphan(record.span, record, run, trigger, age, task)
        if task is None:
            self._orphan_ended(record, None)  # nothing to watch: count it as gone
        else:
            self._orphans.add(record)
        record.run = _DETACHED  # the run is over: hold nothing of it

    def _report_orphan(self, span: Span, record: TaskRecord, run: RunRecord, trigger: str,
                       age: float, task: asyncio.Task[Any] | None) -> None:
        stack = ""
        if task is not None and self._stacks_left > 0:
            self._stacks_left -= 1
            stack = _suspended_stack(task)
        event_attrs: dict[str, Any] = {
            sc.GEN_AI_TOOL_CALL_ID: record.call_id,
            sc.GEN_AI_TOOL_NAME: record.tool_name,
            sc.ADK_INVOCATION_ID: run.invocation_id,
            sc.ADK_RUN_END_TRIGGER: trigger,
            sc.ADK_TOOL_TASK_AGE: round(age, 6),
        }
        if stack:
            event_attrs[sc.CODE_STACKTRACE] = stack
        span.add_event(sc.EVENT_ORPHANED_TASK, event_attrs)
        span.set_attribute(sc.ADK_TOOL_TASK_OUTCOME, sc.Outcome.ORPHANED)
        span.set_status(Status(StatusCode.ERROR, f"still running when its run ended ({trigger})"))
        if run.span is not None and run.span.is_recording():
            run.span.add_event(sc.EVENT_ORPHANED_TASK, event_attrs)
        cancelled = False
        if self.options.cancel_orphans and task is not None and not task.done():
            task.cancel()
            cancelled = True
            span.add_event(sc.EVENT_CANCELLED,
                           {sc.ADK_TOOL_TASK_CANCEL_CAUSE: sc.CancelCause.ORPHAN_CANCELLED})
            _schedule_cancel_check(task, record.tool_name, record.call_id)
        span.end()
        self._orphaned.add(1, {**record.series.attrs, sc.ADK_RUN_END_TRIGGER: trigger},
                           context=trace.set_span_in_context(span))
        self._orphans_alive.add(1, record.series.attrs)
        with trace.use_span(span, end_on_exit=False):
            logger.warning(
                "orphaned tool task: tool=%s call_id=%s invocation=%s trigger=%s age=%.3fs%s",
                record.tool_name, record.call_id, run.invocation_id, trigger, age,
                " (cancelled by cancel_orphans)" if cancelled else "")

    def _report_open_spans(self, run: RunRecord, trigger: str) -> None:
        """Spans a tool (or a library under it) opened in this run and never ended."""
        now = time.time_ns()
        for child in _spans.open_child_spans(run.trace_id, run.start_ns):
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
                               "trigger=%s age=%.3fs", child.name, run.invocation_id,
                               trigger, age)

    def _end_spawned(self, run: RunRecord, trigger: str) -> int:
        """Strict mode: tasks a tool spawned and left behind are orphans of its call."""
        orphans = 0
        for task, parent, spawned_ns in run.spawned:
            if task.done() or task in self._tool_tasks:
                continue
            attributes = dict(getattr(parent.span, "attributes", None) or {})
            attributes.pop(sc.ADK_TOOL_TASK_OUTCOME, None)
            attributes[sc.ADK_TOOL_TASK_SPAWNED] = True
            span = self._tracer.start_span(
                sc.SPAN_NAME_PREFIX + parent.tool_name, kind=SpanKind.INTERNAL,
                context=trace.set_span_in_context(parent.span), start_time=spawned_ns,
                attributes=attributes)
            record = TaskRecord(self, run, parent.call_id, parent.tool_name, parent.kind, span,
                                parent.series)
            record.series.started += 1
            record.start = time.monotonic() - (time.time_ns() - spawned_ns) / 1e9
            record.state = ORPHANED
            record.orphaned_at = time.monotonic()
            record.task = task
            self._report_orphan(span, record, run, trigger, record.orphaned_at - record.start,
                                task)
            task.add_done_callback(record)
            self._orphans.add(record)
            record.run = _DETACHED
            orphans += 1
        run.spawned.clear()
        return orphans

    def _orphan_ended(self, record: TaskRecord, task: asyncio.Task[Any] | None) -> None:
        if record.state != ORPHANED:
            return
        record.state = ENDED
        self._orphans.discard(record)
        if task is None or task.cancelled():
            outcome = sc.Outcome.CANCELLED
        elif task.exception() is not None:
            outcome = sc.Outcome.ERROR
        else:
            outcome = sc.Outcome.OK
        self._orphans_alive.add(-1, record.series.attrs)
        self._orphan_lifetime.record(
            time.monotonic() - record.orphaned_at,
            {**record.series.attrs, sc.ADK_TOOL_TASK_OUTCOME: outcome},
            context=trace.set_span_in_context(record.span))
        record.task = None
        record.holder[0] = None

    def _failed(self, where: str) -> None:
        self.failures += 1
        if self.failures <= 10:
            logger.exception("adk_task_telemetry: internal error in %s (ignored)", where)

    # --- views ------------------------------------------------------------------

    def open_tasks(self) -> list[OpenTask]:
        now = time.monotonic()
        out = [
            OpenTask(run.invocation_id, r.call_id, r.tool_name, r.kind, now - r.start, False)
            for run in list(self._runs.values()) for r in list(run.tasks.values())
        ]
        out.extend(
            OpenTask(r.invocation_id, r.call_id, r.tool_name, r.kind, now - r.start, True)
            for r in list(self._orphans))
        return out

    def state(self) -> TrackerState:
        return TrackerState(len(self._runs), self._open, len(self._orphans))

    def state_size(self) -> tuple[int, int]:
        """(runs held, orphan records held): both zero when nothing runs."""
        return len(self._runs), len(self._orphans)

    def _drop_if_idle(self, invocation_id: str) -> None:
        run = self._runs.get(invocation_id)
        if run is not None and not run.tasks:
            del self._runs[invocation_id]
            self._unwatch(run)
            if run.finalizer is not None:
                run.finalizer.detach()


_DETACHED = RunRecord("", "")
_STEP_KINDS = frozenset({sc.Kind.CALL, sc.Kind.LONG_RUNNING})
_LEDGERS: weakref.WeakSet[Ledger] = weakref.WeakSet()


def note_spawned(record: TaskRecord, task: asyncio.Task[Any]) -> None:
    """Strict mode: ``task`` was created inside the tool task of ``record``."""
    if record.state == OPEN and record.task is not task:
        spawned = record.run.spawned
        if len(spawned) >= 64:
            spawned[:] = [s for s in spawned if not s[0].done()]
        spawned.append((task, record, time.time_ns()))


def shutdown_all() -> int:
    """Sweeps every run of every ledger with the ``shutdown`` trigger.

    Runs at interpreter exit (registered by each plugin, so after providers that
    existed before it were created and before they flush), and first thing in
    the exit handler of configure_telemetry().
    """
    total = 0
    for ledger in list(_LEDGERS):
        with contextlib.suppress(Exception):
            total += ledger.sweep_all(sc.EndTrigger.SHUTDOWN)
    return total


def register_shutdown() -> None:
    """(Re)registers shutdown_all at exit so that it runs before handlers made earlier."""
    atexit.unregister(shutdown_all)
    from .exit import install as _install_exit  # exit.py: sweep (this), then flush
    _install_exit()


def _drop_idle_run(ledger_ref: weakref.ref[Ledger], invocation_id: str) -> None:
    ledger = ledger_ref()
    if ledger is not None:
        with contextlib.suppress(Exception):  # runs from the garbage collector
            ledger._drop_if_idle(invocation_id)


def _schedule_cancel_check(task: asyncio.Task[Any], tool: str, call_id: str) -> None:
    def check() -> None:
        if not task.done():
            logger.warning("orphaned tool task ignored cancellation: tool=%s call_id=%s",
                           tool, call_id)
    with contextlib.suppress(RuntimeError):  # the loop is closed (shutdown)
        task.get_loop().call_later(_ORPHAN_CANCEL_GRACE, check)


def _error_type(error: BaseException) -> str:
    cls = type(error)
    mod = cls.__module__
    return cls.__qualname__ if mod in ("builtins", "__main__") else f"{mod}.{cls.__qualname__}"


def _frames(task: asyncio.Task[Any]) -> Iterator[types.FrameType]:
    """The frames of a suspended task, innermost last, through async generators too."""
    aw: Any = task.get_coro()
    seen = 0
    while aw is not None and seen < 64:
        seen += 1
        frame = getattr(aw, "cr_frame", None) or getattr(aw, "ag_frame", None) or getattr(
            aw, "gi_frame", None)
        if frame is not None:
            yield frame
        nxt = (getattr(aw, "cr_await", None) or getattr(aw, "ag_await", None)
               or getattr(aw, "gi_yieldfrom", None))
        if nxt is None and frame is None:
            # async_generator_asend and friends hide their generator: find it.
            nxt = next((r for r in gc.get_referents(aw)
                        if isinstance(r, (types.AsyncGeneratorType, types.CoroutineType))), None)
        aw = nxt


def _suspended_stack(task: asyncio.Task[Any]) -> str:
    try:
        frames = list(_frames(task))[-_STACK_FRAMES:]
        summary = traceback.StackSummary.extract(((f, f.f_lineno) for f in frames),
                                                 lookup_lines=True)
        return "".join(summary.format())[-_STACK_CHARS:]
    except Exception:
        return ""

