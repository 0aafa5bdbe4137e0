"""Profiles the plugin's per-task hot path (a development tool, not part of `make bench`).

    python -m benchmarks.profile_hot_path [--tasks N] [--lines] [--runner]

cProfile over N tool tasks driven through the plugin's callbacks (as ADK drives
them: runs of 10 parallel tasks); with ``--lines`` also line_profiler over the
plugin's and tracker's hot functions (``pip install line_profiler`` first; it is not
a dependency of the project); with ``--runner`` the same workload through ADK's
Runner, to show the plugin's share of a real run.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import sys
from typing import Any

from .common import drive_runs, make_providers, quiet_plugin_logger


def _plugin() -> Any:
    from adk_task_telemetry import TaskTelemetryPlugin

    prov = make_providers()
    return TaskTelemetryPlugin(tracer_provider=prov.tracer_provider,
                               meter_provider=prov.meter_provider)


def _cprofile(tasks: int, runner: bool) -> None:
    plugin = _plugin()
    loop = asyncio.new_event_loop()
    if runner:
        from adk_task_telemetry.scenarios import run_parallel_calls

        def work() -> None:
            loop.run_until_complete(run_parallel_calls([plugin], runs=tasks // 10, calls=10))
    else:
        def work() -> None:
            loop.run_until_complete(drive_runs(plugin, tasks // 10, 10, prefix="prof"))
    work()  # warm-up
    prof = cProfile.Profile()
    prof.enable()
    work()
    prof.disable()
    out = io.StringIO()
    st = pstats.Stats(prof, stream=out)
    st.sort_stats("tottime").print_stats(30)
    st.sort_stats("cumulative").print_stats(r"adk_task_telemetry|opentelemetry", 40)
    print(out.getvalue())
    loop.close()


def _lines(tasks: int) -> None:
    try:
        from line_profiler import LineProfiler  # type: ignore[import-not-found]
    except ImportError:
        print("line_profiler is not installed: pip install line_profiler", file=sys.stderr)
        return
    from adk_task_telemetry import plugin as plugin_mod
    from adk_task_telemetry import tracker as tracker_mod

    lp = LineProfiler()
    for fn in (plugin_mod.TaskTelemetryPlugin.before_tool_callback,
               plugin_mod.TaskTelemetryPlugin.after_tool_callback,
               plugin_mod.TaskTelemetryPlugin.before_run_callback,
               tracker_mod.Tracker.run_started, tracker_mod.Tracker.opened,
               tracker_mod.Tracker._bind, tracker_mod.Tracker._task_done,
               tracker_mod.Tracker._end_from_task, tracker_mod.Tracker._end,
               tracker_mod.Tracker._leave, tracker_mod.Tracker._end_run):
        lp.add_function(fn)
    plugin = _plugin()
    loop = asyncio.new_event_loop()
    loop.run_until_complete(drive_runs(plugin, 100, 10, prefix="warm"))
    lp.enable_by_count()
    loop.run_until_complete(drive_runs(plugin, tasks // 10, 10, prefix="lp"))
    lp.disable_by_count()
    lp.print_stats(output_unit=1e-6, stripzeros=True)
    loop.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.profile_hot_path")
    ap.add_argument("--tasks", type=int, default=20000)
    ap.add_argument("--lines", action="store_true", help="line_profiler too")
    ap.add_argument("--runner", action="store_true", help="through ADK's Runner")
    args = ap.parse_args(argv)
    quiet_plugin_logger()
    _cprofile(args.tasks, args.runner)
    if args.lines:
        _lines(args.tasks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
