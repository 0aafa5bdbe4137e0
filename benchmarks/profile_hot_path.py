"""Where the plugin's cost per tool task goes, through a real Runner (a development tool).

    python -m benchmarks.profile_hot_path [--blocks 8] [--cprofile]

The workload of ``bench_hot_path`` (runs of 10 parallel calls, ADK's telemetry on,
a BatchSpanProcessor with a no-op exporter). Blocks with the plugin and without it
take turns; in the plugin's blocks each of its callbacks (ADK calls them through
the instance, so they are wrapped there) is timed in CPU time of the loop thread; the
tasks' done path (done-callbacks, no public seam to wrap) is in the rest, which
``--cprofile`` breaks down by function. In every block
the garbage collector's own time and collections are counted (``gc.callbacks``).
Printed: µs per tool task of each cost centre, its share of what the plugin adds,
and collections per run with and without it. ``--cprofile`` also prints the
functions with the most own time inside the plugin's blocks.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import pstats
import statistics
import time
from collections import defaultdict
from typing import Any

from .bench_hot_path import CALLS, RUNS_PER_BLOCK, _block, _providers, _runner
from .common import quiet_plugin_logger

_CALLBACKS = ("before_run_callback", "on_event_callback", "before_tool_callback",
              "after_tool_callback", "on_tool_error_callback", "after_run_callback")


class _GcClock:
    """CPU time the collector spends, and how many collections of each generation."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = [0, 0, 0]
        self._t0 = 0.0
        gc.callbacks.append(self)

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.thread_time()
        else:
            self.seconds += time.thread_time() - self._t0
            self.collections[info["generation"]] += 1

    def take(self) -> tuple[float, list[int]]:
        out = (self.seconds, self.collections)
        self.seconds, self.collections = 0.0, [0, 0, 0]
        return out


def _timed(spent: dict[str, float], name: str, fn: Any) -> Any:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.thread_time()
        try:
            return await fn(*args, **kwargs)
        finally:
            spent[name] += time.thread_time() - t0
    return wrapper


async def _profile(blocks: int, with_cprofile: bool) -> None:
    from adk_task_telemetry import TaskTelemetryPlugin

    _providers("always_on")
    plugin = TaskTelemetryPlugin()
    spent: dict[str, float] = defaultdict(float)
    for name in _CALLBACKS:  # instance attributes: ADK calls these
        setattr(plugin, name, _timed(spent, name, getattr(plugin, name)))
    with_p, without = _runner([plugin]), _runner([])
    await _block(with_p, 5)
    await _block(without, 5)
    clock = _GcClock()
    cpu: dict[bool, list[float]] = {True: [], False: []}
    gcs: dict[bool, list[float]] = {True: [], False: []}
    counts: dict[bool, list[list[int]]] = {True: [], False: []}
    prof = cProfile.Profile() if with_cprofile else None
    for b in range(blocks):
        for flag, runner in ((True, with_p), (False, without))[::1 if b % 2 else -1]:
            clock.take()
            if prof is not None and flag:
                prof.enable()
            cpu[flag].append(await _block(runner, RUNS_PER_BLOCK))
            if prof is not None and flag:
                prof.disable()
            seconds, n = clock.take()
            gcs[flag].append(seconds)
            counts[flag].append(n)
    gc.callbacks.remove(clock)
    tasks = blocks * RUNS_PER_BLOCK * CALLS
    added = (sum(cpu[True]) - sum(cpu[False])) / tasks
    gc_added = (sum(gcs[True]) - sum(gcs[False])) / tasks
    print(f"plugin adds {added * 1e6:.1f} us per tool task "
          f"({blocks} blocks of {RUNS_PER_BLOCK} runs x {CALLS} calls each way)")
    rows = [(name, s / tasks) for name, s in sorted(spent.items(), key=lambda kv: -kv[1])]
    rows.append(("garbage collection (added)", gc_added))
    rows.append(("the rest (tasks' done path, ADK's plugin calls)",
                 added - sum(v for _, v in rows)))
    for name, v in rows:
        print(f"  {name:42} {v * 1e6:7.2f} us  {100 * v / added:5.1f} %")
    for flag in (False, True):
        per_run = [statistics.mean(c[g] for c in counts[flag]) / RUNS_PER_BLOCK
                   for g in range(3)]
        print(f"  collections per run {'with' if flag else 'without'} the plugin: "
              f"gen0 {per_run[0]:.2f}, gen1 {per_run[1]:.3f}, gen2 {per_run[2]:.4f}")
    if prof is not None:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(
            r"adk_task_telemetry|opentelemetry", 25)
        print(out.getvalue())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.profile_hot_path")
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--cprofile", action="store_true")
    args = ap.parse_args(argv)
    import logging

    logging.getLogger("google_adk").setLevel(logging.ERROR)
    quiet_plugin_logger()
    asyncio.run(_profile(args.blocks, args.cprofile))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
