"""The cost per tool task against what else is open (issue 24): flat, or not.

    python -m benchmarks.bench_curve                 # 1, 10, 100, 1,000 concurrent runs
    python -m benchmarks.bench_curve --quick         # 1 and 10, a few pairs (a smoke run)
    python -m benchmarks.bench_curve --record        # also benchmarks/results/curve.json

Through real ADK ``Runner``s, ADK's own telemetry on (an SDK TracerProvider with a
BatchSpanProcessor and a no-op exporter, an SDK MeterProvider), one process. For each
level K, K runs are held open in the background, each with 10 tool tasks waiting
(so up to 10,000 open tasks at K = 1,000: the plugin's ``max_open_tasks`` is set to
hold them and the measured runs' tasks, so nothing overflows). Then blocks of
measured runs (10 parallel calls each, tools that return at once) through a Runner
with the plugin and through one without it take turns; both Runners' background
runs are open the whole time (the bare one's too, so ADK's share of the load is the
same on both sides). Each pair of blocks gives the plugin's added CPU time per tool
task of the event loop's thread (``time.thread_time``); the median over the pairs is
reported per level, and its ratio to the first level. The collector's heap is frozen
after each level's set-up (``gc.freeze()``): what is compared is the work per task,
not how long a collection of a bigger heap takes. A run's end is inside every
measured run: if it read all open tasks or all runs, the figure would grow with K.
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
from pathlib import Path
from typing import Any

from .bench_hot_path import CALLS, _block, _providers
from .common import quiet_plugin_logger

RESULTS = Path(__file__).with_name("results")
LEVELS = (1, 10, 100, 1000)
HELD_PER_RUN = 10
RUNS_PER_BLOCK = 10
PAIRS = 24


def _model(tool: str, calls: int) -> Any:
    """A model that calls ``tool`` ``calls`` times in a run's first turn (unique call
    ids) and answers "done" once the responses are back: each run gets its own calls,
    however many runs share it."""
    from adk_task_telemetry.testing import FanOutLlm

    return FanOutLlm(tool, calls)


class _Side:
    """One side of the comparison: a measured Runner and a background Runner, both
    with the same plugin (or both without), and the background runs held open."""

    def __init__(self, plugin: Any) -> None:
        from google.adk.agents import LlmAgent
        from google.adk.apps import App
        from google.adk.runners import Runner
        from google.adk.sessions import InMemorySessionService

        self.plugin = plugin
        self.release = asyncio.Event()
        self.held = 0
        self._enough = asyncio.Event()
        self._target = 0
        self.background: list[asyncio.Task[Any]] = []
        plugins = [plugin] if plugin is not None else []
        service = InMemorySessionService()

        async def fetch(item: int) -> dict[str, int]:
            """Fetches one item."""
            return {"item": item}

        async def hold(item: int) -> dict[str, int]:
            """Holds until released."""
            self.held += 1
            if self.held >= self._target:
                self._enough.set()
            await self.release.wait()
            return {"item": item}

        self.runner = Runner(app=App(name="bench", root_agent=LlmAgent(
            name="worker", model=_model("fetch", CALLS), instruction="x", tools=[fetch]),
            plugins=plugins), session_service=service)
        self.bg_runner = Runner(app=App(name="held", root_agent=LlmAgent(
            name="holder", model=_model("hold", HELD_PER_RUN), instruction="x",
            tools=[hold]), plugins=plugins), session_service=service)

    async def hold_runs(self, total: int) -> None:
        """Starts background runs until ``total`` are open, and waits until every one
        of their tool tasks is running (a positive signal: the tools count in)."""
        from google.genai import types

        content = types.Content(role="user", parts=[types.Part(text="go")])
        self._target = total * HELD_PER_RUN
        self._enough.clear()
        if self.held >= self._target:
            self._enough.set()

        async def one(session_id: str) -> None:
            async with contextlib.aclosing(self.bg_runner.run_async(
                    user_id="u", session_id=session_id, new_message=content)) as agen:
                async for _event in agen:
                    pass

        while len(self.background) < total:
            session = await self.bg_runner.session_service.create_session(
                app_name="held", user_id="u")
            self.background.append(asyncio.ensure_future(one(session.id)))
        await self._enough.wait()

    async def stop(self) -> None:
        self.release.set()
        await asyncio.gather(*self.background, return_exceptions=True)


async def _measure(levels: tuple[int, ...], pairs: int) -> dict[str, Any]:
    import logging

    from adk_task_telemetry import TaskTelemetryPlugin

    logging.getLogger("google_adk").setLevel(logging.ERROR)
    quiet_plugin_logger()
    _providers("always_on")
    plugin = TaskTelemetryPlugin(max_open_tasks=max(levels) * HELD_PER_RUN + CALLS)
    sides = {True: _Side(plugin), False: _Side(None)}
    for side in sides.values():  # warm-up
        await _block(side.runner, 3)
    out: dict[str, Any] = {"levels": []}
    for k in levels:
        gc.unfreeze()
        for side in sides.values():
            await side.hold_runs(k)
        gc.collect()
        gc.freeze()
        state = plugin.state()
        added = []
        for p in range(pairs):
            order = [True, False] if p % 2 else [False, True]
            got = {flag: await _block(sides[flag].runner, RUNS_PER_BLOCK) for flag in order}
            added.append((got[True] - got[False]) / (RUNS_PER_BLOCK * CALLS))
        row = {"runs_open": k, "tasks_open": state.open, "runs_held": state.runs,
               "added_us_per_task": statistics.median(added) * 1e6, "pairs": len(added)}
        out["levels"].append(row)
        print(f"  {k:5} runs open ({state.open:6} tasks): plugin adds "
              f"{row['added_us_per_task']:6.1f} us/task", flush=True)
    gc.unfreeze()
    for side in sides.values():
        await side.stop()
    first = out["levels"][0]["added_us_per_task"]
    for row in out["levels"]:
        row["to_first"] = row["added_us_per_task"] / first if first > 0 else None
    out["internal_errors"] = plugin.internal_errors
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args(argv)
    from importlib.metadata import version

    levels, pairs = ((1, 10), 4) if args.quick else (LEVELS, PAIRS)
    print(f"google-adk {version('google-adk')}, Python {sys.version.split()[0]}: "
          f"{pairs} pairs of {RUNS_PER_BLOCK} runs x {CALLS} calls per level", flush=True)
    result = asyncio.run(_measure(levels, pairs))
    result.update(google_adk=version("google-adk"), python=sys.version.split()[0],
                  date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    print("  to the first level: " + ", ".join(
        f"{r['runs_open']}: {r['to_first']:.2f}" for r in result["levels"]))
    if args.record and not args.quick:
        (RESULTS / "curve.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


def markdown() -> list[str]:
    """docs/benchmarks.md's section on this benchmark, from the recorded run."""
    path = RESULTS / "curve.json"
    if not path.exists():
        return []
    r = json.loads(path.read_text())
    lines = ["## Cost per task against what else is open (issue 24)", "",
             "`python -m benchmarks.bench_curve --record` (`make bench`), on "
             f"{r['date']}, google-adk {r['google_adk']}, Python {r['python']}, on a machine "
             "shared with other work (2 cores): CPU time, paired. "
             + " ".join(__doc__.split("\n\n")[2].split()), "",
             "| runs open | tool tasks open | plugin adds, us/task | x the first level |",
             "|---|---|---|---|"]
    for row in r["levels"]:
        lines.append(f"| {row['runs_open']:,} | {row['tasks_open']:,} | "
                     f"{row['added_us_per_task']:.1f} | {row['to_first']:.2f} |")
    return [*lines, ""]


if __name__ == "__main__":
    raise SystemExit(main())
