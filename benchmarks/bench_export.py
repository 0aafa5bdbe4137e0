"""Export (issue 24): configure_telemetry()'s span pipeline against the SDK's own
BatchSpanProcessor with the OTLP exporter, on the same load and the same receiver.

    python -m benchmarks.bench_export                # 6 rounds x 2 s blocks, both protocols
    python -m benchmarks.bench_export --quick        # a smoke run (a few seconds)
    python -m benchmarks.bench_export --record       # also benchmarks/results/export.json

The load is the plugin's span path driven at 5,000 tool tasks a second: every 10 ms
five runs start, each ``before_run``, 10 tool calls in asyncio tasks of their own
(``before_tool``, the body, ``after_tool``; each task's end reaching the plugin through
its done-callback), ``after_run`` -- what ADK does for each tool call, with stand-ins
for ADK's context objects. Not a real ADK Runner: one Runner run of 10 scripted calls
costs about 8 ms of CPU here (section 2 of docs/benchmarks.md), so a shared core tops out
near 1,500 tool tasks a second, well short of 5,000; and ADK traces its own spans with
the process's global TracerProvider, which can be only one of the arms below.

Arms, in one process, each with its own TaskTelemetryPlugin on its own providers:
``ours``, the pipeline configure_telemetry() builds (``configure.detached``: our span
processor -> bounded buffer -> sender thread -> the SDK's OTLP exporter, no SDK
BatchSpanProcessor; the OpenSpanProcessor too), and ``stock``, the SDK's
TracerProvider + BatchSpanProcessor + OTLPSpanExporter, each over OTLP/HTTP (protobuf,
configure_telemetry()'s default) and OTLP/gRPC; both have a MeterProvider exporting
OTLP at the same interval. ``stock+open``: the stock pipeline plus the
OpenSpanProcessor that configure_telemetry() also installs (spans a tool leaves open,
reported at its run's end): ours against it is our span processor, the buffer and the
sender thread against the SDK's BatchSpanProcessor. ``floor``: BatchSpanProcessor with
an exporter that does nothing, to tell the export's share from the load's. The receiver
is one OTLP server (tests/otlp_receivers.py, real sockets, every request decoded) in a
process of its own, so its work is not billed to the arms; it counts spans per
``service.name``.

Blocks of each arm take turns in every round (the order rotating). A block: the paced
load for ``--seconds`` while a probe task sleeps 1 ms in a loop (event-loop lag: how
late each wake-up comes), then the provider's ``force_flush`` and a wait until the
receiver holds every span the block ended. CPU per span is the process's CPU time
(every thread: the SDK's batch worker in stock, our sender in ours) over the whole
block, flush and wait included, per span received. Ratios ours/stock are taken per
round; reported are their median and range over the rounds. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from .common import (
    FakeInvocationContext,
    FakeToolContext,
    NoopSpanExporter,
    _tool_task,
    quiet_plugin_logger,
    spread,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).with_name("results")
RATE = 5000  # tool tasks a second
TICK = 0.010  # seconds between launches
CALLS = 10  # parallel tool calls per run
_PROBE_S = 0.001
PROTOCOLS = ("http/protobuf", "grpc")


# --- the receiver: a process of its own --------------------------------------------


def _receiver_main() -> None:
    """Child: OTLP/gRPC and OTLP/HTTP receivers sharing one span count per service.name;
    answers ``{"service": s, "spans": n, "timeout": t}`` on stdin once it holds n spans
    of s (or the timeout passed) with the count it holds."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.otlp_receivers import GrpcReceiver, HttpReceiver, Received, attrs

    class Counting(Received):
        """Counts spans per service.name and keeps no request (memory stays flat)."""

        def __init__(self) -> None:
            super().__init__()
            self.by_service: dict[str, int] = {}

        def add(self, kind: str, request: Any, headers: dict[str, str]) -> None:
            if kind != "traces":
                return
            counts: dict[str, int] = {}
            for rs in request.resource_spans:
                service = str(attrs(rs.resource.attributes).get("service.name"))
                counts[service] = counts.get(service, 0) + sum(len(ss.spans)
                                                               for ss in rs.scope_spans)
            with self.cond:
                for s, n in counts.items():
                    self.by_service[s] = self.by_service.get(s, 0) + n
                self.cond.notify_all()

    rx = Counting()
    grpc_rx, http_rx = GrpcReceiver(received=rx), HttpReceiver(received=rx)
    print(json.dumps({"grpc": grpc_rx.endpoint, "http/protobuf": http_rx.endpoint}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("op") == "quit":
            break
        service, want = str(req["service"]), int(req["spans"])
        rx.wait_for(lambda s=service, n=want: rx.by_service.get(s, 0) >= n,  # type: ignore[misc]
                    float(req["timeout"]))
        with rx.cond:
            got = rx.by_service.get(service, 0)
        print(json.dumps({"spans": got}), flush=True)
    grpc_rx.stop()
    http_rx.stop()


class Receiver:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bench_export", "--receiver-child"],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.endpoints: dict[str, str] = json.loads(self.proc.stdout.readline())

    def wait(self, service: str, spans: int, timeout: float = 30.0) -> int:
        """Spans of ``service`` received so far, once there are ``spans`` (or at timeout)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"service": service, "spans": spans,
                                          "timeout": timeout}) + "\n")
        self.proc.stdin.flush()
        return int(json.loads(self.proc.stdout.readline())["spans"])

    def stop(self) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write('{"op": "quit"}\n')
            self.proc.stdin.flush()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


# --- the arms ------------------------------------------------------------------------


class _Counter(SpanProcessor):
    """A span processor that counts ended spans (the same in every arm)."""

    def __init__(self) -> None:
        self.ended = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.ended += 1


class Arm:
    def __init__(self, name: str, tracer_provider: Any, meter_provider: Any,
                 close: Callable[[], None], exported: bool,
                 flush: Callable[[], object]) -> None:
        from adk_task_telemetry import TaskTelemetryPlugin

        self.name = name
        self.tp = tracer_provider
        self.counter = _Counter()
        self.tp.add_span_processor(self.counter)
        self.plugin = TaskTelemetryPlugin(tracer_provider=tracer_provider,
                                          meter_provider=meter_provider)
        self.close = close
        self.exported = exported
        self.flush = flush  # everything out, exported, and the export answered
        self.received = 0


def _ours(protocol: str, endpoint: str, interval_ms: float,
          timeout: float | None = None) -> Arm:
    from adk_task_telemetry.configure import detached

    handle = detached(endpoint=endpoint, protocol=protocol, service_name=f"ours {protocol}",
                      timeout=timeout)
    wait_ms = int((timeout or 10.0) * 5000)  # a few attempts' worth
    return Arm(f"ours {protocol}", handle.tracer_provider, handle.meter_provider,
               lambda: handle.shutdown(timeout_millis=5000), True,
               lambda: handle.force_flush(timeout_millis=wait_ms))


def _stock(protocol: str, endpoint: str, interval_ms: float, open_spans: bool = False,
           timeout: float | None = None) -> Arm:
    """What a user writes from the SDK's documentation for the same export (with
    ``open_spans``, plus the OpenSpanProcessor configure_telemetry() adds: what is left
    between that and ours is our span processor, the buffer and the sender thread)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        spans: Any = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=timeout)
        metrics: Any = OTLPMetricExporter(endpoint=endpoint, insecure=True, timeout=timeout)
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HttpMetricExporter,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpSpanExporter,
        )
        spans = HttpSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=timeout)
        metrics = HttpMetricExporter(endpoint=f"{endpoint}/v1/metrics", timeout=timeout)
    name = f"{'stock+open' if open_spans else 'stock'} {protocol}"
    resource = Resource.create({"service.name": name})
    tp = TracerProvider(resource=resource, shutdown_on_exit=False)
    tp.add_span_processor(BatchSpanProcessor(spans))
    if open_spans:
        from adk_task_telemetry import OpenSpanProcessor

        tp.add_span_processor(OpenSpanProcessor())
    mp = MeterProvider(metric_readers=[PeriodicExportingMetricReader(
        metrics, export_interval_millis=interval_ms)], resource=resource, shutdown_on_exit=False)

    def close() -> None:
        tp.shutdown()
        mp.shutdown()

    def flush() -> None:
        tp.force_flush()  # the BatchSpanProcessor exports in this thread
        mp.force_flush()
    return Arm(name, tp, mp, close, True, flush)


def _floor(interval_ms: float) -> Arm:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    tp = TracerProvider(shutdown_on_exit=False)
    tp.add_span_processor(BatchSpanProcessor(NoopSpanExporter()))
    mp = MeterProvider(metric_readers=[InMemoryMetricReader()], shutdown_on_exit=False)

    def close() -> None:
        tp.shutdown()
        mp.shutdown()
    return Arm("floor", tp, mp, close, False, tp.force_flush)


# --- the load --------------------------------------------------------------------------


async def _run(plugin: Any, name: str) -> None:
    ctx = FakeInvocationContext(name)
    await plugin.before_run_callback(invocation_context=ctx)
    await asyncio.gather(*[asyncio.create_task(_tool_task(plugin, FakeToolContext(
        f"call-{i}", ctx))) for i in range(CALLS)])
    await plugin.after_run_callback(invocation_context=ctx)


async def _probe(stop: asyncio.Event, lags: list[float]) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(_PROBE_S)
        lags.append(time.perf_counter() - t - _PROBE_S)


def _p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


async def _paced(plugin: Any, seconds: float, tag: str, rate: int) -> dict[str, float]:
    """Runs of CALLS tool tasks started on a fixed schedule for ``rate`` tasks a second
    (late ticks catch up; nothing is skipped). Returns the achieved rate and the lag."""
    runs_per_tick = max(1, round(rate * TICK / CALLS))
    tick = runs_per_tick * CALLS / rate
    ticks = max(1, round(seconds * rate / (runs_per_tick * CALLS)))
    stop = asyncio.Event()
    lags: list[float] = []
    probe = asyncio.create_task(_probe(stop, lags))
    pending: set[asyncio.Task[None]] = set()
    t0 = time.perf_counter()
    for k in range(ticks):
        delay = t0 + k * tick - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        for j in range(runs_per_tick):
            task = asyncio.create_task(_run(plugin, f"{tag}-{k}-{j}"))
            pending.add(task)
            task.add_done_callback(pending.discard)
    if pending:
        await asyncio.gather(*list(pending))
    wall = time.perf_counter() - t0
    stop.set()
    await probe
    tasks = ticks * runs_per_tick * CALLS
    return {"tasks": tasks, "wall_s": wall, "tasks_per_s": tasks / wall,
            "lag_p99_ms": _p(lags, 0.99) * 1e3, "lag_median_ms": _p(lags, 0.5) * 1e3}


def _block(loop: asyncio.AbstractEventLoop, arm: Arm, receiver: Receiver, seconds: float,
           tag: str, rate: int) -> dict[str, float]:
    gc.collect()  # earlier garbage is not billed to this block
    ended0 = arm.counter.ended
    t0, c0, l0 = os.times(), time.process_time(), time.thread_time()
    load = loop.run_until_complete(_paced(arm.plugin, seconds, tag, rate))
    loop_cpu = time.thread_time() - l0
    arm.tp.force_flush()
    spans = arm.counter.ended - ended0
    if arm.exported:
        got = receiver.wait(arm.name, arm.received + spans)
        lost = arm.received + spans - got
        arm.received = got
    else:
        lost = 0
    cpu, t1 = time.process_time() - c0, os.times()
    return {**load, "spans": spans, "lost": lost, "cpu_s": cpu,
            "system_share": (t1.system - t0.system) / max(cpu, 1e-9),
            "cpu_us_per_span": cpu / max(spans, 1) * 1e6,
            "loop_cpu_us_per_task": loop_cpu / load["tasks"] * 1e6}


def _spread_or_none(xs: list[float]) -> dict[str, float] | None:
    """A ratio's spread over the rounds; None where no round had a baseline to divide by."""
    return spread(xs) if xs else None


def _range(x: dict[str, float] | None) -> str:
    return f"{x['median']:.3f} ({x['min']:.3f}-{x['max']:.3f})" if x else "-"


def measure(protocols: tuple[str, ...], rounds: int, seconds: float,
            rate: int = RATE) -> dict[str, Any]:
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    quiet_plugin_logger()
    receiver = Receiver()
    interval_ms = 60_000.0  # configure_telemetry()'s default metric export interval
    arms = [_floor(interval_ms)]
    for proto in protocols:
        arms.append(_ours(proto, receiver.endpoints[proto], interval_ms))
        arms.append(_stock(proto, receiver.endpoints[proto], interval_ms))
        arms.append(_stock(proto, receiver.endpoints[proto], interval_ms, open_spans=True))
    loop = asyncio.new_event_loop()
    blocks: dict[str, list[dict[str, float]]] = {a.name: [] for a in arms}
    arm_by_name = {a.name: a for a in arms}
    try:
        for arm in arms:  # warm-up: imports, first connections, caches
            _block(loop, arm, receiver, min(seconds, 0.3), "warm", rate)
        for r in range(rounds):
            k = r % len(arms)
            for arm in arms[k:] + arms[:k]:
                blocks[arm.name].append(_block(loop, arm, receiver, seconds, f"r{r}", rate))
    finally:
        loop.close()
        for arm in arms:
            arm.close()
        receiver.stop()

    def med(name: str, key: str) -> float:
        return statistics.median(b[key] for b in blocks[name])

    per_arm = {name: {"cpu_us_per_span": spread([b["cpu_us_per_span"] for b in bs]),
                      "spans_per_cpu_second": 1e6 / med(name, "cpu_us_per_span"),
                      "loop_cpu_us_per_task": spread([b["loop_cpu_us_per_task"] for b in bs]),
                      "lag_p99_ms": spread([b["lag_p99_ms"] for b in bs]),
                      "lag_median_ms": med(name, "lag_median_ms"),
                      "system_share": med(name, "system_share"),
                      "tasks_per_s": spread([b["tasks_per_s"] for b in bs]),
                      "spans": sum(int(b["spans"]) for b in bs),
                      "plugin_internal_errors": arm_by_name[name].plugin.internal_errors,
                      "lost": sum(int(b["lost"]) for b in bs)}
               for name, bs in blocks.items()}
    ratios: dict[str, Any] = {}
    for proto in protocols:
        ours, stock, floor = blocks[f"ours {proto}"], blocks[f"stock {proto}"], blocks["floor"]
        ratios[proto] = {
            "cpu_per_span": spread([o["cpu_us_per_span"] / s["cpu_us_per_span"]
                                    for o, s in zip(ours, stock, strict=True)]),
            "cpu_per_span_vs_stock_with_open_spans": spread([
                o["cpu_us_per_span"] / s["cpu_us_per_span"]
                for o, s in zip(ours, blocks[f"stock+open {proto}"], strict=True)]),
            # The export's own share: each arm minus the floor of the same round.
            "export_cpu_per_span": _spread_or_none([
                (o["cpu_us_per_span"] - f["cpu_us_per_span"])
                / (s["cpu_us_per_span"] - f["cpu_us_per_span"])
                for o, s, f in zip(ours, stock, floor, strict=True)
                if s["cpu_us_per_span"] > f["cpu_us_per_span"]]),
            "export_us_per_span": {
                "ours": statistics.median(o["cpu_us_per_span"] - f["cpu_us_per_span"]
                                          for o, f in zip(ours, floor, strict=True)),
                "stock": statistics.median(s["cpu_us_per_span"] - f["cpu_us_per_span"]
                                           for s, f in zip(stock, floor, strict=True))},
            "lag_p99": _spread_or_none([o["lag_p99_ms"] / s["lag_p99_ms"]
                                        for o, s in zip(ours, stock, strict=True)
                                        if s["lag_p99_ms"] > 0]),
        }
    return {"benchmark": "export", "rate_target": rate, "calls_per_run": CALLS,
            "rounds": rounds, "block_seconds": seconds, "protocols": list(protocols),
            "arms": per_arm, "ours_over_stock": ratios,
            "environment": {"python": platform.python_version(),
                            "google_adk": version("google-adk"),
                            "opentelemetry_sdk": version("opentelemetry-sdk"),
                            "cpus": os.cpu_count()},
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


# --- instructions (callgrind) ---------------------------------------------------------

SMALL, LARGE = 300, 1300  # tool tasks in the two windows; the slope cancels fixed costs


#: Export timeout under callgrind (tens of times slower): an export that timed out would
#: be sent again and counted twice, or given up and lost.
_CALLGRIND_TIMEOUT_S = 120.0


def _arm(name: str, endpoints: dict[str, str]) -> Arm:
    if name == "floor":
        return _floor(60_000.0)
    kind, proto = name.split(" ", 1)
    if kind == "ours":
        return _ours(proto, endpoints[proto], 60_000.0, _CALLGRIND_TIMEOUT_S)
    return _stock(proto, endpoints[proto], 60_000.0, open_spans=kind == "stock+open",
                  timeout=_CALLGRIND_TIMEOUT_S)


async def _unpaced(plugin: Any, tasks: int, tag: str) -> None:
    """The same runs as the paced load, five at a time, as fast as they go."""
    per = 5
    for k in range(0, tasks // CALLS, per):
        await asyncio.gather(*[_run(plugin, f"{tag}-{k}-{j}") for j in range(per)])


def _callgrind_child(name: str, endpoints: dict[str, str], tasks: int) -> None:
    from .callgrind_hot_path import _toggle

    logging.getLogger("google_adk").setLevel(logging.ERROR)
    quiet_plugin_logger()
    arm = _arm(name, endpoints)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(_unpaced(arm.plugin, 200, "warm"))  # connections, caches
    arm.flush()
    gc.collect()
    gc.freeze()
    ended = arm.counter.ended
    _toggle("on")
    loop.run_until_complete(_unpaced(arm.plugin, tasks, "m"))
    arm.flush()
    _toggle("off")
    print(json.dumps({"spans": arm.counter.ended, "measured": arm.counter.ended - ended}),
          flush=True)
    arm.close()
    loop.close()


def _instructions(name: str, endpoints: dict[str, str], tasks: int) -> tuple[int, int]:
    """(instructions of every thread in the window, spans the child ended in all)."""
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null",
         sys.executable, "-m", "benchmarks.bench_export", "--callgrind-child", name,
         json.dumps(endpoints), str(tasks)],
        cwd=ROOT, capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"})
    line = next(ln for ln in out.stderr.splitlines() if "Collected" in ln)
    spans = json.loads(out.stdout.strip().splitlines()[-1])["spans"]
    return int(line.split()[-1]), int(spans)


def callgrind(protocols: tuple[str, ...], only: list[str] | None = None) -> dict[str, Any]:
    """Instructions per span of each arm: a window of LARGE tasks minus one of SMALL,
    each in a process of its own under callgrind, every thread counted, the flush that
    waits for the export's answer inside the window."""
    receiver = Receiver()
    names = ["floor", *[f"{k} {p}" for p in protocols for k in ("ours", "stock",
                                                                  "stock+open")]]
    names = [n for n in names if not only or n in only]
    per_span: dict[str, float] = {}
    lost: dict[str, int] = {}
    try:
        for name in names:
            big, spans_big = _instructions(name, receiver.endpoints, LARGE)
            small, spans_small = _instructions(name, receiver.endpoints, SMALL)
            per_span[name] = (big - small) / (LARGE - SMALL)
            if name != "floor":
                want = spans_big + spans_small
                lost[name] = want - receiver.wait(name, want)
            print(f"  {name:20s} {per_span[name] / 1e3:8.1f}k instructions per span",
                  flush=True)
    finally:
        receiver.stop()
    ratios = {p: _ours_over(per_span, per_span, p) for p in protocols
              if f"ours {p}" in per_span}
    return {"instructions_per_span": per_span, "ours_over_stock": ratios, "lost": lost,
            "small": SMALL, "large": LARGE}


def _ours_over(ours: dict[str, float], base: dict[str, float], p: str) -> dict[str, float]:
    """``ours`` arm of protocol ``p`` against the baselines in ``base`` that were run."""
    o, out = ours[f"ours {p}"], {}
    if f"stock {p}" in base:
        out["per_span"] = o / base[f"stock {p}"]
        if "floor" in base:
            floor = base["floor"]
            out["export_per_span"] = (o - floor) / (base[f"stock {p}"] - floor)
    if f"stock+open {p}" in base:
        out["per_span_vs_stock_with_open_spans"] = o / base[f"stock+open {p}"]
    return out


def _callgrind_path(label: str) -> Path:
    return RESULTS / ("export_callgrind.json" if label == "after"
                      else f"export_callgrind-{label}.json")


def _summary(r: dict[str, Any]) -> str:
    lines = [f"{r['rounds']} rounds x {r['block_seconds']} s blocks at {r['rate_target']:,} "
             f"tool tasks/s (target):"]
    for name, a in r["arms"].items():
        lines.append(f"  {name:20s} {a['cpu_us_per_span']['median']:7.1f} us CPU per span "
                     f"({a['spans_per_cpu_second']:,.0f} spans per CPU second, "
                     f"{a['system_share']:.0%} system), loop lag p99 "
                     f"{a['lag_p99_ms']['median']:.2f} ms, {a['tasks_per_s']['median']:,.0f} "
                     f"tasks/s achieved, {a['spans']:,} spans, {a['lost']} lost")
    for proto, x in r["ours_over_stock"].items():
        lines.append(f"  ours/stock {proto}: CPU per span {_range(x['cpu_per_span'])} "
                     f"(against stock+open {_range(x['cpu_per_span_vs_stock_with_open_spans'])}); "
                     f"export's share {_range(x['export_cpu_per_span'])}; lag p99 "
                     f"{_range(x['lag_p99'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run (a few seconds)")
    ap.add_argument("--record", action="store_true",
                    help="also write benchmarks/results/export.json")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=None, help="seconds of load per block")
    ap.add_argument("--protocol", choices=[*PROTOCOLS, "both"], default="both")
    ap.add_argument("--rate", type=int, default=RATE,
                    help=f"tool tasks a second (default {RATE:,}; --record writes "
                    "export-rate<N>.json for another)")
    ap.add_argument("--callgrind", action="store_true",
                    help="instructions per span under valgrind's callgrind instead")
    ap.add_argument("--label", default="after",
                    help="with --callgrind --record: 'after' (export_callgrind.json) or "
                    "another name (export_callgrind-<name>.json), e.g. 'before' with the "
                    "round before's src on PYTHONPATH")
    ap.add_argument("--arms", default="", help="with --callgrind: only these arms "
                    "(comma-separated, e.g. 'ours grpc,floor')")
    ap.add_argument("--receiver-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--callgrind-child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.receiver_child:
        _receiver_main()
        return 0
    if args.callgrind_child:
        name, endpoints, tasks = args.callgrind_child
        _callgrind_child(name, json.loads(endpoints), int(tasks))
        return 0
    protocols = PROTOCOLS if args.protocol == "both" else (args.protocol,)
    if args.callgrind:
        c = callgrind(protocols, [a for a in args.arms.split(",") if a])
        for proto, x in c["ours_over_stock"].items():
            print(f"  ours {proto}: " + ", ".join(f"{k} {v:.3f}" for k, v in x.items()))
        print(f"  spans lost: {c['lost']}")
        if args.record:
            RESULTS.mkdir(exist_ok=True)
            c.update(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     label=args.label, google_adk=version("google-adk"),
                     command=" ".join(["python -m benchmarks.bench_export",
                                       *(sys.argv[1:] if argv is None else argv)]))
            _callgrind_path(args.label).write_text(json.dumps(c, indent=1) + "\n")
        return 0
    rounds = args.rounds or (1 if args.quick else 6)
    seconds = args.seconds or (0.3 if args.quick else 2.0)
    r = measure(protocols, rounds, seconds, args.rate)
    given = sys.argv[1:] if argv is None else argv
    r["command"] = " ".join(["python -m benchmarks.bench_export", *given])
    print(_summary(r))
    if args.record and not args.quick:
        RESULTS.mkdir(exist_ok=True)
        name = "export.json" if args.rate == RATE else f"export-rate{args.rate}.json"
        (RESULTS / name).write_text(json.dumps(r, indent=1) + "\n")
    return 0


def markdown() -> list[str]:
    """docs/benchmarks.md's section on this benchmark, from the recorded run."""
    path = RESULTS / "export.json"
    if not path.exists():
        return []
    r = json.loads(path.read_text())
    env = r["environment"]
    out = ["## Export: our pipeline against the SDK's BatchSpanProcessor", "",
           f"`{r['command']}` (`make bench`), on {r['date']}, google-adk "
           f"{env['google_adk']}, opentelemetry-sdk {env['opentelemetry_sdk']}, Python "
           f"{env['python']}, on a machine shared with other work ({env['cpus']} cores). "
           f"{r['rounds']} rounds, {r['block_seconds']} s of load per block. "
           + " ".join(" ".join(p.split()) for p in __doc__.split("\n\n")[2:5]), "",
           *_paced_tables(r)]
    for extra in sorted(RESULTS.glob("export-rate*.json")):
        e = json.loads(extra.read_text())
        out += [f"The same at {e['rate_target']:,} tool tasks a second (`{e['command']}`, "
                f"{e['date']}, {e['rounds']} rounds of {e['block_seconds']} s):", "",
                *_paced_tables(e)]
    return out + _callgrind_markdown()


def _paced_tables(r: dict[str, Any]) -> list[str]:
    out = ["| arm | CPU per span, us (range) | spans per CPU second | on-loop CPU per task, "
           "us | loop lag p99, ms (range) | tool tasks/s achieved | spans received | lost |",
           "|---|---|---|---|---|---|---|---|"]
    for name, a in r["arms"].items():
        c, g = a["cpu_us_per_span"], a["lag_p99_ms"]
        out.append(f"| {name} | {c['median']:.1f} ({c['min']:.1f}-{c['max']:.1f}) | "
                   f"{a['spans_per_cpu_second']:,.0f} | "
                   f"{a['loop_cpu_us_per_task']['median']:.1f} | {g['median']:.2f} "
                   f"({g['min']:.2f}-{g['max']:.2f}) | {a['tasks_per_s']['median']:,.0f} | "
                   + (f"{a['spans']:,} | {a['lost']} |" if name != "floor"
                      else f"(not exported: {a['spans']:,} made) | - |"))
    out += ["", "| ours / stock | CPU per span (range) | the export's own CPU per span, minus "
            "the floor (range) | export us per span: ours, stock | loop lag p99 (range) | "
            "CPU per span, ours / stock+open (range) |", "|---|---|---|---|---|---|"]
    for proto, x in r["ours_over_stock"].items():
        u = x["export_us_per_span"]
        out.append(f"| {proto} | {_range(x['cpu_per_span'])} | "
                   f"{_range(x['export_cpu_per_span'])} | {u['ours']:.1f}, {u['stock']:.1f} | "
                   f"{_range(x['lag_p99'])} | "
                   f"{_range(x.get('cpu_per_span_vs_stock_with_open_spans'))} |")
    arms = r["arms"]
    achieved = [a["tasks_per_s"]["median"] for a in arms.values()]
    lost = {n: a["lost"] for n, a in arms.items() if a["lost"]}
    out += ["", f"Achieved: {min(achieved):,.0f} to {max(achieved):,.0f} tool tasks a second "
            f"against the {r['rate_target']:,} asked for: where that falls short the process "
            "(one interpreter lock for the loop and the export threads) or the machine (shared "
            "with other work) was saturated, the paced load ran late, and the lag is that "
            "backlog rather than the export's; CPU per span does not depend on the pace. "
            + ("Spans lost (the receiver never got them): " + ", ".join(
                f"{n} {k:,}" for n, k in lost.items()) + ". The SDK's BatchSpanProcessor "
               "drops spans when its queue (2,048) is full while its worker thread waits on "
               "the network; in ours that worker only hands each batch to the buffer."
               if lost else "No span was lost in any arm."), ""]
    return out


def _callgrind_markdown() -> list[str]:
    after = _callgrind_path("after")
    if not after.exists():
        return []
    runs = [json.loads(after.read_text())]
    runs += [json.loads(p.read_text()) for p in sorted(RESULTS.glob("export_callgrind-*.json"))]
    a = runs[0]
    base: dict[str, float] = {}  # the baselines (not ours), the after run's first
    for r in reversed(runs):
        base.update({k: v for k, v in r["instructions_per_span"].items()
                     if not k.startswith("ours ")})
    out = [f"In instructions (valgrind's callgrind, every thread of the process), where a "
           f"shared machine cannot move the figure: `{a['command']}`. Each arm in a process "
           f"of its own, the same runs unpaced; a window of {a['large']:,} tool tasks minus "
           f"one of {a['small']:,} (one-time costs cancel), the flush that waits for the "
           "receiver's answer inside the window. `stock+open`: the stock pipeline plus the "
           "`OpenSpanProcessor` that configure_telemetry() installs too (spans a tool leaves "
           "open, reported at its run's end), so ours against it is our span processor, "
           "buffer and sender thread alone. `before`: ours as it was with the SDK's "
           "BatchSpanProcessor in front of our buffer (its queue and worker thread handing "
           "batches to an exporter of ours). Ratios are against the baselines of the same "
           "run where it has them, else of the `after` run. The "
           "counts of a process with several threads move by a few per cent from run to run "
           "under callgrind (the threads switch by the clock, which callgrind slows); the gRPC "
           "arms moved more between runs than the HTTP ones.", "",
           "| src | arm | instructions per span | ours / stock | the export's own (minus "
           "the floor), ours / stock | ours / stock+open |", "|---|---|---|---|---|---|"]
    for r in runs:
        label = r.get("label", "after")
        own = {**base, **{k: v for k, v in r["instructions_per_span"].items()
                          if not k.startswith("ours ")}}
        for name, n in r["instructions_per_span"].items():
            x = (_ours_over(r["instructions_per_span"], own, name.split(" ", 1)[1])
                 if name.startswith("ours ") else {})
            cells = [f"{x[k]:.3f}" if k in x else "" for k in (
                "per_span", "export_per_span", "per_span_vs_stock_with_open_spans")]
            lost = r.get("lost", {}).get(name, 0)
            if lost:  # the window did not hold the whole export: no figure to compare
                cells = [f"{lost:,} spans lost: not comparable", "", ""]
            out.append(f"| {label} ({r['date']}) | {name} | {n / 1e3:,.1f}k | "
                       + " | ".join(cells) + " |")
    out.append("")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
