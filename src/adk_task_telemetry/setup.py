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

import atexit
import logging
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
from . import semconv as sc
from .ledger import shutdown_all
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
_atexit_registered = False
_told_existing = False


class _QuietExporterLogs(logging.Filter):
    """Keeps the OTLP exporters' per-batch failure messages for one warning of ours."""

    def __init__(self) -> None:
        super().__init__()
        self.first = ""  # since the last export result: usually names the cause

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.first:
            try:
                self.first = record.getMessage()[:300]
            except Exception:  # a malformed record must not break logging
                self.first = str(record.msg)[:300]
        return False

    def take(self) -> str:
        text, self.first = self.first, ""
        return text


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
    threads nor the exit more than one timeout at a time.
    """

    def __init__(self, signal: str, where: str, cooldown: float, outage: _Outage) -> None:
        self.signal = signal
        self.where = where
        self.cooldown = cooldown
        self.outage = outage
        self.failing = False
        self.closing = False
        self.failures = 0
        self.dropped_batches = 0
        self.last_attempt = 0.0

    def should_try(self) -> bool:
        with self.outage.lock:
            if self.failing and (
                    self.closing or time.monotonic() - self.last_attempt < self.cooldown):
                self.dropped_batches += 1
                return False
            self.last_attempt = time.monotonic()
            self.outage.in_flight += 1
            return True

    def record(self, ok: bool, detail: str = "") -> None:
        outage = self.outage
        with outage.lock:
            outage.in_flight = max(0, outage.in_flight - 1)
            queue_full, outage.queue_full = outage.queue_full, None
            before = bool(outage.failing)
            self.failing = not ok
            if ok:
                outage.failing.discard(self.signal)
            else:
                self.failures += 1
                outage.failing.add(self.signal)
            after = bool(outage.failing)
            cause = outage.quiet.take()
        if before and not after:
            logger.warning("adk_task_telemetry: telemetry export works again (%s)", self.where)
        elif after and not before:
            logger.warning(
                "adk_task_telemetry: cannot export telemetry (%s to %s: %s). It is dropped "
                "while the endpoint stays unreachable (bounded queues); the agent is not "
                "affected. Retrying quietly; recovery will be logged.",
                self.signal, self.where, detail or cause or "export failed")
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

    The ``*_provider`` attributes are None for a signal whose provider the
    application had already installed (left alone) or when the SDK is disabled.
    """

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.tracer_provider: TracerProvider | None = None
        self.meter_provider: MeterProvider | None = None
        self.logger_provider: LoggerProvider | None = None
        self.resource: Resource | None = None
        #: signal -> where OTLP sends it (empty when OTLP is off).
        self.otlp_targets: dict[str, _env.OtlpTarget] = {}
        #: The port the Prometheus endpoint listens on (the real one when 0 was asked).
        self.prometheus_port: int | None = None
        self.prometheus_host: str | None = None
        self._health: list[_ExportHealth] = []
        self._log_handler: logging.Handler | None = None
        self._quiet: _QuietExporterLogs | None = None
        self._outage: _Outage | None = None
        self._prom_server: Any = None
        self._prom_reader: MetricReader | None = None
        self._shut = False
        self._shutdown_lock = threading.Lock()

    def force_flush(self, timeout_millis: int = 10_000) -> bool:
        """Exports what is buffered now. Blocks: call it off the event loop if it matters."""
        ok = True
        try:
            if self.tracer_provider is not None:
                ok = self.tracer_provider.force_flush(timeout_millis) and ok
            if self.logger_provider is not None:
                ok = bool(self.logger_provider.force_flush(timeout_millis)) and ok
            if self.meter_provider is not None:
                ok = self.meter_provider.force_flush(timeout_millis) and ok
        except Exception:
            logger.debug("force_flush failed", exc_info=True)
            return False
        return ok and not any(h.failing for h in self._health)

    def shutdown(self, timeout_millis: int = _EXIT_TIMEOUT_MS) -> None:
        """Flushes and stops everything this handle installed, waiting at most
        ``timeout_millis`` for exports in flight (a black-holed endpoint must not
        hold the exit). Final for the process: OTel lets a global provider be set
        only once."""
        with self._shutdown_lock:
            if self._shut:
                return
            self._shut = True
        for h in self._health:  # an endpoint known dead gets no more attempts
            h.closing = True
        if self._log_handler is not None:
            logging.getLogger(sc.LOGGER_NAME).removeHandler(self._log_handler)
        steps: list[Callable[[], object]] = []
        if self.tracer_provider is not None:
            steps.append(self.tracer_provider.shutdown)
        if self.logger_provider is not None:
            steps.append(self.logger_provider.shutdown)
        if self.meter_provider is not None:
            mp = self.meter_provider
            steps.append(lambda: mp.shutdown(timeout_millis))
        steps.append(self._stop_prometheus)
        # In parallel, so that the exports in flight cost one timeout, not one per signal.
        threads = [threading.Thread(target=_quietly, args=(step,), daemon=True,
                                    name="adk_task_telemetry-shutdown") for step in steps]
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout_millis / 1000.0
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in threads):
            logger.warning("adk_task_telemetry: gave up waiting for telemetry export after "
                           "%.1f s at shutdown; what was not sent is dropped",
                           timeout_millis / 1000.0)
            return  # exporters still running: keep their messages quiet
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
        _register_atexit()
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

    existing: list[str] = []
    # Globals are set only once everything is built: a bad OTEL_BSP_*/OTEL_BLRP_*
    # value (the SDK raises) must not leave half a setup installed.
    installs: list[Callable[[], object]] = []

    # --- traces
    if not install or _is_proxy(trace.get_tracer_provider()):
        tp = TracerProvider(resource=resource, shutdown_on_exit=False)
        if "traces" in targets:
            tp.add_span_processor(BatchSpanProcessor(_GuardedSpanExporter(
                _exporters(targets["traces"]), health("traces"))))
        if "traces" in consoles:
            tp.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        # Spans a tool leaves open are reported when its run ends.
        tp.add_span_processor(OpenSpanProcessor())
        if install:
            installs.append(lambda: trace.set_tracer_provider(tp))
        handle.tracer_provider = tp
    else:
        existing.append(f"TracerProvider ({type(trace.get_tracer_provider()).__name__})")

    # --- metrics
    if not install or _is_proxy(metrics.get_meter_provider()):
        readers: list[MetricReader] = []
        if "metrics" in targets:
            readers.append(PeriodicExportingMetricReader(
                _GuardedMetricExporter(_exporters(targets["metrics"]), health("metrics")),
                export_interval_millis=interval_ms))
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
        if install:
            installs.append(lambda: metrics.set_meter_provider(mp))
        handle.meter_provider = mp
    else:
        existing.append(f"MeterProvider ({type(metrics.get_meter_provider()).__name__})")
        if prometheus_port is not None:
            logger.warning("adk_task_telemetry: a MeterProvider is already installed, so no "
                           "Prometheus endpoint was started (add a PrometheusMetricReader to it)")

    # --- logs
    if not install or _is_proxy(_logs.get_logger_provider()):
        lp = LoggerProvider(resource=resource, shutdown_on_exit=False)
        if "logs" in targets:
            lp.add_log_record_processor(BatchLogRecordProcessor(_GuardedLogExporter(
                _exporters(targets["logs"]), health("logs"))))
        if "logs" in consoles:
            lp.add_log_record_processor(BatchLogRecordProcessor(ConsoleLogExporter()))
        if install:
            installs.append(lambda: _logs.set_logger_provider(lp))
        handle.logger_provider = lp
    else:
        existing.append(f"LoggerProvider ({type(_logs.get_logger_provider()).__name__})")
    for set_global in installs:
        set_global()
    if install:
        handle._log_handler = _bridge_logger(_logs.get_logger_provider())

    if targets:
        handle._quiet = quiet
        handle._outage = outage
        for name in _EXPORTER_LOGGERS:
            logging.getLogger(name).addFilter(quiet)
        for name in _QUEUE_LOGGERS:
            logging.getLogger(name).addFilter(outage)

    if existing and not _told_existing:
        _told_existing = True
        logger.warning(
            "adk_task_telemetry: left alone the %s the application (or ADK) already "
            "installed; tool_task telemetry goes wherever it sends it", ", ".join(existing))


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
    return handler


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


def _register_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(_at_exit)
        _atexit_registered = True


def _at_exit() -> None:
    # Runs still in flight are reported (trigger `shutdown`) before the flush.
    shutdown_all()
    handle = _active
    if handle is not None:
        handle.shutdown(timeout_millis=_EXIT_TIMEOUT_MS)
