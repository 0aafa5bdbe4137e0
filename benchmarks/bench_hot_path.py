"""The plugin's own cost per tool task against the contract's floor, in CPU time (issue 18).

    python -m benchmarks.bench_hot_path                  # sampled and unsampled, 3 rounds
    python -m benchmarks.bench_hot_path --rounds 5 --json out.json
    python -m benchmarks.bench_hot_path --record after   # appended to benchmarks/results

Each sampler runs in a process of its own (a process can set the global
TracerProvider, which ADK traces with, only once). Inside it, through a real ADK
``Runner`` with ADK's own telemetry on (an SDK TracerProvider with a
BatchSpanProcessor and a no-op exporter, an SDK MeterProvider), blocks of runs with
the plugin and without it take turns (who goes first alternates), each timed in CPU
time of the event loop's thread (``time.thread_time``: the export thread and other
processes do not count), and each pair of blocks gives one figure. The floor (one
span with the contract's attributes and outcome, one ``duration`` point in its
context) is timed between the pairs in the same thread. Reported: medians over the
pairs of every round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import NoopSpanExporter, quiet_plugin_logger

RESULTS = Path(__file__).with_name("results")
#: What a recorded run measured: "after" is this tree; "before" the engine of the
#: round before (issue 18), measured with ``PYTHONPATH=<its checkout>/src``.
LABELS = ("before", "after")

CALLS = 10
RUNS_PER_BLOCK = 20
PAIRS_PER_ROUND = 12
FLOOR_BATCH = 2000
SAMPLERS = ("always_on", "always_off")
#: "off": the TracerProvider records no span metrics of its own (SDK 1.41 does by default).
SDK_SPAN_METRICS = "ADK_BENCH_SDK_SPAN_METRICS"


def _providers(sampler: str) -> tuple[Any, Any]:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

    kwargs: dict[str, Any] = {}
    if os.environ.get(SDK_SPAN_METRICS) == "off":
        # opentelemetry-sdk 1.41 records its own span metrics into the global
        # MeterProvider for every span (1.44: only when asked): a no-op one turns them
        # off where the SDK takes ``meter_provider`` (callgrind_hot_path --sdk-span-metrics).
        from opentelemetry.metrics import NoOpMeterProvider

        if "meter_provider" in inspect.signature(TracerProvider).parameters:
            kwargs["meter_provider"] = NoOpMeterProvider()
    tp = TracerProvider(sampler=ParentBased(ALWAYS_OFF) if sampler == "always_off" else None,
                        **kwargs)
    tp.add_span_processor(BatchSpanProcessor(NoopSpanExporter()))
    mp = MeterProvider(metric_readers=[InMemoryMetricReader()])
    trace.set_tracer_provider(tp)
    metrics.set_meter_provider(mp)
    return tp, mp


def _contract() -> tuple[dict[str, str], dict[str, str]]:
    """The contract's start attributes of one task, and its duration point's."""
    from adk_task_telemetry import semconv as sc

    attrs = {sc.GEN_AI_TOOL_NAME: "fetch", sc.GEN_AI_TOOL_CALL_ID: "call-1",
             sc.GEN_AI_TOOL_TYPE: "FunctionTool", sc.GEN_AI_AGENT_NAME: "worker",
             sc.GEN_AI_CONVERSATION_ID: "session-1", sc.ADK_APP_NAME: "bench",
             sc.ADK_INVOCATION_ID: "e-1", sc.ADK_TOOL_TASK_KIND: "call"}
    point = {sc.GEN_AI_TOOL_NAME: "fetch", sc.GEN_AI_AGENT_NAME: "worker",
             sc.ADK_TOOL_TASK_KIND: "call", sc.ADK_APP_NAME: "bench",
             sc.ADK_TOOL_TASK_OUTCOME: "ok"}
    return attrs, point


def _floor(tracer: Any, histogram: Any, n: int) -> float:
    """CPU seconds of ``n`` times the contract's own work for one task."""
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind

    from adk_task_telemetry import semconv as sc

    attrs, point = _contract()
    c0 = time.thread_time()
    for _ in range(n):
        span = tracer.start_span("tool_task fetch", kind=SpanKind.INTERNAL, attributes=attrs)
        span.set_attribute(sc.ADK_TOOL_TASK_OUTCOME, "ok")
        span.end()
        # The duration from the span's own clock readings (two, as any task's needs).
        histogram.record((span.end_time - span.start_time) / 1e9, point,
                         context=trace.set_span_in_context(span))
    return time.thread_time() - c0


def _floor_unsampled(tracer: Any, histogram: Any, n: int) -> float:
    """The same where the span is not sampled: it reads no clock, so the duration does."""
    from opentelemetry.context import Context
    from opentelemetry.trace import SpanKind

    attrs, point = _contract()
    empty = Context()
    c0 = time.thread_time()
    for _ in range(n):
        start = time.time_ns()
        span = tracer.start_span("tool_task fetch", kind=SpanKind.INTERNAL, attributes=attrs)
        span.end()
        histogram.record((time.time_ns() - start) / 1e9, point, context=empty)
    return time.thread_time() - c0


def _runner(plugins: list[Any]) -> Any:
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService

    from adk_task_telemetry.scenarios.model import ScriptedLlm, call, text

    async def fetch(item: int) -> dict[str, int]:
        """Fetches one item."""
        await asyncio.sleep(0)
        return {"item": item}

    turn = [call("fetch", f"call-{i}", item=i) for i in range(CALLS)]
    model = ScriptedLlm(turns=[turn, [text("done")]], repeat=True)
    agent = LlmAgent(name="worker", model=model, instruction="scripted", tools=[fetch])
    return Runner(app=App(name="bench", root_agent=agent, plugins=plugins),
                  session_service=InMemorySessionService())


async def _block(runner: Any, runs: int, per_request: bool = False,
                 clock: Callable[[], float] = time.thread_time) -> float:
    """CPU seconds of the loop thread (``clock``) for ``runs`` runs of CALLS parallel calls.

    ``per_request``: each run through a Runner of its own on ``runner``'s App, made for
    the run and closed after it (a web handler's request-scoped Runner; ``close()``
    closes the App's plugins with it), instead of ``runner`` itself."""
    from google.adk.runners import Runner
    from google.genai import types

    content = types.Content(role="user", parts=[types.Part(text="go")])
    sessions = [await runner.session_service.create_session(app_name="bench", user_id="u")
                for _ in range(runs)]
    c0 = clock()
    for session in sessions:
        this = (Runner(app=runner.app, session_service=runner.session_service)
                if per_request else runner)
        async with contextlib.aclosing(this.run_async(
                user_id="u", session_id=session.id, new_message=content)) as agen:
            async for _event in agen:
                pass
        if per_request:
            await this.close()
    return clock() - c0


async def _measure(sampler: str, rounds: int) -> dict[str, Any]:
    import logging

    from opentelemetry import metrics

    from adk_task_telemetry import TaskTelemetryPlugin

    logging.getLogger("google_adk").setLevel(logging.ERROR)
    quiet_plugin_logger()
    tp, _mp = _providers(sampler)
    plugin = TaskTelemetryPlugin()
    with_plugin, without = _runner([plugin]), _runner([])
    tracer = tp.get_tracer("benchmarks.floor")
    histogram = metrics.get_meter("benchmarks.floor").create_histogram("floor.duration", "s")
    floor = _floor if sampler == "always_on" else _floor_unsampled
    for runner in (with_plugin, without):  # warm-up: imports, caches, first-run costs
        await _block(runner, 5)
    floor(tracer, histogram, 200)
    per_task, per_run_pct, floors = [], [], []
    for r in range(rounds):
        for p in range(PAIRS_PER_ROUND):
            order = [(True, with_plugin), (False, without)]
            if (p + r) % 2:
                order.reverse()
            got = {flag: await _block(runner, RUNS_PER_BLOCK) for flag, runner in order}
            floors.append(floor(tracer, histogram, FLOOR_BATCH) / FLOOR_BATCH)
            added = got[True] - got[False]
            per_task.append(added / (RUNS_PER_BLOCK * CALLS))
            per_run_pct.append(100.0 * added / got[False])
    state = plugin.state()
    return {
        "sampler": sampler,
        "per_task_us": statistics.median(per_task) * 1e6,
        "floor_us": statistics.median(floors) * 1e6,
        "ratio_to_floor": statistics.median(
            [t / f for t, f in zip(per_task, floors, strict=True)]),
        "per_run_added_pct": statistics.median(per_run_pct),
        "pairs": len(per_task),
        "state_after": [state.runs, state.open, state.orphans],
    }


async def _measure_per_request(rounds: int) -> dict[str, Any]:
    """Sampled: the plugin's added CPU per tool task with a Runner made and closed per
    run (the App and its plugin shared) and with one long-lived Runner, the four blocks
    taking turns in a rotating order; each round of four gives one ratio (issue 24)."""
    import logging

    from adk_task_telemetry import TaskTelemetryPlugin

    logging.getLogger("google_adk").setLevel(logging.ERROR)
    quiet_plugin_logger()
    _providers("always_on")
    with_plugin, without = _runner([TaskTelemetryPlugin()]), _runner([])
    variants = [(plugin, per_request) for plugin in (True, False)
                for per_request in (False, True)]
    for plugin, per_request in variants:  # warm-up
        await _block(with_plugin if plugin else without, 5, per_request)
    out: dict[str, Any] = {}
    # The loop thread's CPU (what the event loop pays), then the process's (every
    # thread: the flush a close hands to process_exit.py's worker, the SDK's export threads).
    for clock, suffix in ((time.thread_time, ""), (time.process_time, "_process")):
        lived, per_req, ratios = [], [], []
        for r in range(rounds * PAIRS_PER_ROUND):
            order = variants[r % 4:] + variants[:r % 4]
            got = {v: await _block(with_plugin if v[0] else without, RUNS_PER_BLOCK, v[1],
                                   clock)
                   for v in order}
            tasks = RUNS_PER_BLOCK * CALLS
            a = (got[(True, False)] - got[(False, False)]) / tasks
            b = (got[(True, True)] - got[(False, True)]) / tasks
            lived.append(a)
            per_req.append(b)
            if a > 0:
                ratios.append(b / a)
        out.update({f"long_lived_us{suffix}": statistics.median(lived) * 1e6,
                    f"per_request_us{suffix}": statistics.median(per_req) * 1e6,
                    f"per_request_to_long_lived{suffix}": (statistics.median(ratios)
                                                           if ratios else None),
                    "rounds_of_four": len(lived)})
    return out


def _child(sampler: str, rounds: int) -> None:
    measure = (_measure_per_request(rounds) if sampler == "per_request"
               else _measure(sampler, rounds))
    print(json.dumps(asyncio.run(measure)), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--record", choices=LABELS,
                        help="append the results to benchmarks/results/hot_path-LABEL-ADK.json")
    parser.add_argument("--child", choices=(*SAMPLERS, "per_request"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.rounds)
        return 0
    from importlib.metadata import version

    results: dict[str, Any] = {"google_adk": version("google-adk"),
                               "python": sys.version.split()[0], "samplers": {}}
    for sampler in SAMPLERS:
        out = subprocess.run([sys.executable, "-m", "benchmarks.bench_hot_path", "--child",
                              sampler, "--rounds", str(args.rounds)],
                             capture_output=True, text=True, check=True, env=os.environ)
        results["samplers"][sampler] = json.loads(out.stdout.strip().splitlines()[-1])
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_hot_path", "--child",
                          "per_request", "--rounds", str(args.rounds)],
                         capture_output=True, text=True, check=True, env=os.environ)
    results["per_request"] = json.loads(out.stdout.strip().splitlines()[-1])
    on, off = results["samplers"]["always_on"], results["samplers"]["always_off"]
    results["unsampled_to_sampled"] = off["per_task_us"] / on["per_task_us"]
    print(f"google-adk {results['google_adk']}, Python {results['python']}, "
          f"{args.rounds} rounds x {PAIRS_PER_ROUND} pairs of {RUNS_PER_BLOCK} runs"
          f" x {CALLS} calls")
    for name, r in results["samplers"].items():
        print(f"  {name:10} plugin {r['per_task_us']:6.1f} us/task, floor {r['floor_us']:5.1f} us"
              f" ({r['ratio_to_floor']:.2f}x), 10-tool run +{r['per_run_added_pct']:.1f}%")
    print(f"  unsampled / sampled: {results['unsampled_to_sampled']:.2f}")
    pr = results["per_request"]
    print(f"  Runner per request (sampled): plugin {pr['per_request_us']:6.1f} us/task, "
          f"long-lived {pr['long_lived_us']:6.1f} us/task, ratio (median of "
          f"{pr['rounds_of_four']} rounds) {pr['per_request_to_long_lived']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    if args.record:
        path = RESULTS / f"hot_path-{args.record}-{results['google_adk']}.json"
        runs = json.loads(path.read_text())["runs"] if path.exists() else []
        results["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        path.write_text(json.dumps({"runs": [*runs, results]}, indent=1) + "\n")
    return 0


def _row(runs: list[dict[str, Any]], sampler: str, key: str) -> str:
    values = sorted(r["samplers"][sampler][key] for r in runs)
    mid = statistics.median(values)
    return f"{mid:.2f}" if len(values) == 1 else (
        f"{mid:.2f} ({values[0]:.2f}-{values[-1]:.2f})")


def markdown() -> list[str]:
    """docs/benchmarks.md's section on this benchmark, from the recorded runs."""
    found = {(label, p.stem.rsplit("-", 1)[1]): json.loads(p.read_text())["runs"]
             for label in LABELS for p in sorted(RESULTS.glob(f"hot_path-{label}-*.json"))}
    if not found:
        return []
    lines = ["## The hot path through a real Runner (issue 18)", "",
             "`python -m benchmarks.bench_hot_path --record after` (`make bench` runs it on "
             "each ADK of `BENCH_ADK`); `before` is the same benchmark with the engine of "
             "the round before on `PYTHONPATH`. " + " ".join(__doc__.split("\n\n")[2].split()),
             "Each cell: the median over the recorded runs of each run's median (3 rounds x "
             f"{PAIRS_PER_ROUND} pairs), and the range over runs. Targets: at most 1.5x the "
             "floor per task, at most 7% added per 10-tool run, unsampled at most 0.25x of "
             "sampled.", "",
             "| google-adk | engine | runs | sampled: x floor | sampled: us/task | sampled: "
             "10-tool run % | unsampled: x its floor | unsampled: us/task | unsampled / "
             "sampled |", "|---|---|---|---|---|---|---|---|---|"]
    for (label, adk), runs in sorted(found.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        ratio = sorted(r["unsampled_to_sampled"] for r in runs)
        lines.append(
            f"| {adk} | {label} | {len(runs)} | {_row(runs, 'always_on', 'ratio_to_floor')} | "
            f"{_row(runs, 'always_on', 'per_task_us')} | "
            f"{_row(runs, 'always_on', 'per_run_added_pct')} | "
            f"{_row(runs, 'always_off', 'ratio_to_floor')} | "
            f"{_row(runs, 'always_off', 'per_task_us')} | {statistics.median(ratio):.2f} |")
    lines.append("")
    for (label, adk), runs in sorted(found.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        pr = [r["per_request"] for r in runs if r.get("per_request", {}).get(
            "per_request_to_long_lived") is not None]
        if pr:
            lines.append(
                f"A Runner per request ({adk}, {label}; sampled, the same runs each through "
                "a Runner made and closed for it, four blocks in a rotating order): the "
                f"plugin adds {statistics.median(p['per_request_us'] for p in pr):.1f} us/task,"
                f" {statistics.median(p['long_lived_us'] for p in pr):.1f} with one long-lived"
                " Runner; median ratio "
                f"{statistics.median(p['per_request_to_long_lived'] for p in pr):.2f}.")
    return [*lines, ""]


if __name__ == "__main__":
    raise SystemExit(main())
