"""Shared fixtures: the real OTel SDK with in-memory exporter and reader."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
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


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    yield Telemetry(spans, reader, tp, mp)
    tp.shutdown()
    mp.shutdown()


@pytest.fixture(scope="session")
def adk_version() -> tuple[int, int, int]:
    return adk_compat.ADK_VERSION


def has_seed_bug() -> bool:
    """ADK issue 7058 is fixed from 2.13.0 on."""
    return adk_compat.ADK_VERSION < (2, 13, 0)
