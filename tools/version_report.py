"""Runs every scenario on the installed google-adk and prints what happened as JSON.

`make matrix` runs it in each version's venv; tools/versions_doc.py turns the
results into docs/versions.md. Per scenario: the tools' own ground truth (which
calls' bodies ran, and which were still running when the scenario ended) beside
what the plugin reported (each tool task's outcome, and the orphans).
"""

from __future__ import annotations

import asyncio
import json
import platform
import sys
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adk_task_telemetry import TaskTelemetryPlugin, adk_compat
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.scenarios import SCENARIOS, run_scenario


def _orphans(spans: InMemorySpanExporter) -> list[str]:
    return sorted(str((s.attributes or {}).get(sc.GEN_AI_TOOL_CALL_ID))
                  for s in spans.get_finished_spans() if s.name.startswith("tool_task ")
                  and any(e.name == sc.EVENT_ORPHANED_TASK for e in s.events))


async def one(name: str) -> dict[str, Any]:
    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    mp = MeterProvider(metric_readers=[InMemoryMetricReader()])
    plugin = TaskTelemetryPlugin(tracer_provider=tp, meter_provider=mp)
    out: dict[str, Any] = {"name": name}
    try:
        run = await run_scenario(name, [plugin], close_runner=False)
    except Exception as e:  # a scenario that cannot run on this ADK
        out["failure"] = f"{type(e).__name__}: {e}"
        return out
    try:
        # What was reported by the time the scenario's caller was done: before
        # Runner.close() (which ends any run still open, trigger plugin_close).
        out["orphans_at_end"] = _orphans(spans)
        for runner in {id(r): r for r, _ in run.sessions}.values():
            await runner.close()
        await asyncio.sleep(0)
        out["ran"] = sorted(c for c in run.probe.tasks if "/" not in c)
        out["pending"] = sorted(c for c in run.probe.pending() if "/" not in c)
        tasks = {}
        for s in spans.get_finished_spans():
            if not s.name.startswith("tool_task "):
                continue
            a = dict(s.attributes or {})
            cause = next((e.attributes.get(sc.ADK_TOOL_TASK_CANCEL_CAUSE)
                          for e in s.events if e.name == sc.EVENT_CANCELLED
                          and e.attributes), None)
            orphan = next((e.attributes.get(sc.ADK_RUN_END_TRIGGER)
                           for e in s.events if e.name == sc.EVENT_ORPHANED_TASK
                           and e.attributes), None)
            tasks[str(a[sc.GEN_AI_TOOL_CALL_ID])] = {
                "kind": a.get(sc.ADK_TOOL_TASK_KIND),
                "outcome": a.get(sc.ADK_TOOL_TASK_OUTCOME),
                "detail": cause or a.get(sc.ERROR_TYPE) or orphan,
            }
        out["tasks"] = tasks
        out["orphans"] = sorted(c for c, t in tasks.items() if t["outcome"] == "orphaned")
        out["plugin_internal_errors"] = plugin.internal_errors
    finally:
        await run.probe.cleanup()
    return out


async def _hooks() -> list[str]:
    """The hooks a plugin puts on this ADK (one made and closed to see them)."""
    plugin = TaskTelemetryPlugin()
    hooks = adk_compat.live_hooks()
    await plugin.close()
    return hooks


async def main() -> None:
    # ADK's own spans record, as under configure_telemetry(): the plugin can see a run's
    # span end (trigger run_span_end) as a deployment does.
    trace.set_tracer_provider(TracerProvider())
    doc = {
        "google-adk": adk_compat.ADK_VERSION_STRING,
        "python": platform.python_version(),
        "features": adk_compat.features(),
        "hooks": await _hooks(),
        "scenarios": [await one(n) for n in SCENARIOS],
    }
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    asyncio.run(main())
