"""Process exit as one ordered list: sweep the runs in flight, then flush the providers.

The same list runs at interpreter exit (atexit) and on SIGTERM, and its flush half
runs when ADK closes a runner (``TaskTelemetryPlugin.close()``):

1. every run still in flight is swept with trigger ``shutdown`` (its tool tasks
   become orphans, reported before anything is flushed);
2. every provider that holds our telemetry is flushed, in parallel: the ones
   configure_telemetry() built are shut down, the processors it added to existing
   providers are shut down, and the global SDK providers someone else installed
   (ADK's server, with ``OTEL_EXPORTER_OTLP_*`` set) are force-flushed;
3. what has not finished within the budget is given up, with one warning.

Why SIGTERM: uvicorn (``adk web``, ``adk api_server``) re-raises SIGTERM after its
graceful shutdown, so the process dies by the signal and atexit never runs. Our
handler chains the one installed before it; only where the signal would have
killed the process (``SIG_DFL``) does it run the list first, then it restores
``SIG_DFL`` and re-raises, so the process still dies by SIGTERM. Under a server
that handles SIGTERM itself, the flush happens when its lifespan closes the
runners (plugin close), which is after the last request ended.

Why a budget: an endpoint that is down must not hold the exit. Exports to
endpoints that have not answered yet (or are failing) get ``SHORT_BUDGET_S``; only
when every endpoint has already answered does the exit wait up to the export
timeout.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

logger = logging.getLogger("adk_task_telemetry.export")

#: What an exit (or a close) waits at most while some endpoint has not proven itself.
SHORT_BUDGET_S = 0.4
#: After the budget, exporters are interrupted (retry backoff, gRPC calls) and get this.
INTERRUPT_GRACE_S = 0.15

Step = tuple[str, Callable[[], object]]


class Pipeline(Protocol):
    """What configure_telemetry() built (a TelemetryHandle), as exit sees it."""

    def _exit_steps(self, final: bool) -> list[Step]: ...

    def _owns(self, provider: object) -> bool: ...

    def _proven(self) -> bool: ...

    def _retrying(self) -> bool | None: ...

    def _exit_timeout_s(self) -> float: ...

    def _gave_up(self, signals: set[str]) -> set[str]: ...

    def _interrupt(self) -> None: ...

    def _exit_done(self) -> None: ...


_lock = threading.RLock()  # reentrant: the SIGTERM handler runs on the main thread
_pipelines: list[Pipeline] = []
_plugin_meter_provider: Any = None
_prev_sigterm: Any = None
_in_exit = False
_exited = False


def register(pipeline: Pipeline, plugin_meter_provider: Any = None) -> None:
    """Called by configure_telemetry(): flush this pipeline at exit; and, when an
    existing MeterProvider could not take our readers, the meter provider that
    plugins created from now on record into."""
    global _plugin_meter_provider
    with _lock:
        if pipeline not in _pipelines:
            _pipelines.append(pipeline)
        if plugin_meter_provider is not None:
            _plugin_meter_provider = plugin_meter_provider
    install()


def unregister(pipeline: Pipeline) -> None:
    """The pipeline was shut down explicitly: nothing left to flush."""
    global _plugin_meter_provider
    with _lock:
        if pipeline in _pipelines:
            _pipelines.remove(pipeline)
        owner = getattr(pipeline, "plugin_meter_provider", None)
        if owner is not None and owner is _plugin_meter_provider:
            _plugin_meter_provider = None


def plugin_meter_provider() -> Any:
    """The meter provider a TaskTelemetryPlugin without ``meter_provider=`` uses:
    configure_telemetry()'s own one when an existing MeterProvider could not take
    its readers, else None (the global one)."""
    return _plugin_meter_provider


def install() -> None:
    """Registers the exit list at atexit (again, so that it runs before handlers
    registered earlier, e.g. an existing provider's own shutdown) and chains a
    SIGTERM handler (main thread only: Python allows signals nowhere else)."""
    atexit.unregister(_at_exit)
    atexit.register(_at_exit)
    _install_sigterm()


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
    prev = _prev_sigterm
    if callable(prev):
        # Someone else handles SIGTERM (uvicorn: a graceful shutdown, whose
        # lifespan closes the runners and so flushes): it decides what happens.
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
    try:
        from .tracker import shutdown_all

        with contextlib.suppress(Exception):
            shutdown_all()  # 1. runs in flight: trigger `shutdown`, before any flush
        _flush(final=True)  # 2. and 3.
    finally:
        with _lock:
            _exited = True
            _in_exit = False


def flush(final: bool = False) -> bool:
    """Flushes every provider that holds our telemetry, within the budget (blocks)."""
    return _flush(final=final)


async def flush_after_close() -> None:
    """Plugin close: flush in a thread of its own, so the event loop is not blocked;
    wait at most the budget (ADK gives close() 5 s)."""
    try:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()

        def work() -> None:
            ok = False
            try:
                ok = _flush(final=False)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop is closed
                    loop.call_soon_threadsafe(_resolve, done, ok)

        threading.Thread(target=work, daemon=True, name="adk_task_telemetry-flush").start()
        await asyncio.wait([done], timeout=_budget() + INTERRUPT_GRACE_S)
    except Exception:  # never raise into ADK's close
        logger.debug("flush at plugin close failed", exc_info=True)


def _resolve(fut: asyncio.Future[bool], ok: bool) -> None:
    if not fut.done():
        fut.set_result(ok)


def _budget() -> float:
    with _lock:
        pipelines = list(_pipelines)
    if pipelines and all(p._proven() for p in pipelines) and not _foreign_providers(pipelines):
        return max(p._exit_timeout_s() for p in pipelines)
    return SHORT_BUDGET_S


def _foreign_providers(pipelines: list[Pipeline]) -> list[tuple[str, Any]]:
    """Global SDK providers that no pipeline of ours owns (ADK's, the application's)."""
    from opentelemetry import _logs, metrics, trace

    out: list[tuple[str, Any]] = []
    for signal_name, provider in (("traces", trace.get_tracer_provider()),
                                  ("metrics", metrics.get_meter_provider()),
                                  ("logs", _logs.get_logger_provider())):
        if type(provider).__name__.lstrip("_").startswith(("Proxy", "NoOp")):
            continue
        if not callable(getattr(provider, "force_flush", None)):
            continue
        if any(p._owns(provider) for p in pipelines):
            continue
        out.append((signal_name, provider))
    return out


def _flush(final: bool) -> bool:
    with _lock:
        pipelines = list(_pipelines)
    budget = _budget()
    steps: list[Step] = []
    for p in pipelines:
        with contextlib.suppress(Exception):
            steps.extend(p._exit_steps(final))
    foreign = _foreign_providers(pipelines)
    for signal_name, provider in foreign:
        ms = int(budget * 1000)
        flush_one = flush_meter_provider if signal_name == "metrics" else _force_flush
        steps.append((f"{signal_name} of the existing {type(provider).__name__}",
                      functools.partial(flush_one, provider, ms)))
    if not steps:
        return True
    threads = [(what, threading.Thread(target=_quietly, args=(step,), daemon=True,
                                       name="adk_task_telemetry-exit"))
               for what, step in steps]
    for _, t in threads:
        t.start()
    start = time.monotonic()
    deadline = start + budget
    while time.monotonic() < deadline and any(t.is_alive() for _, t in threads):
        _join(threads, min(deadline, time.monotonic() + 0.02))
        states = [p._retrying() for p in pipelines]
        if final and not foreign and True in states and False not in states:
            break  # every export left is waiting out a retry backoff: stop it now
    if final and any(t.is_alive() for _, t in threads):
        # Stop retry backoffs and gRPC calls in flight; a black-holed HTTP
        # request cannot be stopped and is left behind (a daemon thread).
        for p in pipelines:
            with contextlib.suppress(Exception):
                p._interrupt()
        _join(threads, time.monotonic() + INTERRUPT_GRACE_S)
    left = [what for what, t in threads if t.is_alive()]
    if left:
        # One warning per signal and outage: a signal named here is not named
        # again when its export finally fails (nor was one already failing).
        signals = {w.split()[0] for w in left}
        fresh: set[str] = set()
        for p in pipelines:
            with contextlib.suppress(Exception):
                fresh |= p._gave_up(signals)
        named = [w for w in left if w.split()[0] in fresh or " of the existing " in w]
        if named:
            logger.warning(
                "adk_task_telemetry: gave up waiting for telemetry export after %.1f s at %s: "
                "%s did not finish; what was not sent is dropped.",
                time.monotonic() - start, "exit" if final else "runner close",
                "; ".join(named))
    elif final:
        for p in pipelines:
            with contextlib.suppress(Exception):
                p._exit_done()
    return not left


def _force_flush(provider: Any, timeout_millis: int) -> object:
    return provider.force_flush(timeout_millis)


def flush_meter_provider(provider: Any, timeout_millis: int) -> object:
    """Pushes the metrics of each push reader now. A pull reader (Prometheus) is left
    alone: collecting it outside a scrape queues data that the next scrape renders
    twice, with labels out of place (opentelemetry-exporter-prometheus)."""
    readers = getattr(provider, "_metric_readers", None)  # SDK >= 1.44
    if readers is None:  # earlier SDKs
        readers = getattr(getattr(provider, "_sdk_config", None), "metric_readers", None)
    if readers is None:
        return provider.force_flush(timeout_millis)
    for reader in list(readers):
        if "Prometheus" not in type(reader).__name__:
            reader.force_flush(timeout_millis)
    return True


def _join(threads: list[tuple[str, threading.Thread]], deadline: float) -> None:
    for _, t in threads:
        t.join(max(0.0, deadline - time.monotonic()))


def _quietly(step: Callable[[], object]) -> None:
    try:
        step()
    except Exception:
        logger.debug("exit step failed", exc_info=True)
