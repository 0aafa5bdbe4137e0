"""Shared fixtures: the real OTel SDK with in-memory exporter and reader."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adk_task_telemetry import TaskTelemetryPlugin, adk_compat


@dataclass
class Telemetry:
    """A tracer and meter provider that keep everything in memory."""

    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

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
    yield Telemetry(spans, reader, _GLOBAL_TP, mp)
    _SWITCH.target = None
    mp.shutdown()


@pytest.fixture(scope="session")
def adk_version() -> tuple[int, int, int]:
    return adk_compat.ADK_VERSION


def has_seed_bug() -> bool:
    """ADK issue 7058 is fixed from 2.13.0 on (the per-call background-tool registry)."""
    return not adk_compat.HAS_BACKGROUND_TOOL_REGISTRY
