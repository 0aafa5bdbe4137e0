"""10,000 orphans alive (issue 24): what a run's end costs with them, what each one's end
costs, and the memory each one holds.

    python -m benchmarks.bench_orphans              # 1,000 runs x 10 orphans
    python -m benchmarks.bench_orphans --quick      # 50 runs x 10 (a smoke run)
    python -m benchmarks.bench_orphans --record     # also benchmarks/results/orphans.json

Through a real ADK ``Runner`` (ADK's own telemetry on: an SDK TracerProvider with a
BatchSpanProcessor and a no-op exporter, an SDK MeterProvider), the plugin in strict
mode (``track_spawned_tasks=True``). Each run makes one tool call whose body spawns 10
asyncio tasks that wait on one event and returns: at the run's end the plugin reports
those 10 as orphans (span, events, metrics, a WARNING record handed to a NullHandler),
and they stay alive. CPU time of the event loop's thread (``time.thread_time``) per
run, the first tenth of the runs (few orphans alive) against the last tenth (up to
10,000 alive): a run's end that read every orphan alive would grow. Then the event is
set and every orphan ends: CPU time per orphan's end. Memory, in a second pass with
``tracemalloc`` on (200 runs each way): what the runs hold with the plugin minus the
same runs without it, per orphan alive.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from .bench_curve import _model
from .bench_hot_path import _providers
from .common import quiet_plugin_logger

RESULTS = Path(__file__).with_name("results")
SPAWNED = 10


def _runner(plugin: Any, release: asyncio.Event, spawned: list[asyncio.Future[Any]]) -> Any:
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService

    async def spawn(item: int) -> dict[str, int]:
        """Starts background work and returns."""
        spawned.extend(asyncio.ensure_future(release.wait()) for _ in range(SPAWNED))
        return {"item": item}

    return Runner(app=App(name="bench", root_agent=LlmAgent(
        name="worker", model=_model("spawn", 1), instruction="x", tools=[spawn]),
        plugins=[plugin] if plugin is not None else []),
        session_service=InMemorySessionService())


async def _run(runner: Any) -> float:
    from google.genai import types

    session = await runner.session_service.create_session(app_name="bench", user_id="u")
    content = types.Content(role="user", parts=[types.Part(text="go")])
    c0 = time.thread_time()
    async with contextlib.aclosing(runner.run_async(
            user_id="u", session_id=session.id, new_message=content)) as agen:
        async for _event in agen:
            pass
    return time.thread_time() - c0


async def _cpu(runs: int) -> dict[str, Any]:
    from adk_task_telemetry import TaskTelemetryPlugin

    release = asyncio.Event()
    spawned: list[asyncio.Future[Any]] = []
    plugin = TaskTelemetryPlugin(track_spawned_tasks=True, max_open_tasks=runs * SPAWNED + 100)
    runner = _runner(plugin, release, spawned)
    per_run = [await _run(runner) for _ in range(runs)]
    alive = plugin.state().orphans
    tenth = max(runs // 10, 1)
    first, last = statistics.median(per_run[:tenth]), statistics.median(per_run[-tenth:])
    gc.collect()
    c0 = time.thread_time()
    release.set()
    await asyncio.gather(*spawned)
    while plugin.state().orphans:  # each orphan's end is handed to the loop: wait for all
        await asyncio.sleep(0)
    end_cpu = time.thread_time() - c0
    return {"runs": runs, "orphans_alive": alive, "run_first_tenth_us": first * 1e6,
            "run_last_tenth_us": last * 1e6, "last_to_first": last / first,
            "orphan_end_us": end_cpu / max(alive, 1) * 1e6,
            "internal_errors": plugin.internal_errors}


async def _memory(runs: int) -> dict[str, Any]:
    from adk_task_telemetry import TaskTelemetryPlugin

    held: dict[str, float] = {}
    for name in ("bare", "plugin"):
        release = asyncio.Event()
        spawned: list[asyncio.Future[Any]] = []
        plugin = (TaskTelemetryPlugin(track_spawned_tasks=True,
                                      max_open_tasks=runs * SPAWNED + 100)
                  if name == "plugin" else None)
        runner = _runner(plugin, release, spawned)
        await _run(runner)  # warm-up: first-use caches
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(runs):
            await _run(runner)
        gc.collect()
        held[name] = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        release.set()
        await asyncio.gather(*spawned)
    orphans = runs * SPAWNED
    return {"memory_runs": runs, "bytes_per_orphan": (held["plugin"] - held["bare"]) / orphans}


async def _measure(runs: int, memory_runs: int) -> dict[str, Any]:
    import logging

    logging.getLogger("google_adk").setLevel(logging.ERROR)
    quiet_plugin_logger()
    _providers("always_on")
    return {**await _cpu(runs), **await _memory(memory_runs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args(argv)
    from importlib.metadata import version

    runs, memory_runs = (50, 20) if args.quick else (1000, 200)
    r = asyncio.run(_measure(runs, memory_runs))
    r.update(google_adk=version("google-adk"), python=sys.version.split()[0],
             date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    print(f"google-adk {r['google_adk']}: {r['orphans_alive']:,} orphans alive after "
          f"{runs:,} runs; a run (its end reports 10 orphans) {r['run_first_tenth_us']:,.0f} us "
          f"in the first tenth, {r['run_last_tenth_us']:,.0f} us in the last "
          f"({r['last_to_first']:.2f}x); an orphan's end {r['orphan_end_us']:.1f} us; "
          f"{r['bytes_per_orphan']:,.0f} bytes per orphan alive")
    if args.record and not args.quick:
        (RESULTS / "orphans.json").write_text(json.dumps(r, indent=1) + "\n")
    return 0


def markdown() -> list[str]:
    """docs/benchmarks.md's section on this benchmark, from the recorded run."""
    path = RESULTS / "orphans.json"
    if not path.exists():
        return []
    r = json.loads(path.read_text())
    return ["## 10,000 orphans alive (issue 24)", "",
            "`python -m benchmarks.bench_orphans --record` (`make bench`), on "
            f"{r['date']}, google-adk {r['google_adk']}, Python {r['python']}, on a machine "
            "shared with other work (2 cores). " + " ".join(__doc__.split("\n\n")[2].split()),
            "", "| what | figure |", "|---|---|",
            f"| orphans alive at the end | {r['orphans_alive']:,} |",
            f"| a run whose end reports 10 orphans, first tenth of the runs (median) | "
            f"{r['run_first_tenth_us']:,.0f} us |",
            f"| the same, last tenth (up to {r['orphans_alive']:,} alive) | "
            f"{r['run_last_tenth_us']:,.0f} us ({r['last_to_first']:.2f}x) |",
            f"| an orphan's end (CPU per orphan, all ending at once) | "
            f"{r['orphan_end_us']:.1f} us |",
            f"| memory per orphan alive (plugin minus bare, {r['memory_runs']} runs) | "
            f"{r['bytes_per_orphan']:,.0f} bytes |", ""]


if __name__ == "__main__":
    raise SystemExit(main())
