"""What one ``Runner.close()`` costs the process: CPU time and threads started.

    python -m benchmarks.bench_close [--closes 200] [--protocol grpc|http/protobuf]

configure_telemetry() exports to a live OTLP receiver on 127.0.0.1; one
TaskTelemetryPlugin is shared by a fresh ADK Runner per iteration, which runs the
scripted ``single_call`` scenario's agent once and is then closed (ADK calls the
plugin's ``close()``, which flushes what was recorded). Measured per close: process
CPU time (every thread, the flush included) and the threads started, counted by
wrapping ``threading.Thread.start`` in this process only. Prints JSON.
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
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.otlp_receivers import GrpcReceiver, HttpReceiver  # noqa: E402

_started = 0
_real_start = threading.Thread.start


def _counting_start(self: threading.Thread) -> None:
    global _started
    _started += 1
    _real_start(self)


async def _closes(n: int) -> dict[str, Any]:
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    from adk_task_telemetry import TaskTelemetryPlugin
    from adk_task_telemetry.scenarios import ScriptedLlm, call, text

    def add_numbers(a: int, b: int) -> dict[str, int]:
        """Adds two numbers."""
        return {"sum": a + b}

    plugin = TaskTelemetryPlugin()
    cpu: list[float] = []
    wall: list[float] = []
    threads: list[int] = []
    msg = types.Content(role="user", parts=[types.Part(text="go")])
    for i in range(n):
        model = ScriptedLlm([[call("add_numbers", f"c{i}", a=1, b=2)], [text("done")]])
        agent = LlmAgent(name="a", model=model, instruction="x", tools=[add_numbers])
        runner = Runner(app=App(name="bench_close", root_agent=agent, plugins=[plugin]),
                        session_service=InMemorySessionService())
        session = await runner.session_service.create_session(app_name="bench_close",
                                                              user_id="u")
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=msg):
            pass
        before_threads, c0, w0 = _started, time.process_time(), time.perf_counter()
        await runner.close()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        threads.append(_started - before_threads)
    return {"closes": n,
            "cpu_ms_per_close_median": round(statistics.median(cpu) * 1e3, 3),
            "cpu_ms_per_close_mean": round(statistics.fmean(cpu) * 1e3, 3),
            "wall_ms_per_close_median": round(statistics.median(wall) * 1e3, 3),
            "threads_started_per_close_mean": round(statistics.fmean(threads), 3),
            "threads_started_total": sum(threads)}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--closes", type=int, default=200)
    ap.add_argument("--protocol", choices=["grpc", "http/protobuf"], default="grpc")
    args = ap.parse_args(argv)
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    receiver = GrpcReceiver() if args.protocol == "grpc" else HttpReceiver()
    from importlib.metadata import version

    from adk_task_telemetry import configure_telemetry

    handle = configure_telemetry("bench-close", endpoint=receiver.endpoint,
                                 protocol=args.protocol)
    threading.Thread.start = _counting_start  # type: ignore[method-assign]
    try:
        out = asyncio.run(_closes(args.closes))
    finally:
        threading.Thread.start = _real_start  # type: ignore[method-assign]
        handle.shutdown()
        receiver.stop()
    out.update({"benchmark": "close", "protocol": args.protocol,
                "environment": {"python": platform.python_version(),
                                "google_adk": version("google-adk"),
                                "opentelemetry_sdk": version("opentelemetry-sdk"),
                                "cpus": os.cpu_count()}})
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
