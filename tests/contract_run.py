"""Runs that make every name of docs/telemetry.md appear, through the real Runner.

``produce()`` runs the scenario library through three plugins (one per option set):
every span, event, attribute, metric and log record of the contract comes out of
it. tests/test_docs.py runs it in process (in-memory SDK) and, as
``python tests/contract_run.py``, in a process set up by
``configure_telemetry(prometheus_port=0)`` (its OTLP export refused, so that what it
drops is counted too), which prints ``READY <port>`` once everything is recorded and
serves ``/metrics`` until its stdin closes: a real scrape.

A new contract name that these runs do not produce fails tests/test_docs.py: add the
run that produces it to ``PLAN``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

from adk_task_telemetry.scenarios import SCENARIOS, run_scenario

#: Plugin option sets, by name.
OPTIONS: dict[str, dict[str, Any]] = {
    # Tool arguments and results (gen_ai.tool.call.arguments / .result).
    "capture": {"capture_arguments": True},
    # Strict mode: a spawned task's span (adk.tool_task.spawned), cancelled by
    # cancel_orphans (cause orphan_cancelled).
    "strict": {"track_spawned_tasks": True, "cancel_orphans": True},
    # adk.tool_task.overflow and its log record.
    "overflow": {"max_open_tasks": 1},
    # stuck_task events (and stuck tool task: records) on a task that outlives the threshold.
    "stuck": {"stuck_after": 0.05},
}

#: (scenario, option set). The audit corpus shows every kind, outcome and cancel
#: cause ADK produces; live_stubborn_tool an orphan on every ADK version (then its
#: end: orphan_lifetime); unended_span the open_span event (OpenSpanProcessor).
PLAN: list[tuple[str, str]] = [
    *((name, "capture") for name, s in SCENARIOS.items() if s.audit),
    ("live_stubborn_tool", "capture"),
    ("unended_span", "capture"),
    ("fire_and_forget", "strict"),
    ("parallel_calls", "overflow"),
    ("live_stubborn_tool", "stuck"),
]


async def produce(make_plugin: Callable[..., Any]) -> list[str]:
    """Runs PLAN with one plugin per option set (``make_plugin(**options)``); every
    leftover task is stopped before it returns. Returns the scenarios' own errors
    (some scenarios end in an error by design: they are not failures)."""
    plugins = {key: make_plugin(**kw) for key, kw in OPTIONS.items()}
    notes = []
    for name, key in PLAN:
        run = await run_scenario(name, [plugins[key]])
        if key == "stuck":
            await _reported_stuck(plugins[key])
        await run.probe.cleanup()
        if run.error is not None:
            notes.append(f"{name}: {type(run.error).__name__}")
    await asyncio.sleep(0)  # the orphans' done-callbacks (orphan_lifetime)
    return notes


async def _reported_stuck(plugin: Any) -> None:
    """Until the stuck sweep has told the plugin's tasks still running (orphans) once."""
    from adk_task_telemetry.testing import stuck_sweeps

    after = plugin.options.stuck_after
    while not all(t.age > after * 1.5 for t in plugin.open_tasks()):
        await asyncio.sleep(0.01)
    sweeps = stuck_sweeps()
    while stuck_sweeps() < sweeps + 2:
        await asyncio.sleep(0.01)


def main() -> None:
    import os

    from adk_task_telemetry import TaskTelemetryPlugin, configure_telemetry

    # OTLP to a port nothing listens on, through a one-span buffer: the spans of the
    # runs are dropped and counted (adk.export.dropped), as in an outage.
    os.environ["ADK_TASK_TELEMETRY_BUFFER_SPANS"] = "1"
    handle = configure_telemetry("contract-scrape", prometheus_port=0, otlp=True,
                                 endpoint=f"http://127.0.0.1:{_closed_port()}")
    asyncio.run(produce(TaskTelemetryPlugin))
    handle.force_flush()
    print(f"READY {handle.prometheus_port}", flush=True)
    sys.stdin.readline()  # the parent has scraped
    handle.shutdown()


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    main()
