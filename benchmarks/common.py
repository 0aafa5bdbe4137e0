"""Shared pieces: an OTel SDK set-up with a no-op exporter, timing helpers and a
stand-in for the ADK objects the plugin's callbacks read (to drive them directly)."""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


class NoopSpanExporter(SpanExporter):
    """Accepts every batch and does nothing: the floor of an exporting pipeline."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


@dataclass
class Providers:
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    reader: InMemoryMetricReader

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def make_providers() -> Providers:
    """A real SDK: BatchSpanProcessor + no-op exporter, and a MeterProvider whose
    reader aggregates every measurement (collected only on demand)."""
    tp = TracerProvider()
    tp.add_span_processor(BatchSpanProcessor(NoopSpanExporter()))
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    return Providers(tp, mp, reader)


def quiet_plugin_logger() -> None:
    """Orphan WARNING records would go to stderr through logging's last resort:
    the benchmarks still create every record but hand it to a NullHandler."""
    log = logging.getLogger("adk_task_telemetry")
    log.addHandler(logging.NullHandler())
    log.propagate = False


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def spread(xs: Sequence[float]) -> dict[str, float]:
    """Median, min, max and the inter-quartile range of repeated measurements."""
    xs = sorted(xs)
    if len(xs) >= 4:
        q = statistics.quantiles(xs, n=4)
        iqr = q[2] - q[0]
    else:
        iqr = xs[-1] - xs[0]
    return {"median": median(xs), "min": xs[0], "max": xs[-1], "iqr": iqr, "n": len(xs)}


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) ``fn()`` took, after a full collection so
    that earlier garbage is not billed. CPU time counts every thread of the process
    (the SDK's export thread too) and not the time other processes held the core: on
    a shared machine it is the steadier of the two."""
    gc.collect()
    c0 = time.process_time()
    t0 = time.perf_counter()
    fn()
    t1 = time.perf_counter()
    return t1 - t0, time.process_time() - c0


def rss_bytes() -> int:
    """Resident set size now (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def finite_positive(x: float) -> bool:
    return math.isfinite(x) and x > 0


# --- the tracker driven directly (its verbs, no ADK) ---------------------------------


def direct_run(tracker: Any, invocation_id: str) -> Any:
    """A run of ``tracker`` (testing.tracker), as before_run_callback starts one."""
    from adk_task_telemetry import testing

    return testing.start_run(tracker, invocation_id, app_name="bench",
                             conversation_id="session-1")


def direct_open(tracker: Any, run: Any, call_id: str, task: Any = None) -> Any:
    """A tool task of ``run``, as before_tool_callback opens one (``task`` None: one
    that its callbacks end)."""
    from adk_task_telemetry import testing

    return testing.open_call(tracker, run, call_id, task=task, tool_name="fetch",
                             agent_name="worker")


# --- stand-ins for the ADK objects the plugin reads ---------------------------------


class FakeAgent:
    name = "worker"


class FakeSession:
    def __init__(self, sid: str) -> None:
        self.id = sid


class FakeInvocationContext:
    """What the plugin reads of an InvocationContext (non-live run)."""

    def __init__(self, invocation_id: str) -> None:
        self.invocation_id = invocation_id
        self.app_name = "bench"
        self.agent = FakeAgent()
        self.session = FakeSession("session-" + invocation_id)
        self.live_request_queue = None


class FakeToolContext:
    def __init__(self, call_id: str, ctx: FakeInvocationContext) -> None:
        self.function_call_id = call_id
        self.invocation_id = ctx.invocation_id
        self._invocation_context = ctx


def _fetch(item: int) -> dict[str, int]:
    return {"item": item}


class FunctionTool:
    """Named like ADK's, so ``gen_ai.tool.type`` reads the same."""

    name = "fetch"
    is_long_running = False
    func = staticmethod(_fetch)


class NullPlugin:
    """The same callbacks, doing nothing: the harness cost the plugin is compared to."""

    async def before_run_callback(self, *, invocation_context: Any) -> None:
        return None

    async def after_run_callback(self, *, invocation_context: Any) -> None:
        return None

    async def before_tool_callback(self, *, tool: Any, tool_args: Any, tool_context: Any) -> None:
        return None

    async def after_tool_callback(self, *, tool: Any, tool_args: Any, tool_context: Any,
                                  result: Any) -> None:
        return None


_TOOL = FunctionTool()
_ARGS = {"item": 1}


async def _tool_task(plugin: Any, tc: FakeToolContext) -> dict[str, int]:
    # What ADK does in each tool call's own task: before_tool, the body, after_tool.
    await plugin.before_tool_callback(tool=_TOOL, tool_args=_ARGS, tool_context=tc)
    result = _fetch(1)
    await plugin.after_tool_callback(tool=_TOOL, tool_args=_ARGS, tool_context=tc, result=result)
    return result


async def drive_runs(plugin: Any, runs: int, calls: int, prefix: str = "inv") -> int:
    """``runs`` runs of ``calls`` parallel tool tasks through the plugin's callbacks,
    the way ADK calls them (each tool call in an asyncio task of its own; the task's
    end reaches the plugin through its done-callback). Returns the tasks driven."""
    for r in range(runs):
        ctx = FakeInvocationContext(f"{prefix}-{r}")
        await plugin.before_run_callback(invocation_context=ctx)
        tasks = [asyncio.create_task(_tool_task(plugin, FakeToolContext(f"call-{i}", ctx)))
                 for i in range(calls)]
        await asyncio.gather(*tasks)
        await plugin.after_run_callback(invocation_context=ctx)
    return runs * calls
