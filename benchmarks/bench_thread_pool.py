"""Issue 19's cost: async tools are not charged for the tool-thread-pool hook, and
what a synchronous tool on ADK's pool costs.

    python -m benchmarks.bench_thread_pool --baseline-src PATH    # e.g. main's src/
    python -m benchmarks.bench_thread_pool --baseline-src PATH --quick

Two persistent worker processes, one per source tree (this one's ``src/`` and
``--baseline-src``), driven in lock-step so that only one measures at a time and their
rounds interleave (who goes first rotates). Each sample is the event loop thread's CPU
time (``time.thread_time``: the pool's worker threads and the SDK's export thread are
not in it) and the process's, per tool task, for three workloads, each against its
no-plugin baseline in the same process:

- ``callbacks``: the plugin's callbacks driven as ADK drives them (async tool tasks),
  minus the same harness with a plugin that does nothing;
- ``callbacks_sync_pool``: the same, each tool body a ``run_in_executor`` call on ADK's
  own tool thread pool (taken from ADK's getter, as ADK does, hooked or not): what a
  synchronous tool adds, without the Runner's noise;
- ``runner_async``: ADK's Runner, runs of 10 parallel calls to an async tool;
- ``runner_sync_pool``: the same with a synchronous tool and
  ``RunConfig.tool_thread_pool_config`` (ADK 2.11 on runs it on the pool).

Figures are medians over rounds of the plugin's added cost per task. Results go to
benchmarks/results/thread_pool.json.

    python -m benchmarks.bench_thread_pool --baseline-src PATH --callgrind

counts the event loop thread's instructions instead (valgrind's callgrind, threads
apart: a client-request dump holds the calling thread's cost since its last dump):
deterministic, so a loaded machine cannot blur a small difference. One valgrind
process per tree runs every (workload, plugin or not) at two sizes between dumps; the
difference over the difference in tasks is the cost per task, warm-up cancelled out.
Results go to benchmarks/results/thread_pool_callgrind.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "thread_pool.json"
CALLS = 10
WORKLOADS = ("callbacks", "callbacks_sync_pool", "runner_async", "runner_sync_pool")


# --- in the worker process ------------------------------------------------------------


async def _drive_sync_pool(plugin: Any, runs: int, prefix: str) -> int:
    """``drive_runs`` with a synchronous body on ADK's tool thread pool: each call's
    task submits it through ``loop.run_in_executor`` and awaits the result."""
    from google.adk.flows.llm_flows import functions

    from .common import FakeInvocationContext, FakeToolContext, FunctionTool

    tool, args = FunctionTool(), {"item": 1}
    loop = asyncio.get_running_loop()

    async def one(tc: FakeToolContext) -> Any:
        await plugin.before_tool_callback(tool=tool, tool_args=args, tool_context=tc)
        pool = functions._get_tool_thread_pool(4)  # ADK's (through the hook when on)
        result = await loop.run_in_executor(pool, tool.func, 1)
        await plugin.after_tool_callback(tool=tool, tool_args=args, tool_context=tc,
                                         result=result)
        return result

    for r in range(runs):
        ctx = FakeInvocationContext(f"{prefix}-{r}")
        await plugin.before_run_callback(invocation_context=ctx)
        await asyncio.gather(*(one(FakeToolContext(f"call-{i}", ctx)) for i in range(CALLS)))
        await plugin.after_run_callback(invocation_context=ctx)
    return runs * CALLS


async def _runner_runs(plugins: list[Any], runs: int, sync_on_pool: bool) -> int:
    from google.adk.agents import LlmAgent
    from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    from adk_task_telemetry.scenarios import ScriptedLlm, call, text

    def fetch_sync(item: int) -> dict[str, int]:
        """Fetches one item (a synchronous tool)."""
        return {"item": item}

    async def fetch(item: int) -> dict[str, int]:
        """Fetches one item."""
        await asyncio.sleep(0)
        return {"item": item}

    tool = fetch_sync if sync_on_pool else fetch
    turn = [call(tool.__name__, f"call-{i}", item=i) for i in range(CALLS)]
    model = ScriptedLlm(turns=[turn, [text("done")]], repeat=True)
    agent = LlmAgent(name="worker", model=model, instruction="scripted", tools=[tool])
    runner = Runner(app=App(name="bench", root_agent=agent, plugins=list(plugins)),
                    session_service=InMemorySessionService())
    config = RunConfig(tool_thread_pool_config=ToolThreadPoolConfig()) if sync_on_pool \
        else RunConfig()
    content = types.Content(role="user", parts=[types.Part(text="go")])
    for _ in range(runs):
        session = await runner.session_service.create_session(app_name="bench", user_id="u")
        async with contextlib.aclosing(runner.run_async(
                user_id="u", session_id=session.id, new_message=content,
                run_config=config)) as agen:
            async for _event in agen:
                pass
    return runs * CALLS


class _Worker:
    def __init__(self) -> None:
        from adk_task_telemetry import TaskTelemetryPlugin

        from .common import NullPlugin, make_providers

        self.providers = make_providers()
        self.plugin = TaskTelemetryPlugin(tracer_provider=self.providers.tracer_provider,
                                          meter_provider=self.providers.meter_provider)
        self.null = NullPlugin()
        self.loop = asyncio.new_event_loop()
        self.counter = 0

    def sample(self, workload: str, with_plugin: bool, size: int, *, collect: bool = True
               ) -> dict[str, float]:
        from .common import drive_runs

        self.counter += 1
        if workload == "callbacks":
            coro = drive_runs(self.plugin if with_plugin else self.null, size, CALLS,
                              prefix=f"P{self.counter}")
        elif workload == "callbacks_sync_pool":
            coro = _drive_sync_pool(self.plugin if with_plugin else self.null, size,
                                    prefix=f"S{self.counter}")
        else:
            coro = _runner_runs([self.plugin] if with_plugin else [], size,
                                workload == "runner_sync_pool")
        if collect:
            gc.collect()
        t0, c0 = time.thread_time(), time.process_time()
        tasks = self.loop.run_until_complete(coro)
        loop_cpu, cpu = time.thread_time() - t0, time.process_time() - c0
        state = self.plugin.state()
        assert (state.runs, state.open, state.orphans) == (0, 0, 0), state
        return {"loop_ns": loop_cpu / tasks * 1e9, "process_ns": cpu / tasks * 1e9}


_CG_HELPER = """
#include <valgrind/callgrind.h>
void adk_bench_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
"""


def _dump_fn(build_dir: Path) -> Any:
    """``dump(label)``: a callgrind client request (a no-op outside valgrind), from a
    helper compiled here: Python cannot issue one itself."""
    import ctypes

    c, so = build_dir / "cg.c", build_dir / "cg.so"
    c.write_text(_CG_HELPER)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(so), str(c)], check=True)
    fn = ctypes.CDLL(str(so)).adk_bench_dump
    fn.argtypes = [ctypes.c_char_p]
    return lambda label: fn(label.encode())


def session_main(build_dir: Path, steps: list[tuple[str, str, int]]) -> None:
    """Under callgrind: every step, between two dumps (each dump holds the cost since
    the last). Without a plugin the tool-pool hook is removed, as if none existed."""
    from .common import quiet_plugin_logger

    quiet_plugin_logger()
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    from adk_task_telemetry import adk_compat

    dump = _dump_fn(build_dir)
    w = _Worker()
    for wl in WORKLOADS:  # warm-up: imports, caches, the pool's threads
        w.sample(wl, True, 2)
    remove = getattr(adk_compat, "remove_thread_work_listener", None)
    for wl, variant, size in steps:
        if variant == "none" and remove is not None:
            remove(w.plugin)  # no hook on the pool: as if no plugin existed
        gc.collect()
        gc.disable()  # when the collector runs depends on the heap, not on the code
        dump("idle")
        w.sample(wl, variant == "plugin", size, collect=False)
        dump(f"step {wl} {variant} {size}")
        gc.enable()
        if variant == "none" and remove is not None:
            adk_compat.add_thread_work_listener(w.plugin)  # back, outside the step


def _callgrind_session(src: Path, steps: list[tuple[str, str, int]]) -> dict[str, int]:
    """Instructions (Ir) of each step on the loop thread (the main thread, which
    issues the dumps: another thread's cost is not in them)."""
    import glob
    import re
    import tempfile

    with tempfile.TemporaryDirectory(prefix="cg-") as d:
        env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{ROOT}")
        subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes",
                        f"--callgrind-out-file={d}/cg.out", sys.executable, "-m",
                        "benchmarks.bench_thread_pool", "--session", d, json.dumps(steps)],
                       check=True, env=env, cwd=ROOT, capture_output=True)
        out: dict[str, int] = {}
        for path in glob.glob(f"{d}/cg.out.*-01"):
            text = Path(path).read_text(errors="replace")
            label = re.search(r"^desc: Trigger: Client Request: (.*)$", text, re.M)
            total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            if label and label.group(1).startswith("step ") and total:
                out[label.group(1)[5:]] = int(total.group(1))
    return out


def callgrind_main(trees: dict[str, Path], quick: bool) -> dict[str, Any]:
    sizes = {"callbacks": (20, 120), "callbacks_sync_pool": (20, 120),
             "runner_async": (4, 24), "runner_sync_pool": (4, 24)}
    if quick:
        sizes = {k: (2, 4) for k in sizes}
    steps = [(wl, variant, n) for wl in WORKLOADS for variant in ("none", "plugin")
             for n in sizes[wl]]
    out: dict[str, Any] = {}
    for name, src in trees.items():
        got = _callgrind_session(src, steps)
        for wl in WORKLOADS:
            tasks = (sizes[wl][1] - sizes[wl][0]) * CALLS
            per_task = {v: (got[f"{wl} {v} {sizes[wl][1]}"] - got[f"{wl} {v} {sizes[wl][0]}"])
                        / tasks for v in ("none", "plugin")}
            out.setdefault(name, {})[wl] = {
                "plugin_ir": round(per_task["plugin"]), "none_ir": round(per_task["none"]),
                "added_ir": round(per_task["plugin"] - per_task["none"])}
        print(f"[bench] callgrind {name}: {json.dumps(out[name])}", file=sys.stderr, flush=True)
    return {"what": "instructions per tool task on the event loop thread (callgrind Ir)",
            "sizes_runs": sizes, "calls_per_run": CALLS,
            "trees": {k: str(v) for k, v in trees.items()}, "results": out}


def worker_main() -> None:
    from .common import quiet_plugin_logger

    quiet_plugin_logger()
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    import adk_task_telemetry
    from adk_task_telemetry import adk_compat

    w = _Worker()
    remove = getattr(adk_compat, "remove_thread_work_listener", None)
    # The src/ directory (the package's parent: adk_compat is a module or a package).
    src = Path(adk_task_telemetry.__file__).parent.parent
    print(json.dumps({"ready": True, "src": str(src),
                      "pool_hook": hasattr(adk_compat, "add_thread_work_listener")}),
          flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("op") == "quit":
            break
        out = {}
        for v in ("plugin", "none") if req["plugin_first"] else ("none", "plugin"):
            if v == "none" and remove is not None:
                remove(w.plugin)  # no hook on the pool: as if no plugin existed
            out[v] = w.sample(req["workload"], v == "plugin", int(req["size"]))
            if v == "none" and remove is not None:
                adk_compat.add_thread_work_listener(w.plugin)  # back, outside the timing
        print(json.dumps(out), flush=True)


# --- the parent -------------------------------------------------------------------


class _Proc:
    def __init__(self, src: Path) -> None:
        env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{ROOT}")
        self.p = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_thread_pool",
                                   "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, env=env, cwd=ROOT)
        self.hello = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.p.stdout is not None
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("benchmark worker died")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def ask(self, **req: Any) -> dict[str, Any]:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        return self._read()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ask(op="quit")
        self.p.wait(timeout=30)


def _median(xs: list[float]) -> float:
    import statistics

    return float(statistics.median(xs))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--baseline-src", type=Path, help="the src/ directory to compare with")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--callgrind", action="store_true", help="count instructions instead")
    ap.add_argument("--session", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main()
        return 0
    if args.session:
        session_main(Path(args.session[0]), [tuple(x) for x in json.loads(args.session[1])])
        return 0
    if args.baseline_src is None:
        ap.error("--baseline-src is required")
    if args.callgrind:
        from importlib.metadata import version

        doc = callgrind_main({"this": ROOT / "src", "baseline": args.baseline_src.resolve()},
                             args.quick)
        doc["google-adk"] = version("google-adk")
        if not args.quick:
            OUT.with_name("thread_pool_callgrind.json").write_text(
                json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(json.dumps(doc["results"], indent=1, sort_keys=True))
        return 0
    rounds = 2 if args.quick else args.rounds
    sizes = {"callbacks": 30, "callbacks_sync_pool": 30, "runner_async": 3,
             "runner_sync_pool": 3} if args.quick else {
        "callbacks": 300, "callbacks_sync_pool": 300, "runner_async": 20,
        "runner_sync_pool": 20}
    trees = {"this": ROOT / "src", "baseline": args.baseline_src.resolve()}
    procs = {name: _Proc(src) for name, src in trees.items()}
    added: dict[str, dict[str, dict[str, list[float]]]] = {
        t: {w: {"loop_ns": [], "process_ns": []} for w in WORKLOADS} for t in trees}
    try:
        for name in trees:  # warm-up: imports, caches, the pool's threads
            for wl in WORKLOADS:
                procs[name].ask(workload=wl, size=sizes[wl], plugin_first=True)
        for r in range(rounds):
            order = list(trees) if r % 2 == 0 else list(trees)[::-1]
            for wl in WORKLOADS:
                for name in order:
                    got = procs[name].ask(workload=wl, size=sizes[wl], plugin_first=r % 2 == 1)
                    for k in ("loop_ns", "process_ns"):
                        added[name][wl][k].append(got["plugin"][k] - got["none"][k])
            print(f"[bench] round {r + 1}/{rounds}", file=sys.stderr, flush=True)
    finally:
        hello = {name: p.hello for name, p in procs.items()}
        for p in procs.values():
            p.close()
    from importlib.metadata import version

    result = {
        "what": "the plugin's added CPU time per tool task (ns), median over rounds",
        "google-adk": version("google-adk"), "rounds": rounds, "sizes": sizes,
        "calls_per_run": CALLS, "workers": hello,
        "added_ns": {t: {w: {k: round(_median(v)) for k, v in m.items()}
                         for w, m in per.items()} for t, per in added.items()},
        "samples_ns": added,
    }
    if not args.quick:
        OUT.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result["added_ns"], indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
