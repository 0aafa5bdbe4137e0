"""Strict mode (``track_spawned_tasks=True``): tasks a tool body spawned and left running.

A task factory chained onto the running loop notes every task created inside a
tool task of a strict tracker, in that task's run record (``RunRecord.spawned``); at
the run's end the tracker asks which of them still run (and are not tool tasks
themselves) and reports each as an orphan of the call that spawned it, on a span of
its own with ``adk.tool_task.spawned`` set.

Part of the engine (it writes run records: ``RunRecord.spawned``), but not of its
transitions: it reads the tracker's context variable (which record is current) and never
calls the tracker; the tracker takes from ``spawned`` at the run's end.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
import weakref
from typing import Any

from .. import semconv as sc
from .records import OPEN, TaskRecord

logger = logging.getLogger(sc.LOGGER_NAME)

#: Spawned tasks kept per run before finished ones are pruned.
PRUNE_SPAWNED_AT = 64

#: Per strict tracker (held weakly, never called): its context variable that names the
#: record of the tool task running in this context.
_current: weakref.WeakKeyDictionary[object, contextvars.ContextVar[TaskRecord | None]] = (
    weakref.WeakKeyDictionary())
_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
_tool_tasks: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()


def install_on_running_loop(tracker: object,
                            current: contextvars.ContextVar[TaskRecord | None]) -> None:
    """Chains a task factory onto the running loop (once per loop; uvloop too) that
    notes tasks created where ``current`` names an open record of ``tracker``'s."""
    _current[tracker] = current
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
    for current in list(_current.values()):
        record = current.get()
        if record is None or record.state != OPEN or record.task is task:
            continue
        spawned = record.run.spawned
        if len(spawned) >= PRUNE_SPAWNED_AT:
            spawned[:] = [s for s in spawned if not s[0].done()]
        spawned.append((task, record, time.time_ns()))


def note_tool_task(task: asyncio.Task[Any]) -> None:
    """``task`` is a tool task itself (ADK's, bound to a record): never a spawned orphan."""
    _tool_tasks.add(task)


def left_running(spawned: list[tuple[asyncio.Task[Any], TaskRecord, int]]
                 ) -> list[tuple[asyncio.Task[Any], TaskRecord, int]]:
    """At a run's end (``spawned``: what its tool bodies spawned, taken from the run by
    the tracker): the tasks still running, each an orphan of its call."""
    return [s for s in spawned if not s[0].done() and s[0] not in _tool_tasks]
