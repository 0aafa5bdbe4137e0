"""SDK providers for configure_telemetry(): create them, or attach to the ones that
ADK's server or the application installed first.

Everything is built first and installed last, so that a bad ``OTEL_BLRP_*`` value
(the SDK raises) leaves nothing half installed. Spans go to our own processor
(``sdk_side.SpanHandOver``); an SDK BatchSpanProcessor serves the console's spans only.
Where our exporters go is known from what we built (``Setup``), never by reading SDK
objects.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import _logs, metrics, trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, ConsoleLogExporter
from opentelemetry.sdk.metrics import (
    AlwaysOffExemplarFilter,
    AlwaysOnExemplarFilter,
    Counter,
    ExemplarFilter,
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
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

from .. import otel_compat
from .. import semconv as sc
from ..lifecycle import process_exit as _exit
from ..signals.span_processors import OpenSpanProcessor
from ..version import __version__
from . import bridge, prometheus, settings
from .export import Sender
from .otlp_exporters import otlp_exporter
from .outage import QuietExporterLogs
from .sdk_side import ADAPTERS

logger = logging.getLogger(sc.EXPORT_LOGGER_NAME)

# Providers of others that we added an OpenSpanProcessor to (one is enough).
_open_span_added: weakref.WeakSet[Any] = weakref.WeakSet()
_told_existing = False


@dataclass(frozen=True)
class Asked:
    """What one configure_telemetry() call asked for (arguments, variables resolved)."""

    service_name: str | None = None
    service_version: str | None = None
    resource_attributes: Mapping[str, str] | None = None
    endpoint: str | None = None
    protocol: str | None = None
    headers: Mapping[str, str] | None = None
    timeout: float | None = None
    use_otlp: bool = True
    console: bool = False
    prometheus_port: int | None = None
    prometheus_host: str = "127.0.0.1"
    interval_ms: float = settings.DEFAULT_METRIC_INTERVAL_MS
    exemplar_filter: str = "trace_based"
    install: bool = True  # set the globals; False: a detached pipeline (benchmarks)
    otlp_explicit: bool = False  # otlp= was given: the *_EXPORTER variables do not apply


class DropCounter:
    """``adk.export.dropped``, recorded into the setup's own MeterProvider (so that it
    is exported when the endpoint answers again)."""

    def __init__(self) -> None:
        self._counter: Any = None

    def bind(self, provider: Any) -> None:
        meter = provider.get_meter(sc.SCOPE_NAME, __version__, schema_url=sc.SCHEMA_URL)
        self._counter = meter.create_counter(
            sc.METRIC_EXPORT_DROPPED, unit=sc.UNIT_ITEM,
            description="Telemetry items that could not be exported and were dropped")

    def __call__(self, signal: str, reason: str, n: int) -> None:
        if self._counter is not None and n > 0:
            self._counter.add(n, {sc.ADK_EXPORT_SIGNAL: signal, sc.ADK_EXPORT_REASON: reason})


@dataclass
class Setup:
    """What build() made: the handle's facts."""

    resource: Resource
    targets: dict[str, settings.OtlpTarget]
    actions: dict[str, str] = field(default_factory=dict)
    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    logger_provider: LoggerProvider | None = None
    plugin_meter_provider: MeterProvider | None = None
    #: (signal, processor) we added to a provider someone else installed.
    attached: list[tuple[str, Any]] = field(default_factory=list)
    #: Our push readers (flushed at close; a pull reader is collected only by a scrape).
    push_readers: list[MetricReader] = field(default_factory=list)
    senders: dict[str, Sender] = field(default_factory=dict)
    prometheus: prometheus.PrometheusEndpoint | None = None
    log_handler: logging.Handler | None = None
    quiet: QuietExporterLogs | None = None
    #: Counts the measurements recorded into our MeterProvider (None: no such provider).
    recorded: RecordedSince | None = None

    def owned(self) -> list[Any]:
        return [p for p in (self.tracer_provider, self.meter_provider, self.logger_provider)
                if p is not None]


def build(asked: Asked) -> Setup:
    """Builds (and, with ``asked.install``, installs) the providers and exporters."""
    resource = _resource(asked.service_name, asked.service_version, asked.resource_attributes)
    targets: dict[str, settings.OtlpTarget] = {}
    consoles: set[str] = set(settings.SIGNALS) if asked.console else set()
    for signal in settings.SIGNALS:
        chosen = None if asked.otlp_explicit else settings.signal_exporters(signal)
        if chosen is not None and "console" in chosen:
            consoles.add(signal)
        if asked.use_otlp and (chosen is None or "otlp" in chosen):
            targets[signal] = settings.resolve_target(
                signal, endpoint=asked.endpoint, protocol=asked.protocol,
                headers=asked.headers, timeout=asked.timeout)
    setup = Setup(resource, targets)
    drops = DropCounter()
    if targets:
        setup.quiet = QuietExporterLogs()
    temporality = _cumulative()
    for signal, target in targets.items():
        assert setup.quiet is not None
        setup.senders[signal] = Sender(
            target, otlp_exporter(target, temporality), settings.buffer_bounds(signal),
            setup.quiet, drops,
            batching=settings.span_batching() if signal == "traces" else None)
    try:
        installs = _Build(asked, setup, consoles, temporality).run()
    except BaseException:  # nothing half installed, nothing left running
        for sender in setup.senders.values():
            sender.stop()
        if setup.prometheus is not None:
            setup.prometheus.stop()
        raise
    for step in installs:
        step()
    if asked.install:
        setup.log_handler = bridge.bridge_logger(_logs.get_logger_provider())
    if setup.quiet is not None:
        setup.quiet.install()
    drops.bind(setup.meter_provider or setup.plugin_meter_provider
               or metrics.get_meter_provider())
    return setup


class _Build:
    """One build: each signal's provider, made or attached to; installs deferred."""

    def __init__(self, asked: Asked, setup: Setup, consoles: set[str],
                 temporality: dict[type, AggregationTemporality] | None) -> None:
        self.asked, self.setup, self.consoles = asked, setup, consoles
        self.temporality = temporality
        self.installs: list[Callable[[], object]] = []
        self.told: list[str] = []  # what was done with providers that already existed
        self.existing: list[tuple[str, Any]] = []  # (signal, its resource)

    def run(self) -> list[Callable[[], object]]:
        global _told_existing
        self._traces()
        self._metrics()
        self._logs()
        if self.existing and not _told_existing:
            _told_existing = True
            _tell_existing(self.told, self.existing, self.setup.resource)
        return self.installs

    def _adapter(self, signal: str) -> Any:
        return ADAPTERS[signal](self.setup.senders[signal])

    def _exported_by_installer(self, signal: str) -> bool:
        """An existing provider with the endpoint variables set: whoever installed it
        (ADK's server, opentelemetry-instrument, the SDK's exporters) read them too."""
        return (signal in self.setup.targets and self.asked.endpoint is None
                and settings.otlp_endpoint_configured(signal=signal))

    def _existing(self, signal: str, provider: Any, add: str, processors: list[Any],
                  what: str) -> None:
        """Adds our processors to a provider someone else installed."""
        kind = type(provider).__name__
        target = self.setup.targets.get(signal)
        if self._exported_by_installer(signal):
            assert target is not None
            self.setup.actions[signal] = "already_exported"
            self.told.append(f"{signal}: the existing {kind} was installed with "
                             f"{target.endpoint} in the OTEL_EXPORTER_OTLP_* variables and "
                             "exports there itself; nothing added")
            return
        if not callable(getattr(provider, add, None)):
            self.setup.actions[signal] = "not_possible"
            self.told.append(f"{signal}: the existing {kind} takes no {what} processors; "
                             f"ours go wherever it sends them")
            return
        for proc in processors:
            self.installs.append(functools.partial(getattr(provider, add), proc))
            if not isinstance(proc, OpenSpanProcessor):
                self.setup.attached.append((signal, proc))
        ours = [p for p in processors if not isinstance(p, OpenSpanProcessor)]
        self.setup.actions[signal] = "added_to_existing" if ours else "off"
        if target is not None:
            self.told.append(f"{signal}: added OTLP export to {target.endpoint} "
                             f"({target.protocol}) to the existing {kind}")

    def _traces(self) -> None:
        self._signal("traces", trace.get_tracer_provider(), BatchSpanProcessor,
                     ConsoleSpanExporter, "add_span_processor", "span")

    def _logs(self) -> None:
        self._signal("logs", _logs.get_logger_provider(), BatchLogRecordProcessor,
                     ConsoleLogExporter, "add_log_record_processor", "log record")

    def _signal(self, signal: str, now: Any, batch: Callable[[Any], Any],
                console: Callable[[], Any], add: str, what: str) -> None:
        """Traces or logs: a provider of ours, or our processors on the existing one."""
        procs: list[Any] = []
        if signal in self.setup.targets:  # spans: our processor; log records: the SDK's
            adapter = self._adapter(signal)
            procs.append(adapter if signal == "traces" else batch(adapter))
        if signal in self.consoles:
            procs.append(batch(console()))
        if self.asked.install and not otel_compat.nobody_installed(now):
            self.existing.append((signal, getattr(now, "resource", None)))
            if signal == "traces" and now not in _open_span_added:
                procs.append(OpenSpanProcessor())  # spans a tool leaves open
                self.installs.append(lambda: _open_span_added.add(now))
            self._existing(signal, now, add, procs, what)
            return
        ours: Any = (TracerProvider if signal == "traces" else LoggerProvider)(
            resource=self.setup.resource, shutdown_on_exit=False)
        for proc in procs + ([OpenSpanProcessor()] if signal == "traces" else []):
            getattr(ours, add)(proc)
        if self.asked.install:
            setter = trace.set_tracer_provider if signal == "traces" \
                else _logs.set_logger_provider
            self.installs.append(lambda: setter(ours))
        if signal == "traces":
            self.setup.tracer_provider = ours
        else:
            self.setup.logger_provider = ours
        self.setup.actions[signal] = "installed"

    def _metrics(self) -> None:
        asked, setup = self.asked, self.setup
        now = metrics.get_meter_provider()
        is_new = not asked.install or otel_compat.nobody_installed(now)
        if not is_new and self._exported_by_installer("metrics"):
            self.existing.append(("metrics", setup.resource))  # not ours to name
            self._existing("metrics", now, "", [], "")
            if asked.prometheus_port is not None:
                logger.warning("adk_task_telemetry: the existing MeterProvider already "
                               "exports metrics, so no Prometheus endpoint was started")
            return
        if not (is_new or "metrics" in setup.targets or "metrics" in self.consoles
                or asked.prometheus_port is not None):
            setup.actions["metrics"] = "off"
            self.existing.append(("metrics", setup.resource))  # nothing of ours there
            return
        readers: list[MetricReader] = []
        if "metrics" in setup.targets:
            readers.append(PeriodicExportingMetricReader(
                self._adapter("metrics"), export_interval_millis=asked.interval_ms))
        if "metrics" in self.consoles:
            readers.append(PeriodicExportingMetricReader(
                ConsoleMetricExporter(preferred_temporality=self.temporality),
                export_interval_millis=asked.interval_ms))
        setup.push_readers = list(readers)
        if asked.prometheus_port is not None:
            setup.prometheus = prometheus.start(asked.prometheus_host, asked.prometheus_port)
            if setup.prometheus is not None:
                readers.append(setup.prometheus.reader)
        setup.recorded = RecordedSince(_exemplar_filter(asked.exemplar_filter))
        mp = MeterProvider(metric_readers=readers, resource=setup.resource,
                           shutdown_on_exit=False, exemplar_filter=setup.recorded)
        setup.meter_provider = mp
        if is_new:
            if asked.install:
                self.installs.append(lambda: metrics.set_meter_provider(mp))
            setup.actions["metrics"] = "installed"
            return
        # A MeterProvider takes readers only when it is built: the plugin records into
        # a provider of its own instead (ADK's own metrics stay on the existing one).
        setup.plugin_meter_provider = mp
        setup.actions["metrics"] = "own_meter_provider"
        self.existing.append(("metrics", setup.resource))  # ours: named as asked
        target = setup.targets.get("metrics")
        self.told.append(f"metrics: the plugin records into a MeterProvider of its own "
                         f"(the existing {type(now).__name__} cannot take readers), exporting"
                         + (f" to {target.endpoint}" if target else "")
                         + "; ADK's own metrics stay on the existing one")
        earlier = _exit.plugins_alive()  # plugins built before this call
        if earlier:
            self.told.append(f"{earlier} TaskTelemetryPlugin(s) built before "
                             "configure_telemetry() keep recording metrics into the existing "
                             "MeterProvider: build the plugin after this call")


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
    if settings.temporality_configured():
        return None
    c = AggregationTemporality.CUMULATIVE
    return {Counter: c, UpDownCounter: c, Histogram: c, ObservableCounter: c,
            ObservableUpDownCounter: c, ObservableGauge: c}


class RecordedSince(ExemplarFilter):
    """The exemplar filter of our MeterProvider, which the SDK asks once for every
    measurement, anyone's (ADK's, the application's, ours): it also counts them, so
    that a Runner's close collects metrics only when something was recorded since the
    last collection. Measurements made in the thread that collects now (the
    observable callbacks of that collection) are not counted."""

    def __init__(self, inner: ExemplarFilter) -> None:
        self._inner = inner
        self.count = 0
        self.collector = -1  # the thread collecting for a close, while it does

    def should_sample(self, value: Any, time_unix_nano: int, attributes: Any,
                      context: Any) -> bool:
        if threading.get_ident() != self.collector:
            self.count += 1
        return self._inner.should_sample(value, time_unix_nano, attributes, context)


def _exemplar_filter(name: str) -> Any:
    if name == "always_on":
        return AlwaysOnExemplarFilter()
    if name == "always_off":
        return AlwaysOffExemplarFilter()
    return TraceBasedExemplarFilter()
