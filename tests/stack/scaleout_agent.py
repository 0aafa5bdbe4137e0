"""One agent process of the scale-out test: a real ADK Runner with a scripted model,
the plugin, and ``configure_telemetry()`` exporting OTLP to a gateway collector.

    python -m tests.stack.scaleout_agent --endpoint URL --name NAME
        [--runs N] [--seconds S] [--interval I]

Runs the scenario library in a fixed mix, one run after another, one every
``--interval`` seconds at most: mostly a clean run (``parallel_calls``: three tool
calls that all end ok), every 10th an error run (``parallel_one_fails``: a tool
raises, its siblings are cancelled), every 10th an orphan run (``live_stubborn_tool``:
a streaming tool that ignores cancellation outlives its live run). It prints
``READY`` once set up, ``RAN <n>`` after each run, and stops after ``--runs`` runs,
after ``--seconds``, or when a line arrives on stdin, whichever comes first. Then it
flushes its export and prints one JSON line: every trace it ended, with its span ids,
its kind (``orphan`` when a span carries the ``orphaned_task`` event, else ``error``
when a span has status ERROR, else ``clean``) and its span times. That is the ground
truth the test holds the samplers and Jaeger to: a span processor on the SDK's
provider sees every span this process ends.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import threading
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.trace import StatusCode

from adk_task_telemetry import TaskTelemetryPlugin, configure_telemetry
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.scenarios import run_scenario

#: The run of each kind (index % 10 picks it).
CLEAN, ERROR, ORPHAN = "parallel_calls", "parallel_one_fails", "live_stubborn_tool"


def scenario_for(index: int) -> str:
    return {3: ERROR, 7: ORPHAN}.get(index % 10, CLEAN)


class Recorder(SpanProcessor):
    """Every span this process ends, by trace: what must arrive at the other end."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.traces: dict[str, dict[str, Any]] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        if ctx is None or not ctx.trace_flags.sampled:
            return
        tid = format(ctx.trace_id, "032x")
        orphan = any(e.name == sc.EVENT_ORPHANED_TASK for e in span.events)
        error = span.status.status_code is StatusCode.ERROR
        with self.lock:
            t = self.traces.setdefault(tid, {"spans": [], "orphan": False, "error": False,
                                             "start": span.start_time, "end": span.end_time})
            t["spans"].append(format(ctx.span_id, "016x"))
            t["orphan"] |= orphan
            t["error"] |= error
            t["start"] = min(t["start"] or 0, span.start_time or 0) or span.start_time
            t["end"] = max(t["end"] or 0, span.end_time or 0)

    def result(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            out = {}
            for tid, t in self.traces.items():
                kind = "orphan" if t["orphan"] else "error" if t["error"] else "clean"
                out[tid] = {"kind": kind, "spans": sorted(t["spans"]),
                            "start_ns": t["start"], "end_ns": t["end"]}
            return out


async def load(plugin: TaskTelemetryPlugin, runs: int, seconds: float, interval: float,
               stop: threading.Event) -> int:
    start = time.monotonic()
    deadline = start + seconds
    done = 0
    while done < runs and time.monotonic() < deadline and not stop.is_set():
        ahead = start + done * interval - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)
        run = await run_scenario(scenario_for(done), [plugin])
        await run.probe.cleanup()
        done += 1
        print(f"RAN {done}", flush=True)
    return done


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--endpoint", required=True, help="the gateway's OTLP/HTTP base URL")
    ap.add_argument("--name", required=True, help="service.name of this agent")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=0.0,
                    help="seconds between the starts of two runs (a paced load)")
    args = ap.parse_args(argv)
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    logging.getLogger(sc.LOGGER_NAME).setLevel(logging.ERROR)
    handle = configure_telemetry(args.name, endpoint=args.endpoint, protocol="http/protobuf")
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), provider
    recorder = Recorder()
    provider.add_span_processor(recorder)
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    print("READY", flush=True)
    runs = asyncio.run(load(TaskTelemetryPlugin(), args.runs, args.seconds, args.interval, stop))
    flushed = handle.force_flush(30_000)
    status = {signal: {"sent": s.sent, "dropped": dict(s.dropped)} for signal, s in
              handle.export_status().items()}
    print(json.dumps({"agent": args.name, "runs": runs, "flushed": flushed,
                      "export": status, "traces": recorder.result()}), flush=True)
    handle.shutdown()


if __name__ == "__main__":
    main()
