"""Section 2's worker processes. Global OTel providers are set once per process, so:

  process "off"  no global providers (the OTel API's no-op defaults); variants
                 ``none`` and ``plugin_only`` (the plugin with its own SDK providers)
  process "on"   SDK TracerProvider + MeterProvider set globally, so ADK records its
                 own spans and metrics; variants ``adk``, ``adk_null_plugin`` (a plugin
                 whose callbacks do nothing: what ADK charges for any plugin),
                 ``adk_plugin`` and ``adk_openinference`` (OpenInference's
                 GoogleADKInstrumentor, instrumented before and uninstrumented after
                 each of its samples, outside the timing)

The parent starts both and drives them in lock-step over stdin/stdout, one JSON
line per request, so all variants interleave and only one runs at a time; the
variants that share a process are compared in that process.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import sys
import time
from typing import Any

PROCESSES: dict[str, tuple[str, ...]] = {
    "off": ("none", "plugin_only"),
    "on": ("adk", "adk_null_plugin", "adk_plugin", "adk_openinference"),
}


def _null_plugin() -> Any:
    from google.adk.plugins.base_plugin import BasePlugin

    class NullPlugin(BasePlugin):
        def __init__(self) -> None:
            super().__init__(name="null_plugin")

        async def before_run_callback(self, *, invocation_context: Any) -> None:
            return None

        async def after_run_callback(self, *, invocation_context: Any) -> None:
            return None

        async def before_tool_callback(self, *, tool: Any, tool_args: Any,
                                       tool_context: Any) -> None:
            return None

        async def after_tool_callback(self, *, tool: Any, tool_args: Any, tool_context: Any,
                                      result: Any) -> None:
            return None

    return NullPlugin()


class _Process:
    def __init__(self, kind: str) -> None:
        from adk_task_telemetry import TaskTelemetryPlugin

        from .common import make_providers

        self.plugins: dict[str, list[Any]] = {}
        self.instrumentor: Any = None
        self.instrumented = False
        self.unavailable: dict[str, str] = {}
        providers = make_providers()
        self.tracer_provider = providers.tracer_provider
        if kind == "off":
            self.plugins["none"] = []
            self.plugins["plugin_only"] = [TaskTelemetryPlugin(
                tracer_provider=providers.tracer_provider,
                meter_provider=providers.meter_provider)]
            return
        from opentelemetry import metrics, trace

        trace.set_tracer_provider(providers.tracer_provider)
        metrics.set_meter_provider(providers.meter_provider)
        self.plugins["adk"] = []
        self.plugins["adk_null_plugin"] = [_null_plugin()]
        self.plugins["adk_plugin"] = [TaskTelemetryPlugin()]
        try:
            from openinference.instrumentation.google_adk import GoogleADKInstrumentor

            self.instrumentor = GoogleADKInstrumentor()
            self.plugins["adk_openinference"] = []
        except Exception as e:
            self.unavailable["adk_openinference"] = (
                f"openinference-instrumentation-google-adk does not import here "
                f"({type(e).__name__}: {e}); install it with pip install -e '.[bench]'")

    def prepare(self, variant: str) -> None:
        want = variant == "adk_openinference"
        if want and not self.instrumented:
            self.instrumentor.instrument(tracer_provider=self.tracer_provider)
            self.instrumented = True
        elif not want and self.instrumented:
            self.instrumentor.uninstrument()
            self.instrumented = False


def _reply(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    from .common import quiet_plugin_logger

    quiet_plugin_logger()
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    proc = _Process(sys.argv[1])
    from adk_task_telemetry.scenarios import run_parallel_calls

    loop = asyncio.new_event_loop()
    _reply({"ready": True, "variants": list(proc.plugins), "unavailable": proc.unavailable})
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("op") == "quit":
            break
        variant, runs, calls = str(req["variant"]), int(req["runs"]), int(req["calls"])
        proc.prepare(variant)
        plugins = proc.plugins[variant]
        gc.collect()  # earlier garbage is not billed to this sample
        c0 = time.process_time()
        t0 = time.perf_counter()
        bodies = loop.run_until_complete(run_parallel_calls(plugins, runs=runs, calls=calls))
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - c0
        state: list[int] = []
        for p in plugins:
            if hasattr(p, "state"):
                s = p.state()
                state = [s.runs, s.orphans]
        _reply({"seconds": elapsed, "cpu_seconds": cpu, "bodies": bodies, "state_size": state})
    loop.close()


if __name__ == "__main__":
    main()
