"""Tool-task latency when the OTLP endpoint is dead, beside a live one, in one process.

    python -m benchmarks.bench_dead_endpoint [--protocol grpc|http/protobuf]
        [--dead blackhole|refusing] [--rounds 30] [--runs 5]

Two pipelines built exactly as configure_telemetry() builds them (OTLP exporters fed
from a bounded buffer by sender threads, behind the SDK's batch processors), one
pointed at a live OTLP receiver on 127.0.0.1, one at a dead endpoint (a black hole
that accepts and never answers, or a refused port). Each has its own
TaskTelemetryPlugin; rounds interleave the two (alternating who goes first)
running the real scripted ``parallel_calls`` ADK scenario. Tool-task latency is
each tool_task span's own duration (creation to end, as the plugin measures it);
medians are per round, then over rounds, and the dead/live ratio is taken per
round and its median reported. Prints JSON.

ADK's own spans go to the process's global (no-op) provider in both variants:
what differs is only where the plugin's telemetry is exported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.otlp_receivers import (  # noqa: E402
    BlackHole,
    GrpcReceiver,
    HttpReceiver,
    refusing_endpoint,
)

from adk_task_telemetry import TaskTelemetryPlugin, adk_compat  # noqa: E402
from adk_task_telemetry.configure import detached  # noqa: E402
from adk_task_telemetry.scenarios import run_scenario  # noqa: E402

SCENARIO = "parallel_calls"  # lookup_order x2 (async, sleeps 10 ms) + add_numbers (sync)


class ToolTaskTimes(SpanProcessor):
    """Collects (tool, duration in ms) of every tool_task span as it ends."""

    def __init__(self) -> None:
        self.samples: list[tuple[str, float]] = []

    def on_end(self, span: ReadableSpan) -> None:
        if span.name.startswith("tool_task ") and span.end_time and span.start_time:
            self.samples.append((span.name[len("tool_task "):],
                                 (span.end_time - span.start_time) / 1e6))

    def take(self) -> list[tuple[str, float]]:
        out, self.samples = self.samples, []
        return out


class Variant:
    def __init__(self, name: str, endpoint: str, protocol: str, timeout: float) -> None:
        self.name = name
        self.handle = detached(endpoint=endpoint, protocol=protocol, timeout=timeout)
        assert self.handle.tracer_provider is not None
        self.times = ToolTaskTimes()
        self.handle.tracer_provider.add_span_processor(self.times)
        self.plugin = TaskTelemetryPlugin(tracer_provider=self.handle.tracer_provider,
                                          meter_provider=self.handle.meter_provider)

    async def round(self, runs: int) -> dict[str, Any]:
        run_ms: list[float] = []
        for _ in range(runs):
            t0 = time.perf_counter()
            run = await run_scenario(SCENARIO, [self.plugin])
            run_ms.append((time.perf_counter() - t0) * 1e3)
            await run.probe.cleanup()
        samples = self.times.take()
        by_tool: dict[str, list[float]] = {}
        for tool, ms in samples:
            by_tool.setdefault(tool, []).append(ms)
        return {"run_ms": statistics.median(run_ms),
                "tool_ms": {t: statistics.median(v) for t, v in by_tool.items()},
                "all_tool_ms": statistics.median(ms for _, ms in samples)}


def _median(xs: Sequence[float]) -> float:
    return round(statistics.median(xs), 4)


async def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--protocol", choices=["grpc", "http/protobuf"], default="grpc")
    ap.add_argument("--dead", choices=["blackhole", "refusing"], default="blackhole")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--runs", type=int, default=5, help="scenario runs per variant per round")
    ap.add_argument("--timeout", type=float, default=None,
                    help="OTLP export timeout in seconds (default: configure_telemetry's)")
    args = ap.parse_args(argv)

    logging.getLogger("google_adk").setLevel(logging.ERROR)  # ADK's per-run chatter
    receiver: GrpcReceiver | HttpReceiver = (
        GrpcReceiver() if args.protocol == "grpc" else HttpReceiver())
    hole = BlackHole() if args.dead == "blackhole" else None
    dead_endpoint = hole.endpoint if hole is not None else refusing_endpoint()
    live = Variant("live", receiver.endpoint, args.protocol, args.timeout or 5.0)
    dead = Variant("dead", dead_endpoint, args.protocol, args.timeout or 5.0)
    per_round: list[dict[str, Any]] = []
    try:
        for warm in (live, dead):  # imports, first connections, caches
            await warm.round(1)
        for i in range(args.rounds):
            order = (live, dead) if i % 2 == 0 else (dead, live)
            results = {v.name: await v.round(args.runs) for v in order}
            per_round.append(results)
        live.handle.force_flush(timeout_millis=2000)
    finally:
        live.handle.shutdown(timeout_millis=5000)
        dead.handle.shutdown(timeout_millis=1000)  # its export in flight is abandoned
        received = len(receiver.received.tool_spans())
        receiver.stop()
        if hole is not None:
            hole.stop()

    def series(variant: str, key: str, tool: str | None = None) -> list[float]:
        if tool is None:
            return [r[variant][key] for r in per_round]
        return [r[variant][key][tool] for r in per_round if tool in r[variant][key]]

    tools = sorted({t for r in per_round for t in r["live"]["tool_ms"]})
    out: dict[str, Any] = {
        "benchmark": "dead_endpoint",
        "protocol": args.protocol, "dead_endpoint": args.dead,
        "rounds": args.rounds, "runs_per_round": args.runs, "scenario": SCENARIO,
        "tool_task_ms_median": {"live": _median(series("live", "all_tool_ms")),
                                "dead": _median(series("dead", "all_tool_ms"))},
        "tool_task_ratio_median": _median([r["dead"]["all_tool_ms"] / r["live"]["all_tool_ms"]
                                           for r in per_round]),
        "per_tool_ms_median": {t: {"live": _median(series("live", "tool_ms", t)),
                                   "dead": _median(series("dead", "tool_ms", t))}
                               for t in tools},
        "run_ms_median": {"live": _median(series("live", "run_ms")),
                          "dead": _median(series("dead", "run_ms"))},
        "run_ratio_median": _median([r["dead"]["run_ms"] / r["live"]["run_ms"]
                                     for r in per_round]),
        "live_tool_spans_received": received,
        "dead_export_failing_at_end": dead.handle.export_failing,
        "dead_export_status": {k: {"buffered": v.buffered, "dropped": v.dropped}
                               for k, v in dead.handle.export_status().items()},
        "environment": {"python": platform.python_version(),
                        "google_adk": adk_compat.ADK_VERSION_STRING,
                        "opentelemetry_sdk": version("opentelemetry-sdk"),
                        "cpus": os.cpu_count()},
    }
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main()), indent=2))
