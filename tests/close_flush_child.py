"""A process whose last telemetry goes out only by its runners' closes (test_close_flush).

``python close_flush_child.py <endpoint>``: configure_telemetry() to an OTLP/HTTP
receiver with batch delays and a metric interval that never pass, a plugin in strict
mode, and one run whose tool spawns a task that outlives it (an orphan). Then, with no
run in between:

1. the Runner closes (the orphan is alive: ``orphans_alive`` 1);
2. the orphan ends (``orphan_lifetime`` gets a point, ``orphans_alive`` goes to 0:
   metrics recorded outside any run, nothing else);
3. a second Runner on the same App closes: its flush must send those metrics at once
   (orphan measurements are not coalesced);
4. the application records a metric of its own (outside any run: no plugin sees it)
   into the MeterProvider configure_telemetry() installed, and a third Runner closes,
   within the coalescing interval of the second's collection (widened to
   ``INTERVAL_S`` so that a loaded machine cannot push it out): it sends no metrics at
   once, and the deferred collection must send the metric (waited for: the export's
   own count goes up);
5. a fourth closes right after it, with nothing new.

After each close (and the deferred collection) it records the metric batches sent so
far; then it dies with ``os._exit`` (as a server that uvicorn's re-raised SIGTERM
kills: no atexit, no shutdown), so only what the closes flushed reaches the receiver.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

#: The coalescing interval here (close_flush.CLOSE_METRICS_EVERY_S is 1 s).
INTERVAL_S = 3.0
FAR_AWAY = {"OTEL_BSP_SCHEDULE_DELAY": "600000", "OTEL_BLRP_SCHEDULE_DELAY": "600000",
            "OTEL_METRIC_EXPORT_INTERVAL": "600000"}


async def main(endpoint: str) -> dict[str, Any]:
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    from adk_task_telemetry import TaskTelemetryPlugin, configure_telemetry
    from adk_task_telemetry.scenarios import ScriptedLlm, call, text

    handle = configure_telemetry(service_name="close-flush", endpoint=endpoint,
                                 protocol="http/protobuf")
    release = asyncio.Event()
    spawned: list[asyncio.Task[Any]] = []

    async def spawner() -> dict[str, str]:
        """Starts background work and returns."""
        spawned.append(asyncio.get_running_loop().create_task(release.wait()))
        return {"status": "started"}

    model = ScriptedLlm([[call("spawner", "call-spawner")], [text("done")]])
    agent = LlmAgent(name="spawning_agent", model=model, instruction="scripted",
                     tools=[spawner])
    plugin = TaskTelemetryPlugin(track_spawned_tasks=True)
    app = App(name="close_flush", root_agent=agent, plugins=[plugin])
    sessions = InMemorySessionService()
    runner = Runner(app=app, session_service=sessions)
    session = await sessions.create_session(app_name="close_flush", user_id="u")
    msg = types.Content(role="user", parts=[types.Part(text="go")])
    async for _event in runner.run_async(user_id="u", session_id=session.id, new_message=msg):
        pass
    out: dict[str, Any] = {"orphans_after_run": plugin.state().orphans}

    def sent() -> int:
        return handle.export_status()["metrics"].sent

    await runner.close()
    out["metrics_sent"] = [sent()]
    release.set()
    await asyncio.gather(*spawned)
    while plugin.state().orphans:  # the orphan's end reaches the plugin by done-callback
        await asyncio.sleep(0)
    out["orphans_after_release"] = plugin.state().orphans
    await Runner(app=app, session_service=sessions).close()
    out["metrics_sent"].append(sent())
    # The application's own metric, outside any run: no plugin sees it.
    from opentelemetry import metrics

    metrics.get_meter("the_app").create_counter("app.jobs").add(1)
    await Runner(app=app, session_service=sessions).close()
    out["metrics_sent"].append(sent())
    # The deferred collection: the positive signal is the export's own count rising
    # (when the close deferred; if it collected at once, the test fails on that).
    while sent() == out["metrics_sent"][-1] == out["metrics_sent"][-2]:
        await asyncio.sleep(0.05)
    out["metrics_sent"].append(sent())
    await Runner(app=app, session_service=sessions).close()
    out["metrics_sent"].append(sent())
    return out


if __name__ == "__main__":
    os.environ.update(FAR_AWAY)
    from adk_task_telemetry.testing import close_metrics_every

    with close_metrics_every(INTERVAL_S):
        result = asyncio.run(main(sys.argv[1]))
    print("RESULT " + json.dumps(result), flush=True)
    os._exit(0)  # no atexit: only what the closes flushed has left the process
