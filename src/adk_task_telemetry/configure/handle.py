"""TelemetryHandle: what configure_telemetry() set up; flush it, shut it down, ask how
its export is doing. Its ``ExitSide`` is the pipeline that process_exit.py flushes
(``process_exit.Pipeline``; ``flush_at_exit`` registers it), so that the exit protocol stays
off the public handle.

A flush never starts a thread and never calls an exporter itself: it hands what the
SDK holds to the signals' senders (their threads were started with the setup) and
waits for them, each signal to its own deadline. So it works at interpreter exit on
every Python (3.12 refuses new threads there) and a dead endpoint costs at most the
short budget.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from .. import semconv as sc
from ..lifecycle import process_exit as _exit
from . import bridge
from .export import SignalStatus, count
from .providers import Setup
from .settings import OtlpTarget

logger = logging.getLogger(sc.EXPORT_LOGGER_NAME)

#: What shutdown() (and so interpreter exit) waits at most for an endpoint that answers.
EXIT_TIMEOUT_MS = int(_exit.LIVE_BUDGET_S * 1000)


class TelemetryHandle:
    """What configure_telemetry() set up: flush it, shut it down (both idempotent).

    ``tracer_provider`` and ``logger_provider`` are the providers configure_telemetry()
    built: None for a signal whose provider the application or ADK had already
    installed (our processors were added to it), or when the SDK is disabled.
    ``meter_provider`` is the MeterProvider configure_telemetry() built: the global one
    it installed where none was installed before (action ``installed``, with no reader
    when no metrics export was asked), or, beside an existing one that cannot take
    readers, a provider of ours that the plugin records into (``own_meter_provider``:
    then ``plugin_meter_provider`` is the same object). None where it built none: the
    existing provider exports metrics itself (``already_exported``), nothing of ours was
    asked of metrics (``off``), or the SDK is disabled. ``actions`` says per signal what
    was done (``installed``, ``added_to_existing``, ``already_exported``,
    ``own_meter_provider``, ``not_possible``, ``off``).
    """

    def __init__(self, setup: Setup | None = None) -> None:
        self.enabled = setup is not None
        self._setup = setup
        # What configure_telemetry() registers with process_exit.py (``flush_at_exit``).
        self._exit_side = ExitSide(self)
        self.tracer_provider: TracerProvider | None = setup.tracer_provider if setup else None
        self.meter_provider: MeterProvider | None = setup.meter_provider if setup else None
        self.logger_provider: LoggerProvider | None = setup.logger_provider if setup else None
        #: ``meter_provider`` again when it is not the global one (an existing
        #: MeterProvider cannot take readers, so the plugin records into ours); else None.
        self.plugin_meter_provider: MeterProvider | None = (
            setup.plugin_meter_provider if setup else None)
        self.resource: Resource | None = setup.resource if setup else None
        #: signal -> where OTLP sends it (empty when OTLP is off).
        self.otlp_targets: dict[str, OtlpTarget] = dict(setup.targets) if setup else {}
        #: signal -> what configure_telemetry() did for it.
        self.actions: dict[str, str] = dict(setup.actions) if setup else {}
        prom = setup.prometheus if setup else None
        #: The port the Prometheus endpoint listens on (the real one when 0 was asked).
        self.prometheus_port: int | None = prom.port if prom else None
        self.prometheus_host: str | None = prom.host if prom else None
        self._shut = False
        self._lock = threading.Lock()
        self._drops_collected = 0  # export drops counted at the last metrics hand-over
        self._recorded_collected = 0  # measurements counted then (providers.RecordedSince)

    @property
    def shut(self) -> bool:
        """shutdown() ran (or the exit did): the setup is final for this process."""
        return self._shut

    @property
    def export_failing(self) -> bool:
        """Whether an OTLP export failed last time it was tried."""
        return any(s.failing for s in self._senders())

    def export_status(self) -> dict[str, SignalStatus]:
        """Per signal: whether its endpoint fails, what is buffered, sent and dropped."""
        return {s.signal: s.status() for s in self._senders()}

    def force_flush(self, timeout_millis: int = 10_000) -> bool:
        """Exports what is buffered now. Blocks: call it off the event loop if it matters.
        False when an export is failing or did not finish in time."""
        if self._setup is None:
            return True
        start = time.monotonic()
        try:
            self._hand_over(final=False, timeout_millis=timeout_millis)
        except Exception:
            logger.debug("force_flush failed", exc_info=True)
            return False
        deadline = start + timeout_millis / 1000.0
        ok = all([self._wait(s, deadline) for s in self._senders()])
        return ok and not self.export_failing

    def shutdown(self, timeout_millis: int = EXIT_TIMEOUT_MS) -> None:
        """Flushes and stops everything this handle installed, waiting at most
        ``timeout_millis`` for an endpoint that answers (one that does not gets
        less: a black-holed endpoint must not hold the exit). Final for the
        process: OTel lets a global provider be set only once."""
        left = self._finish(time.monotonic(), timeout_millis / 1000.0, stop_server=True)
        _exit.unregister(self._exit_side)
        if left:
            logger.warning("adk_task_telemetry: gave up on telemetry export at shutdown: "
                           "%s.", "; ".join(f"{u.what} ({u.detail})" for u in left))

    # --- what process_exit.py calls (through ExitSide, not part of the public handle) ------

    def _owns(self, provider: object) -> bool:
        return self._setup is not None and any(provider is p for p in self._setup.owned())

    def _flush_for_exit(self, start: float, *, final: bool, metrics: bool | None = True
                        ) -> list[_exit.Unfinished]:
        if final:
            return self._finish(start, _exit.LIVE_BUDGET_S, stop_server=False)
        if self._setup is None or self._shut:
            return []
        # Anything recorded into our MeterProvider since its last collection for a
        # close (the application's own measurements too; a drop is counted in one of
        # ours) needs a collection, whatever the plugins saw.
        recorded = self._setup.recorded
        count = recorded.count if recorded is not None else 0
        drops = sum(sum(s.buffer.dropped.values()) for s in self._senders())
        if metrics is None:  # a close's collection deferred (close_flush.CLOSE_METRICS_EVERY_S):
            metrics = False  # what was seen stays counted as new for the deferred one
        elif drops != self._drops_collected or count != self._recorded_collected:
            metrics = True
        if metrics:  # read before collecting: what comes during it is seen next time
            self._drops_collected, self._recorded_collected = drops, count
        self._hand_over(final=False, timeout_millis=EXIT_TIMEOUT_MS, metrics=metrics)
        left = []
        for s in self._senders():
            # A signal known dead is not waited for: the next close would wait again.
            if not s.failing and not self._wait(s, start + self._budget(s, _exit.LIVE_BUDGET_S)):
                left.append(_exit.Unfinished(f"{s.signal} to {s.target.endpoint}",
                                             "did not finish"))
        return left

    # --- the parts ---------------------------------------------------------------

    def _senders(self) -> list[Any]:
        return list(self._setup.senders.values()) if self._setup else []

    @staticmethod
    def _budget(sender: Any, live_s: float) -> float:
        return live_s if sender.proven else _exit.SHORT_BUDGET_S

    @staticmethod
    def _wait(sender: Any, deadline: float) -> bool:
        """Sends now and waits; stops waiting at a failure of this flush's attempts."""
        return bool(sender.wait_sent(deadline, give_up_on_failure_after=sender.kick()))

    def _hand_over(self, *, final: bool, timeout_millis: int, metrics: bool = True) -> None:
        """Moves what the SDK's processors and readers hold into our senders (our
        exporters only buffer: this does not wait on the network). ``metrics`` False:
        the readers are not collected (nothing was recorded since they last were)."""
        setup = self._setup
        assert setup is not None
        if final:
            for provider in setup.owned():
                _quietly(provider.shutdown)
            for _, proc in setup.attached:
                _quietly(proc.shutdown)
            return
        for provider in (setup.tracer_provider, setup.logger_provider):
            if provider is not None:
                provider.force_flush(timeout_millis)
        if metrics and setup.push_readers:  # a pull reader is collected by its scrape
            if setup.recorded is not None:  # this collection's own callbacks: not news
                setup.recorded.collector = threading.get_ident()
            try:
                for reader in setup.push_readers:
                    reader.force_flush(timeout_millis)
            finally:
                if setup.recorded is not None:
                    setup.recorded.collector = -1
        for _, proc in setup.attached:
            proc.force_flush(timeout_millis)

    def _finish(self, start: float, live_s: float, *, stop_server: bool
                ) -> list[_exit.Unfinished]:
        """The final flush: hand over, wait, then stop; what is left is dropped and
        counted, and returned for the caller's one line."""
        setup = self._setup
        with self._lock:
            if setup is None or self._shut:
                self._shut = True
                return []
            self._shut = True
        senders = self._senders()
        for s in senders:
            s.closing = True  # their failures are told in our one line
        # Unreferenced, the SDK's handler leaves logging's list of handlers, whose
        # flush at exit would start a thread (SDK >= 1.39): 3.12 refuses that.
        bridge.unbridge(setup.log_handler)
        setup.log_handler = None
        self._hand_over(final=True, timeout_millis=EXIT_TIMEOUT_MS)
        done = {s.signal: self._wait(s, start + self._budget(s, live_s)) for s in senders}
        for s in senders:
            s.stop()  # interrupts retry backoffs and gRPC calls of the ones not done
        grace = time.monotonic() + _exit.INTERRUPT_GRACE_S
        left = []
        for s in senders:
            if done[s.signal]:
                continue
            s.wait_idle(grace)
            dropped = s.give_up()
            if dropped:
                cause = s.last_cause if s.failing else "no answer before the exit stopped waiting"
                left.append(_exit.Unfinished(f"{s.signal} to {s.target.endpoint}",
                                             f"{cause}: {count(dropped, s.signal)} dropped"))
        if setup.quiet is not None and all(s.buffer.in_flight() == 0 for s in senders):
            setup.quiet.uninstall()  # an export still in flight stays quiet
        if stop_server and setup.prometheus is not None:
            _quietly(setup.prometheus.stop)
        return left


class ExitSide:
    """A handle as process_exit.py sees it (``process_exit.Pipeline``): the exit protocol's methods
    stay off the public TelemetryHandle."""

    def __init__(self, handle: TelemetryHandle) -> None:
        self._handle = handle

    @property
    def plugin_meter_provider(self) -> Any:
        return self._handle.plugin_meter_provider

    def owns(self, provider: object) -> bool:
        return self._handle._owns(provider)

    def flush(self, start: float, *, final: bool, metrics: bool | None = True
              ) -> list[_exit.Unfinished]:
        return self._handle._flush_for_exit(start, final=final, metrics=metrics)


def flush_at_exit(handle: TelemetryHandle) -> None:
    """Puts ``handle`` on process_exit.py's list (its ``ExitSide``), for configure_telemetry():
    a detached handle (benchmarks) is flushed only when its owner says so.
    ``shutdown()`` takes it off again."""
    _exit.register(handle._exit_side)


def _quietly(step: Any) -> None:
    try:
        step()
    except Exception:
        logger.debug("telemetry shutdown step failed", exc_info=True)
