"""Process exit as one ordered list: sweep the runs in flight, then flush the providers.

The same list runs at interpreter exit (atexit) and on SIGTERM, and its flush half
runs when ADK closes a runner (``TaskTelemetryPlugin.close()``):

1. every exit sweep runs (the tracker registers one: runs still in flight end with
   trigger ``shutdown``, their orphans reported before anything is flushed);
2. every pipeline (what configure_telemetry() built) hands what the SDK holds to its
   senders and waits for them, in the calling thread, each signal to its own
   deadline; the global SDK providers that no pipeline owns (ADK's server's, with
   ``OTEL_EXPORTER_OTLP_*`` set) are force-flushed by flush_worker.py's thread;
3. what has not finished within the budget is given up and counted, in one line.

The exit does not count on starting a thread: Python 3.12 refuses new threads once
interpreter shutdown has begun. The network is waited on in threads started before:
the senders (configure/export.py) and flush_worker.py's one thread, started by
``install()``, which also runs the flush of every ``Runner.close()`` (close_flush.py).
Where that thread is not running when the list runs (a forked child of a process that
installed it), handing it the providers of others tries to start it again: that works
under SIGTERM and on Python before 3.12, and at a 3.12 interpreter shutdown it is
refused, and those providers are then not flushed (ours still are, in the calling
thread).

Why SIGTERM: uvicorn (``adk web``, ``adk api_server``) re-raises SIGTERM after its
graceful shutdown, so the process dies by the signal and atexit never runs. Our
handler chains the one installed before it; only where the signal would have
killed the process (``SIG_DFL``) does it run the list first, then it restores
``SIG_DFL`` and re-raises, so the process still dies by SIGTERM. Under a server
that handles SIGTERM itself, the flush happens when its lifespan closes the
runners (plugin close), which is after the last request ended.

A close's metrics may be coalesced (close_flush.py): a deferred collection waits in
the worker (flush_worker.py), and what ends the process never waits for it: SIGTERM
reaching our handler runs it at once, and the exit list drops it and collects
everything itself.

Why a budget: an endpoint that is down must not hold the exit. A signal whose
endpoint has not answered yet, or is failing, gets ``SHORT_BUDGET_S`` (then its
exporter is interrupted and gets ``INTERRUPT_GRACE_S``); one whose endpoint answers
gets up to ``LIVE_BUDGET_S``.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import logging
import signal
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from opentelemetry import _logs, metrics, trace

from .. import otel_compat
from .. import semconv as sc
from .flush_worker import worker

logger = logging.getLogger(sc.EXPORT_LOGGER_NAME)

#: What an exit (or a close) waits at most for a signal whose endpoint has not
#: answered yet or is failing, and for providers of others.
SHORT_BUDGET_S = 0.4
#: After the budget, exporters are interrupted (retry backoff, gRPC calls) and get this.
INTERRUPT_GRACE_S = 0.15
#: What an exit waits at most for a signal whose endpoint answers.
LIVE_BUDGET_S = 5.0


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
        None (a close whose collection is deferred, close_flush.py): traces and logs
        only, whatever it saw (a deferred collection follows)."""
        ...


_lock = threading.RLock()  # reentrant: the SIGTERM handler runs on the main thread
_pipelines: list[Pipeline] = []
_sweeps: list[Callable[[], object]] = []
_plugins: weakref.WeakSet[Any] = weakref.WeakSet()
_plugin_meter_provider: Any = None
_prev_sigterm: Any = None
_in_exit = False
_exited = False
#: SIGTERM reached our handler: closes collect at once from now on.
_sigterm_seen = False


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
    worker.start()


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
    running = worker.drop_deferred()
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


def flush(final: bool = False, with_metrics: bool | None = True) -> bool:
    """Flushes every provider that holds our telemetry, within the budget (blocks).
    ``with_metrics``: as ``Pipeline.flush``'s ``metrics`` (a close's, close_flush.py)."""
    return _flush(final, with_metrics)


def closes_collect_now() -> bool:
    """SIGTERM reached our handler, or the exit list runs or ran: a close collects
    its metrics at once (close_flush.py defers none from now on)."""
    return _sigterm_seen or _in_exit or _exited


def exiting() -> bool:
    """The exit list runs or ran: it collects everything itself."""
    return _in_exit or _exited


def has_pipelines() -> bool:
    return bool(_pipelines)


def _run_deferred_now() -> None:
    """SIGTERM reached our handler: a pending deferred collection runs now, in this
    (the main) thread, bounded by the budget; one the worker runs already is waited
    for, bounded too."""
    taken = worker.take_deferred()
    if isinstance(taken, concurrent.futures.Future):
        with contextlib.suppress(concurrent.futures.TimeoutError):
            taken.result(timeout=LIVE_BUDGET_S + INTERRUPT_GRACE_S)
    elif taken is not None:
        run, with_metrics = taken
        run(with_metrics)


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
             _force_flush(p, ms) if worker.is_current() else worker.submit(_force_flush, p, ms))
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
