"""A ``Runner.close()``'s flush: off the event loop, sharing, and coalescing metrics.

ADK's server closes its runners and then uvicorn dies by SIGTERM, where atexit never
runs: so a plugin's close (the last of its runners) flushes what was recorded, in
flush_worker.py's thread, and waits at most the budget (ADK gives ``close()`` 5 s).

Why a close's metrics are coalesced (``CLOSE_METRICS_EVERY_S``): a collection costs
about 1.2M instructions however little changed, and an app that builds a Runner per
request closes one per request. A close within the interval of the last close's
collection leaves its metrics to one deferred collection, run by the worker when the
interval has passed; nothing else is deferred. What ends a process never waits for
it: SIGTERM reaching process_exit.py's handler runs it at once (and no close defers after
that), and the exit list supersedes it. The window left is documented in
docs/configuration.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from dataclasses import dataclass

from .. import semconv as sc
from . import process_exit as _exit
from .flush_worker import worker

logger = logging.getLogger(sc.EXPORT_LOGGER_NAME)

#: A Runner's close collects metrics at most once per this many seconds; a close that
#: comes sooner after the last close's collection leaves them to one deferred
#: collection at that collection's time plus this (``flush_after_close``).
CLOSE_METRICS_EVERY_S = 1.0


@dataclass(frozen=True)
class Activity:
    """What a plugin's close tells the flush about metrics since the last close.

    ``recorded``: a value that changes whenever a metric may have been recorded outside
    a run that is still going on (the runs begun in the process, the measurements taken
    after a run's end); ``runs_alive``: runs of any plugin still going on (they may
    record more). ADK records its own metrics inside runs, ours are recorded in runs or
    counted in ``recorded``: equal ``recorded`` and no run alive at the last close mean
    no metric changed since that close's collection began."""

    recorded: tuple[int, ...]
    runs_alive: bool
    #: Orphan measurements so far (reported at a run's end, or an orphan's end): a
    #: change since the last close makes the close collect at once (see
    #: ``flush_after_close``).
    alarms: int = 0


# Reentrant: process_exit.py's SIGTERM handler may run a deferred collection on the main
# thread while its event loop was interrupted holding it.
_lock = threading.RLock()
#: What the last close that flushed metrics saw (``Activity``); None: flush them next.
_metrics_seen: Activity | None = None
#: When (monotonic) the last collection for a close (or a deferred one) began.
_last_collection: float | None = None
#: ``Activity.alarms`` at the last close that collected because of them.
_alarms_seen = 0
#: The close flush queued in the worker and not started yet (later closes share it).
_queued: _CloseFlush | None = None


async def flush_after_close(activity: Activity | None = None) -> None:
    """Plugin close: the flush runs in the worker thread, so the event loop is not
    blocked; waits at most the budget.

    What it costs is what is new: traces and logs export what they hold (our
    pipeline's span buffer, the SDK's batch processors elsewhere; nothing, after a close
    with nothing since), and metrics, whose collection costs the same however little
    changed, are collected only when ``activity`` says something may have been
    recorded since the last close's collection (None: always), and then at most once
    per ``CLOSE_METRICS_EVERY_S`` (``_close_metrics`` says when a close collects at
    once and when it defers). Closes that come while a flush waits to start share it;
    one that comes while a flush runs gets the next one (what the running one already
    took is not taken again; what came after it is)."""
    try:
        fut = _share(_close_metrics(activity))
        if fut is None:  # no worker (interpreter shutdown): the exit flushes everything
            _metrics_failed()
            return
        await _done_or_timeout(fut, _exit.LIVE_BUDGET_S + _exit.INTERRUPT_GRACE_S)
        if not fut.done():
            _metrics_failed()  # not out within the budget: the next close flushes again
    except Exception:  # never raise into ADK's close
        _metrics_failed()
        logger.debug("flush at plugin close failed", exc_info=True)


def _close_metrics(activity: Activity | None) -> bool | None:
    """What a close does with metrics: True collect now, False only what a pipeline
    saw recorded into its own MeterProvider, None not now (deferred).

    A close that comes within ``CLOSE_METRICS_EVERY_S`` of the last close's
    collection does not collect: it arms the one deferred collection in the worker
    (at that collection's time plus the interval; later closes share it) and its
    traces and logs still go out now. So metrics recorded by a run can wait up to the
    interval after its Runner's close. No close defers, and collection happens now:

    - the first close of the process, and one after the interval has passed;
    - ``activity`` None (a caller that asks for a collection);
    - once SIGTERM has reached process_exit.py's handler (a server shutting down: its last
      closes are the last chance; the handler itself runs a pending deferral first);
    - **orphans** measured since the last close (``Activity.alarms``: one reported at
      a run's end, or an orphan's end): they are the alarm the plugin exists for, rare
      (one per orphan, not per task), and the one signal an operator must not see a
      second late or lose to a kill within the interval. Ordinary counters and
      histograms (durations, started, active, ADK's own) coalesce.

    At exit (atexit, or SIGTERM where it would kill the process) process_exit.py drops a
    pending deferral and collects everything itself."""
    global _alarms_seen
    due = _metrics_due(activity)
    with _lock:
        if activity is None or _exit.closes_collect_now():
            return due
        if activity.alarms != _alarms_seen:
            _alarms_seen = activity.alarms
            return True
        last = _last_collection
        if last is None or time.monotonic() - last >= CLOSE_METRICS_EVERY_S:
            return due
        if not due and not _exit.has_pipelines():
            return False  # nothing to collect later either (no pipeline that counts)
    if worker.defer(last + CLOSE_METRICS_EVERY_S, _deferred_collection, due):
        return None
    return due  # no worker to defer to: collect now


def _metrics_due(activity: Activity | None) -> bool:
    """Whether a close must flush metrics: unless ``activity`` shows that nothing was
    recorded since the last close that flushed them (and no run was alive then)."""
    global _metrics_seen
    with _lock:
        seen = _metrics_seen
        due = (activity is None or seen is None or seen.runs_alive
               or seen.recorded != activity.recorded)
        if due:
            _metrics_seen = activity  # taken before its collection begins
        return due


def _metrics_failed() -> None:
    global _metrics_seen
    with _lock:
        _metrics_seen = None


def _collection_began() -> None:
    """A close's collection begins (or a deferred one): a pending deferral is
    covered by it, and the interval counts from now."""
    global _last_collection
    with _lock:
        _last_collection = time.monotonic()
    worker.drop_deferred()


def _deferred_collection(with_metrics: bool) -> bool:
    """The collection closes deferred (worker thread; or process_exit.py's SIGTERM handler,
    inline): skipped once the exit list runs, which collects everything itself."""
    if _exit.exiting():
        return True
    _collection_began()
    ok = False
    try:
        ok = _exit.flush(with_metrics=with_metrics)
    finally:
        if not ok:  # not all out: the next close flushes metrics again
            _metrics_failed()
    return ok


def _share(with_metrics: bool | None) -> concurrent.futures.Future[object] | None:
    """The worker's job for this close. One queued and not started yet is shared
    (and does the most any of its closes asks: collect, then check, then defer); one
    that runs already is not: what was recorded after it took its share would be
    left behind."""
    global _queued
    with _lock:
        job = _queued
        if job is not None and not job.started:
            job.with_metrics = _most(job.with_metrics, with_metrics)
            return job.future
    job = _CloseFlush(with_metrics)
    fut = worker.submit(job)
    if fut is None:
        return None
    job.future = fut
    with _lock:
        _queued = job
    return fut


def _most(a: bool | None, b: bool | None) -> bool | None:
    """Of two closes' ``with_metrics``: collect (True) over check (False) over defer."""
    if a is True or b is True:
        return True
    if a is False or b is False:
        return False
    return None


class _CloseFlush:
    """One close's flush, queued in the worker; closes share it until it starts."""

    def __init__(self, with_metrics: bool | None) -> None:
        self.with_metrics = with_metrics
        self.started = False
        self.future: concurrent.futures.Future[object] | None = None

    def __call__(self) -> bool:
        with _lock:
            self.started = True
            with_metrics = self.with_metrics
        if with_metrics:
            _collection_began()
        ok = False
        try:
            ok = _exit.flush(with_metrics=with_metrics)
        finally:
            if not ok and with_metrics is not None:
                _metrics_failed()  # not all out (or it raised): the next close collects
        return ok


async def _done_or_timeout(fut: concurrent.futures.Future[object], timeout: float) -> None:
    """Waits for the worker's ``fut`` at most ``timeout`` s without blocking the loop
    (what ``asyncio.wait([wrap_future(fut)], timeout=...)`` does, with fewer steps: a
    Runner per request pays it at every close)."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not waiter.done():
            waiter.set_result(None)

    def done(_: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(wake)

    timer = loop.call_later(timeout, wake)
    fut.add_done_callback(done)
    try:
        await waiter
    finally:
        timer.cancel()
