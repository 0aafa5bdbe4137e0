"""ADK's own server at saturation (issue 24): requests per second with the plugin and
export on, against the same server without them.

    python -m benchmarks.bench_server              # 4 server sets x 6 rounds of 3 s blocks
    python -m benchmarks.bench_server --quick      # 1 pair of 1 s blocks (a smoke run)
    python -m benchmarks.bench_server --record     # also benchmarks/results/server.json

ADK's FastAPI server (``get_fast_api_app`` under uvicorn, in-memory sessions created by
``/run`` itself: ``auto_create_session``), one process per arm, serves the agent in
benchmarks/server_agents/bench_app: a scripted model that makes two parallel calls of
a synchronous CPU-bound tool (a fixed number of integer rounds, about 1 ms each) and
then answers. Arm ``bare``: no plugin, no export (ADK's server as it comes: its SDK
tracer provider records ADK's spans and exports none). Arm ``export``: the plugin
registered first and ``configure_telemetry()`` exporting over OTLP/gRPC to a real
receiver on loopback (the tests' gRPC receiver, in a process of its own, counting
what it decodes), so ADK's own telemetry is exported too, as it is for a user. Two
more arms split the difference: ``plugin`` (no export) and ``export_only`` (no
plugin). The load is real HTTP on loopback: httpx clients, 16 at a time, each
starting a new session's run as soon as its last one answered, every other one
through ``/run`` and the rest through ``/run_sse`` read to its end, so the server
always has work queued. All servers are up at once; in each round a block of load
goes to each in turn, the order reversing from round to round, and every few rounds
all servers are replaced by fresh ones. Each round gives each arm's ratio to the
bare block of the same round, in runs per second and in the server process's CPU
time per run (every thread, from /proc; the event loop's thread apart); the median
and spread over the rounds are reported. With two or more CPUs each server is pinned
to CPU 0 (its export threads compete with its event loop there, as on a one-core
container) and started in a session of its own (its own scheduler group, so its share
of the core does not grow with its number of threads), the clients and the receiver
pinned to CPU 1. From the scheduler's accounting (/proc schedstat) each block also
gives the share of the time the server's event loop was idle (waiting for requests:
near 0 means saturated) and waiting for the CPU (taken by other work on its core). At
the end the receiver must have every ``tool_task`` span the export arm's runs made.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).with_name("results")
ROOT = Path(__file__).resolve().parent.parent
AGENTS = Path(__file__).with_name("server_agents")
APP = "bench_app"
ARMS = ("bare", "plugin", "export_only", "export")
CALLS = 2
WORK = 7_000


@dataclass(frozen=True)
class Plan:
    generations: int  # fresh server pairs
    pairs: int  # pairs of blocks per server pair
    seconds: float  # one block of load
    warmup: float  # seconds of load per server before its first block
    concurrency: int  # clients at a time
    arms: tuple[str, ...] = ARMS
    work: int = WORK  # integer rounds per tool call


FULL = Plan(4, 6, 3.0, 2.0, 16)
QUICK = Plan(1, 1, 1.0, 0.5, 8, ("bare", "export"))


# --- the processes -----------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid``, every thread (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _loop_cpu_seconds(pid: int) -> float:
    """CPU time of the process's main thread (the event loop's, under uvicorn)."""
    with open(f"/proc/{pid}/task/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _schedstat(pid: int, tid: int | None = None) -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one) of thread ``tid`` of
    ``pid``, or of every thread of ``pid`` (Linux /proc/.../schedstat, nanoseconds)."""
    tids = [tid] if tid is not None else [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    run = wait = 0
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                r, w, _ = f.read().split()
        except OSError:  # a thread that ended meanwhile
            continue
        run, wait = run + int(r), wait + int(w)
    return run / 1e9, wait / 1e9


def _pin(cpu: int | None) -> Any:
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "BENCH_SERVER_", "ADK_TASK_TELEMETRY_"))}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra)
    return env


class Receiver:
    """The OTLP/gRPC receiver, in a process of its own: it decodes every request and
    counts spans (all, and ``tool_task`` ones), keeping none."""

    def __init__(self, cpu: int | None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bench_server", "--receive"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env({}),
            cwd=str(ROOT), preexec_fn=_pin(cpu))
        assert self.proc.stdout is not None
        self.endpoint = json.loads(self.proc.stdout.readline())["endpoint"]

    def counts(self) -> dict[str, int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        result: dict[str, int] = json.loads(self.proc.stdout.readline())
        return result

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(30)


class Server:
    """One ADK server process on 127.0.0.1, serving the bench agent in one arm."""

    def __init__(self, arm: str, tmp: Path, endpoint: str, cpu: int | None,
                 profile_to: Path | None = None, work: int = WORK) -> None:
        from tests.otlp_receivers import free_port

        self.arm = arm
        agents = tmp / f"agents-{arm}"  # a copy: ADK may write local state next to agents
        shutil.copytree(AGENTS, agents, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"server-{arm}-{self.port}.log"
        env = _env({"BENCH_SERVER_ARM": arm, "BENCH_SERVER_ENDPOINT": endpoint,
                    "BENCH_SERVER_CALLS": str(CALLS), "BENCH_SERVER_WORK": str(work),
                    **({"BENCH_SERVER_PROFILE": str(profile_to)} if profile_to else {})})
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.bench_server", "--serve", str(self.port),
                 str(agents)], stdout=log, stderr=subprocess.STDOUT, env=env,
                cwd=str(tmp), preexec_fn=_pin(cpu),
                # A session of its own: its own scheduler group (autogroup), so that its
                # share of the core does not grow with its number of threads.
                start_new_session=True)

    def wait_ready(self, timeout: float = 120.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.arm} server exited:\n{self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.base}/list-apps", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.arm} server did not start:\n{self.log_path.read_text()}")

    def cpu(self) -> tuple[float, float, float, float]:
        """(CPU seconds of every thread, of the event loop's thread; seconds the event
        loop's thread was runnable and waited for the CPU, and on the CPU, by the
        scheduler's own accounting)."""
        pid = self.proc.pid
        run, wait = _schedstat(pid, pid)
        return _cpu_seconds(pid), _loop_cpu_seconds(pid), wait, run

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


# --- the load ----------------------------------------------------------------------


def _body(session_id: str, streaming: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "app_name": APP, "user_id": "bench", "session_id": session_id,
        "new_message": {"role": "user", "parts": [{"text": "crunch"}]}}
    if streaming:
        body["streaming"] = False  # /run_sse, events as they come, not token streaming
    return body


async def _load(server: Server, seconds: float, concurrency: int) -> dict[str, Any]:
    """``concurrency`` clients, each starting a new run as soon as its last one
    answered, for ``seconds``; then the runs still in flight finish. Runs per second:
    every run over the whole time, until the last one answered (the server stays
    saturated while any run is in flight: its work is CPU). Counting only the runs
    answered within the window would count in steps of ``concurrency``: the clients'
    runs progress side by side and answer in waves."""
    import httpx

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    total = bad = 0
    async with httpx.AsyncClient(base_url=server.base, timeout=120, limits=limits) as client:
        c0 = server.cpu()
        t0 = time.perf_counter()
        deadline = t0 + seconds

        async def one(sse: bool) -> bool:
            sid = f"s-{uuid.uuid4().hex}"
            if not sse:
                r = await client.post("/run", json=_body(sid, False))
                return r.status_code == 200 and b'"done"' in r.content
            last = ""
            async with client.stream("POST", "/run_sse", json=_body(sid, True)) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data:"):
                        last = line
            return r.status_code == 200 and '"done"' in last

        async def client_loop(w: int) -> None:
            nonlocal total, bad
            i = 0
            while time.perf_counter() < deadline:
                ok = await one(sse=bool((w + i) % 2))
                i += 1
                total += 1
                bad += not ok

        await asyncio.gather(*(client_loop(w) for w in range(concurrency)))
        wall = time.perf_counter() - t0
        c1 = server.cpu()
    cpu, loop = c1[0] - c0[0], c1[1] - c0[1]
    waited, ran = c1[2] - c0[2], c1[3] - c0[3]
    return {"runs_per_s": (total - bad) / wall, "runs": total, "failed": bad,
            "server_cpu_ms_per_run": cpu / max(total, 1) * 1e3,
            "loop_cpu_ms_per_run": loop / max(total, 1) * 1e3,
            "server_busy": cpu / wall,
            # The event loop's thread: waiting for the CPU (others on its core: the
            # machine's other work, the server's own export threads) and idle (waiting
            # for requests: the server was not saturated).
            "loop_waiting": waited / wall, "loop_idle": max(0.0, 1 - (waited + ran) / wall)}


# --- the comparison ----------------------------------------------------------------


def _spread(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=4) if len(xs) >= 4 else [xs[0], 0.0, xs[-1]]
    return {"median": statistics.median(xs), "min": xs[0], "max": xs[-1],
            "iqr": q[2] - q[0], "n": len(xs)}


def _loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def _measure(plan: Plan, pin: bool, arms: tuple[str, ...] = ARMS,
             profile_to: Path | None = None) -> dict[str, Any]:
    # A terminated benchmark stops its servers and receiver too (the finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    server_cpu = client_cpu = None
    if pin and (os.cpu_count() or 1) >= 2 and hasattr(os, "sched_setaffinity"):
        server_cpu, client_cpu = 0, 1
        os.sched_setaffinity(0, {client_cpu})
    receiver = Receiver(client_cpu)
    blocks: list[dict[str, Any]] = []
    export_runs = 0
    load_before = _loadavg()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-server-") as tmp:
            for g in range(plan.generations):
                servers = {arm: Server(arm, Path(tmp), receiver.endpoint, server_cpu,
                                       profile_to, plan.work) for arm in arms}
                try:
                    for s in servers.values():
                        s.wait_ready()
                    for arm, s in servers.items():  # warm-up: imports, caches, first spans
                        w = asyncio.run(_load(s, plan.warmup, plan.concurrency))
                        export_runs += w["runs"] if arm == "export" else 0
                    if profile_to is not None:
                        import httpx

                        for s in servers.values():
                            httpx.post(f"{s.base}/_bench/profile", timeout=30)
                    for p in range(plan.pairs):
                        k = g * plan.pairs + p
                        order = list(arms) if k % 2 == 0 else list(reversed(arms))
                        pair: dict[str, Any] = {"generation": g, "pair": p, "order": order}
                        for arm in order:
                            pair[arm] = asyncio.run(
                                _load(servers[arm], plan.seconds, plan.concurrency))
                            export_runs += pair[arm]["runs"] if arm == "export" else 0
                        blocks.append(pair)
                        print(f"  server pair {g} block pair {p}: " + ", ".join(
                            f"{arm} {pair[arm]['runs_per_s']:.1f} runs/s "
                            f"({pair[arm]['server_cpu_ms_per_run']:.2f} ms CPU/run, "
                            f"loop {pair[arm]['loop_cpu_ms_per_run']:.2f}, "
                            f"busy {pair[arm]['server_busy']:.2f}, loop waiting "
                            f"{pair[arm]['loop_waiting']:.2f}, idle "
                            f"{pair[arm]['loop_idle']:.2f})" for arm in arms),
                            flush=True)
                    if profile_to is not None:
                        import httpx

                        for arm, s in servers.items():
                            threads = httpx.get(f"{s.base}/_bench/profile", timeout=120).json()
                            print(f"  {arm} (pid {s.proc.pid}) threads' CPU s: {threads}")
                finally:
                    for s in servers.values():
                        s.stop()
        want = export_runs * CALLS
        deadline = time.monotonic() + 30
        got = receiver.counts()  # the servers' exits flushed what they held
        while got["tool_task_spans"] < want and time.monotonic() < deadline:
            time.sleep(0.2)
            got = receiver.counts()
    finally:
        receiver.stop()
    others = [arm for arm in arms if arm != "bare"]
    rps = {arm: _spread([b[arm]["runs_per_s"] / b["bare"]["runs_per_s"] for b in blocks])
           for arm in others}
    cpu = {arm: _spread([b["bare"]["server_cpu_ms_per_run"] / b[arm]["server_cpu_ms_per_run"]
                         for b in blocks]) for arm in others}
    return {
        "arms": list(arms), "calls_per_run": CALLS, "work_rounds_per_call": plan.work,
        "concurrency": plan.concurrency, "block_seconds": plan.seconds,
        "generations": plan.generations, "pairs_per_generation": plan.pairs,
        "pinned": server_cpu is not None,
        "ratio_runs_per_s": rps, "ratio_cpu_per_run": cpu,
        "runs_per_s": {arm: _spread([b[arm]["runs_per_s"] for b in blocks]) for arm in arms},
        "server_cpu_ms_per_run": {arm: _spread([b[arm]["server_cpu_ms_per_run"]
                                                for b in blocks]) for arm in arms},
        "loop_cpu_ms_per_run": {arm: _spread([b[arm]["loop_cpu_ms_per_run"]
                                              for b in blocks]) for arm in arms},
        **{key: {arm: _spread([b[arm][key] for b in blocks]) for arm in arms}
           for key in ("server_busy", "loop_waiting", "loop_idle")},
        "failed_runs": sum(b[arm]["failed"] for b in blocks for arm in arms),
        "export": {"runs": export_runs, "tool_task_spans_expected": want,
                   "tool_task_spans_received": got["tool_task_spans"],
                   "spans_received": got["spans"]},
        "loadavg_before": load_before, "loadavg_after": _loadavg(),
        "blocks": blocks,
    }


# --- the child processes -----------------------------------------------------------


def _serve(port: int, agents_dir: str) -> None:
    """What ``adk api_server --auto_create_session`` does, with in-memory services."""
    import inspect
    import logging

    import uvicorn
    from google.adk.cli.fast_api import get_fast_api_app

    # ADK 2.13 logs a WARNING per model call ("missing token usage metadata"): the
    # scripted model has none; terminal I/O would be the noisiest part of a run.
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    kw: dict[str, Any] = {}
    if "auto_create_session" in inspect.signature(get_fast_api_app).parameters:
        kw["auto_create_session"] = True
    app = get_fast_api_app(agents_dir=agents_dir, web=False, host="127.0.0.1", port=port,
                           session_service_uri="memory://", artifact_service_uri="memory://",
                           use_local_storage=False, **kw)
    profile_to = os.environ.get("BENCH_SERVER_PROFILE")
    if profile_to:
        _profiled(app, Path(profile_to))
    uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                  access_log=False)).run()


def _threads_cpu() -> dict[str, float]:
    """CPU seconds of each thread of this process, by thread name (Linux /proc)."""
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        out[f"{name}-{tid}"] = cpu
    return out


def _profiled(app: Any, to: Path) -> None:
    """--profile: routes that start cProfile (thread CPU time) on the event loop's
    thread, and write its statistics and every thread's CPU time."""
    import cProfile
    import gc
    import pstats

    profile = cProfile.Profile(time.thread_time)  # CPU time: the machine is shared
    # The collector's time by generation, while profiling: a collection is billed by
    # cProfile to whatever call allocated last, so it is counted apart here.
    gc_time: dict[str, float] = {}
    gc_started = [0.0]
    on = [False]

    def collecting(phase: str, info: dict[str, int]) -> None:
        if not on[0]:
            return
        if phase == "start":
            gc_started[0] = time.thread_time()
            return
        key = f"gc-gen{info['generation']}"
        gc_time[key + "-s"] = gc_time.get(key + "-s", 0.0) + time.thread_time() - gc_started[0]
        gc_time[key + "-n"] = gc_time.get(key + "-n", 0) + 1

    gc.callbacks.append(collecting)

    @app.post("/_bench/profile")
    async def start() -> None:  # on the event loop's thread, which it profiles
        on[0] = True
        profile.enable()

    @app.get("/_bench/profile")
    async def dump() -> dict[str, float]:
        profile.disable()
        with (to / f"profile-{os.getpid()}.txt").open("w") as f:
            pstats.Stats(profile, stream=f).sort_stats("cumulative").print_stats(80)
            pstats.Stats(profile, stream=f).sort_stats("tottime").print_stats(60)
        profile.dump_stats(str(to / f"profile-{os.getpid()}.prof"))
        on[0] = False
        return {**_threads_cpu(), **{k: round(v, 3) for k, v in gc_time.items()}}


def _receive() -> None:
    """The receiver process: prints its endpoint, then its counts for every line read."""
    from tests.otlp_receivers import GrpcReceiver, Received

    lock = threading.Lock()
    counts = {"spans": 0, "tool_task_spans": 0, "requests": 0}

    class Counting(Received):
        def add(self, kind: str, request: Any, headers: dict[str, str]) -> None:
            if kind != "traces":
                return
            names = [s.name for rs in request.resource_spans for ss in rs.scope_spans
                     for s in ss.spans]
            with lock:
                counts["requests"] += 1
                counts["spans"] += len(names)
                counts["tool_task_spans"] += sum(n.startswith("tool_task ") for n in names)

    rx = GrpcReceiver(received=Counting())
    print(json.dumps({"endpoint": rx.endpoint}), flush=True)
    for _line in sys.stdin:
        with lock:
            print(json.dumps(counts), flush=True)
    rx.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--no-pin", action="store_true", help="do not pin servers and clients")
    ap.add_argument("--arms", default="",
                    help="arms to compare, bare first (default: " + ",".join(ARMS) + ")")
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR",
                    help="profile each server's event loop (cProfile) into DIR and print "
                         "each thread's CPU time (for development: the profiler's cost "
                         "is in the figures)")
    ap.add_argument("--work", type=int, default=WORK,
                    help=f"integer rounds per tool call (default {WORK:,}, about 1 ms); with "
                         "--record, another value writes results/server-work<N>.json")
    ap.add_argument("--plan", default="", metavar="G,P,SECONDS",
                    help="server pairs, block pairs per server pair, seconds per block")
    ap.add_argument("--serve", nargs=2, metavar=("PORT", "AGENTS_DIR"), help=argparse.SUPPRESS)
    ap.add_argument("--receive", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        _serve(int(args.serve[0]), args.serve[1])
        return 0
    if args.receive:
        _receive()
        return 0
    from importlib.metadata import version

    plan = QUICK if args.quick else FULL
    if args.plan:
        g, p, sec = args.plan.split(",")
        plan = Plan(int(g), int(p), float(sec), plan.warmup, plan.concurrency, plan.arms)
    arms = tuple(args.arms.split(",")) if args.arms else plan.arms
    plan = dataclasses.replace(plan, work=args.work)
    print(f"google-adk {version('google-adk')}, Python {sys.version.split()[0]}: "
          f"{plan.generations} server pairs x {plan.pairs} pairs of {plan.seconds:g} s "
          f"blocks, {plan.concurrency} clients", flush=True)
    r = _measure(plan, pin=not args.no_pin, arms=arms,
                 profile_to=args.profile.resolve() if args.profile else None)
    r.update(google_adk=version("google-adk"), python=sys.version.split()[0],
             date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    for arm in r["ratio_runs_per_s"]:
        rr, rc = r["ratio_runs_per_s"][arm], r["ratio_cpu_per_run"][arm]
        print(f"  {arm}/bare runs per second: median {rr['median']:.3f} "
              f"(min {rr['min']:.3f}, max {rr['max']:.3f}, IQR {rr['iqr']:.3f}, "
              f"{rr['n']} pairs); by server CPU per run: median {rc['median']:.3f} "
              f"(min {rc['min']:.3f}, max {rc['max']:.3f})", flush=True)
    print(f"  {r['export']['tool_task_spans_received']:,} of "
          f"{r['export']['tool_task_spans_expected']:,} tool_task spans received; "
          f"{r['failed_runs']} failed runs; load average {r['loadavg_before']} -> "
          f"{r['loadavg_after']}", flush=True)
    if args.record and not args.quick:
        name = "server.json" if args.work == WORK else f"server-work{args.work}.json"
        (RESULTS / name).write_text(json.dumps(r, indent=1) + "\n")
    return 0


# Where the cost goes: one profiled run, summarised (cProfile with thread CPU time on
# each server's event-loop thread, steady state after the warm-up; the profiler
# roughly triples every figure, so only the shares are comparable).
_PROFILE = [
    "Where the cost goes (2026-12-02, google-adk 2.13.0; `python -m benchmarks.bench_server "
    "--plan 1,2,8 --profile DIR`: cProfile on each server's event-loop thread, thread CPU "
    "time, steady state; shares of the bare arm's profiled CPU per run; the figures of such "
    "a run move by a point or two from one run to the next):", "",
    "| added, % of a bare run | plugin | export only | plugin + export |",
    "|---|---|---|---|",
    "| adk_task_telemetry (the plugin's callbacks, tracker, OpenSpanProcessor) "
    "| 1.1 | 0.3 | 1.6 |",
    "| OpenTelemetry SDK and API, traces (our two spans; with export: the batch "
    "processor's `on_end` for every span) | 2.8 (2.0 of it in one function, the context's "
    "`get_current`: about as many calls a run as bare, at 7 times the time, probably a "
    "collection of the heap billed to it; "
    "without it 0.8) | 1.4 | 2.7 |",
    "| OpenTelemetry SDK metrics: ADK's and FastAPI's own instruments (9 histogram points "
    "a run, each offered to an exemplar reservoir) recording into the MeterProvider "
    "`configure_telemetry()` installs; ours are 2 of them | 0 | 1.6 | 1.8 |",
    "| OpenTelemetry logs: ADK's completion-details events (one a model call) | 0 | 0.3 "
    "| 0.3 |",
    "| ADK's plugin manager dispatching to the plugin | 0.2 | 0 | 0.2 |",
    "| everything else (ADK, FastAPI, pydantic; collections of the larger heap) "
    "| -0.8 | 3.5 | 4.1 |",
    "| total (event-loop thread) | 3.4 | 7.3 | 10.9 |", "",
    "Beside the event loop, the export arms' other threads (the SDK's batch processors, "
    "our sender: OTLP encoding and gRPC) used 0.7 to 1.1 ms of CPU a run (the table's "
    "server CPU minus event-loop thread), 5 to 8 % of a bare run; on one core, under the "
    "GIL, that is throughput too. What the plugin adds is about a third of the "
    "export arm's cost; the rest is ADK's own telemetry, which `configure_telemetry()` "
    "exports as documented (ADK's spans, and its metrics and log events, which record "
    "nothing until a MeterProvider and LoggerProvider are installed). Nothing in "
    "adk_task_telemetry stood out: its share is spread over the callbacks, the run's end "
    "and OpenSpanProcessor's two dictionary operations a span.", "",
    "A second profile (2026-12-02 21:25 UTC, `--plan 1,2,5 --profile DIR`, which also "
    "times the collector apart through `gc.callbacks`) agrees: adk_task_telemetry is 1.3, "
    "0.4 and 1.8 % of a bare run (plugin, export only, both). In the export arms "
    "OpenSpanProcessor's `on_start` and `on_end` are 0.4 % (about 12 spans a run, ADK's "
    "included) and the exemplar filter that counts measurements for a close's flush "
    "(`RecordedSince`) 0.1 %; no function of the plugin's callbacks or a run's end is "
    "above 0.1 %. The collector made 2 or 3 full collections in each arm's window, about "
    "0.1 s each, in every arm alike: no arm's heap makes them costlier. Nothing of ours "
    "is left that is cheap to cut; the bulk is ADK's own telemetry, which "
    "`configure_telemetry()` exports by decision (its cost stated, here).", ""]

def _verdict(r: dict[str, Any]) -> list[str]:
    """The goal (issue 24: at least 0.95), read from runs per second at saturation, with
    the CPU time per run as the cross-check."""
    cpu = r["server_cpu_ms_per_run"]
    bare = cpu["bare"]["median"]
    added = cpu["export"]["median"] - bare
    rps = r["ratio_runs_per_s"]["export"]["median"]
    est = r["ratio_cpu_per_run"]["export"]["median"]
    met = "met" if rps >= 0.95 else "not met"
    idle, waiting = r.get("loop_idle"), r.get("loop_waiting")
    sat = ""
    if idle and waiting:
        w = [v["median"] for v in waiting.values()]
        sat = (f"The servers were saturated: their event loop idle "
               f"{max(v['median'] for v in idle.values()):.2f} of the time at most (median "
               f"of an arm), and it waited for the CPU {min(w):.2f}-{max(w):.2f} of the "
               "time (others' work "
               "on its core: the machine is shared, hence the spread of runs per second "
               "from one round to the next). ")
    return [f"**Goal, at least 0.95: {met} ({rps:.3f} by runs per second at saturation; "
            f"{est:.3f} by the server's CPU time per run).** " + sat +
            f"Plugin + export add {added:.2f} ms of CPU a run to {bare:.2f} ms: the ratio is "
            f"0.95 or more for agents whose runs cost at least {added * 19:.0f} ms of server "
            "CPU without them. The plugin without export adds "
            f"{cpu['plugin']['median'] - bare:.2f} ms a run (two tool tasks); exporting "
            "ADK's own telemetry without the plugin adds "
            f"{cpu['export_only']['median'] - bare:.2f} ms.", ""]


_ARM_NAMES = {"bare": "bare (no plugin, no export)", "plugin": "plugin, no export",
              "export_only": "export of ADK's own telemetry, no plugin",
              "export": "**plugin + export**"}


def markdown() -> list[str]:
    """docs/benchmarks.md's section on this benchmark, from the recorded run."""
    path = RESULTS / "server.json"
    if not path.exists():
        return []
    r = json.loads(path.read_text())
    rr, rc = r["ratio_runs_per_s"]["export"], r["ratio_cpu_per_run"]["export"]
    lines = ["## ADK's server at saturation (issue 24)", "",
             "`python -m benchmarks.bench_server --record` (`make bench`), on "
             f"{r['date']}, google-adk {r['google_adk']}, Python {r['python']}, on a machine "
             f"shared with other work (2 cores; load average {r['loadavg_before']} before, "
             f"{r['loadavg_after']} after). " + " ".join(__doc__.split("\n\n")[2].split()),
             "", f"Medians over {rr['n']} rounds ({r['generations']} server generations x "
             f"{r['pairs_per_generation']} rounds of {r['block_seconds']:g} s blocks, "
             f"{r['concurrency']} clients); ratios are taken per round, against the bare "
             "block of the same round.", "",
             "| arm | runs/s | x bare, runs/s (IQR) | server CPU ms/run | event-loop "
             "thread ms/run | x bare, by CPU/run (IQR) | server's share of a core | event "
             "loop idle | event loop waiting for the CPU |",
             "|---|---|---|---|---|---|---|---|---|"]
    for arm in r["arms"]:
        rps, cpu = r["runs_per_s"][arm], r["server_cpu_ms_per_run"][arm]
        loop, busy = r["loop_cpu_ms_per_run"][arm], r["server_busy"][arm]
        if arm == "bare":
            ratio_rps = ratio_cpu = "1"
        else:
            a, b = r["ratio_runs_per_s"][arm], r["ratio_cpu_per_run"][arm]
            ratio_rps = f"{a['median']:.3f} ({a['iqr']:.3f})"
            ratio_cpu = f"{b['median']:.3f} ({b['iqr']:.3f})"
        idle = r.get("loop_idle", {}).get(arm, {}).get("median")
        waiting = r.get("loop_waiting", {}).get(arm, {}).get("median")
        lines.append(f"| {_ARM_NAMES.get(arm, arm)} | {rps['median']:.1f} | {ratio_rps} | "
                     f"{cpu['median']:.2f} | {loop['median']:.2f} | {ratio_cpu} | "
                     f"{busy['median']:.2f} | "
                     + (f"{idle:.2f} | {waiting:.2f} |" if idle is not None
                        and waiting is not None else "| |"))
    lines += ["", f"Plugin + export against bare: runs per second **{rr['median']:.3f}** "
              f"(IQR {rr['iqr']:.3f}), by the server's CPU time per run **{rc['median']:.3f}** "
              f"(IQR {rc['iqr']:.3f}). The receiver decoded "
              f"{r['export']['tool_task_spans_received']:,} of the "
              f"{r['export']['tool_task_spans_expected']:,} `tool_task` spans the export "
              f"arm's runs made ({r['export']['spans_received']:,} spans in all, ADK's own "
              f"included); {r['failed_runs']} runs failed.", "", *_verdict(r)]
    for other in sorted(RESULTS.glob("server-work*.json")):
        w = json.loads(other.read_text())
        a, b = w["ratio_runs_per_s"]["export"], w["ratio_cpu_per_run"]["export"]
        cpu = w["server_cpu_ms_per_run"]
        lines += [f"With heavier tools (`python -m benchmarks.bench_server --work "
                  f"{w['work_rounds_per_call']} --arms {','.join(w['arms'])} --plan "
                  f"{w['generations']},{w['pairs_per_generation']},{w['block_seconds']:g} "
                  f"--record`, {w['date']}, load average {w['loadavg_before']} before): "
                  f"{cpu['bare']['median']:.1f} ms of CPU a bare run, "
                  f"{cpu['export']['median']:.1f} with plugin + export; ratio by runs per "
                  f"second **{a['median']:.3f}** (IQR {a['iqr']:.3f}, {a['n']} rounds), by "
                  f"CPU per run {b['median']:.3f} (IQR {b['iqr']:.3f})"
                  + "".join(f"; {_ARM_NAMES.get(arm, arm)}: "
                            f"{w['ratio_runs_per_s'][arm]['median']:.3f} and "
                            f"{w['ratio_cpu_per_run'][arm]['median']:.3f}"
                            for arm in w["arms"] if arm not in ("bare", "export")) + ".", ""]
    lines += _PROFILE
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
