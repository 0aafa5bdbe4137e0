"""configure_telemetry(): OTel providers and exporters for the plugin and ADK's own spans.

One call installs a TracerProvider, a MeterProvider and a LoggerProvider (the orphan
WARNING of the ``adk_task_telemetry`` logger becomes a log record linked to its
trace), exporting over OTLP (gRPC or HTTP/protobuf), to a Prometheus scrape
endpoint and/or the console. Settings come from arguments first, then the standard
OTEL_* variables (docs/configuration.md). An exporter that is down never reaches
the agent: spans, logs and metrics are handed to background threads through
bounded queues, exports time out quickly, and an outage is logged once.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import _logs, metrics, trace
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, ConsoleLogExporter
from opentelemetry.sdk.metrics import (
    AlwaysOffExemplarFilter,
    AlwaysOnExemplarFilter,
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    TraceBasedExemplarFilter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    ConsoleMetricExporter,
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)

from . import _env
from . import exit as _exit
from . import semconv as sc
from .spans import OpenSpanProcessor

try:  # the base class was renamed in SDK 1.39; the old name warns
    from opentelemetry.sdk._logs.export import LogRecordExporter as _LogExporterBase
except ImportError:  # pragma: no cover - SDK < 1.39
    from opentelemetry.sdk._logs.export import (  # type: ignore[assignment]
        LogExporter as _LogExporterBase,
    )

logger = logging.getLogger("adk_task_telemetry.export")

__all__ = ["TelemetryHandle", "configure_telemetry"]

# Loggers of the OTLP exporters: they log every failed batch. While configured we
# keep their text for our one warning per outage instead of letting them repeat.
_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http._log_exporter",
)
# Loggers of the SDK's batch processors: "Queue full, dropping Span." on every
# dropped item, on the thread that ends the span (the event loop).
_QUEUE_LOGGERS = (
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.sdk.trace.export",
    "opentelemetry.sdk._logs._internal.export",
)
# The most shutdown() (and so interpreter exit) waits for exports in flight.
_EXIT_TIMEOUT_MS = 5_000

_lock = threading.Lock()
_active: TelemetryHandle | None = None
_told_existing = False


class _QuietExporterLogs(logging.Filter):
    """Keeps the OTLP exporters' per-batch failure messages for one warning of ours.

    Kept per thread: an export runs in the thread that calls it, so the message a
    failed export left is the cause of that signal's failure, not of another's.
    """

    def __init__(self) -> None:
        super().__init__()
        self.first: dict[int, str] = {}  # thread -> first message since its last result

    def filter(self, record: logging.LogRecord) -> bool:
        key = threading.get_ident()
        if key not in self.first and not str(record.msg).startswith(_NOT_A_CAUSE):
            if len(self.first) > 64:  # threads that never took theirs
                self.first.clear()
            try:
                self.first[key] = record.getMessage()
            except Exception:  # a malformed record must not break logging
                self.first[key] = str(record.msg)
        return False

    def take(self) -> str:
        return self.first.pop(threading.get_ident(), "")


# Exporter messages that follow our own stopping of an export, not its cause.
_NOT_A_CAUSE = ("Shutdown in progress", "Exporter already shutdown")


def _probe(where: str) -> str | None:
    """Why an endpoint cannot be reached, from one TCP connect (first failure only)."""
    import socket
    import urllib.parse

    url = urllib.parse.urlparse(where.split()[0])
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
        with socket.create_connection((url.hostname or "localhost", port), timeout=0.3):
            return None
    except ConnectionRefusedError:
        return "connection refused"
    except socket.gaierror:
        return "the host name does not resolve"
    except (OSError, ValueError):
        return None


def _cause(text: str, timeout: float) -> str:
    """A short, complete cause from an exporter's message (which may be a page long)."""
    low = text.lower()
    if "connection refused" in low or "connectionrefused" in low:
        return "connection refused"
    if "name or service not known" in low or "nodename nor servname" in low:
        return "the host name does not resolve"
    if "deadline_exceeded" in low or "timed out" in low or "timeout" in low:
        return f"no answer within {timeout:g} s"
    m = re.search(r"code: (\d{3}), reason: ([^,.]{1,60})", text)
    if m:
        return f"HTTP {m.group(1)} {m.group(2).strip()}"
    m = re.search(r"StatusCode\.([A-Z_]+)", text)
    if m:
        return m.group(1)
    m = re.search(r"Transient error (.{1,60}?) encountered", text)
    if m:
        return m.group(1)
    first = text.split(". ")[0].strip()
    if len(first) > 160:
        first = first[:160].rsplit(" ", 1)[0] + " …"
    return first or "export failed"


class _Outage(logging.Filter):
    """Shared by a handle's signals, so that an outage is logged once, not per signal.

    Also a filter on the SDK's queue loggers: a full queue while an export hangs or
    fails is part of the outage (reported once), not a message per dropped span.
    """

    def __init__(self, quiet: _QuietExporterLogs) -> None:
        super().__init__()
        self.quiet = quiet
        self.failing: set[str] = set()
        self.in_flight = 0
        self.queue_full: str | None = None  # seen while an export was in flight
        self.lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if "queue full" not in str(record.msg).lower():
            return True
        with self.lock:
            if self.failing:
                return False
            if self.in_flight:
                # Decided when that export ends: an outage, or a slow endpoint.
                self.queue_full = self.queue_full or record.getMessage()
                return False
        return True


class _ExportHealth:
    """One signal's export state, and a breaker.

    While the endpoint fails, a batch is tried at most once per ``cooldown``
    seconds and dropped otherwise, so a dead collector costs neither the export
    threads nor the exit more than one timeout at a time. Each signal says once
    when its export starts failing and once when it works again.
    """

    def __init__(self, signal: str, where: str, cooldown: float, outage: _Outage) -> None:
        self.signal = signal
        self.where = where
        self.cooldown = cooldown
        self.outage = outage
        self.failing = False
        self.succeeded = False  # the endpoint answered at least once
        self.closing = False
        self.interrupted = False  # the exit gave up waiting and stopped the exporter
        self.quiet = False  # the exit already named this signal: say nothing more
        self.told = False  # a flush that gave up already named this signal's failure
        self.failures = 0
        self.dropped_batches = 0
        self.last_attempt = 0.0
        self.busy_since: float | None = None  # an export of this signal is in flight
        self.thread = 0  # the thread of the export in flight

    def retrying(self) -> bool:
        """An export is in flight and its exporter already logged a failure: it is
        waiting out a retry backoff (a refused port), not waiting for an answer."""
        return self.busy_since is not None and self.thread in self.outage.quiet.first

    def stuck(self, longer_than: float) -> bool:
        """Known dead, or an export has been in flight for longer than ``longer_than``."""
        since = self.busy_since
        return self.failing or (since is not None and time.monotonic() - since > longer_than)

    def should_try(self) -> bool:
        with self.outage.lock:
            if self.interrupted or (self.failing and (
                    self.closing or time.monotonic() - self.last_attempt < self.cooldown)):
                self.dropped_batches += 1
                return False
            self.last_attempt = self.busy_since = time.monotonic()
            self.thread = threading.get_ident()
            self.outage.in_flight += 1
            return True

    def record(self, ok: bool, detail: str = "") -> None:
        outage = self.outage
        with outage.lock:
            outage.in_flight = max(0, outage.in_flight - 1)
            self.busy_since = None
            queue_full, outage.queue_full = outage.queue_full, None
            was_failing = self.failing
            self.failing = not ok
            if ok:
                self.succeeded = True
                outage.failing.discard(self.signal)
            else:
                self.failures += 1
                outage.failing.add(self.signal)
            text = outage.quiet.take()
            quiet = self.quiet
            told, self.told = self.told, False
        if quiet or (told and not ok):
            return
        if was_failing and ok:
            logger.warning("adk_task_telemetry: export of %s works again (%s)",
                           self.signal, self.where)
        elif not was_failing and not ok:
            cause = _cause(detail or text, self.cooldown) if (detail or text) else ""
            if not cause or "max retries or shutdown" in (detail or text):
                # The HTTP exporter gives up before logging why: ask the socket.
                cause = (_probe(self.where)
                         or f"no successful answer within {self.cooldown:g} s")
            elif cause == "UNAVAILABLE":  # older gRPC exporters say no more than that
                cause = _probe(self.where) or cause
            if self.interrupted:
                logger.warning(
                    "adk_task_telemetry: cannot export %s to %s at exit (%s); what was not "
                    "sent is dropped.", self.signal, self.where,
                    cause or "no answer before the exit stopped waiting")
                return
            logger.warning(
                "adk_task_telemetry: cannot export %s to %s (%s). They are dropped while the "
                "endpoint stays unreachable (bounded queues); the agent is not affected. "
                "Retrying quietly; recovery will be logged.",
                self.signal, self.where, cause or "export failed")
        elif ok and queue_full:
            logger.warning("adk_task_telemetry: %s: export to %s is slower than the agent "
                           "produces telemetry", queue_full, self.where)


def _ok(result: Any) -> bool:
    return getattr(result, "name", "") == "SUCCESS"


def _guarded_call(health: _ExportHealth, call: Callable[[], Any], failure: Any) -> Any:
    if not health.should_try():
        return failure
    try:
        result = call()
    except Exception as exc:  # an exporter must never raise into the SDK's threads
        health.record(False, f"{type(exc).__name__}: {exc}")
        return failure
    health.record(_ok(result))
    return result


class _GuardedSpanExporter(SpanExporter):
    def __init__(self, inner: SpanExporter, health: _ExportHealth) -> None:
        self._inner = inner
        self.health = health

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result: SpanExportResult = _guarded_call(
            self.health, lambda: self._inner.export(spans), SpanExportResult.FAILURE)
        return result

    def shutdown(self) -> None:
        try:
            self._inner.shutdown()
        except Exception:
            logger.debug("span exporter shutdown failed", exc_info=True)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self._inner.force_flush(timeout_millis))


class _GuardedMetricExporter(MetricExporter):
    def __init__(self, inner: MetricExporter, health: _ExportHealth) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner = inner
        self.health = health

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        result: MetricExportResult = _guarded_call(
            self.health, lambda: self._inner.export(metrics_data, timeout_millis=timeout_millis),
            MetricExportResult.FAILURE)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return bool(self._inner.force_flush(timeout_millis=timeout_millis))

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        try:
            self._inner.shutdown(timeout_millis=timeout_millis)
        except Exception:
            logger.debug("metric exporter shutdown failed", exc_info=True)


class _GuardedLogExporter(_LogExporterBase):
    def __init__(self, inner: Any, health: _ExportHealth) -> None:
        self._inner = inner
        self.health = health

    def export(self, batch: Any) -> Any:
        failure = _failure_like(self._inner)
        return _guarded_call(self.health, lambda: self._inner.export(batch), failure)

    def shutdown(self) -> None:
        try:
            self._inner.shutdown()
        except Exception:
            logger.debug("log exporter shutdown failed", exc_info=True)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self._inner.force_flush(timeout_millis))


def _failure_like(_exporter: Any) -> Any:
    """The log-export FAILURE value of this SDK version (the enum was renamed)."""
    from opentelemetry.sdk._logs import export as log_export

    enum = getattr(log_export, "LogRecordExportResult", None) or log_export.LogExportResult
    return enum.FAILURE


class TelemetryHandle:
    """What configure_telemetry() set up: flush it, shut it down (both idempotent).

    The ``*_provider`` attributes are the providers configure_telemetry() built:
    None for a signal whose provider the application or ADK had already installed,
    or when the SDK is disabled. ``actions`` says per signal what was done
    (``installed``, ``added_to_existing``, ``already_exported``,
    ``own_meter_provider``, ``not_possible``, ``off``).
    """

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.tracer_provider: TracerProvider | None = None
        self.meter_provider: MeterProvider | None = None
        self.logger_provider: LoggerProvider | None = None
        #: A MeterProvider of ours that is not the global one: an existing
        #: MeterProvider cannot take readers, so the plugin records into this one.
        self.plugin_meter_provider: MeterProvider | None = None
        self.resource: Resource | None = None
        #: signal -> where OTLP sends it (empty when OTLP is off).
        self.otlp_targets: dict[str, _env.OtlpTarget] = {}
        #: signal -> what configure_telemetry() did for it.
        self.actions: dict[str, str] = {}
        #: The port the Prometheus endpoint listens on (the real one when 0 was asked).
        self.prometheus_port: int | None = None
        self.prometheus_host: str | None = None
        self._health: list[_ExportHealth] = []
        self._guarded: list[Any] = []
        #: (signal, processor) we added to a provider someone else installed.
        self._attached: list[tuple[str, Any]] = []
        self._log_handler: logging.Handler | None = None
        self._quiet: _QuietExporterLogs | None = None
        self._outage: _Outage | None = None
        self._prom_server: Any = None
        self._prom_reader: MetricReader | None = None
        self._shut = False
        self._shutdown_lock = threading.Lock()

    def _own_providers(self) -> list[Any]:
        return [p for p in (self.tracer_provider, self.meter_provider, self.logger_provider)
                if p is not None]

    def force_flush(self, timeout_millis: int = 10_000) -> bool:
        """Exports what is buffered now. Blocks: call it off the event loop if it matters."""
        ok = True
        try:
            for provider in self._own_providers():
                if provider is self.meter_provider:  # never collect Prometheus off a scrape
                    ok = bool(_exit.flush_meter_provider(provider, timeout_millis)) and ok
                else:
                    ok = bool(provider.force_flush(timeout_millis)) and ok
            for _, proc in self._attached:
                ok = bool(proc.force_flush(timeout_millis)) and ok
        except Exception:
            logger.debug("force_flush failed", exc_info=True)
            return False
        return ok and not any(h.failing for h in self._health)

    def shutdown(self, timeout_millis: int = _EXIT_TIMEOUT_MS) -> None:
        """Flushes and stops everything this handle installed, waiting at most
        ``timeout_millis`` for exports in flight (a black-holed endpoint must not
        hold the exit). Final for the process: OTel lets a global provider be set
        only once."""
        if self._shut:
            return
        steps = self._exit_steps(final=True)
        threads = [threading.Thread(target=_quietly, args=(step,), daemon=True,
                                    name="adk_task_telemetry-shutdown") for _, step in steps]
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout_millis / 1000.0
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        _exit.unregister(self)
        if any(t.is_alive() for t in threads):
            logger.warning("adk_task_telemetry: gave up waiting for telemetry export after "
                           "%.1f s at shutdown: %s did not finish; what was not sent is "
                           "dropped.", timeout_millis / 1000.0,
                           "; ".join(w for (w, _), t in zip(steps, threads, strict=True)
                                     if t.is_alive()))
            for h in self._health:
                h.quiet = True
            return  # exporters still running: keep their messages quiet
        self._exit_done()

    # --- what exit.py needs (see exit.Pipeline) ---------------------------------

    def _exit_steps(self, final: bool) -> list[tuple[str, Callable[[], object]]]:
        """Flush (or, when final, shut down) each provider and processor of ours."""
        if final:
            with self._shutdown_lock:
                if self._shut:
                    return []
                self._shut = True
            for h in self._health:  # an endpoint known dead gets no more attempts
                h.closing = True
            if self._log_handler is not None:
                logging.getLogger(sc.LOGGER_NAME).removeHandler(self._log_handler)
        steps: list[tuple[str, Callable[[], object]]] = []
        ms = _EXIT_TIMEOUT_MS
        # At a runner close, a signal whose endpoint is known dead (or whose last
        # export is stuck) is not waited for: the next close would wait again.
        stuck = set() if final else {h.signal for h in self._health
                                     if h.stuck(_exit.SHORT_BUDGET_S)}

        def where(signal: str) -> str:
            t = self.otlp_targets.get(signal)
            return f"{signal} to {t.endpoint}" if t is not None else signal

        if self.tracer_provider is not None and "traces" not in stuck:
            tp = self.tracer_provider
            steps.append((where("traces"), tp.shutdown if final else lambda: tp.force_flush(ms)))
        if self.logger_provider is not None and "logs" not in stuck:
            lp = self.logger_provider
            steps.append((where("logs"), lp.shutdown if final else lambda: lp.force_flush(ms)))
        if self.meter_provider is not None and "metrics" not in stuck:
            mp = self.meter_provider
            steps.append((where("metrics"), (lambda: mp.shutdown(ms)) if final
                          else (lambda: _exit.flush_meter_provider(mp, ms))))
        for signal, proc in self._attached:
            if signal in stuck:
                continue
            steps.append((where(signal), proc.shutdown if final
                          else functools.partial(proc.force_flush, ms)))
        if final and self._prom_server is not None:
            steps.append(("the Prometheus endpoint", self._stop_prometheus))
        return steps

    def _owns(self, provider: object) -> bool:
        return any(provider is p for p in self._own_providers())

    def _proven(self) -> bool:
        return all(h.succeeded and not h.failing for h in self._health)

    def _retrying(self) -> bool | None:
        """None: no export in flight; True: each one in flight waits out a backoff."""
        busy = [h for h in self._health if h.busy_since is not None]
        return all(h.retrying() for h in busy) if busy else None

    def _gave_up(self, signals: set[str]) -> set[str]:
        """A flush gave up on ``signals``: those whose failure was not told yet are
        told now (the caller's warning names them), not again when the export ends."""
        fresh = set()
        for h in self._health:
            if h.signal in signals and not h.failing and not h.told:
                h.told = True
                fresh.add(h.signal)
        return fresh

    def _exit_timeout_s(self) -> float:
        return _EXIT_TIMEOUT_MS / 1000.0

    def _interrupt(self) -> None:
        """Stops the exporters still exporting: retry backoffs end, gRPC calls are
        cancelled. Each in a thread of its own: a stuck one must not stop the rest."""
        for h in self._health:
            h.interrupted = True
        for exporter in self._guarded:
            threading.Thread(target=_quietly, args=(exporter._inner.shutdown,), daemon=True,
                             name="adk_task_telemetry-interrupt").start()

    def _exit_done(self) -> None:
        if self._quiet is not None:
            for name in _EXPORTER_LOGGERS:
                logging.getLogger(name).removeFilter(self._quiet)
        if self._outage is not None:
            for name in _QUEUE_LOGGERS:
                logging.getLogger(name).removeFilter(self._outage)

    @property
    def export_failing(self) -> bool:
        """Whether an OTLP export failed last time it was tried."""
        return any(h.failing for h in self._health)

    def _stop_prometheus(self) -> None:
        server = self._prom_server
        if server is not None:
            server.shutdown()
            server.server_close()
            self._prom_server = None


def _quietly(step: Callable[[], object]) -> None:
    try:
        step()
    except Exception:
        logger.debug("telemetry shutdown step failed", exc_info=True)


def configure_telemetry(
    service_name: str | None = None,
    *,
    endpoint: str | None = None,
    protocol: str | None = None,
    prometheus_port: int | None = None,
    console: bool = False,
    otlp: bool | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float | None = None,
    prometheus_host: str = "127.0.0.1",
    service_version: str | None = None,
    resource_attributes: Mapping[str, str] | None = None,
    metric_export_interval_millis: float | None = None,
    exemplar_filter: str | None = None,
    disabled: bool | None = None,
) -> TelemetryHandle:
    """Installs OTel providers and exporters for the plugin (and ADK's own spans).

    Arguments win over OTEL_* variables; see docs/configuration.md for every
    option. ``otlp`` defaults to on unless only ``prometheus_port``/``console``
    was asked for and no OTEL_EXPORTER_OTLP_*ENDPOINT is set. Providers the
    application already installed are left alone. A second call returns the
    first handle. Never blocks on the network; flushes at interpreter exit.
    """
    global _active
    with _lock:
        if _active is not None and not _active._shut:
            logger.debug("configure_telemetry() already ran in this process; keeping that setup")
            return _active
        if _env.sdk_disabled(disabled):
            logger.info("adk_task_telemetry: OpenTelemetry SDK disabled (OTEL_SDK_DISABLED)")
            _active = TelemetryHandle(enabled=False)
            return _active
        if protocol is not None:
            _env.normalize_protocol(protocol, strict=True)  # a typo fails here, not later
        filter_name = _env.exemplar_filter_name(exemplar_filter)
        use_otlp = otlp if otlp is not None else (
            endpoint is not None or _env.otlp_endpoint_configured()
            or (prometheus_port is None and not console))
        handle = TelemetryHandle(enabled=True)
        try:
            _build(handle, service_name=service_name, service_version=service_version,
                   resource_attributes=resource_attributes, endpoint=endpoint, protocol=protocol,
                   headers=headers, timeout=timeout, use_otlp=use_otlp, console=console,
                   prometheus_port=prometheus_port, prometheus_host=prometheus_host,
                   interval_ms=_env.metric_export_interval_millis(metric_export_interval_millis),
                   filter_name=filter_name, otlp_explicit=otlp is not None)
        except BaseException:
            handle.shutdown(timeout_millis=1000)
            raise
        _active = handle
        _exit.register(handle, handle.plugin_meter_provider)
        return handle


def _detached(*, endpoint: str, protocol: str, timeout: float | None = None,
              service_name: str = "benchmark") -> TelemetryHandle:
    """The same pipeline as configure_telemetry() (OTLP only), installed nowhere.

    For benchmarks that compare two pipelines in one process: pass the handle's
    providers to ``TaskTelemetryPlugin(tracer_provider=..., meter_provider=...)``.
    """
    handle = TelemetryHandle(enabled=True)
    _build(handle, service_name=service_name, service_version=None, resource_attributes=None,
           endpoint=endpoint, protocol=protocol, headers=None, timeout=timeout, use_otlp=True,
           console=False, prometheus_port=None, prometheus_host="127.0.0.1",
           interval_ms=_env.metric_export_interval_millis(None),
           filter_name=_env.exemplar_filter_name(None), install=False, otlp_explicit=True)
    return handle


def _is_proxy(provider: object) -> bool:
    """The API's placeholder, i.e. nobody installed a provider yet."""
    return type(provider).__name__.lstrip("_").startswith("Proxy")


def _resource(service_name: str | None, service_version: str | None,
              extra: Mapping[str, str] | None) -> Resource:
    attrs: dict[str, str] = dict(extra or {})
    if service_name:
        attrs["service.name"] = service_name
    if service_version:
        attrs["service.version"] = service_version
    # Resource.create merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME below ours.
    resource = Resource.create(attrs)
    if "service.instance.id" not in resource.attributes:
        resource = resource.merge(Resource({"service.instance.id": str(uuid.uuid4())}))
    return resource


def _cumulative() -> dict[type, AggregationTemporality] | None:
    """Cumulative for every instrument unless the user asked otherwise by variable:
    Prometheus and the contract's PromQL rely on cumulative series."""
    import os

    if os.environ.get("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "").strip():
        return None
    c = AggregationTemporality.CUMULATIVE
    return {Counter: c, UpDownCounter: c, Histogram: c, ObservableCounter: c,
            ObservableUpDownCounter: c, ObservableGauge: c}


def _exporters(target: _env.OtlpTarget) -> Any:
    """The OTLP exporter of one signal, for its protocol."""
    try:
        return _make_exporter(target)
    except ImportError as e:
        raise ImportError(
            f"OTLP export needs {e.name}, a dependency of adk-task-telemetry: reinstall it "
            f"(pip install --force-reinstall adk-task-telemetry)") from e


def _make_exporter(target: _env.OtlpTarget) -> Any:
    hdrs = target.headers or None
    if target.protocol == _env.GRPC:
        if target.signal == "traces":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            return OTLPSpanExporter(endpoint=target.endpoint, insecure=target.insecure,
                                    headers=hdrs, timeout=target.timeout)
        if target.signal == "metrics":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter,
            )
            return OTLPMetricExporter(endpoint=target.endpoint, insecure=target.insecure,
                                      headers=hdrs, timeout=target.timeout,
                                      preferred_temporality=_cumulative())
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        return OTLPLogExporter(endpoint=target.endpoint, insecure=target.insecure,
                               headers=hdrs, timeout=target.timeout)
    if target.signal == "traces":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpSpanExporter,
        )
        return HttpSpanExporter(endpoint=target.endpoint, headers=hdrs, timeout=target.timeout)
    if target.signal == "metrics":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HttpMetricExporter,
        )
        return HttpMetricExporter(endpoint=target.endpoint, headers=hdrs,
                                  timeout=target.timeout, preferred_temporality=_cumulative())
    from opentelemetry.exporter.otlp.proto.http._log_exporter import (
        OTLPLogExporter as HttpLogExporter,
    )
    return HttpLogExporter(endpoint=target.endpoint, headers=hdrs, timeout=target.timeout)


def _build(handle: TelemetryHandle, *, service_name: str | None, service_version: str | None,
           resource_attributes: Mapping[str, str] | None, endpoint: str | None,
           protocol: str | None, headers: Mapping[str, str] | None, timeout: float | None,
           use_otlp: bool, console: bool, prometheus_port: int | None, prometheus_host: str,
           interval_ms: float, filter_name: str, install: bool = True,
           otlp_explicit: bool = False) -> None:
    global _told_existing
    resource = _resource(service_name, service_version, resource_attributes)
    handle.resource = resource
    quiet = _QuietExporterLogs()
    targets: dict[str, _env.OtlpTarget] = {}
    consoles: set[str] = set(_env.SIGNALS) if console else set()
    for signal in _env.SIGNALS:
        chosen = None if otlp_explicit else _env.signal_exporters(signal)
        if chosen is not None and "console" in chosen:
            consoles.add(signal)
        if use_otlp and (chosen is None or "otlp" in chosen):
            targets[signal] = _env.resolve_target(
                signal, endpoint=endpoint, protocol=protocol, headers=headers, timeout=timeout)
    handle.otlp_targets = targets

    outage = _Outage(quiet)

    def health(signal: str) -> _ExportHealth:
        t = targets[signal]
        h = _ExportHealth(signal, f"{t.endpoint} over OTLP {t.protocol}", t.timeout, outage)
        handle._health.append(h)
        return h

    def guarded(signal: str) -> Any:
        wrapper = {"traces": _GuardedSpanExporter, "metrics": _GuardedMetricExporter,
                   "logs": _GuardedLogExporter}[signal]
        g = wrapper(_exporters(targets[signal]), health(signal))
        handle._guarded.append(g)
        return g

    # Globals are set (and processors added to existing providers) only once
    # everything is built: a bad OTEL_BSP_*/OTEL_BLRP_* value (the SDK raises)
    # must not leave half a setup installed.
    installs: list[Callable[[], object]] = []
    told: list[str] = []  # what was done with providers that already existed
    existing_resources: list[tuple[str, Any]] = []

    def attach(signal: str, provider: Any, add: str, processors: list[Any]) -> None:
        for proc in processors:
            installs.append(functools.partial(getattr(provider, add), proc))
            if not isinstance(proc, OpenSpanProcessor):
                handle._attached.append((signal, proc))

    # --- traces
    tp_now = trace.get_tracer_provider()
    if not install or _is_proxy(tp_now):
        tp = TracerProvider(resource=resource, shutdown_on_exit=False)
        if "traces" in targets:
            tp.add_span_processor(BatchSpanProcessor(guarded("traces")))
        if "traces" in consoles:
            tp.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        # Spans a tool leaves open are reported when its run ends.
        tp.add_span_processor(OpenSpanProcessor())
        if install:
            installs.append(lambda: trace.set_tracer_provider(tp))
        handle.tracer_provider = tp
        handle.actions["traces"] = "installed"
    else:
        existing_resources.append(("traces", getattr(tp_now, "resource", None)))
        kind = type(tp_now).__name__
        target = targets.get("traces")
        if target is not None and _target_key(target) in _exports_to(tp_now):
            handle.actions["traces"] = "already_exported"
            told.append(f"traces: the existing {kind} already exports to {target.endpoint}; "
                        "nothing added")
        elif not callable(getattr(tp_now, "add_span_processor", None)):
            handle.actions["traces"] = "not_possible"
            told.append(f"traces: the existing {kind} takes no span processors; tool_task "
                        "spans go wherever it sends them")
        else:
            procs: list[Any] = []
            if target is not None:
                procs.append(BatchSpanProcessor(guarded("traces")))
            if "traces" in consoles:
                procs.append(BatchSpanProcessor(ConsoleSpanExporter()))
            if not _has_open_span_processor(tp_now):
                procs.append(OpenSpanProcessor())
            attach("traces", tp_now, "add_span_processor", procs)
            handle.actions["traces"] = "added_to_existing" if target or "traces" in consoles \
                else "off"
            if target is not None:
                told.append(f"traces: added OTLP export to {target.endpoint} "
                            f"({target.protocol}) to the existing {kind}")

    # --- metrics
    mp_now = metrics.get_meter_provider()
    mp_is_new = not install or _is_proxy(mp_now)
    m_target = targets.get("metrics")
    if not mp_is_new and m_target is not None and _target_key(m_target) in _exports_to(mp_now):
        handle.actions["metrics"] = "already_exported"
        existing_resources.append(("metrics", getattr(getattr(mp_now, "_sdk_config", None),
                                                     "resource", None)))
        told.append(f"metrics: the existing {type(mp_now).__name__} already exports to "
                    f"{m_target.endpoint}; nothing added")
        if prometheus_port is not None:
            logger.warning("adk_task_telemetry: the existing MeterProvider already exports "
                           "metrics, so no Prometheus endpoint was started")
    elif mp_is_new or m_target is not None or "metrics" in consoles \
            or prometheus_port is not None:
        readers: list[MetricReader] = []
        if m_target is not None:
            readers.append(PeriodicExportingMetricReader(
                guarded("metrics"), export_interval_millis=interval_ms))
        if "metrics" in consoles:
            readers.append(PeriodicExportingMetricReader(
                ConsoleMetricExporter(preferred_temporality=_cumulative()),
                export_interval_millis=interval_ms))
        if prometheus_port is not None:
            reader = _start_prometheus(handle, prometheus_host, prometheus_port)
            if reader is not None:
                readers.append(reader)
        mp = MeterProvider(metric_readers=readers, resource=resource, shutdown_on_exit=False,
                           exemplar_filter=_exemplar_filter(filter_name))
        handle.meter_provider = mp
        if mp_is_new:
            if install:
                installs.append(lambda: metrics.set_meter_provider(mp))
            handle.actions["metrics"] = "installed"
        else:
            # A MeterProvider takes readers only when it is built: the plugin
            # records into a provider of its own instead (ADK's own metrics stay
            # on the existing one). Plugins built before this call keep theirs.
            handle.plugin_meter_provider = mp
            handle.actions["metrics"] = "own_meter_provider"
            existing_resources.append(("metrics", resource))  # ours: named as asked
            told.append(f"metrics: the plugin records into a MeterProvider of its own "
                        f"(the existing {type(mp_now).__name__} cannot take readers), exporting"
                        + (f" to {m_target.endpoint}" if m_target else "")
                        + "; ADK's own metrics stay on the existing one")
            earlier = len(_tracker_module().trackers())
            if earlier:
                told.append(f"{earlier} TaskTelemetryPlugin(s) built before "
                            "configure_telemetry() keep recording metrics into the existing "
                            "MeterProvider: build the plugin after this call")
    else:
        handle.actions["metrics"] = "off"
        existing_resources.append(("metrics", resource))  # nothing of ours there to name

    # --- logs
    lp_now = _logs.get_logger_provider()
    if not install or _is_proxy(lp_now):
        lp = LoggerProvider(resource=resource, shutdown_on_exit=False)
        if "logs" in targets:
            lp.add_log_record_processor(BatchLogRecordProcessor(guarded("logs")))
        if "logs" in consoles:
            lp.add_log_record_processor(BatchLogRecordProcessor(ConsoleLogExporter()))
        if install:
            installs.append(lambda: _logs.set_logger_provider(lp))
        handle.logger_provider = lp
        handle.actions["logs"] = "installed"
    else:
        existing_resources.append(("logs", getattr(lp_now, "resource", None)))
        kind = type(lp_now).__name__
        target = targets.get("logs")
        if target is not None and _target_key(target) in _exports_to(lp_now):
            handle.actions["logs"] = "already_exported"
            told.append(f"logs: the existing {kind} already exports to {target.endpoint}; "
                        "nothing added")
        elif not callable(getattr(lp_now, "add_log_record_processor", None)):
            handle.actions["logs"] = "not_possible"
            told.append(f"logs: the existing {kind} takes no log record processors; orphan "
                        "log records go wherever it sends them")
        else:
            lprocs: list[Any] = []
            if target is not None:
                lprocs.append(BatchLogRecordProcessor(guarded("logs")))
            if "logs" in consoles:
                lprocs.append(BatchLogRecordProcessor(ConsoleLogExporter()))
            attach("logs", lp_now, "add_log_record_processor", lprocs)
            handle.actions["logs"] = "added_to_existing" if lprocs else "off"
            if target is not None:
                told.append(f"logs: added OTLP export to {target.endpoint} "
                            f"({target.protocol}) to the existing {kind}")

    for step in installs:
        step()
    if install:
        handle._log_handler = _bridge_logger(_logs.get_logger_provider())

    if targets:
        handle._quiet = quiet
        handle._outage = outage
        for name in _EXPORTER_LOGGERS:
            logging.getLogger(name).addFilter(quiet)
        for name in _QUEUE_LOGGERS:
            logging.getLogger(name).addFilter(outage)

    if existing_resources and not _told_existing:
        _told_existing = True
        _tell_existing(told, existing_resources, resource)


def _tell_existing(told: list[str], existing: list[tuple[str, Any]], ours: Resource) -> None:
    """One message: what was done with each provider that was already installed, and
    that their resource (service.name) stays as it is."""
    want = ours.attributes.get("service.name")
    differs = []
    for signal, res in existing:
        have = getattr(res, "attributes", {}).get("service.name") if res is not None else None
        if have != want:
            differs.append((signal, have))
    text = ("adk_task_telemetry: OpenTelemetry providers were already installed (by ADK's "
            "server or the application). " + ("; ".join(told) + "." if told else ""))
    if differs:
        signals = ", ".join(s for s, _ in differs)
        names = sorted({str(h) for _, h in differs})
        text += (f" An existing provider's resource cannot be changed: {signals} keep "
                 f"service.name={' / '.join(names)} (asked for {want!s}); set "
                 "OTEL_SERVICE_NAME (and OTEL_RESOURCE_ATTRIBUTES) before the server starts "
                 "to name them.")
        logger.warning(text)
    else:
        logger.info(text)


def _tracker_module() -> Any:
    from . import tracker

    return tracker


def _has_open_span_processor(provider: Any) -> bool:
    return any(isinstance(p, OpenSpanProcessor) for p in _walk(provider))


def _target_key(target: _env.OtlpTarget) -> tuple[str, str]:
    """How an OTLP target is compared with exporters found in an existing provider."""
    if target.protocol == _env.GRPC:
        return (_env.GRPC, _netloc(target.endpoint))
    return (_env.HTTP, _norm_url(target.endpoint))


def _netloc(endpoint: str) -> str:
    import urllib.parse

    parsed = urllib.parse.urlparse(endpoint if "://" in endpoint else "http://" + endpoint)
    return parsed.netloc.lower()


def _norm_url(url: str) -> str:
    return url.strip().rstrip("/").lower()


_CHILD_ATTRS = ("_active_span_processor", "_span_processors", "_multi_log_record_processor",
                "_log_record_processors", "_metric_readers", "_sdk_config", "metric_readers",
                "_batch_processor",
                "_exporter", "span_exporter", "_inner")


def _walk(obj: Any, depth: int = 0) -> list[Any]:
    """Processors, readers and exporters inside a provider (private SDK attributes,
    read defensively: a layout we do not know yields nothing)."""
    if depth > 6 or obj is None:
        return []
    found: list[Any] = []
    for name in _CHILD_ATTRS:
        try:
            child = getattr(obj, name, None)
        except Exception:
            continue
        children = child if isinstance(child, (list, tuple)) else [child]
        for c in children:
            if c is not None and not isinstance(c, (str, bytes, int, float)):
                found.append(c)
                found.extend(_walk(c, depth + 1))
    return found


def _exports_to(provider: Any) -> set[tuple[str, str]]:
    """The OTLP (protocol, endpoint) pairs an existing provider exports to."""
    out: set[tuple[str, str]] = set()
    for obj in _walk(provider):
        module = type(obj).__module__
        endpoint = getattr(obj, "_endpoint", None)
        if not module.startswith("opentelemetry.exporter.otlp.proto.") or not endpoint:
            continue
        if ".grpc" in module:
            out.add((_env.GRPC, _netloc(str(endpoint))))
        else:
            out.add((_env.HTTP, _norm_url(str(endpoint))))
    return out


def _exemplar_filter(name: str) -> Any:
    if name == "always_on":
        return AlwaysOnExemplarFilter()
    if name == "always_off":
        return AlwaysOffExemplarFilter()
    return TraceBasedExemplarFilter()


def _bridge_logger(provider: Any) -> logging.Handler | None:
    """Sends the ``adk_task_telemetry`` logger's records to OTel logs (trace-linked,
    since they are emitted inside the task span), unless a bridge already sees them."""
    ours = logging.getLogger(sc.LOGGER_NAME)
    for lg in (ours, logging.getLogger()):
        # The SDK's handler, or the one of opentelemetry-instrumentation-logging.
        if any(isinstance(h, LoggingHandler) or type(h).__name__ == "LoggingHandler"
               for h in lg.handlers):
            return None
    with warnings.catch_warnings():  # deprecated in favour of a contrib package; still works
        warnings.simplefilter("ignore", DeprecationWarning)
        handler = LoggingHandler(level=logging.WARNING, logger_provider=provider)
    # Our own export-health messages are about the pipeline itself: keep them local.
    handler.addFilter(lambda r: not r.name.startswith(logger.name))
    ours.addHandler(handler)
    # With a handler on our logger, Python's last-resort stderr output no longer
    # applies to it: without one on the root logger, our export warnings would vanish.
    if not any(isinstance(h, _LastResort) for h in logger.handlers):
        logger.addHandler(_LastResort())
    return handler


class _LastResort(logging.Handler):
    """What ``logging.lastResort`` does for an application that configured no logging
    (WARNING and above to stderr), for our export warnings only."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger().handlers and logging.lastResort is not None:
            logging.lastResort.handle(record)


def _start_prometheus(handle: TelemetryHandle, host: str, port: int) -> MetricReader | None:
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server
    except ImportError as exc:  # pragma: no cover - the `prometheus` extra provides both
        raise RuntimeError(
            "prometheus_port needs opentelemetry-exporter-prometheus: "
            "pip install 'adk-task-telemetry[prometheus]'") from exc
    try:
        started = start_http_server(port, addr=host)
    except OSError as exc:  # a port in use must not stop the agent (nor the other exports)
        logger.warning("adk_task_telemetry: cannot serve Prometheus metrics on %s:%s (%s); "
                       "continuing without it", host, port, exc)
        return None
    reader = PrometheusMetricReader()
    server = started[0] if isinstance(started, tuple) else None
    handle._prom_server = server
    handle._prom_reader = reader
    handle.prometheus_host = host
    handle.prometheus_port = int(server.server_port) if server is not None else port
    logger.info("adk_task_telemetry: Prometheus metrics on http://%s:%s/metrics",
                host, handle.prometheus_port)
    return reader
