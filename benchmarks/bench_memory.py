"""Memory per open tool task (issue 24): what the plugin holds for each task still
running, beside what ADK holds for it anyway.

    python -m benchmarks.bench_memory              # 1,000 runs x 10 open tasks
    python -m benchmarks.bench_memory --quick      # 20 runs x 10 (a smoke run)
    python -m benchmarks.bench_memory --record     # also benchmarks/results/memory.json

Through a real ADK ``Runner`` (ADK's own telemetry on: an SDK TracerProvider with a
BatchSpanProcessor and a no-op exporter, an SDK MeterProvider). Each run's model calls
one tool 10 times in parallel; the tool waits on an event, so every call stays an open
tool task. The runs are started until all their tasks are waiting (a positive signal:
the tools count in), then what the process holds is read, and the event is set so
that every task ends. Once with the plugin (``max_open_tasks`` set to hold them all)
and once without it, in that order and then the other: the plugin's bytes per open
task are the difference over the number of open tasks. Read two ways: ``tracemalloc``
(the Python heap, in this process, two rounds) and the resident set size (a fresh
process per side, no tracemalloc: what the operating system sees, allocator slack
included). Memory per orphan alive is benchmarks/bench_orphans.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from .bench_curve import _model
from .bench_hot_path import _providers
from .common import quiet_plugin_logger, rss_bytes

RESULTS = Path(__file__).with_name("results")
ROOT = Path(__file__).resolve().parent.parent
CALLS = 10


class _Held:
    """A Runner whose runs' tool tasks all wait on one event, with or without the plugin."""

    def __init__(self, plugin: Any) -> None:
        from google.adk.agents import LlmAgent
        from google.adk.apps import App
        from google.adk.runners import Runner
        from google.adk.sessions import InMemorySessionService

        self.plugin = plugin
        self.release = asyncio.Event()
        self.waiting = 0
        self._enough = asyncio.Event()
        self._target = 0

        async def hold(item: int) -> dict[str, int]:
            """Holds until released."""
            self.waiting += 1
            if self.waiting >= self._target:
                self._enough.set()
            await self.release.wait()
            self.waiting -= 1
            return {"item": item}

        self.runner = Runner(app=App(name="bench", root_agent=LlmAgent(
            name="holder", model=_model("hold", CALLS), instruction="x", tools=[hold]),
            plugins=[plugin] if plugin is not None else []),
            session_service=InMemorySessionService())

    async def _one(self) -> None:
        from google.genai import types

        session = await self.runner.session_service.create_session(app_name="bench",
                                                                   user_id="u")
        content = types.Content(role="user", parts=[types.Part(text="go")])
        async with contextlib.aclosing(self.runner.run_async(
                user_id="u", session_id=session.id, new_message=content)) as agen:
            async for _event in agen:
                pass

    async def hold(self, runs: int) -> list[asyncio.Task[None]]:
        """Starts ``runs`` runs and returns once all their tool tasks are waiting."""
        self.release.clear()
        self._enough.clear()
        self._target = runs * CALLS
        tasks = [asyncio.ensure_future(self._one()) for _ in range(runs)]
        await self._enough.wait()
        return tasks

    async def finish(self, tasks: list[asyncio.Task[None]]) -> None:
        self.release.set()
        await asyncio.gather(*tasks)


def _plugin(runs: int) -> Any:
    from adk_task_telemetry import TaskTelemetryPlugin

    return TaskTelemetryPlugin(max_open_tasks=runs * CALLS + 100)


async def _traced(runs: int, side: str) -> tuple[int, int]:
    """(bytes the Python heap grew by with ``runs`` runs' tasks open, tasks the plugin
    held open), one side, in this process."""
    held = _Held(_plugin(runs) if side == "plugin" else None)
    await held.finish(await held.hold(1))  # warm-up: first-use caches
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tasks = await held.hold(runs)
    gc.collect()
    grew = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    open_tasks = held.plugin.state().open if held.plugin is not None else 0
    await held.finish(tasks)
    return grew, open_tasks


async def _rss(runs: int, side: str) -> dict[str, int]:
    """The resident set size before and with ``runs`` runs' tasks open (a child)."""
    held = _Held(_plugin(runs) if side == "plugin" else None)
    await held.finish(await held.hold(1))
    gc.collect()
    before = rss_bytes()
    tasks = await held.hold(runs)
    gc.collect()
    grew = rss_bytes() - before
    open_tasks = held.plugin.state().open if held.plugin is not None else 0
    await held.finish(tasks)
    return {"grew": grew, "open": open_tasks}


def _setup() -> None:
    import logging

    logging.getLogger("google_adk").setLevel(logging.ERROR)
    quiet_plugin_logger()
    _providers("always_on")


async def _measure_traced(runs: int) -> dict[str, Any]:
    per_task = []
    rounds = []
    for order in (("plugin", "bare"), ("bare", "plugin")):
        got = {side: await _traced(runs, side) for side in order}
        tasks = runs * CALLS
        if got["plugin"][1] != tasks:
            raise RuntimeError(f"the plugin held {got['plugin'][1]} open tasks, not {tasks}")
        per_task.append((got["plugin"][0] - got["bare"][0]) / tasks)
        rounds.append({"order": list(order), "plugin_bytes": got["plugin"][0],
                       "bare_bytes": got["bare"][0]})
    return {"tracemalloc_bytes_per_open_task": statistics.median(per_task),
            "tracemalloc_rounds": rounds}


def _child(runs: int, side: str) -> dict[str, int]:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_memory", "--rss-child",
                           side, str(runs)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=True)
    result: dict[str, int] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--rss-child", nargs=2, metavar=("SIDE", "RUNS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    _setup()
    if args.rss_child:
        print(json.dumps(asyncio.run(_rss(int(args.rss_child[1]), args.rss_child[0]))))
        return 0
    from importlib.metadata import version

    runs = 20 if args.quick else 1000
    r: dict[str, Any] = {"runs": runs, "open_tasks": runs * CALLS,
                         **asyncio.run(_measure_traced(runs))}
    rss = {side: _child(runs, side) for side in ("plugin", "bare")}
    r["rss_bytes_per_open_task"] = (rss["plugin"]["grew"] - rss["bare"]["grew"]) / (runs * CALLS)
    r["rss"] = rss
    r.update(google_adk=version("google-adk"), python=sys.version.split()[0],
             date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    print(f"google-adk {r['google_adk']}: {r['open_tasks']:,} open tool tasks; the plugin "
          f"holds {r['tracemalloc_bytes_per_open_task']:,.0f} bytes per open task "
          f"(tracemalloc, median of 2 rounds), {r['rss_bytes_per_open_task']:,.0f} bytes "
          f"(resident set size)")
    if args.record and not args.quick:
        (RESULTS / "memory.json").write_text(json.dumps(r, indent=1) + "\n")
    return 0


def markdown() -> list[str]:
    """docs/benchmarks.md's section on this benchmark, from the recorded run."""
    path = RESULTS / "memory.json"
    if not path.exists():
        return []
    r = json.loads(path.read_text())
    rounds = ", ".join(f"{(x['plugin_bytes'] - x['bare_bytes']) / r['open_tasks']:,.0f}"
                       for x in r["tracemalloc_rounds"])
    bare = statistics.median(x["bare_bytes"] for x in r["tracemalloc_rounds"]) / r["open_tasks"]
    lines = ["## Memory per open task (issue 24)", "",
             "`python -m benchmarks.bench_memory --record` (`make bench`), on "
             f"{r['date']}, google-adk {r['google_adk']}, Python {r['python']}. "
             + " ".join(__doc__.split("\n\n")[2].split()), "",
             "| what | figure |", "|---|---|",
             f"| open tool tasks | {r['open_tasks']:,} ({r['runs']:,} runs x {CALLS}) |",
             f"| plugin's bytes per open task, Python heap (tracemalloc; rounds: {rounds}) | "
             f"{r['tracemalloc_bytes_per_open_task']:,.0f} |",
             f"| plugin's bytes per open task, resident set size | "
             f"{r['rss_bytes_per_open_task']:,.0f} |",
             f"| for scale: what ADK and the run hold per open task without the plugin "
             f"(tracemalloc) | {bare:,.0f} |"]
    orphans = RESULTS / "orphans.json"
    if orphans.exists():
        o = json.loads(orphans.read_text())
        lines.append(f"| for comparison: bytes per orphan alive (bench_orphans, "
                     f"{o['date']}) | {o['bytes_per_orphan']:,.0f} |")
    lines += ["", "The per-task CPU cost up to `max_open_tasks` open tasks is the section "
              "\"Cost per task against what else is open\" above: its last level holds "
              "1,000 runs x 10 = 10,000 open tool tasks, the default `max_open_tasks`.", ""]
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
