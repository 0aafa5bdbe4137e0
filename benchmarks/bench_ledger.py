"""The call ledger's cost at run end, for a run its events left with a call unanswered.

    python -m benchmarks.bench_ledger [--rounds 15] [--json PATH]

A run whose events answered every call it made reads nothing at its end. One left
with a call seen unanswered reads the session once, back to the run's start, to see
whether the session stores that call without a response. Here the session holds
``history`` events of earlier invocations, then this run's: the user's message, a
model event with ``calls`` function calls, the event with their responses and the
final answer (real ``google.adk.events.Event`` objects, as ADK stores them). The
scan must stop at the run's start, so its cost must not grow with the history.
Beside it, in the same rounds, the plugin's whole cost of one run of the same number
of calls (before_run, the tool tasks, after_run: ``drive_runs``): the ratio says what
share of a run's telemetry cost that pass is. Medians over rounds; nothing asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from google.adk.events import Event
from google.genai import types

from adk_task_telemetry import TaskTelemetryPlugin
from adk_task_telemetry.adk_compat import unanswered_in_session

from .common import make_providers, median, quiet_plugin_logger

HISTORIES = (0, 1_000, 10_000)
CALLS = 10
REPEAT = 200  # scans per sample


class _Session:
    def __init__(self, events: list[Event]) -> None:
        self.events = events


class _Ctx:
    def __init__(self, events: list[Event]) -> None:
        self.session = _Session(events)


def _invocation(inv: str, ts: float, calls: int) -> list[Event]:
    fcs = [types.Part(function_call=types.FunctionCall(name="fetch", id=f"{inv}-c{i}",
                                                       args={"i": i})) for i in range(calls)]
    frs = [types.Part(function_response=types.FunctionResponse(
        name="fetch", id=f"{inv}-c{i}", response={"ok": i})) for i in range(calls)]
    return [
        Event(invocation_id=inv, author="user", timestamp=ts,
              content=types.Content(role="user", parts=[types.Part(text="go")])),
        Event(invocation_id=inv, author="agent", timestamp=ts + 0.001,
              content=types.Content(role="model", parts=fcs)),
        Event(invocation_id=inv, author="agent", timestamp=ts + 0.002,
              content=types.Content(role="user", parts=frs)),
        Event(invocation_id=inv, author="agent", timestamp=ts + 0.003,
              content=types.Content(role="model", parts=[types.Part(text="done")])),
    ]


def _session(history: int) -> tuple[_Ctx, float]:
    now = time.time()
    events: list[Event] = []
    for k in range(history // 4):
        events.extend(_invocation(f"old-{k}", now - 3600 + k * 0.01, 1))
    events.extend(_invocation("this-run", now, CALLS))
    return _Ctx(events), now


def _scan_s(ctx: _Ctx, start: float) -> float:
    t0 = time.perf_counter()
    for _ in range(REPEAT):
        found = unanswered_in_session(ctx, {"this-run-c0": 1}, start)
    elapsed = (time.perf_counter() - t0) / REPEAT
    assert found == [], found  # every call of this run was answered
    return elapsed


async def _run_cost_s(plugin: TaskTelemetryPlugin, runs: int) -> float:
    from .common import drive_runs

    t0 = time.perf_counter()
    await drive_runs(plugin, runs, CALLS, prefix=f"r{time.perf_counter_ns()}")
    return (time.perf_counter() - t0) / runs


async def main(rounds: int) -> dict[str, Any]:
    quiet_plugin_logger()
    providers = make_providers()
    plugin = TaskTelemetryPlugin(tracer_provider=providers.tracer_provider,
                                 meter_provider=providers.meter_provider)
    sessions = {h: _session(h) for h in HISTORIES}
    scans: dict[int, list[float]] = {h: [] for h in HISTORIES}
    runs: list[float] = []
    for r in range(rounds):
        order = list(HISTORIES)[r % len(HISTORIES):] + list(HISTORIES)[:r % len(HISTORIES)]
        for h in order:
            scans[h].append(_scan_s(*sessions[h]))
        runs.append(await _run_cost_s(plugin, 50))
    run_s = median(runs)
    out = {
        "calls_per_run": CALLS,
        "plugin_cost_per_run_us": round(run_s * 1e6, 2),
        "scan_us": {str(h): round(median(v) * 1e6, 2) for h, v in scans.items()},
        "scan_share_of_run_cost": {str(h): round(median(v) / run_s, 4)
                                   for h, v in scans.items()},
        "scan_10000_over_0": round(median(scans[10_000]) / median(scans[0]), 3),
        "rounds": rounds,
    }
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    result = asyncio.run(main(args.rounds))
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
