"""The stuck sweep and the oldest-age collection, per open task (issue 33).

    python -m benchmarks.bench_stuck_sweep            # 10 and 10,000 open tasks
    python -m benchmarks.bench_stuck_sweep --record   # also benchmarks/results/stuck_sweep.json
    python -m benchmarks.bench_stuck_sweep --quick    # 10 and 1,000, few rounds (a smoke run)

A tracker (what one plugin holds, on SDK providers with a no-op exporter) with N tool
tasks open, each an asyncio task waiting on one event, every one bound to its record as
``before_tool_callback`` binds it. Measured, in CPU time of this thread
(``time.thread_time``), median of repeated rounds, divided by N:

- ``sweep_idle``: one sweep when no task is due (the steady state: every task younger
  than ``stuck_after``, or already reported for its current age): what the timer costs
  every ``stuck_after`` / 4 seconds while tasks are open;
- ``sweep_report``: one sweep in which every task is due for its first report (a stuck
  record each: span made, event, WARNING record to a NullHandler; a stack for the first
  100): the worst sweep, bounded by ``stuck.REPORTS_PER_SWEEP`` (250) reports;
- ``collect``: one metric collection (``started``, ``active`` and ``oldest_age``, read
  from the open records), through the SDK's InMemoryMetricReader.

A task's start and end do nothing for the sweep: that is benchmarks.callgrind_hot_path's
figure, feature on against the same commit without it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from .common import make_providers, quiet_plugin_logger

RESULTS = Path(__file__).with_name("results")
SIZES = (10, 10_000)


class _Open:
    """A tracker with ``n`` tool tasks open, each waiting on one event."""

    def __init__(self, n: int) -> None:
        from adk_task_telemetry import testing

        self.n = n
        self.providers = make_providers()
        self.tracker = testing.tracker(self.providers.tracer_provider,
                                       self.providers.meter_provider, max_open_tasks=n + 1)
        self.gate = asyncio.Event()
        self.run = testing.start_run(self.tracker, f"inv-{n}")
        self.tasks = []
        for i in range(n):
            task = asyncio.ensure_future(self.gate.wait())
            self.tasks.append(task)
            testing.open_call(self.tracker, self.run, f"call-{i}", task=task)

    async def close(self) -> None:
        from adk_task_telemetry import testing

        self.gate.set()
        await asyncio.gather(*self.tasks)
        testing.end_run(self.tracker, self.run)
        self.providers.shutdown()


async def _measure(n: int, rounds: int) -> dict[str, float]:
    from adk_task_telemetry.engine import stuck_sweep as stuck

    loop = asyncio.get_running_loop()
    out: dict[str, float] = {}
    world = _Open(n)
    await asyncio.sleep(0)
    try:
        stuck.watch(world.tracker, 3600.0, False)  # nothing due
        stuck.sweep(loop)
        out["sweep_idle"] = _per_task(lambda: stuck.sweep(loop), n, rounds)
        world.providers.reader.get_metrics_data()
        out["collect"] = _per_task(world.providers.reader.get_metrics_data, n, rounds)
        stuck.watch(world.tracker, 0.0, False)
    finally:
        await world.close()
    # Every task due for its first report: a fresh set of tasks each round.
    samples = []
    for _ in range(5):
        world = _Open(n)
        await asyncio.sleep(0)
        try:
            stuck.watch(world.tracker, 1e-9, False)
            t0 = time.thread_time_ns()
            stuck.sweep(loop)
            samples.append((time.thread_time_ns() - t0) / min(n, stuck.REPORTS_PER_SWEEP))
            stuck.watch(world.tracker, 0.0, False)
        finally:
            await world.close()
    out["sweep_report"] = statistics.median(samples)
    return out


def _per_task(fn: Any, n: int, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        t0 = time.thread_time_ns()
        fn()
        samples.append((time.thread_time_ns() - t0) / n)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    quiet_plugin_logger()
    results: dict[str, dict[str, float]] = {}
    sizes = (10, 1000) if args.quick else SIZES
    if args.quick:
        args.rounds = 5
    for n in sizes:
        results[str(n)] = asyncio.run(_measure(n, args.rounds))
        r = results[str(n)]
        print(f"{n:>6} open tasks: sweep (none due) {r['sweep_idle']:8.0f} ns/task, "
              f"sweep (all due) {r['sweep_report']:8.0f} ns/report, "
              f"collection {r['collect']:8.0f} ns/task", flush=True)
    if args.record:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "stuck_sweep.json").write_text(json.dumps(
            {"unit": "ns of CPU per open task (sweep_report: per report)",
             "python": sys.version.split()[0], "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
