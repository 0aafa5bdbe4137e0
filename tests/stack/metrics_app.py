"""An agent process of the stack tests: scenarios through configure_telemetry().

    python tests/stack/metrics_app.py otlp SERVICE_NAME [--workload W]
    python tests/stack/metrics_app.py scrape SERVICE_NAME PORT [HOST] [--workload W]

``otlp``: configure_telemetry() as a user calls it, its metrics going where the OTEL_*
variables of the environment say (the test points them at Prometheus 3's OTLP receiver
or at the collector), at the export interval those variables set (the SDK's 60 s by
default). ``scrape``: configure_telemetry(prometheus_port=PORT) serving /metrics, OTLP
off; HOST is passed as ``prometheus_host`` when given, else the default (or
OTEL_EXPORTER_PROMETHEUS_HOST) applies.

Workloads:

- ``corpus`` (default): every scenario of the library once: the ADK-behaviour corpus,
  the seed bug among them, and the application bugs that orphan on every ADK version,
  so that the orphan panels have something to show on ADK 2.13 too;
- ``wrong``: what each alert rule exists for, at once, each on its own tool: an orphan
  that keeps running (live_stubborn_tool: AdkToolTaskOrphaned, AdkToolTaskOrphansAlive),
  a synchronous tool cut by its caller (thread_pool_timeout: AdkToolCallUnanswered), a
  call that never returns inside a run that waits for it (``await_approval`` of agent
  ``approver``: AdkToolTaskStuck), and then, until the end, parallel calls of which one
  fails and cancels its siblings, twice a second (parallel_one_fails:
  AdkToolTaskErrorRateHigh);
- ``clean``: runs with nothing wrong (single_call, parallel_calls, recovered_error,
  agent_tool), twice a second until the end.

It prints ``ready`` once the one-off scenarios have run (the loops keep going), then
keeps running, with its orphaned tool bodies alive, until it is terminated (SIGTERM:
configure_telemetry's exit hook flushes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from adk_task_telemetry import TaskTelemetryPlugin, configure_telemetry
from adk_task_telemetry.scenarios import SCENARIOS, ScenarioRun, ScriptedLlm, call, run_scenario

# Strict mode and OpenSpanProcessor scenarios show nothing in metrics.
SKIP = ("fire_and_forget", "unended_span")
WRONG_ONCE = ("live_stubborn_tool", "thread_pool_timeout")
WRONG_LOOP = "parallel_one_fails"
CLEAN_LOOP = ("single_call", "parallel_calls", "recovered_error", "agent_tool")
LOOP_PAUSE_S = 0.5


async def _once(name: str, plugin: TaskTelemetryPlugin, runs: list[ScenarioRun]) -> None:
    # The runners stay open, as a server's do: closing a runner flushes the plugin's
    # metrics at once (the plugin's close), which a long-lived agent does not do between
    # its periodic exports (and a pool's gauges report only while its runner lives).
    with contextlib.suppress(Exception):
        runs.append(await run_scenario(name, [plugin], close_runner=False))


async def _loop(names: tuple[str, ...], plugin: TaskTelemetryPlugin) -> None:
    while True:
        for name in names:
            with contextlib.suppress(Exception):
                run = await run_scenario(name, [plugin])
                await run.probe.cleanup()
        await asyncio.sleep(LOOP_PAUSE_S)


async def _stuck_call(plugin: TaskTelemetryPlugin, started: asyncio.Event) -> None:
    """A run whose one tool call never returns: the call stays in flight in its run."""

    async def await_approval(request: str) -> dict[str, str]:
        """Waits for a human approval that never comes."""
        started.set()
        await asyncio.Event().wait()
        return {"approved": request}

    agent = LlmAgent(name="approver", model=ScriptedLlm(turns=[[call(
        "await_approval", "call-approval", request="refund")]]), instruction="scripted",
        tools=[await_approval])
    runner = Runner(app=App(name="scenarios", root_agent=agent, plugins=[plugin]),
                    session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="scenarios", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text="go")])
    async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
        pass


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("otlp", "scrape"))
    parser.add_argument("service")
    parser.add_argument("port", nargs="?", type=int)
    parser.add_argument("host", nargs="?")
    parser.add_argument("--workload", choices=("corpus", "wrong", "clean"), default="corpus")
    args = parser.parse_args(argv)
    if args.mode == "scrape":
        # prometheus_host only when asked: its default (and OTEL_EXPORTER_PROMETHEUS_HOST)
        # is what the stack tests are about.
        extra = {"prometheus_host": args.host} if args.host else {}
        handle = configure_telemetry(service_name=args.service, prometheus_port=args.port,
                                     otlp=False, **extra)
        print(f"serving {handle.prometheus_host}:{handle.prometheus_port}", file=sys.stderr)
    else:
        configure_telemetry(service_name=args.service)
    plugin = TaskTelemetryPlugin()
    runs: list[ScenarioRun] = []
    background: list[asyncio.Task[Any]] = []
    if args.workload == "corpus":
        for name in SCENARIOS:
            if name not in SKIP:
                await _once(name, plugin, runs)
    elif args.workload == "wrong":
        for name in WRONG_ONCE:
            await _once(name, plugin, runs)
        started = asyncio.Event()
        background.append(asyncio.create_task(_stuck_call(plugin, started)))
        await asyncio.wait_for(started.wait(), 30)
        background.append(asyncio.create_task(_loop((WRONG_LOOP,), plugin)))
    else:
        background.append(asyncio.create_task(_loop(CLEAN_LOOP, plugin)))
    print("ready", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    for task in background:
        task.cancel()
    for run in runs:
        with contextlib.suppress(Exception):
            await run.probe.cleanup()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(sys.argv[1:]))
