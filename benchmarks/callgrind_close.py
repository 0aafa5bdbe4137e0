"""What the flush at a ``Runner.close()`` costs, per signal, in instructions (callgrind).

    python -m benchmarks.callgrind_close [--record]     # needs valgrind (Debian: valgrind)

The plugin's ``close()`` flushes what was recorded when no run is busy (a server's
last close comes right before uvicorn dies by SIGTERM: process_exit.py). Measured here in a
process like ``callgrind_hot_path``'s (a real ``Runner``, 10 parallel calls a run,
ADK's telemetry on: SDK providers with batch processors and no-op exporters, a
MeterProvider with an in-memory reader), each in a process of its own under callgrind,
all threads counted, instruction counting on only around the measured step. Each
figure is a slope, 4 steps minus 1, per step:

- ``idle``: the step again with nothing recorded since the last one (back-to-back
  closes, a server closing its runners one after another);
- ``after_run``: the step right after one run (10 tool tasks: about 25 spans, ours
  and ADK's, and their metric points), as a Runner per request does.

Steps: each provider's ``force_flush`` alone (``traces``, ``metrics``, ``logs``), and
the plugin's whole ``close()`` (``close``: the flush in process_exit.py's worker thread,
awaited).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).with_name("results")
STEPS = ("none", "traces", "metrics", "logs", "flush", "close")
SCENARIOS = ("idle", "after_run")
SMALL, LARGE = 1, 4


def _noop_log_exporter() -> Any:
    from adk_task_telemetry.configure.sdk_side import _LOG_SUCCESS, _LogExporterBase

    class Noop(_LogExporterBase):  # type: ignore[misc]
        def export(self, batch: Any) -> Any:
            return _LOG_SUCCESS

        def shutdown(self) -> None:
            return None

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return True

    return Noop()


def _toggle(state: str) -> None:
    subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], check=True,
                   capture_output=True)


async def _child(step: str, scenario: str, reps: int) -> None:
    from opentelemetry import _logs
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

    from adk_task_telemetry import TaskTelemetryPlugin
    from adk_task_telemetry.lifecycle import process_exit as _exit

    from .bench_hot_path import _block, _providers, _runner
    from .common import quiet_plugin_logger

    quiet_plugin_logger()
    tp, mp = _providers("always_on")
    lp = LoggerProvider()
    lp.add_log_record_processor(BatchLogRecordProcessor(_noop_log_exporter()))
    _logs.set_logger_provider(lp)
    plugin = TaskTelemetryPlugin()
    runner = _runner([plugin])

    async def do() -> None:
        if step == "traces":
            tp.force_flush()
        elif step == "metrics":
            mp.force_flush()
        elif step == "logs":
            lp.force_flush()
        elif step == "flush":
            _exit.flush()
        elif step == "close":
            await plugin.close()

    await _block(runner, 3)
    await plugin.close()  # the worker thread is started, its first flush done
    await do()
    gc.collect()
    gc.freeze()
    for _ in range(reps):
        if scenario == "after_run":
            await _block(runner, 1)
        _toggle("on")
        await do()
        _toggle("off")


def _count(step: str, scenario: str, reps: int) -> int:
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null",
         sys.executable, "-m", "benchmarks.callgrind_close", "--child", step, scenario,
         str(reps)], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"})
    line = next(ln for ln in out.stderr.splitlines() if "Collected" in ln)
    return int(line.split()[-1])


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        from .callgrind_hot_path import logging_off

        logging_off()
        asyncio.run(_child(sys.argv[2], sys.argv[3], int(sys.argv[4])))
        return 0
    import adk_task_telemetry

    print(f"adk_task_telemetry from {os.path.dirname(adk_task_telemetry.__file__)}")
    only = [s for s in sys.argv[1:] if s in STEPS] or list(STEPS)
    found: dict[str, dict[str, float]] = {}
    for step in only:
        for scenario in SCENARIOS:
            per = (_count(step, scenario, LARGE) - _count(step, scenario, SMALL)) / (
                LARGE - SMALL)
            found.setdefault(step, {})[scenario] = per
            print(f"  {step:8} {scenario:9} {per / 1e3:9.1f}k instr", flush=True)
    if "--record" in sys.argv:
        from importlib.metadata import version

        label = sys.argv[sys.argv.index("--record") + 1]
        path = RESULTS / "close_callgrind.json"
        recorded: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        recorded[f"{version('google-adk')} {label}"] = {
            **found, "date": time.strftime("%Y-%m-%d", time.gmtime())}
        path.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def markdown() -> list[str]:
    """docs/benchmarks.md's section on what a close's flush costs, from the recorded runs
    (``--record before|after``): each step net of ``none`` (the toggling alone)."""
    path = RESULTS / "close_callgrind.json"
    if not path.exists():
        return []
    lines = ["## What a Runner's close flushes, and what it costs (issue 24)", "",
             "`python -m benchmarks.callgrind_close --record after` (`before`: the same with "
             "the engine of the round before on `PYTHONPATH`). A plugin's `close()` flushes "
             "what was recorded when no run of it is busy: ADK's server closes its runners "
             "before uvicorn dies by a re-raised SIGTERM, so atexit never runs and the "
             "close is the last chance. In instructions (callgrind, all threads), per "
             "step, net of the toggling alone: `idle` is the step again with nothing "
             "recorded since (back-to-back closes), `after run` right after one run of 10 "
             "tool tasks (about 25 spans and their metric points: a Runner per request). "
             "The providers are the hot path's (SDK batch processors with no-op exporters, "
             "a MeterProvider with an in-memory reader). What each signal costs: the "
             "batch processors of traces and logs export what they hold, nothing when "
             "empty; a metric collection costs the same however little changed (every "
             "instrument of the provider, ADK's included). So a close now collects "
             "metrics only when something may have been recorded since the last close's "
             "collection (a run began or was still going on, or a measurement was taken "
             "outside any run: an orphan's end; with configure_telemetry()'s MeterProvider, "
             "anything recorded into it, which its exemplar filter counts), and a close "
             "that comes while a flush waits to start shares it.", "",
             "| google-adk | engine | step | idle | after run |", "|---|---|---|---|---|"]
    for key, r in sorted(json.loads(path.read_text()).items()):
        adk, label = key.split()
        none = r.get("none", {})
        for step in ("traces", "metrics", "logs", "flush", "close"):
            if step not in r:
                continue
            cells = []
            for scenario in SCENARIOS:
                v = r[step].get(scenario)
                cells.append("" if v is None else
                             f"{max(0.0, v - none.get(scenario, 0.0)) / 1e3:,.0f}k")
            name = {"flush": "`exit.flush()` (everything)",
                    "close": "the plugin's `close()`"}.get(step, f"{step} `force_flush`")
            lines.append(f"| {adk} | {label} ({r.get('commit', '?')}) | {name} | "
                         f"{cells[0]} | {cells[1]} |")
    return [*lines, ""]
