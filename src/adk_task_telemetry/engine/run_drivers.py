"""Which asyncio task drives a run, and the done-callback that tells the tracker it ended.

A run goes on in the task reading its generator: ADK's own run task (a live run
where ``compat.LIVE_RUN_HAS_OWN_TASK``: it ends exactly with the run), or a caller's
task, which may serve thousands of runs (a web server's handler loop) and may hand
the generator on to another task (a ``wait_for`` around every ``anext``). The run
record is the done-callback of its current driver (``RunRecord.__call__`` hands the
end to the tracker's ``driver_done``): of ADK's own run task for the run's whole
life, of a caller's task only while the run has open tasks, so that a long-lived
caller task never collects one callback per run. This module changes no record's
state: it keeps the callback on the right task as the tracker's transitions change
what the run holds.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from .records import RunRecord


def drive(run: RunRecord, task: asyncio.Task[Any] | None, is_run: bool) -> None:
    """``task`` drives ``run`` now; ``is_run``: ADK made it for this run alone."""
    run.driver_ref = weakref.ref(task) if task is not None else None
    run.driver_is_run = is_run
    if run.tasks or is_run:
        watch(run)


def watch(run: RunRecord) -> None:
    """Keeps the run as done-callback of its current driver: ADK's own run task for
    the run's whole life (it ends with the run), a caller's task only while the run
    has open tasks (it may serve thousands of runs)."""
    watched = run.watched_ref() if run.watched_ref is not None else None
    task = run.driver if (run.tasks or run.driver_is_run) and not run.ended else None
    if watched is task:
        return
    if watched is not None:
        watched.remove_done_callback(run)
    run.watched_ref = None
    if task is not None and not task.done():
        task.add_done_callback(run)
        run.watched_ref = weakref.ref(task)


def release(run: RunRecord) -> None:
    """The run ended: no task carries it any more."""
    watch(run)  # detaches from the driver
    run.driver_ref = None


def current_task() -> asyncio.Task[Any] | None:
    """The task running now; None outside a running loop (a pool thread)."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop in this thread
        return None
