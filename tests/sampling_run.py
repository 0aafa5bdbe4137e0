"""Runs the scenario corpus under one sampler and prints what the plugin reported.

    python -m tests.sampling_run always_on|always_off|ratio

One process per sampler: ADK traces with the global TracerProvider, which a process
sets once. What is printed is what must not depend on sampling: every tool task's
end and orphan (observers), every unanswered call, and every metric data point's
attributes and count (values of histograms are timings, so their counts only).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, TraceIdRatioBased

from adk_task_telemetry import TaskTelemetryPlugin, observe
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.engine.records import TaskSeen, UnansweredCall
from adk_task_telemetry.scenarios import SCENARIOS, run_scenario

SAMPLERS = {
    "always_on": ALWAYS_ON,
    "always_off": ALWAYS_OFF,
    "ratio": ParentBased(TraceIdRatioBased(0.01)),  # 1 % of traces
}
#: Scenarios whose plugin needs options of its own (strict mode, OpenSpanProcessor).
_SKIP = {"fire_and_forget", "unended_span"}


async def _run(plugin: TaskTelemetryPlugin) -> list[list[Any]]:
    seen: list[list[Any]] = []

    def observer(item: Any) -> None:
        if isinstance(item, TaskSeen):
            seen.append(["task", current, item.call_id, item.tool_name, item.kind,
                         item.outcome, item.cancel_cause, item.error_type, item.trigger])
        elif isinstance(item, UnansweredCall):
            seen.append(["unanswered", current, item.call_id, item.tool_name, item.reason,
                         item.trigger])

    observe.add_observer(observer)
    for current in sorted(n for n in SCENARIOS if n not in _SKIP):
        run = await run_scenario(current, [plugin])
        await run.probe.cleanup()
        await asyncio.sleep(0)
    observe.remove_observer(observer)
    return sorted(seen, key=repr)


def main(sampler: str) -> None:
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    logging.getLogger(sc.LOGGER_NAME).setLevel(logging.ERROR)
    tp = TracerProvider(sampler=SAMPLERS[sampler])
    spans = InMemorySpanExporter()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(tp)
    reader = InMemoryMetricReader()
    plugin = TaskTelemetryPlugin(meter_provider=MeterProvider(metric_readers=[reader]))
    seen = asyncio.run(_run(plugin))
    points = []
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            if sm.scope.name != sc.SCOPE_NAME:
                continue
            for m in sm.metrics:
                for p in m.data.data_points:
                    value = getattr(p, "count", None)
                    points.append([m.name, sorted(dict(p.attributes or {}).items()),
                                   value if value is not None else p.value])
    state = plugin.state()
    print(json.dumps({
        "seen": seen,
        "metrics": sorted(points, key=repr),
        "state": [state.runs, state.open, state.orphans],
        "internal_errors": plugin.internal_errors,
        "tool_spans": sum(1 for s in spans.get_finished_spans()
                          if s.name.startswith(sc.SPAN_NAME_PREFIX)),
    }))


if __name__ == "__main__":
    main(sys.argv[1])
