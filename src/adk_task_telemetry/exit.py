"""Process exit as one ordered list: sweep the runs in flight, then flush the providers.

The same list runs at interpreter exit (atexit) and on SIGTERM, and its flush half
runs when ADK closes a runner (``TaskTelemetryPlugin.close()``):

1. every exit sweep runs (the tracker registers one: runs still in flight end with
   trigger ``shutdown``, their orphans reported before anything is flushed);
2. every pipeline (what configure_telemetry() built) hands what the SDK holds to its
   senders and waits for them, in the calling thread, each signal to its own
   deadline; the global SDK providers that no pipeline owns (ADK's server's, with
   ``OTEL_EXPORTER_OTLP_*`` set) are force-flushed by this module's worker thread;
3. what has not finished within the budget is given up and counted, in one line.

No thread is started here at exit: Python 3.12 refuses new threads once interpreter
shutdown has begun. The network is only ever waited on in threads started before:
the senders (configure/export.py) and one worker of this module, started by
``install()``, which also runs the flush of every ``Runner.close()``.

Why SIGTERM: uvicorn (``adk web``, ``adk api_server``) re-raises SIGTERM after its
graceful shutdown, so the process dies by the signal and atexit never runs. Our
handler chains the one installed before it; only where the signal would have
killed the process (``SIG_DFL``) does it run the list first, then it restores
``SIG_DFL`` and re-raises, so the process still dies by SIGTERM. Under a server
that handles SIGTERM itself, the flush happens when its lifespan closes the
runners (plugin close), which is after the last request ended.

Why a close's metrics are coalesced (``CLOSE_METRICS_EVERY_S``): a collection costs
about 1.2M instructions however little changed, and an app that builds a Runner per
request closes one per request. A close within the interval of the last close's
collection leaves its metrics to one deferred collection, run by the worker when the
interval has passed; nothing else is deferred. What ends a process never waits for
it: SIGTERM reaching our handler runs it at once (and no close defers after that),
the exit list supersedes it. The window left is documented in docs/configuration.md.

Why a budget: an endpoint that is down must not hold the exit. A signal whose
endpoint has not answered yet, or is failing, gets ``SHORT_BUDGET_S`` (then its
exporter is interrupted and gets ``INTERRUPT_GRACE_S``); one whose endpoint answers
gets up to ``LIVE_BUDGET_S``.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import queue
import signal
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from opentelemetry import _logs, metrics, trace

from . import otel_compat
from . import semconv as sc

logger = logging.getLogger(sc.EXPORT_LOGGER_NAME)

#: What an exit (or a close) waits at most for a signal whose endpoint has not
#: answered yet or is failing, and for providers of others.
SHORT_BUDGET_S = 0.4
#: After the budget, exporters are interrupted (retry backoff, gRPC calls) and get this.
INTERRUPT_GRACE_S = 0.15
#: What an exit waits at most for a signal whose endpoint answers.
LIVE_BUDGET_S = 5.0
#: A Runner's close collects metrics at most once per this many seconds; a close that
#: comes sooner after the last close's collection leaves them to one deferred
#: collection at that collection's time plus this (``flush_after_close``).
CLOSE_METRICS_EVERY_S = 1.0


@dataclass(frozen=True)
class Unfinished:
    """What a flush could not finish by its deadline."""

    what: str  # "traces to http://collector:4317"
    detail: str  # "connection refused; 12 spans dropped"


class Pipeline(Protocol):
    """What configure_telemetry() built (a TelemetryHandle), as exit sees it."""

    @property
    def plugin_meter_provider(self) -> Any: ...

    def owns(self, provider: object) -> bool:
        """Whether ``provider`` is one this pipeline built (flushed by ``flush``)."""
        ...

    def flush(self, start: float, *, final: bool, metrics: bool | None = True
              ) -> list[Unfinished]:
        """Sends what is buffered, in the calling thread, each signal to its own
        deadline from ``start``; ``final``: then stops, drops and counts the rest.
        ``metrics`` False (a close with no metric recorded since the last): traces and
        logs only, unless the pipeline saw a measurement in its own MeterProvider;
        None (a close whose collection is deferred, ``CLOSE_METRICS_EVERY_S``): traces
        and logs only, whatever it saw (a deferred collection follows)."""
        ...


_lock = threading.RLock()  # reentrant: the SIGTERM handler runs on the main thread
_pipelines: list[Pipeline] = []
_sweeps: list[Callable[[], object]] = []
_plugins: weakref.WeakSet[Any] = weakref.WeakSet()
_plugin_meter_provider: Any = None
_prev_sigterm: Any = None
_in_exit = False
_exited = False
#: What the last close that flushed metrics saw (``Activity``); None: flush them next.
_metrics_seen: Activity | None = None
#: When (monotonic) the last collection for a close (or a deferred one) began.
_last_close_collection: float | None = None
#: ``Activity.alarms`` at the last close that collected because of them.
_alarms_seen = 0
#: SIGTERM reached our handler: closes collect at once from now on.
_sigterm_seen = False


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


def register(pipeline: Pipeline) -> None:
    """Called by configure_telemetry(): flush this pipeline at exit; and, when an
    existing MeterProvider could not take our readers, the meter provider that
    plugins created from now on record into."""
    global _plugin_meter_provider
    with _lock:
        if pipeline not in _pipelines:
            _pipelines.append(pipeline)
        if pipeline.plugin_meter_provider is not None:
            _plugin_meter_provider = pipeline.plugin_meter_provider
    install()


def unregister(pipeline: Pipeline) -> None:
    """The pipeline was shut down explicitly: nothing left to flush."""
    global _plugin_meter_provider
    with _lock:
        if pipeline in _pipelines:
            _pipelines.remove(pipeline)
        owner = pipeline.plugin_meter_provider
        if owner is not None and owner is _plugin_meter_provider:
            _plugin_meter_provider = None


def add_exit_sweep(sweep: Callable[[], object]) -> None:
    """Runs ``sweep`` first at exit, before anything is flushed (once per callable)."""
    with _lock:
        if sweep not in _sweeps:
            _sweeps.append(sweep)


def plugin_built(plugin: object) -> None:
    """A TaskTelemetryPlugin exists (held weakly): configure_telemetry() asks how many
    were built before it, through here rather than by importing the engine."""
    _plugins.add(plugin)


def plugins_alive() -> int:
    return len(_plugins)


def plugin_meter_provider() -> Any:
    """The meter provider a TaskTelemetryPlugin without ``meter_provider=`` uses:
    configure_telemetry()'s own one when an existing MeterProvider could not take
    its readers, else None (the global one)."""
    return _plugin_meter_provider


def install() -> None:
    """Registers the exit list at atexit (again, so that it runs before handlers
    registered earlier, e.g. an existing provider's own shutdown), chains a SIGTERM
    handler (main thread only: Python allows signals nowhere else) and starts the
    worker thread (now: at exit it could not be started)."""
    atexit.unregister(_at_exit)
    atexit.register(_at_exit)
    _install_sigterm()
    _worker.start()


def _install_sigterm() -> None:
    global _prev_sigterm
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current is _on_sigterm or current is None:  # None: installed outside Python
            return
        signal.signal(signal.SIGTERM, _on_sigterm)
        _prev_sigterm = current
    except (ValueError, OSError):  # an embedded interpreter without signals
        logger.debug("cannot install a SIGTERM handler", exc_info=True)


def _on_sigterm(signum: int, frame: Any) -> None:
    global _sigterm_seen
    _sigterm_seen = True  # no close defers its metrics from now on
    prev = _prev_sigterm
    if callable(prev):
        # Someone else handles SIGTERM (uvicorn: a graceful shutdown, whose
        # lifespan closes the runners and so flushes): it decides what happens. A
        # collection deferred by a close runs first, here: uvicorn may re-raise
        # SIGTERM with its own saved handler (not ours) as soon as it is done, and
        # a Runner per request leaves no close for its lifespan to make.
        with contextlib.suppress(Exception):
            _run_deferred_now()
        prev(signum, frame)
        return
    if prev == signal.SIG_IGN:
        return
    run_exit()
    # Then what SIGTERM would have done: the process dies by the signal.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.raise_signal(signal.SIGTERM)


def _at_exit() -> None:
    run_exit()


def run_exit() -> None:
    """The ordered list; runs once per process (atexit and SIGTERM share it)."""
    global _in_exit, _exited
    with _lock:
        if _in_exit or _exited:
            return
        _in_exit = True
        sweeps = list(_sweeps)
    # A deferred close collection is superseded by the final flush: dropped if it has
    # not begun, waited for (bounded) if it has, so that the two never collect at once.
    running = _worker.drop_deferred()
    if running is not None:
        with contextlib.suppress(Exception):
            running.result(timeout=LIVE_BUDGET_S + INTERRUPT_GRACE_S)
    try:
        for sweep in sweeps:  # 1. runs in flight: trigger `shutdown`, before any flush
            with contextlib.suppress(Exception):
                sweep()
        _flush(final=True)  # 2. and 3.
    finally:
        with _lock:
            _exited = True
            _in_exit = False


def flush(final: bool = False) -> bool:
    """Flushes every provider that holds our telemetry, within the budget (blocks)."""
    return _flush(final=final)


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


async def flush_after_close(activity: Activity | None = None) -> None:
    """Plugin close: the flush runs in this module's worker thread, so the event loop
    is not blocked; waits at most the budget (ADK gives close() 5 s).

    What it costs is what is new: traces and logs export what they hold (our
    pipeline's span buffer, the SDK's batch processors elsewhere; nothing, after a close
    with nothing since), and metrics, whose
    collection costs the same however little changed (about 1.2M instructions with
    ADK's instruments), are collected only when ``activity`` says something may have
    been recorded since the last close's collection (None: always), and then at most
    once per ``CLOSE_METRICS_EVERY_S`` (``_close_metrics`` says when a close collects
    at once and when it defers). Closes that come while a flush waits to start share
    it; one that comes while a flush runs gets the next one (what the running one
    already took is not taken again; what came after it is). No thread is started
    per close."""
    try:
        fut = _worker.close_flush(_close_metrics(activity))
        if fut is None:  # no worker (interpreter shutdown): the exit flushes everything
            _metrics_failed()
            return
        await _done_or_timeout(fut, LIVE_BUDGET_S + INTERRUPT_GRACE_S)
        if not fut.done():
            _metrics_failed()  # not out within the budget: the next close flushes again
    except Exception:  # never raise into ADK's close
        _metrics_failed()
        logger.debug("flush at plugin close failed", exc_info=True)


def _close_metrics(activity: Activity | None) -> bool | None:
    """What a close does with metrics: True collect now, False only what a pipeline
    saw recorded into its own MeterProvider, None not now (deferred).

    Coalescing: a Runner per request would otherwise pay a whole collection at every
    close. A close that comes within ``CLOSE_METRICS_EVERY_S`` of the last close's
    collection does not collect: it arms the one deferred collection in the worker
    (at that collection's time plus the interval; later closes share it) and its
    traces and logs still go out now. So metrics recorded by a run can wait up to the
    interval after its Runner's close. No close defers, and collection happens now:

    - the first close of the process, and one after the interval has passed;
    - ``activity`` None (a caller that asks for a collection);
    - once SIGTERM has reached our handler (a server shutting down: its last closes
      are the last chance; the handler itself runs a pending deferral first);
    - **orphans** measured since the last close (``Activity.alarms``: one reported at
      a run's end, or an orphan's end): they are the alarm the plugin exists for, rare
      (one per orphan, not per task), and the one signal an operator must not see a
      second late or lose to a kill within the interval. Ordinary counters and
      histograms (durations, started, active, ADK's own) coalesce.

    At exit (atexit, or SIGTERM where it would kill the process) ``run_exit`` drops a
    pending deferral and collects everything itself."""
    global _alarms_seen
    due = _metrics_due(activity)
    with _lock:
        if activity is None or _sigterm_seen or _in_exit or _exited:
            return due
        if activity.alarms != _alarms_seen:
            _alarms_seen = activity.alarms
            return True
        last = _last_close_collection
        if last is None or time.monotonic() - last >= CLOSE_METRICS_EVERY_S:
            return due
        if not due and not _pipelines:
            return False  # nothing to collect later either (no pipeline that counts)
    if _worker.defer(last + CLOSE_METRICS_EVERY_S, due):
        return None
    return due  # no worker to defer to: collect now


def _collection_began() -> None:
    """A close's collection begins (or a deferred one): a pending deferral is
    covered by it, and the interval counts from now."""
    global _last_close_collection
    with _lock:
        _last_close_collection = time.monotonic()
    _worker.drop_deferred()


def _deferred_collection(with_metrics: bool) -> bool:
    """The collection closes deferred (worker thread; or the SIGTERM handler's,
    inline): skipped once the exit list runs, which collects everything itself."""
    with _lock:
        if _in_exit or _exited:
            return True
    _collection_began()
    ok = False
    try:
        ok = _flush(False, with_metrics)
    finally:
        if not ok:  # not all out: the next close flushes metrics again
            _metrics_failed()
    return ok


def _run_deferred_now() -> None:
    """SIGTERM reached our handler: a pending deferred collection runs now, in this
    (the main) thread, bounded by the budget; one the worker runs already is waited
    for, bounded too."""
    taken = _worker.take_deferred()
    if isinstance(taken, concurrent.futures.Future):
        with contextlib.suppress(concurrent.futures.TimeoutError):
            taken.result(timeout=LIVE_BUDGET_S + INTERRUPT_GRACE_S)
    elif taken is not None:
        _deferred_collection(taken)


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


def records_nothing(provider: object) -> bool:
    """Nothing to flush there: the API's stand-in (``otel_compat``), or its no-op
    provider (public classes)."""
    return otel_compat.nobody_installed(provider) or isinstance(
        provider, (trace.NoOpTracerProvider, metrics.NoOpMeterProvider,
                   _logs.NoOpLoggerProvider))


def _foreign_providers(pipelines: list[Pipeline], with_metrics: bool = True
                       ) -> list[tuple[str, Any]]:
    """Global SDK providers that no pipeline of ours owns (ADK's, the application's)."""
    out: list[tuple[str, Any]] = []
    for signal_name, provider in (("traces", trace.get_tracer_provider()),
                                  ("metrics", metrics.get_meter_provider()),
                                  ("logs", _logs.get_logger_provider())):
        if signal_name == "metrics" and not with_metrics:
            continue
        if records_nothing(provider):
            continue
        if not callable(getattr(provider, "force_flush", None)):
            continue
        if any(p.owns(provider) for p in pipelines):
            continue
        out.append((signal_name, provider))
    return out


def _flush(final: bool, with_metrics: bool | None = True) -> bool:
    """``with_metrics``: as ``Pipeline.flush``'s ``metrics`` (None: deferred)."""
    start = time.monotonic()
    with _lock:
        pipelines = list(_pipelines)
    # Providers of others first, in the worker: they run while ours are waited for
    # (inline when this flush is the worker's own job: a runner close).
    ms = int(SHORT_BUDGET_S * 1000)
    jobs = [(f"{name} of the existing {type(p).__name__}",
             _force_flush(p, ms) if _worker.is_current() else _worker.submit(_force_flush, p, ms))
            for name, p in _foreign_providers(pipelines, bool(with_metrics) or final)]
    left: list[Unfinished] = []
    for p in pipelines:
        try:
            left.extend(p.flush(start, final=final, metrics=True if final else with_metrics))
        except Exception:
            left.append(Unfinished("a pipeline", "its flush failed"))
            logger.debug("flush failed", exc_info=True)
    for what, job in jobs:
        if not isinstance(job, concurrent.futures.Future):
            continue  # done inline, or no worker (interpreter shutdown before install())
        try:
            job.result(timeout=max(0.0, start + SHORT_BUDGET_S - time.monotonic()))
        except concurrent.futures.TimeoutError:
            left.append(Unfinished(what, "did not finish"))
        except Exception:
            logger.debug("flush of %s failed", what, exc_info=True)
    if left and final:
        logger.warning(
            "adk_task_telemetry: gave up on telemetry export after %.1f s at exit: %s.",
            time.monotonic() - start, "; ".join(f"{u.what} ({u.detail})" for u in left))
    return not left


def _force_flush(provider: Any, timeout_millis: int) -> object:
    return provider.force_flush(timeout_millis)


class _Worker:
    """One long-lived daemon thread that runs flush jobs in order, and the one
    deferred close collection when its time comes (``flush_after_close``)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[..., object], tuple[Any, ...],
                                            concurrent.futures.Future[object]] | None] = (
            queue.SimpleQueue())  # None: wakes the thread to read the deferral's time
        self._thread: threading.Thread | None = None
        self._close: _CloseFlush | None = None
        # Reentrant: the SIGTERM handler (main thread) takes it, and may have
        # interrupted the main thread's event loop inside ``close_flush``.
        self._lock = threading.RLock()
        #: The pending deferred collection: (when, whether it must collect).
        self._deferred: tuple[float, bool] | None = None
        #: The deferred collection the thread runs now.
        self._deferred_running: concurrent.futures.Future[object] | None = None

    def start(self) -> None:
        with self._lock:
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
        if not self._alive():
            return None
        fut: concurrent.futures.Future[object] = concurrent.futures.Future()
        self._jobs.put((fn, args, fut))
        return fut

    def close_flush(self, with_metrics: bool | None
                    ) -> concurrent.futures.Future[object] | None:
        """The flush of a runner close. One that has not started yet is shared (and
        does the most any of its closes asks: collect, then check, then defer); one
        that runs already is not: what was recorded after it took its share would be
        left behind."""
        with self._lock:
            job = self._close
            if job is not None and not job.started:
                job.with_metrics = _most(job.with_metrics, with_metrics)
                return job.future
        job = _CloseFlush(with_metrics)
        fut = self.submit(job)
        if fut is None:
            return None
        job.future = fut
        with self._lock:
            self._close = job
        return fut

    def defer(self, at: float, with_metrics: bool) -> bool:
        """Arms the deferred collection for ``at`` (monotonic), or joins the pending
        one; False: no thread to run it."""
        if not self._alive():
            return False
        with self._lock:
            pending = self._deferred
            if pending is None:
                self._deferred = (at, with_metrics)
            else:
                self._deferred = (min(pending[0], at), pending[1] or with_metrics)
            wake = pending is None or at < pending[0]
        if wake:
            self._jobs.put(None)
        return True

    def drop_deferred(self) -> concurrent.futures.Future[object] | None:
        """Disarms the pending deferral; returns the one running now, if any."""
        with self._lock:
            self._deferred = None
            return self._deferred_running

    def take_deferred(self) -> bool | concurrent.futures.Future[object] | None:
        """For the caller to run now: the pending deferral's ``with_metrics``
        (disarmed), or the running one's future, or None."""
        with self._lock:
            pending, self._deferred = self._deferred, None
            if pending is not None:
                return pending[1]
            return self._deferred_running

    def _next(self) -> tuple[Callable[..., object], tuple[Any, ...],
                             concurrent.futures.Future[object]] | None:
        with self._lock:
            pending = self._deferred
            wait = None if pending is None else pending[0] - time.monotonic()
            if pending is not None and wait is not None and wait <= 0:
                self._deferred = None
                fut: concurrent.futures.Future[object] = concurrent.futures.Future()
                self._deferred_running = fut
                return _deferred_collection, (pending[1],), fut
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
                    with self._lock:
                        self._deferred_running = None


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
        with _worker._lock:
            self.started = True
            with_metrics = self.with_metrics
        if with_metrics:
            _collection_began()
        ok = False
        try:
            ok = _flush(False, with_metrics)
        finally:
            if not ok and with_metrics is not None:
                _metrics_failed()  # not all out (or it raised): the next close collects
        return ok


_worker = _Worker()
