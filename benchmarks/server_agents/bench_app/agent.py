"""The agent ADK's server loads in benchmarks/bench_server.py (agents folder layout).

What a user writes in agent.py, in one of four arms chosen by ``BENCH_SERVER_ARM``:
``bare`` (no plugin, no export: ADK's server as it comes), ``plugin`` (the plugin,
no configure_telemetry()), ``export`` (configure_telemetry() to the OTLP/gRPC
endpoint in ``BENCH_SERVER_ENDPOINT``, and the plugin registered first) and
``export_only`` (configure_telemetry() without the plugin: what exporting ADK's own
telemetry costs). The model
is scripted (no network, no key) and CPU-bound work is the tools': every run makes
``BENCH_SERVER_CALLS`` parallel calls of ``crunch``, a synchronous tool that runs
``BENCH_SERVER_WORK`` rounds of integer arithmetic (deterministic: the same work for
every call, whichever arm), then the model answers "done".
"""

from __future__ import annotations

import os
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App

from adk_task_telemetry import TaskTelemetryPlugin, configure_telemetry
from adk_task_telemetry.testing import FanOutLlm

ARM = os.environ.get("BENCH_SERVER_ARM", "bare")
CALLS = int(os.environ.get("BENCH_SERVER_CALLS", "2"))
WORK = int(os.environ.get("BENCH_SERVER_WORK", "20000"))

TELEMETRY: Any = None
if ARM in ("export", "export_only"):
    TELEMETRY = configure_telemetry("bench-server",
                                    endpoint=os.environ["BENCH_SERVER_ENDPOINT"],
                                    protocol="grpc")


def crunch(seed: int) -> dict[str, int]:
    """Computes a checksum (CPU-bound: a fixed number of rounds, no I/O)."""
    h = seed
    for _ in range(WORK):
        h = (h * 1103515245 + 12345) & 0x7FFFFFFF
    return {"checksum": h}


root_agent = LlmAgent(name="cruncher", model=FanOutLlm("crunch", CALLS, arg="seed"),
                      instruction="scripted", tools=[crunch])
PLUGIN = TaskTelemetryPlugin() if ARM in ("plugin", "export") else None
app = App(name="bench_app", root_agent=root_agent,
          plugins=[PLUGIN] if PLUGIN is not None else [])
