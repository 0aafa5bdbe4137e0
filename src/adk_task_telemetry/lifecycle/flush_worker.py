"""The one long-lived thread that flushes off the event loop, and its one deferral.

Started by ``process_exit.install()`` (at exit no thread could be started: Python 3.12
refuses them once interpreter shutdown has begun), it runs flush jobs in order: a
``Runner.close()``'s flush (close_flush.py), the force-flush of providers of others
(process_exit.py). It also holds at most one deferred job, armed for a time: the metric
collection that closes within ``close_flush.CLOSE_METRICS_EVERY_S`` of the last one
leave for later. The deferral is held here, below both process_exit.py and close_flush.py,
because both must reach it: closes arm it, and what ends the process (SIGTERM, the
exit list) takes it or drops it. No thread is started per job.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

Job = tuple[Callable[..., object], tuple[Any, ...], "concurrent.futures.Future[object]"]
#: A deferred job: what it runs, and whether it must collect metrics.
Deferred = tuple[Callable[[bool], object], bool]


class Worker:
    """Runs jobs in order in one daemon thread, and the deferred job when its time
    comes (a job queued meanwhile runs first)."""

    def __init__(self) -> None:
        # None: wakes the thread to read the deferral's time.
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        # Reentrant: the SIGTERM handler (main thread) takes it, and may have
        # interrupted the main thread's event loop while it was held.
        self.lock = threading.RLock()
        #: The pending deferral: (when, what it runs, whether it must collect).
        self._deferred: tuple[float, Callable[[bool], object], bool] | None = None
        #: The deferred job the thread runs now.
        self._deferred_running: concurrent.futures.Future[object] | None = None

    def start(self) -> None:
        with self.lock:
            if self._thread is not None and self._thread.is_alive():
                return
            try:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="adk_task_telemetry-flush")
                self._thread.start()
            except RuntimeError:  # interpreter shutdown: nothing can be started now
                self._thread = None

    def is_current(self) -> bool:
        return self._thread is threading.current_thread()

    def _alive(self) -> bool:
        if self._thread is None or not self._thread.is_alive():
            self.start()  # after a fork, or before install(); not possible at shutdown
        return self._thread is not None

    def submit(self, fn: Callable[..., object], *args: Any
               ) -> concurrent.futures.Future[object] | None:
        """Queues ``fn(*args)``; None: no thread to run it (interpreter shutdown)."""
        if not self._alive():
            return None
        fut: concurrent.futures.Future[object] = concurrent.futures.Future()
        self._jobs.put((fn, args, fut))
        return fut

    def defer(self, at: float, run: Callable[[bool], object], with_metrics: bool) -> bool:
        """Arms ``run(with_metrics)`` for ``at`` (monotonic), or joins the pending
        deferral (the earlier time; collect if either must); False: no thread."""
        if not self._alive():
            return False
        with self.lock:
            pending = self._deferred
            if pending is None:
                self._deferred = (at, run, with_metrics)
            else:
                self._deferred = (min(pending[0], at), pending[1], pending[2] or with_metrics)
            wake = pending is None or at < pending[0]
        if wake:
            self._jobs.put(None)
        return True

    def drop_deferred(self) -> concurrent.futures.Future[object] | None:
        """Disarms the pending deferral; returns the one running now, if any."""
        with self.lock:
            self._deferred = None
            return self._deferred_running

    def take_deferred(self) -> Deferred | concurrent.futures.Future[object] | None:
        """For the caller to run now: the pending deferral (disarmed), or the running
        one's future, or None."""
        with self.lock:
            pending, self._deferred = self._deferred, None
            if pending is not None:
                return pending[1], pending[2]
            return self._deferred_running

    def _next(self) -> Job | None:
        with self.lock:
            pending = self._deferred
            wait = None if pending is None else pending[0] - time.monotonic()
            if pending is not None and wait is not None and wait <= 0:
                self._deferred = None
                fut: concurrent.futures.Future[object] = concurrent.futures.Future()
                self._deferred_running = fut
                return pending[1], (pending[2],), fut
        try:
            return self._jobs.get(timeout=wait)
        except queue.Empty:  # the deferral's time came
            return None

    def _run(self) -> None:
        while True:
            item = self._next()
            if item is None:
                continue
            fn, args, fut = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # the worker outlives every job
                fut.set_exception(exc)
            finally:
                if fut is self._deferred_running:
                    with self.lock:
                        self._deferred_running = None


#: The process's one worker.
worker = Worker()
