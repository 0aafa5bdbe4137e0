"""Benchmarks of issue 6: the plugin's cost per task, per run, at run end, in memory
and at throughput, each measured beside its baseline in the same run.

    python -m benchmarks.run            # full: benchmarks/results/full.json + docs/benchmarks.md
    python -m benchmarks.run --quick    # smoke run, well under a minute; asserts nothing

Every comparison is made in one process and one run: the variants of a section take
turns within each round (rotating who goes first), and each figure is the median
over the rounds; ratios are taken per round and their median reported. Section 2
needs a global TracerProvider/MeterProvider per configuration, which OTel lets a
process set only once: there each configuration lives in a persistent worker
process (benchmarks/worker.py) that the parent drives in lock-step, so only one
configuration runs at a time and their rounds still interleave.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import gc
import json
import logging
import math
import os
import platform
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .bench_curve import markdown as curve_markdown
from .bench_export import markdown as export_markdown
from .bench_hot_path import markdown as hot_path_markdown
from .bench_memory import markdown as memory_markdown
from .bench_orphans import markdown as orphans_markdown
from .bench_server import markdown as server_markdown
from .callgrind_close import markdown as close_markdown
from .callgrind_hot_path import markdown as per_request_markdown
from .common import (
    NullPlugin,
    direct_open,
    direct_run,
    make_providers,
    median,
    quiet_plugin_logger,
    rss_bytes,
    spread,
    timed,
)
from .worker import PROCESSES

ROOT = Path(__file__).resolve().parent.parent
CALL_COUNTS = (1, 10, 100)


@dataclass(frozen=True)
class Plan:
    """How much of everything to do: the full run or the quick smoke run."""

    quick: bool
    rounds: int  # interleaved rounds of sections 1 and 2
    span_batch: int  # tasks per sample, direct drivers of section 1
    runner_runs: int  # runs of 10 calls per sample, section 1 through the Runner
    runs_per_sample: dict[int, int]  # section 2: runs per sample, by parallel calls
    sweep_open: tuple[int, ...]
    sweep_reps: int
    history: tuple[int, ...]
    memory_tasks: int
    throughput_seconds: float
    throughput_rounds: int


FULL = Plan(False, 15, 4000, 20, {1: 30, 10: 20, 100: 3}, (1, 10, 100, 1000, 10000), 7,
            (0, 1000, 10000, 100000), 100_000, 2.0, 5)
QUICK = Plan(True, 2, 300, 2, {1: 2, 10: 2, 100: 1}, (1, 10, 100), 2, (0, 300), 3000, 0.2, 2)


def _state(plugin: Any) -> list[int]:
    """(runs held, orphan records held) from the plugin's supported test hook."""
    s = plugin.state()
    return [s.runs, s.orphans]


def _silence_adk() -> None:
    # ADK 2.13 logs a WARNING per model call here ("missing token usage metadata")
    # to stderr; terminal I/O would be the noisiest part of a run, in every config.
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    quiet_plugin_logger()


def _say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _rotate(items: list[Any], r: int) -> list[Any]:
    k = r % len(items)
    return items[k:] + items[:k]


# --- 1. cost per tool task ----------------------------------------------------------


def section_per_task(plan: Plan) -> dict[str, Any]:
    """ns per tool task: the floor (one bare span), the tracker driven directly, the
    plugin's callbacks driven as ADK drives them, and the plugin through the Runner."""
    from adk_task_telemetry import TaskTelemetryPlugin, testing
    from adk_task_telemetry import semconv as sc
    from adk_task_telemetry.scenarios import run_parallel_calls

    from .common import drive_runs

    prov = make_providers()
    tp, mp = prov.tracer_provider, prov.meter_provider
    tracer = tp.get_tracer("benchmarks.floor")
    ledger = testing.tracker(tp, mp)
    plugin = TaskTelemetryPlugin(tracer_provider=tp, meter_provider=mp)
    null = NullPlugin()
    loop = asyncio.new_event_loop()
    n = plan.span_batch
    attrs8 = {sc.GEN_AI_TOOL_NAME: "fetch", sc.GEN_AI_AGENT_NAME: "worker",
              sc.ADK_TOOL_TASK_KIND: "call", sc.ADK_APP_NAME: "bench",
              sc.GEN_AI_TOOL_CALL_ID: "call-1", sc.GEN_AI_TOOL_TYPE: "FunctionTool",
              sc.ADK_INVOCATION_ID: "inv-1", sc.GEN_AI_CONVERSATION_ID: "session-1"}
    counter = [0]

    def floor() -> None:
        start = tracer.start_span
        for _ in range(n):
            start("tool_task fetch").end()

    def floor_attrs() -> None:
        start = tracer.start_span
        for _ in range(n):
            start("tool_task fetch", attributes=attrs8).end()

    def ledger_direct() -> None:
        # What one call bound to callbacks costs: opened, returned, run end (the
        # tracker driven directly; the key keeps its name for comparable results).
        counter[0] += 1
        for r in range(n // 10):
            run = direct_run(ledger, f"L{counter[0]}-{r}")
            for i in range(10):
                rec = direct_open(ledger, run, f"call-{i}")
                assert rec is not None
                testing.return_call(ledger, rec)
            testing.end_run(ledger, run, "after_run")

    def callbacks(p: Any) -> Callable[[], None]:
        def go() -> None:
            counter[0] += 1
            loop.run_until_complete(drive_runs(p, n // 10, 10, prefix=f"P{counter[0]}"))
        return go

    def runner(p: list[Any]) -> Callable[[], None]:
        def go() -> None:
            loop.run_until_complete(run_parallel_calls(p, runs=plan.runner_runs, calls=10))
        return go

    variants: dict[str, Callable[[], None]] = {
        "floor_bare_span": floor,
        "span_with_8_attributes": floor_attrs,
        "ledger_direct": ledger_direct,
        "callbacks_harness_only": callbacks(null),
        "callbacks_plugin": callbacks(plugin),
        "runner_no_plugin": runner([]),
        "runner_plugin": runner([plugin]),
    }
    tasks_per_sample = {k: n for k in variants}
    runner_tasks = plan.runner_runs * 10
    tasks_per_sample["runner_no_plugin"] = tasks_per_sample["runner_plugin"] = runner_tasks
    for fn in variants.values():  # warm-up: imports, caches, first spans
        fn()
    samples: dict[str, list[float]] = {k: [] for k in variants}
    wall: dict[str, list[float]] = {k: [] for k in variants}
    ratios: dict[str, list[float]] = {k: [] for k in ("ledger_direct", "plugin_callbacks",
                                                       "plugin_runner")}
    names = list(variants)
    for r in range(plan.rounds):
        got: dict[str, float] = {}
        for name in _rotate(names, r):
            w, c = timed(variants[name])
            got[name] = c / tasks_per_sample[name] * 1e9
            samples[name].append(got[name])
            wall[name].append(w / tasks_per_sample[name] * 1e9)
        f = got["floor_bare_span"]
        ratios["ledger_direct"].append(got["ledger_direct"] / f)
        ratios["plugin_callbacks"].append((got["callbacks_plugin"]
                                           - got["callbacks_harness_only"]) / f)
        ratios["plugin_runner"].append((got["runner_plugin"] - got["runner_no_plugin"]) / f)
    loop.close()
    prov.shutdown()
    ns = {k: spread(v) for k, v in samples.items()}
    med = {k: v["median"] for k, v in ns.items()}
    plugin_cb = med["callbacks_plugin"] - med["callbacks_harness_only"]
    plugin_rn = med["runner_plugin"] - med["runner_no_plugin"]
    return {
        "unit": "ns per tool task, process CPU time (wall time in samples_wall_ns)",
        "tasks_per_sample": tasks_per_sample,
        "samples_ns": ns,
        "samples_wall_ns": {k: spread(v) for k, v in wall.items()},
        "plugin_ns": {"ledger_direct": med["ledger_direct"],
                      "plugin_callbacks": plugin_cb, "plugin_runner": plugin_rn},
        "ratio_to_floor": {k: median(v) for k, v in ratios.items()},
        "notes": ("ledger_direct: Tracker.tool_started+returned per task, Tracker.run_ended per "
                  "run of 10. "
                  "plugin_callbacks: before_run, 10 asyncio tasks each running "
                  "before_tool+after_tool (their end reaching the plugin by done-callback), "
                  "after_run; minus the same with callbacks that do nothing. plugin_runner: "
                  "run_parallel_calls(calls=10) through ADK's Runner with the plugin minus "
                  "without it, ADK's own telemetry off; a difference of two ~ms figures, "
                  "so the noisiest of the three."),
    }


# --- 2. scripted runs: 1, 10, 100 parallel calls ------------------------------------


class _Worker:
    def __init__(self, kind: str) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.kind = kind
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.worker", kind], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True)

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"benchmark worker {self.kind!r} exited ({self.proc.wait()})")
        out: dict[str, Any] = json.loads(line)
        return out

    def ask(self, variant: str, runs: int, calls: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"variant": variant, "runs": runs,
                                          "calls": calls}) + "\n")
        self.proc.stdin.flush()
        rep = self.read()
        if rep.get("bodies") != runs * calls:
            raise RuntimeError(f"{variant}: {rep}")
        return rep

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def _openinference_version() -> str | None:
    try:
        return version("openinference-instrumentation-google-adk")
    except PackageNotFoundError:
        return None


# Each variant's baseline: the variant without the thing measured, in the same process.
_BASELINE = {"none": "none", "plugin_only": "none", "adk": "adk", "adk_null_plugin": "adk",
             "adk_plugin": "adk", "adk_openinference": "adk"}


def section_runs(plan: Plan) -> dict[str, Any]:
    workers = {kind: _Worker(kind) for kind in PROCESSES}
    skipped: dict[str, str] = {}
    owner: dict[str, _Worker] = {}
    try:
        for w in workers.values():
            hello = w.read()
            skipped.update(hello.get("unavailable", {}))
            for v in hello["variants"]:
                owner[v] = w
        variants = [v for kind in PROCESSES for v in PROCESSES[kind] if v in owner]
        for calls in CALL_COUNTS:  # warm-up, discarded
            for v in variants:
                owner[v].ask(v, 1, calls)
        def grid() -> dict[int, dict[str, list[float]]]:
            return {n: {v: [] for v in variants} for n in CALL_COUNTS}

        ms, cpu_ms, rel, cpu_rel = grid(), grid(), grid(), grid()
        state: dict[str, list[int]] = {}
        for r in range(plan.rounds):
            for calls in CALL_COUNTS:
                runs = plan.runs_per_sample[calls]
                got: dict[str, float] = {}
                got_cpu: dict[str, float] = {}
                for v in _rotate(variants, r):
                    rep = owner[v].ask(v, runs, calls)
                    got[v] = rep["seconds"] / runs * 1e3
                    got_cpu[v] = rep["cpu_seconds"] / runs * 1e3
                    ms[calls][v].append(got[v])
                    cpu_ms[calls][v].append(got_cpu[v])
                    if rep.get("state_size"):
                        state[v] = rep["state_size"]
                for v in variants:
                    base = _BASELINE[v] if _BASELINE[v] in got else v
                    rel[calls][v].append(got[v] / got[base])
                    cpu_rel[calls][v].append(got_cpu[v] / got_cpu[base])
            _say(f"runs: round {r + 1}/{plan.rounds}")
    finally:
        for w in workers.values():
            w.close()
    results: dict[str, Any] = {}
    for calls in CALL_COUNTS:
        row: dict[str, Any] = {}
        for v in variants:
            med_none = median(ms[calls]["none"]) if "none" in variants else None
            row[v] = {"ms_per_run": spread(ms[calls][v]),
                      "cpu_ms_per_run": spread(cpu_ms[calls][v]),
                      "baseline": _BASELINE[v],
                      "ratio_to_baseline": median(rel[calls][v]),
                      "added_pct": (median(rel[calls][v]) - 1) * 100,
                      "cpu_ratio_to_baseline": median(cpu_rel[calls][v]),
                      "cpu_added_pct": (median(cpu_rel[calls][v]) - 1) * 100,
                      "ratio_to_none_cross_process": (median(ms[calls][v]) / med_none
                                                      if med_none else None)}
        results[str(calls)] = row
    return {
        "unit": "ms per run (wall; cpu_* = the worker process's CPU time)",
        "variants": variants,
        "processes": {k: list(v) for k, v in PROCESSES.items()},
        "skipped": skipped,
        "runs_per_sample": {str(k): v for k, v in plan.runs_per_sample.items()},
        "results": results,
        "plugin_state_size_after": state,
        "openinference_version": _openinference_version(),
        "notes": ("Global providers can be set once per process: 'none' and 'plugin_only' "
                  "run in a process with none (the OTel API's no-ops; plugin_only gives the "
                  "plugin SDK providers of its own), 'adk', 'adk_null_plugin', 'adk_plugin' "
                  "and 'adk_openinference' in a process with an SDK TracerProvider "
                  "(BatchSpanProcessor, no-op exporter) and MeterProvider set globally, so "
                  "ADK records its own spans and metrics. The parent drives both processes "
                  "in lock-step, one sample at a time, rotating the order every round. "
                  "ratio_to_baseline is the median of per-round ratios to the baseline in "
                  "the same process ('none' or 'adk'); ratio_to_none_cross_process compares "
                  "medians across the two processes. adk_null_plugin: a plugin whose "
                  "callbacks do nothing (ADK's own price for any plugin). OpenInference's "
                  "instrumentor is toggled outside the timing; it replaces ADK's tracer."),
    }


# --- 3. run-end sweep -----------------------------------------------------------------


async def _pending() -> None:
    await asyncio.sleep(3600)


def _sweep_once(loop: asyncio.AbstractEventLoop, ledger: Any, inv: str, open_n: int,
                done_n: int = 0) -> float:
    """Seconds one sweep takes for a run with ``open_n`` tasks still running (each
    bound to a pending asyncio task) after ``done_n`` that ended already."""
    from adk_task_telemetry import testing

    run = direct_run(ledger, inv)
    for i in range(done_n):
        rec = direct_open(ledger, run, f"done-{i}")
        assert rec is not None
        testing.return_call(ledger, rec)
    tasks = [loop.create_task(_pending()) for _ in range(open_n)]
    loop.run_until_complete(asyncio.sleep(0))  # let them start: a real suspended stack
    for i, t in enumerate(tasks):
        rec = direct_open(ledger, run, f"call-{i}", t)
        assert rec is not None, "max_open_tasks reached"
    gc.collect()
    t0 = time.process_time()
    testing.end_run(ledger, run, "after_run")
    dt = time.process_time() - t0
    for t in tasks:
        t.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks))
    loop.run_until_complete(asyncio.sleep(0))
    return dt


def _idle_sweeps(ledger: Any, inv: Callable[[], str], k: int) -> float:
    """Seconds per sweep of a run whose 10 tasks all ended already (timed over k)."""
    from adk_task_telemetry import testing

    ids = []
    for _ in range(k):
        run = direct_run(ledger, inv())
        for j in range(10):
            rec = direct_open(ledger, run, f"call-{j}")
            assert rec is not None
            testing.return_call(ledger, rec)
        ids.append(run)
    gc.collect()
    sweep = testing.end_run
    t0 = time.process_time()
    for i in ids:
        sweep(ledger, i, "after_run")
    return (time.process_time() - t0) / k


def _open_span_processor(plan: Plan) -> dict[str, Any]:
    """configure_telemetry() also installs an OpenSpanProcessor (spans left open under
    a run are reported at its end). Measured apart, last, because while one exists in
    the process every sweep consults it: its cost per span, and the idle sweep as
    unrelated spans (other runs in flight) stay open."""
    try:
        from adk_task_telemetry.signals.span_processors import OpenSpanProcessor
    except ImportError as e:
        return {"skipped": f"no OpenSpanProcessor in this version ({e})"}
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from adk_task_telemetry import testing

    from .common import NoopSpanExporter

    sizes = (0, 100) if plan.quick else (0, 100, 1000, 5000)
    plain = make_providers()
    tp = TracerProvider()
    tp.add_span_processor(BatchSpanProcessor(NoopSpanExporter()))
    tp.add_span_processor(OpenSpanProcessor(max_spans=2 * max(sizes) + 1000))
    n = plan.span_batch
    plain_tracer, osp_tracer = plain.tracer_provider.get_tracer("a"), tp.get_tracer("b")

    def spans(tracer: Any) -> Callable[[], None]:
        def go() -> None:
            start = tracer.start_span
            for _ in range(n):
                start("tool_task fetch").end()
        return go

    per_span: dict[str, list[float]] = {"without": [], "with": []}
    ratio: list[float] = []
    for r in range(plan.rounds):
        got = {}
        for name, tracer in _rotate([("without", plain_tracer), ("with", osp_tracer)], r):
            got[name] = timed(spans(tracer))[1] / n * 1e9
            per_span[name].append(got[name])
        ratio.append(got["with"] / got["without"])
    ledger = testing.tracker(tp, plain.meter_provider)
    seq = [0]

    def inv() -> str:
        seq[0] += 1
        return f"osp-{seq[0]}"

    by_open: list[dict[str, Any]] = []
    other = tp.get_tracer("other-runs")
    held: list[Any] = []
    for size in sizes:
        while len(held) < size:
            held.append(other.start_span("other run's span"))
        idle = [_idle_sweeps(ledger, inv, 50) * 1e6 for _ in range(plan.sweep_reps)]
        by_open.append({"unrelated_open_spans": size, "us_idle_run": spread(idle)})
        _say(f"sweep with OpenSpanProcessor, {size} unrelated open spans: "
             f"{median(idle):.1f} us")
    for sp in held:
        sp.end()
    tp.shutdown()
    plain.shutdown()
    del ledger, tp, held
    gc.collect()
    return {
        "ns_per_bare_span": {k: spread(v) for k, v in per_span.items()},
        "span_ratio_with_to_without": median(ratio),
        "idle_sweep_by_unrelated_open_spans": by_open,
        "notes": ("Process CPU time. The idle sweep reads every open span the processor "
                  "holds to find the run's own, so its cost grows with spans other runs "
                  "hold open at that moment (not with ended history)."),
    }


def section_sweep(plan: Plan) -> dict[str, Any]:
    from adk_task_telemetry import testing

    prov = make_providers()
    loop = asyncio.new_event_loop()
    # The default max_open_tasks (10,000) would stop tracking at the largest size.
    ledger = testing.tracker(prov.tracer_provider, prov.meter_provider,
                             max_open_tasks=2 * max(plan.sweep_open))
    seq = [0]

    def inv() -> str:
        seq[0] += 1
        return f"sweep-{seq[0]}"

    _sweep_once(loop, ledger, inv(), 10)  # warm-up
    by_open: list[dict[str, Any]] = []
    for n in plan.sweep_open:
        reps = plan.sweep_reps if n < 10000 else max(2, plan.sweep_reps // 2)
        xs = [_sweep_once(loop, ledger, inv(), n) * 1e6 for _ in range(reps)]
        s = spread(xs)
        by_open.append({"open_tasks": n, "us": s, "us_per_open_task": s["median"] / n})
        _say(f"sweep: {n} open tasks: {s['median']:.0f} us")
    # Ended history: runs that came and went (one task each, ended, swept).
    by_history: list[dict[str, Any]] = []
    history = 0
    for h in plan.history:
        while history < h:
            run = direct_run(ledger, inv())
            rec = direct_open(ledger, run, "call-0")
            assert rec is not None
            testing.return_call(ledger, rec)
            testing.end_run(ledger, run, "after_run")
            history += 1
        state = _state(ledger)
        idle = [_idle_sweeps(ledger, inv, 200) * 1e6 for _ in range(plan.sweep_reps)]
        open10 = [_sweep_once(loop, ledger, inv(), 10) * 1e6 for _ in range(plan.sweep_reps)]
        by_history.append({"ended_runs": h, "state_size": state,
                           "us_idle_run": spread(idle), "us_10_open": spread(open10)})
        _say(f"sweep: history {h}: idle {median(idle):.1f} us, 10 open {median(open10):.0f} us")
    loop.close()
    prov.shutdown()
    osp = _open_span_processor(plan)
    first, last = by_history[0], by_history[-1]
    return {
        "open_span_processor": osp,
        "unit": "microseconds per sweep (process CPU time)",
        "by_open_tasks": by_open,
        "by_ended_history": by_history,
        "history_growth_ratio": {
            "idle_run": last["us_idle_run"]["median"] / first["us_idle_run"]["median"],
            "10_open": last["us_10_open"]["median"] / first["us_10_open"]["median"]},
        "notes": ("Tracker.run_ended timed alone. An open task at the sweep becomes an orphan: "
                  "span event + status + end, run-span event, 3 metric updates, a WARNING "
                  "record (NullHandler here) and its suspended stack. 'idle run': a run "
                  "whose 10 tasks all ended before the sweep (the common case)."),
    }


# --- 4. memory ------------------------------------------------------------------------


def section_memory(plan: Plan) -> dict[str, Any]:
    from adk_task_telemetry import TaskTelemetryPlugin

    from .common import drive_runs

    prov = make_providers()
    plugin = TaskTelemetryPlugin(tracer_provider=prov.tracer_provider,
                                 meter_provider=prov.meter_provider)
    loop = asyncio.new_event_loop()
    total = plan.memory_tasks
    step = max(total // 10, 10)

    def drive(tasks: int, prefix: str) -> None:
        loop.run_until_complete(drive_runs(plugin, tasks // 10, 10, prefix=prefix))

    drive(2000, "warm")
    prov.tracer_provider.force_flush()
    gc.collect()
    rss = [{"tasks": 0, "rss_bytes": rss_bytes()}]
    done = 0
    while done < total:
        drive(step, f"rss{done}")
        done += step
        prov.tracer_provider.force_flush()
        gc.collect()
        rss.append({"tasks": done, "rss_bytes": rss_bytes()})
    state_rss = _state(plugin)
    # The same again under tracemalloc (slower; so measured apart from RSS).
    tracemalloc.start()
    drive(1000, "tmwarm")
    prov.tracer_provider.force_flush()
    gc.collect()
    before, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    snap0 = tracemalloc.take_snapshot()
    drive(total, "tm")
    prov.tracer_provider.force_flush()
    gc.collect()
    after, peak = tracemalloc.get_traced_memory()
    snap1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    ours = [s for s in snap1.compare_to(snap0, "filename")
            if "adk_task_telemetry" in (s.traceback[0].filename if s.traceback else "")]
    ours_growth = sum(s.size_diff for s in ours)
    state_tm = _state(plugin)
    loop.close()
    prov.shutdown()
    growth = rss[-1]["rss_bytes"] - rss[1]["rss_bytes"]
    return {
        "tool_tasks": total,
        "rss_checkpoints": rss,
        "rss_growth_bytes_after_first_checkpoint": growth,
        "rss_growth_bytes_per_1k_tasks": growth / max(total - step, 1) * 1000,
        "tracemalloc": {"current_growth_bytes": after - before,
                        "peak_above_start_bytes": peak - before,
                        "growth_in_adk_task_telemetry_bytes": ours_growth},
        "state_size_after": {"rss_pass": state_rss, "tracemalloc_pass": state_tm},
        "notes": ("Plugin callbacks driven as in section 1 (runs of 10 parallel tasks, each "
                  "swept at after_run), spans flushed and gc run before every reading. "
                  "state_size = (runs held, orphan records held): must be (0, 0)."),
    }


# --- 5. throughput --------------------------------------------------------------------


def _throughput_child(seconds: float, rounds: int) -> dict[str, Any]:
    """Runs pinned to one core (main() pins the process before any thread starts)."""
    from adk_task_telemetry import TaskTelemetryPlugin

    from .common import drive_runs

    prov = make_providers()
    plugin = TaskTelemetryPlugin(tracer_provider=prov.tracer_provider,
                                 meter_provider=prov.meter_provider)
    null = NullPlugin()
    loop = asyncio.new_event_loop()
    seq = [0]

    wall_rates: dict[str, list[float]] = {"plugin": [], "alone": []}

    def rate(p: Any, name: str = "") -> float:
        """Tool tasks per CPU second (and, kept aside, per wall second)."""
        t_end = time.perf_counter() + seconds
        done = 0
        c0 = time.process_time()
        t0 = time.perf_counter()
        while time.perf_counter() < t_end:
            seq[0] += 1
            done += loop.run_until_complete(drive_runs(p, 20, 10, prefix=f"T{seq[0]}"))
        if name:
            wall_rates[name].append(done / (time.perf_counter() - t0))
        return done / (time.process_time() - c0)

    rate(plugin)
    rate(null)
    with_plugin: list[float] = []
    harness: list[float] = []
    plugin_only: list[float] = []
    for r in range(rounds):
        pair = [(plugin, with_plugin, "plugin"), (null, harness, "alone")]
        for p, out, name in (pair if r % 2 == 0 else pair[::-1]):
            out.append(rate(p, name))
        # Seconds per task the plugin adds (floored: a noisy round must not divide by 0).
        added = max(1.0 / with_plugin[-1] - 1.0 / harness[-1], 1e-9)
        plugin_only.append(1.0 / added)
    loop.close()
    prov.shutdown()
    return {"harness_with_plugin_tasks_per_s": spread(with_plugin),
            "harness_alone_tasks_per_s": spread(harness),
            "plugin_only_tasks_per_s": median(plugin_only),
            "wall_clock": {"harness_with_plugin_tasks_per_s": spread(wall_rates["plugin"]),
                           "harness_alone_tasks_per_s": spread(wall_rates["alone"])},
            "state_size_after": _state(plugin)}


def section_throughput(plan: Plan) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cpu = cpus[-1] if cpus else None
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))

    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--throughput-child",
         str(plan.throughput_seconds), str(plan.throughput_rounds),
         "" if cpu is None else str(cpu)],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    res: dict[str, Any] = json.loads(out.stdout)
    res["pinned_cpu"] = cpu
    res["notes"] = ("A child process pinned to one core (its SDK export thread too) drives "
                    "runs of 10 parallel tool tasks through the plugin's callbacks for "
                    f"{plan.throughput_seconds} s per sample, alternating with callbacks "
                    "that do nothing. Rates per CPU second of that process (wall-clock rates, "
                    "lower while other processes share the core, under wall_clock). "
                    "plugin_only = 1 / (1/with - 1/alone): tool tasks per second the plugin "
                    "alone could sustain on that core.")
    return res


# --- goals, report ----------------------------------------------------------------------


def goals(res: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pt = res["per_task"]["ratio_to_floor"]
    out["1_per_task_vs_bare_span"] = {"target": "<= 1.5x",
                                      "plugin_callbacks_x": pt["plugin_callbacks"],
                                      "ledger_direct_x": pt["ledger_direct"],
                                      "met": pt["plugin_callbacks"] <= 1.5}
    r10 = res["runs"]["results"]["10"].get("adk_plugin")
    if r10 is not None:
        out["2_ten_tool_run_over_adk_telemetry"] = {
            "target": "<= 3%", "added_pct": r10["added_pct"],
            "cpu_added_pct": r10["cpu_added_pct"],
            "met": max(r10["added_pct"], r10["cpu_added_pct"]) <= 3.0}
    hg = res["sweep"]["history_growth_ratio"]
    out["3_sweep_flat_in_history"] = {"target": "no growth with ended runs",
                                      "last_over_first": hg,
                                      "met": max(hg.values()) <= 1.5}
    mem = res["memory"]
    zero = (all(v == [0, 0] for v in mem["state_size_after"].values())
            and all(h["state_size"] == [0, 0] for h in res["sweep"]["by_ended_history"]))
    out["4_no_records_flat_rss"] = {
        "target": "state_size == (0, 0); flat RSS", "state_zero": zero,
        "rss_growth_bytes_per_1k_tasks": mem["rss_growth_bytes_per_1k_tasks"],
        "met": zero and mem["rss_growth_bytes_per_1k_tasks"] < 1024}
    return out


def _fmt(x: float | None, nd: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:,.{nd}f}"


_METHOD = """\
How it is measured: every comparison is made in one run. The variants of a section
take turns within each round, the order rotating every round, and each figure is
the median over the rounds; a ratio is taken within each round and the median of
those ratios reported. Micro-benchmarks count the process's CPU time (all its
threads, the SDK's span-export thread included), which other processes on a shared
machine disturb far less than wall time; scripted runs report both. The floor is one
span started and ended on an SDK TracerProvider with a BatchSpanProcessor and an
exporter that does nothing; metrics go to an SDK MeterProvider whose reader
aggregates every measurement. Section 2 needs ADK's own telemetry on, which takes
a *global* TracerProvider/MeterProvider, and OTel lets a process set those once:
so it runs two persistent worker processes (one with no global providers, one with
SDK providers set globally) that the parent drives in lock-step, one sample at a
time. Each variant is compared with its baseline inside the same process (the
OpenInference instrumentor is instrumented/uninstrumented between samples, outside
the timing); only `adk` against `none` crosses processes. A forwarding processor in
one process was not used: it would still create SDK spans for the no-telemetry
baseline, which is then not the no-op API a user without telemetry has.

`--quick` runs every section at a tiny size (well under a minute) and asserts
nothing about time; tests/test_benchmarks_smoke.py runs it. Profile the hot path
with `python -m benchmarks.profile_hot_path [--lines] [--runner]`.
"""


def render_markdown(res: dict[str, Any], command: str | None = None) -> str:
    m = res["meta"]
    pt = res["per_task"]
    command = command or m.get("command") or (
        f"{m.get('python_executable', 'python')} -m benchmarks.run"
        + (" --quick" if m.get("quick") else ""))
    lines = [
        "# Benchmarks",
        "",
        *hot_path_markdown(),
        *per_request_markdown(),
        *close_markdown(),
        *curve_markdown(),
        *orphans_markdown(),
        *memory_markdown(),
        *server_markdown(),
        *export_markdown(),
        "## The section benchmarks (`benchmarks.run`)",
        "",
        "Produced by:",
        "",
        "```",
        command,
        "```",
        "",
        f"on {m['date']} at commit {m.get('git_commit', '?')}"
        + (" (src/ had uncommitted changes)" if m.get("src_modified") else "")
        + f": Python {m['python']}, google-adk {m['google_adk']}, "
        f"opentelemetry-sdk {m['opentelemetry_sdk']}, {m['cpus']} CPUs (shared, noisy). "
        f"Raw figures: `{m['json']}`. Medians over {m['rounds']} interleaved rounds; every "
        "ratio is against a baseline measured in the same run (median of per-round ratios). "
        "The interpreter is `make bench`'s own virtualenv (`.venvs/bench`: the newest "
        "google-adk and `pip install -e '.[export,bench]'`; the OpenInference "
        "instrumentor pulls a newer OpenTelemetry SDK than the test virtualenvs pin). "
        "Where the `bench` extra is missing, the OpenInference column is skipped with "
        "its reason.",
        "",
        _METHOD,
        "## Goals",
        "",
        "| goal | target | measured | met |",
        "|---|---|---|---|",
    ]
    g = res["goals"]
    g1 = g["1_per_task_vs_bare_span"]
    lines.append(f"| 1 per tool task vs one bare span | <= 1.5x | "
                 f"{_fmt(g1['plugin_callbacks_x'])}x (ledger alone "
                 f"{_fmt(g1['ledger_direct_x'])}x) | {'yes' if g1['met'] else 'no'} |")
    g2 = g.get("2_ten_tool_run_over_adk_telemetry")
    if g2:
        lines.append(f"| 2 added to a 10-tool run, ADK telemetry on | <= 3% | "
                     f"{g2['added_pct']:+.1f}% wall, {g2['cpu_added_pct']:+.1f}% CPU | "
                     f"{'yes' if g2['met'] else 'no'} |")
    g3 = g["3_sweep_flat_in_history"]
    lines.append(f"| 3 sweep cost vs ended history | flat | idle run "
                 f"{_fmt(g3['last_over_first']['idle_run'])}x, 10 open "
                 f"{_fmt(g3['last_over_first']['10_open'])}x (last/first) | "
                 f"{'yes' if g3['met'] else 'no'} |")
    g4 = g["4_no_records_flat_rss"]
    lines.append(f"| 4 records for ended runs; RSS | (0, 0); flat | "
                 f"{'(0, 0)' if g4['state_zero'] else 'NOT zero'}; "
                 f"{_fmt(g4['rss_growth_bytes_per_1k_tasks'], 0)} B per 1k tasks | "
                 f"{'yes' if g4['met'] else 'no'} |")
    lines += ["", "## 1. Cost per tool task (ns, process CPU time)", "",
              "| variant | median ns/task (CPU) | IQR | x bare span | median ns/task (wall) |",
              "|---|---|---|---|---|"]
    floor = pt["samples_ns"]["floor_bare_span"]["median"]
    for k, v in pt["samples_ns"].items():
        lines.append(f"| {k} | {_fmt(v['median'], 0)} | {_fmt(v['iqr'], 0)} | "
                     f"{_fmt(v['median'] / floor)} | "
                     f"{_fmt(pt['samples_wall_ns'][k]['median'], 0)} |")
    lines += ["", "| plugin's own cost | ns/task | x bare span |", "|---|---|---|"]
    for k, v in pt["plugin_ns"].items():
        lines.append(f"| {k} | {_fmt(v, 0)} | {_fmt(pt['ratio_to_floor'][k])} |")
    lines += ["", pt["notes"], ""]
    ru = res["runs"]
    def runs_table(key: str, added: str) -> list[str]:
        rows = ["| parallel calls | " + " | ".join(ru["variants"]) + " |",
                "|---|" + "---|" * len(ru["variants"])]
        for calls, row in ru["results"].items():
            cells = [f"{_fmt(row[v][key]['median'])} ({row[v][added]:+.1f}%)"
                     if v != row[v]["baseline"] else _fmt(row[v][key]["median"])
                     for v in ru["variants"]]
            rows.append(f"| {calls} | " + " | ".join(cells) + " |")
        return rows

    lines += ["## 2. Scripted runs: wall time per run (ms)", "",
              "Median ms per run; in brackets the added time against the baseline in the "
              "same process (`none` or `adk`).", "",
              *runs_table("ms_per_run", "added_pct")]
    lines += ["", "The same runs in the worker's CPU time (ms per run, added CPU time against "
              "the baseline):", "", *runs_table("cpu_ms_per_run", "cpu_added_pct")]
    lines += ["", "`adk` against `none` (two processes): " + ", ".join(
        f"{calls} calls {_fmt(row['adk']['ratio_to_none_cross_process'])}x"
        for calls, row in ru["results"].items() if "adk" in row) + ".", "", ru["notes"]]
    for c, why in ru["skipped"].items():
        lines.append(f"Skipped `{c}`: {why}.")
    if ru.get("openinference_version"):
        lines.append(f"openinference-instrumentation-google-adk {ru['openinference_version']}.")
    sw = res["sweep"]
    lines += ["", "## 3. Run-end sweep (µs)", "", "| open tasks at the sweep | median µs | "
              "µs per open task |", "|---|---|---|"]
    for row in sw["by_open_tasks"]:
        lines.append(f"| {row['open_tasks']:,} | {_fmt(row['us']['median'], 1)} | "
                     f"{_fmt(row['us_per_open_task'], 1)} |")
    lines += ["", "| ended runs before | idle run µs | 10 open µs | state_size |",
              "|---|---|---|---|"]
    for row in sw["by_ended_history"]:
        lines.append(f"| {row['ended_runs']:,} | {_fmt(row['us_idle_run']['median'], 1)} | "
                     f"{_fmt(row['us_10_open']['median'], 1)} | {tuple(row['state_size'])} |")
    lines += ["", sw["notes"], ""]
    osp = sw.get("open_span_processor", {})
    if "skipped" in osp:
        lines += [f"OpenSpanProcessor: skipped ({osp['skipped']}).", ""]
    elif osp:
        lines += ["With the OpenSpanProcessor that `configure_telemetry()` installs: a bare "
                  f"span costs {_fmt(osp['span_ratio_with_to_without'])}x what it costs "
                  "without it, and the idle sweep reads the spans other runs hold open:", "",
                  "| unrelated open spans | idle run µs |", "|---|---|"]
        for row in osp["idle_sweep_by_unrelated_open_spans"]:
            lines.append(f"| {row['unrelated_open_spans']:,} | "
                         f"{_fmt(row['us_idle_run']['median'], 1)} |")
        lines += ["", osp["notes"], ""]
    me = res["memory"]
    tm = me["tracemalloc"]
    lines += ["## 4. Memory", "", f"{me['tool_tasks']:,} tool tasks through the plugin.", "",
              "| tasks | RSS MiB |", "|---|---|"]
    for row in me["rss_checkpoints"]:
        lines.append(f"| {row['tasks']:,} | {_fmt(row['rss_bytes'] / 2**20, 1)} |")
    lines += ["", f"tracemalloc over {me['tool_tasks']:,} tasks: current "
              f"{_fmt(tm['current_growth_bytes'] / 1024, 1)} KiB, peak above start "
              f"{_fmt(tm['peak_above_start_bytes'] / 1024, 1)} KiB, of which allocated in "
              "adk_task_telemetry and still held "
              f"{_fmt(tm['growth_in_adk_task_telemetry_bytes'] / 1024, 1)} KiB. "
              f"state_size after: {me['state_size_after']}.", "", me["notes"], ""]
    tp = res["throughput"]
    lines += ["## 5. Throughput on one core", "", "| | tool tasks/s |", "|---|---|",
              f"| harness + plugin | {_fmt(tp['harness_with_plugin_tasks_per_s']['median'], 0)} |",
              f"| harness alone | {_fmt(tp['harness_alone_tasks_per_s']['median'], 0)} |",
              f"| plugin alone (derived) | {_fmt(tp['plugin_only_tasks_per_s'], 0)} |",
              "", tp["notes"], ""]
    notes = Path(__file__).with_name("PROFILE.md")
    if notes.exists():  # the hot-path profile, written by hand from profile_hot_path
        lines += [notes.read_text().rstrip(), ""]
    return "\n".join(lines)


def _shown_python() -> str:
    exe = Path(sys.executable)
    try:
        return str(exe.relative_to(ROOT))
    except ValueError:
        return str(exe)


def _meta(plan: Plan, out_json: Path) -> dict[str, Any]:
    def v(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "absent"
    try:
        rel = str(out_json.relative_to(ROOT))
    except ValueError:
        rel = str(out_json)
    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "git_commit": git("rev-parse", "--short", "HEAD"),
            "src_modified": bool(git("status", "--porcelain", "--", "src")),
            "python": platform.python_version(), "google_adk": v("google-adk"),
            "opentelemetry_sdk": v("opentelemetry-sdk"),
            "adk_task_telemetry": v("adk-task-telemetry"),
            "cpus": os.cpu_count(), "quick": plan.quick, "rounds": plan.rounds,
            # Relative to the checkout when inside it: no machine's paths in results.
            "python_executable": os.path.relpath(sys.executable)
            if os.path.abspath(sys.executable).startswith(os.getcwd()) else "python",
            "platform": platform.platform(), "json": rel}


SECTIONS: dict[str, Callable[[Plan], dict[str, Any]]] = {
    "per_task": section_per_task,
    "runs": section_runs,
    "sweep": section_sweep,
    "memory": section_memory,
    "throughput": section_throughput,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run (well under a minute)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results",
                    help="directory for the JSON (default benchmarks/results)")
    ap.add_argument("--markdown", type=Path, default=None,
                    help="where to write the Markdown table (full run default: "
                         "docs/benchmarks.md; --quick writes none unless given)")
    ap.add_argument("--only", default="", help="comma-separated sections (for development)")
    ap.add_argument("--throughput-child", nargs=3, metavar=("SECONDS", "ROUNDS", "CPU"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--render", type=Path, default=None, metavar="JSON",
                    help="only re-render the Markdown from an earlier run's JSON")
    args = ap.parse_args(argv)
    if args.render is not None:
        md = args.markdown or ROOT / "docs" / "benchmarks.md"
        md.write_text(render_markdown(json.loads(args.render.read_text())) + "\n")
        return 0
    _silence_adk()
    if args.throughput_child:
        cpu = args.throughput_child[2]
        if cpu and hasattr(os, "sched_setaffinity"):  # before any thread exists
            os.sched_setaffinity(0, {int(cpu)})
        res = _throughput_child(float(args.throughput_child[0]), int(args.throughput_child[1]))
        print(json.dumps(res))
        return 0
    plan = QUICK if args.quick else FULL
    out_dir: Path = args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    out_json = out_dir / ("quick.json" if plan.quick else "full.json")
    only = [s for s in args.only.split(",") if s] or list(SECTIONS)
    results: dict[str, Any] = {"meta": _meta(plan, out_json)}
    given = sys.argv[1:] if argv is None else argv
    results["meta"]["command"] = " ".join([_shown_python(), "-m", "benchmarks.run", *given])
    t0 = time.perf_counter()
    for name in only:
        _say(f"section {name} ...")
        t = time.perf_counter()
        results[name] = SECTIONS[name](plan)
        results[name]["section_seconds"] = time.perf_counter() - t
    results["meta"]["total_seconds"] = time.perf_counter() - t0
    if all(s in results for s in SECTIONS):
        results["goals"] = goals(results)
    out_json.write_text(json.dumps(results, indent=2) + "\n")
    _say(f"wrote {out_json}")
    md_path = args.markdown or (None if plan.quick else ROOT / "docs" / "benchmarks.md")
    if md_path is not None and "goals" in results:
        md_path.parent.mkdir(parents=True, exist_ok=True)
        md_path.write_text(render_markdown(results) + "\n")
        _say(f"wrote {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
