"""configure_telemetry(): OTel providers and exporters for the plugin and ADK's own spans.

One call installs a TracerProvider, a MeterProvider and a LoggerProvider (the orphan
WARNING of the ``adk_task_telemetry`` logger becomes a log record linked to its
trace), exporting over OTLP (gRPC or HTTP/protobuf), to a Prometheus scrape endpoint
and/or the console. Settings come from arguments first, then the OTEL_* and
ADK_TASK_TELEMETRY_* variables (docs/configuration.md). An endpoint that is down
never reaches the agent, and what was recorded meanwhile waits in a bounded buffer
until it answers again.

    settings.py                 arguments, then variables (their names: ../variables.py)
    providers.py                create SDK providers, or attach to existing ones
    sdk_side.py                 what the SDK calls: our span processor and exporters
    buffer.py, export.py        the bounded buffer, and the sender threads
    otlp_exporters.py           the SDK's OTLP exporters behind them
    outage.py                   why an export failed, in a few words
    bridge.py, prometheus.py    the log bridge; the scrape endpoint
    handle.py                   TelemetryHandle: flush, shutdown, status; exit's pipeline

The OpenTelemetry SDK belongs here: this package may import every layer below it (the
lifecycle's exit list, the span processors of ``signals/``); nothing below the plugin's
process hooks imports it (tests/test_layers.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from .. import semconv as sc
from . import settings
from .export import SignalStatus
from .handle import TelemetryHandle, flush_at_exit
from .providers import Asked, build

__all__ = ["SignalStatus", "TelemetryHandle", "configure_telemetry", "detached"]

logger = logging.getLogger(sc.EXPORT_LOGGER_NAME)

_lock = threading.Lock()
_active: TelemetryHandle | None = None


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
    prometheus_host: str | None = None,
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
    application already installed stay installed: our processors are added to an
    existing tracer and logger provider, and the plugin records metrics into a
    MeterProvider of its own beside an existing one (which cannot take readers); their
    resource is not changed (one message says so). A second call returns the
    first handle. Never blocks on the network; flushes at interpreter exit.
    """
    global _active
    with _lock:
        if _active is not None and not _active.shut:
            logger.debug("configure_telemetry() already ran in this process; keeping that setup")
            return _active
        if settings.sdk_disabled(disabled):
            logger.info("adk_task_telemetry: OpenTelemetry SDK disabled (OTEL_SDK_DISABLED)")
            _active = TelemetryHandle()
            return _active
        if protocol is not None:
            settings.normalize_protocol(protocol, strict=True)  # a typo fails here, not later
        asked = Asked(
            service_name=service_name, service_version=service_version,
            resource_attributes=resource_attributes, endpoint=endpoint, protocol=protocol,
            headers=headers, timeout=timeout,
            use_otlp=otlp if otlp is not None else (
                endpoint is not None or settings.otlp_endpoint_configured()
                or (prometheus_port is None and not console)),
            console=console, prometheus_port=prometheus_port,
            prometheus_host=settings.prometheus_host(prometheus_host),
            interval_ms=settings.metric_export_interval_millis(metric_export_interval_millis),
            exemplar_filter=settings.exemplar_filter_name(exemplar_filter),
            otlp_explicit=otlp is not None)
        handle = TelemetryHandle(build(asked))
        _active = handle
        flush_at_exit(handle)
        return handle


def active() -> TelemetryHandle | None:
    """The handle configure_telemetry() returned in this process, if any."""
    return _active


def replace_active(handle: TelemetryHandle | None) -> TelemetryHandle | None:
    """Makes ``handle`` the one configure_telemetry() returns next (None: the next call
    sets up afresh) and returns the one it replaced. For tests, through
    ``adk_task_telemetry.testing.configure_afresh``: an application has no use for it
    (OpenTelemetry lets a global provider be set only once per process)."""
    global _active
    with _lock:
        previous, _active = _active, handle
    return previous


def detached(*, endpoint: str, protocol: str, timeout: float | None = None,
             service_name: str = "benchmark") -> TelemetryHandle:
    """The same pipeline as configure_telemetry() (OTLP only), installed nowhere.

    For benchmarks that compare two pipelines in one process: pass the handle's
    providers to ``TaskTelemetryPlugin(tracer_provider=..., meter_provider=...)``.
    """
    return TelemetryHandle(build(Asked(
        service_name=service_name, endpoint=endpoint, protocol=protocol, timeout=timeout,
        exemplar_filter=settings.exemplar_filter_name(None), install=False,
        otlp_explicit=True)))
