"""Event-loop lag the plugin adds under load, beside the same load without it.

    python -m benchmarks.bench_loop_lag [--rounds 9] [--runs 200] [--calls 10]

Each round runs ``run_concurrent_mixed`` (``runs`` concurrent ADK runs with
``calls`` parallel tool calls each, a quarter of the runs with a failing call)
twice in one process, once with no plugin and once with TaskTelemetryPlugin on real
SDK providers (batch span processor, no-op exporter), alternating who goes first.
A probe task sleeps 1 ms in a loop meanwhile; its lag is how late each wake-up
comes. Reported: the median and p99 of the lag per variant (medians over rounds)
and the median per-round ratio of the p99s. Prints JSON; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from adk_task_telemetry import TaskTelemetryPlugin
from adk_task_telemetry.scenarios import run_concurrent_mixed

from .common import make_providers, quiet_plugin_logger

_TICK = 0.001


async def _probe(stop: asyncio.Event, lags: list[float]) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(_TICK)
        lags.append(time.perf_counter() - t - _TICK)


def _p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


async def _round(plugins: list[Any], runs: int, calls: int) -> dict[str, float]:
    stop = asyncio.Event()
    lags: list[float] = []
    probe = asyncio.create_task(_probe(stop, lags))
    t = time.perf_counter()
    await run_concurrent_mixed(plugins, runs=runs, calls=calls)
    wall = time.perf_counter() - t
    stop.set()
    await probe
    return {"median_ms": statistics.median(lags) * 1e3, "p99_ms": _p(lags, 0.99) * 1e3,
            "wall_s": wall}


async def main(rounds: int, runs: int, calls: int) -> dict[str, Any]:
    quiet_plugin_logger()
    providers = make_providers()
    plugin = TaskTelemetryPlugin(tracer_provider=providers.tracer_provider,
                                 meter_provider=providers.meter_provider)
    out: dict[str, list[dict[str, float]]] = {"none": [], "plugin": []}
    await _round([], runs, calls)  # warm-up: imports, first-run caches
    for i in range(rounds):
        order = [("none", []), ("plugin", [plugin])]
        if i % 2:
            order.reverse()
        for name, plugins in order:
            out[name].append(await _round(plugins, runs, calls))
    ratios = [p["p99_ms"] / n["p99_ms"] for n, p in zip(out["none"], out["plugin"], strict=True)
              if n["p99_ms"] > 0]

    def med(name: str, key: str) -> float:
        return round(statistics.median(r[key] for r in out[name]), 3)

    return {
        "workload": {"concurrent_runs": runs, "parallel_calls": calls, "rounds": rounds},
        "lag_median_ms": {"none": med("none", "median_ms"), "plugin": med("plugin", "median_ms")},
        "lag_p99_ms": {"none": med("none", "p99_ms"), "plugin": med("plugin", "p99_ms")},
        "wall_s": {"none": med("none", "wall_s"), "plugin": med("plugin", "wall_s")},
        "p99_ratio_plugin_over_none": round(statistics.median(ratios), 3) if ratios else None,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--calls", type=int, default=10)
    a = ap.parse_args()
    print(json.dumps(asyncio.run(main(a.rounds, a.runs, a.calls)), indent=2))
