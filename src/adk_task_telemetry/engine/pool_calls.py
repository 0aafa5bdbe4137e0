"""A tool call's synchronous callable on ADK's tool thread pool, bound to its record.

With ``RunConfig.tool_thread_pool_config`` set, ADK runs a synchronous tool's callable
on a pool thread (adk_compat hooks the pool and tells the plugin of each submission).
A thread cannot be cancelled: a call whose task is cancelled while its callable runs
is still working. Its record holds the pool's future (``TaskRecord.work``) and ends
only once both its task and that future are done.

This module is the binding and the hand-over between threads: which submission
belongs to which record, and the future's done-callback, which runs on the pool
thread and hands the end to the loop's thread only where the record waits for it.
It changes no record's state: the tracker's ``work_done`` (``WorkOwner``) does, on
the loop.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from functools import partial
from typing import Any, Protocol

from .. import semconv as sc
from .records import OPEN, TaskRecord


class WorkOwner(Protocol):
    """What a finished callable's record is handed to, on its loop's thread: the
    tracker implements it; this module never imports the engine."""

    def work_done(self, record: TaskRecord, work: Future[Any]) -> None: ...


def bind(owner: WorkOwner, record: TaskRecord, work: Future[Any]) -> None:
    """``work`` runs ``record``'s callable, if it was submitted from the call's own task.

    Called on the loop's thread, in the submitting task, right after ADK queued the
    callable (a submission from a pool thread, a nested call, is not the call's own).
    """
    try:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
    except RuntimeError:  # a pool thread (a nested call): not the call's own task
        return
    if task is None or task is not (record.task or record.run.driver):
        return
    record.work = work
    work.add_done_callback(partial(_done_in_thread, owner, record, loop))


def _done_in_thread(owner: WorkOwner, record: TaskRecord, loop: asyncio.AbstractEventLoop,
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
        loop.call_soon_threadsafe(owner.work_done, record, work)
    except RuntimeError:  # its loop is closed (asyncio.run returned): ends here
        owner.work_done(record, work)


def working(record: TaskRecord) -> bool:
    """The record's thread work is still queued or running."""
    work = record.work
    return work is not None and not work.done()


def outcome_of(work: Future[Any]) -> str:
    """What the thread did, for a call whose task ended before it (the outcome)."""
    if work.cancelled():
        return sc.Outcome.CANCELLED
    return sc.Outcome.ERROR if work.exception() is not None else sc.Outcome.OK
