"""Strict mode (``track_spawned_tasks=True``): tasks a tool body spawned and left running.

A task factory chained onto the running loop notes every task created inside a
tool task of a strict tracker; at its run's end, those still running (and not
tool tasks themselves) are reported as orphans of the call that spawned them,
on a span of their own with ``adk.tool_task.spawned`` set.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import TYPE_CHECKING, Any, Protocol

from . import semconv as sc

if TYPE_CHECKING:
    from .records import TaskRecord


class SpawnOwner(Protocol):
    """A strict tracker, as this module sees it: it says which record is current and
    takes the spawned tasks this module finds. The tracker implements it; this module
    never imports the engine."""

    def current(self) -> TaskRecord | None: ...

    def note_spawned(self, record: TaskRecord, task: asyncio.Task[Any]) -> None: ...

    def adopt_spawned(self, parent: TaskRecord, task: asyncio.Task[Any], spawned_ns: int,
                      trigger: str) -> None: ...


logger = logging.getLogger(sc.LOGGER_NAME)

_trackers: weakref.WeakSet[SpawnOwner] = weakref.WeakSet()
_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
_tool_tasks: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()


def install_on_running_loop(tracker: SpawnOwner) -> None:
    """Chains a task factory onto the running loop (once per loop; uvloop too) that
    tells ``tracker`` of tasks created inside its tool tasks."""
    _trackers.add(tracker)
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
    for tracker in list(_trackers):
        record = tracker.current()
        if record is not None and record.task is not task:
            tracker.note_spawned(record, task)


def note_tool_task(task: asyncio.Task[Any]) -> None:
    """``task`` is a tool task itself (ADK's, bound to a record): never a spawned orphan."""
    _tool_tasks.add(task)


def end_spawned(tracker: SpawnOwner, spawned: list[tuple[asyncio.Task[Any], TaskRecord, int]],
                trigger: str) -> None:
    """At a run's end (``spawned``: what its tool bodies spawned, taken from the run by
    the tracker): each task still running is an orphan of its call."""
    for task, parent, spawned_ns in spawned:
        if not task.done() and task not in _tool_tasks:
            tracker.adopt_spawned(parent, task, spawned_ns, trigger)
