"""One configuration of section 2, in a process of its own (global OTel providers
are set once per process). The parent starts one worker per configuration and
drives them in lock-step over stdin/stdout, one JSON line per request, so that the
configurations' rounds interleave while only one of them runs at a time.

Configurations:
  none         no telemetry at all (the OTel API's no-op defaults)
  adk          ADK's own telemetry: SDK TracerProvider + MeterProvider set globally
  adk_plugin   the same + TaskTelemetryPlugin
  adk_openinference  the same + OpenInference's GoogleADKInstrumentor
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

CONFIGS = ("none", "adk", "adk_plugin", "adk_openinference")


def _setup(config: str) -> list[Any]:
    """Installs the configuration; returns the plugins to register."""
    from .common import make_providers, quiet_plugin_logger

    quiet_plugin_logger()
    if config == "none":
        return []
    from opentelemetry import metrics, trace

    providers = make_providers()
    trace.set_tracer_provider(providers.tracer_provider)
    metrics.set_meter_provider(providers.meter_provider)
    if config == "adk":
        return []
    if config == "adk_plugin":
        from adk_task_telemetry import TaskTelemetryPlugin

        return [TaskTelemetryPlugin()]
    if config == "adk_openinference":
        from openinference.instrumentation.google_adk import GoogleADKInstrumentor

        GoogleADKInstrumentor().instrument(tracer_provider=providers.tracer_provider)
        return []
    raise ValueError(f"unknown configuration {config!r}")


def _reply(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    config = sys.argv[1]
    try:
        plugins = _setup(config)
    except Exception as e:  # e.g. OpenInference does not import: the parent skips it
        _reply({"ready": False, "reason": f"{type(e).__name__}: {e}"})
        return
    from adk_task_telemetry.scenarios import run_parallel_calls

    loop = asyncio.new_event_loop()
    _reply({"ready": True})
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("op") == "quit":
            break
        runs, calls = int(req["runs"]), int(req["calls"])
        t0 = time.perf_counter()
        bodies = loop.run_until_complete(run_parallel_calls(plugins, runs=runs, calls=calls))
        elapsed = time.perf_counter() - t0
        state: list[int] = []
        for p in plugins:
            ledger = getattr(p, "_ledger", None)
            if ledger is not None:
                state = list(ledger.state_size())
        _reply({"seconds": elapsed, "bodies": bodies, "state_size": state})
    loop.close()


if __name__ == "__main__":
    main()
