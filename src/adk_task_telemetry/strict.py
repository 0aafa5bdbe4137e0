"""Strict mode (``track_spawned_tasks=True``): tasks a tool body spawned and left running.

A task factory chained onto the running loop notes every task created inside a
tool task of a strict tracker; at its run's end, those still running (and not
tool tasks themselves) are reported as orphans of the call that spawned them,
on a span of their own with ``adk.tool_task.spawned`` set.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from . import semconv as sc
from .records import OPEN, RunRecord, TaskRecord

if TYPE_CHECKING:
    from .tracker import Tracker

logger = logging.getLogger(sc.LOGGER_NAME)

#: Spawned tasks kept per run before finished ones are pruned.
_PRUNE_AT = 64

_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
_tool_tasks: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()


def install_on_running_loop() -> None:
    """Chains a task factory onto the running loop (once per loop; uvloop too)."""
    loop = asyncio.get_running_loop()
    if loop in _loops:
        return
    previous = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        if previous is not None:
            task = previous(loop, coro, **kwargs)
        else:
            task = asyncio.Task(coro, loop=loop, **kwargs)
        try:
            if isinstance(task, asyncio.Task):
                _note(task)
        except Exception:
            logger.debug("spawned-task tracking failed", exc_info=True)
        return task

    loop.set_task_factory(factory)
    _loops.add(loop)


def _note(task: asyncio.Task[Any]) -> None:
    from .tracker import trackers

    for tracker in trackers():
        if not tracker.options.track_spawned_tasks:
            continue
        record = tracker.current()
        if record is not None and record.state == OPEN and record.task is not task:
            spawned = record.run.spawned
            if len(spawned) >= _PRUNE_AT:
                spawned[:] = [s for s in spawned if not s[0].done()]
            spawned.append((task, record, time.time_ns()))


def note_tool_task(task: asyncio.Task[Any]) -> None:
    """``task`` is a tool task itself (ADK's, bound to a record): never a spawned orphan."""
    _tool_tasks.add(task)


def end_spawned(tracker: Tracker, run: RunRecord, trigger: str) -> None:
    """At the run's end: each spawned task still running is an orphan of its call."""
    for task, parent, spawned_ns in run.spawned:
        if task.done() or task in _tool_tasks:
            continue
        attributes = dict(getattr(parent.span, "attributes", None) or {})
        attributes.pop(sc.ADK_TOOL_TASK_OUTCOME, None)
        attributes[sc.ADK_TOOL_TASK_SPAWNED] = True
        span = tracker.tracer.start_span(
            sc.SPAN_NAME_PREFIX + parent.tool_name, kind=SpanKind.INTERNAL,
            context=trace.set_span_in_context(parent.span), start_time=spawned_ns,
            attributes=attributes)
        start = time.monotonic() - (time.time_ns() - spawned_ns) / 1e9
        record = TaskRecord(run, f"{parent.key}/spawned-{id(task):x}", parent.call_id,
                            parent.tool_name, parent.kind, span, parent.series,
                            parent.on_done, start=start)
        tracker.adopt_orphan(record, trigger, task)
    run.spawned.clear()
