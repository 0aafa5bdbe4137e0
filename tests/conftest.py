"""Shared fixtures: the real OTel SDK with in-memory exporters for spans, metrics and logs."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs import export as log_export
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adk_task_telemetry import TaskTelemetryPlugin, adk_compat, semconv

with warnings.catch_warnings():  # the SDK's handler is deprecated for a contrib one; it works
    warnings.simplefilter("ignore", DeprecationWarning)
    from opentelemetry.sdk._logs import LoggingHandler

# SDK 1.39 renamed the in-memory log exporter (the old name warns); 1.37 has only the old one.
_InMemoryLogExporter: Any = (getattr(log_export, "InMemoryLogRecordExporter", None)
                             or log_export.InMemoryLogExporter)


@dataclass
class Telemetry:
    """A tracer, meter and logger provider that keep everything in memory.

    ``logs`` gets what the ``adk_task_telemetry`` logger says at WARNING and above (an
    orphan, an unanswered call, a span left open) through the SDK's LoggingHandler, as
    configure_telemetry() bridges it: each record carries the trace context it was
    emitted in.
    """

    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    logs: Any = field(default_factory=_InMemoryLogExporter)
    logger_provider: LoggerProvider = field(
        default_factory=lambda: LoggerProvider(shutdown_on_exit=False))

    def plugin(self, **kw: Any) -> TaskTelemetryPlugin:
        return TaskTelemetryPlugin(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **kw)

    def tool_spans(self) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name.startswith("tool_task ")]

    def by_call(self) -> dict[str, ReadableSpan]:
        out: dict[str, ReadableSpan] = {}
        for s in self.tool_spans():
            call_id = str((s.attributes or {})["gen_ai.tool.call.id"])
            assert call_id not in out, f"two spans for {call_id}"
            out[call_id] = s
        return out

    def metrics(self) -> dict[str, list[Any]]:
        """Instrument name -> data points, from one collection."""
        data = self.reader.get_metrics_data()
        out: dict[str, list[Any]] = {}
        if data is None:
            return out
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                if sm.scope.name != "adk_task_telemetry":
                    continue
                for m in sm.metrics:
                    out.setdefault(m.name, []).extend(m.data.data_points)
        return out

    def log_records(self, startswith: str = "") -> list[Any]:
        """The OTel log records (body, severity, trace_id, span_id, attributes) the
        plugin emitted so far, in order; only those whose body starts with
        ``startswith`` when given (e.g. ``"orphaned tool task:"``)."""
        return [r.log_record for r in self.logs.get_finished_logs()
                if str(r.log_record.body).startswith(startswith)]


class _Switch(SpanProcessor):
    """Forwards ended spans to the exporter of the test that is running.

    ADK writes its own spans (invocation, execute_tool) to the global provider,
    which can be set once per process; this lets each test see them.
    """

    def __init__(self) -> None:
        self.target: SpanProcessor | None = None

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if self.target is not None:
            self.target.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if self.target is not None:
            self.target.on_end(span)


_SWITCH = _Switch()
_GLOBAL_TP = TracerProvider()
_GLOBAL_TP.add_span_processor(_SWITCH)
trace.set_tracer_provider(_GLOBAL_TP)


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    spans = InMemorySpanExporter()
    _SWITCH.target = SimpleSpanProcessor(spans)
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    t = Telemetry(spans, reader, _GLOBAL_TP, mp)
    t.logger_provider.add_log_record_processor(log_export.SimpleLogRecordProcessor(t.logs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        handler = LoggingHandler(level=logging.WARNING, logger_provider=t.logger_provider)
    # As configure_telemetry() bridges it: the export pipeline's own health messages
    # (adk_task_telemetry.export) stay local.
    handler.addFilter(lambda r: not r.name.startswith(f"{semconv.LOGGER_NAME}.export"))
    ours = logging.getLogger(semconv.LOGGER_NAME)
    ours.addHandler(handler)
    try:
        yield t
    finally:
        ours.removeHandler(handler)
        _SWITCH.target = None
        mp.shutdown()
        t.logger_provider.shutdown()


@pytest.fixture(scope="session")
def adk_version() -> tuple[int, int, int]:
    return adk_compat.ADK_VERSION


def has_seed_bug() -> bool:
    """ADK issue 7058 is fixed from 2.13.0 on (the per-call background-tool registry)."""
    return not adk_compat.HAS_BACKGROUND_TOOL_REGISTRY
