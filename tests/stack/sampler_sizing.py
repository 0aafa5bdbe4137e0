"""Bytes per held trace in the tail sampler, at the traced-caller test's shape, and the
``num_traces`` each committed sampler config can hold under its memory limit.

    python -m tests.stack.sampler_sizing [--runs 1200]     (make sampler-sizing)

The committed compose collector config in the real otelcol-adk (ADK_STACK_BIN), with
nothing decided while it measures: the local-root processors taken out and
``decision_wait`` kept at 30 min, so every trace the server sends stays held. The
collector runs with GOGC=10, so that its heap (what ``memory_limiter`` compares with
its limits) is close to what is live. ADK's real server (tests/adk_server.py) serves
``--runs`` requests of tests/stack/traceparent_load.py's mix, each under a caller's
``traceparent``. Bytes per held trace = the heap's growth / the traces held.

Capacity of a config = (its memory_limiter soft limit - the idle heap - its decision
caches) / bytes per held trace (tests/sampler_capacity.py). Prints JSON; docs/deploy.md
gives the figures of one run, and tests/sampler_capacity.py's MEASURED keeps them.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.adk_server import Server
from tests.sampler_capacity import capacities
from tests.stack.conftest import DEPLOY, collector_config, load
from tests.stack.tracecheck import collector_metric
from tests.stack.traceparent_load import HEAP, ON_MEMORY, Caller
from tests.stack_programs import Program, free_port, wait_until, write_yaml


def measure(runs: int, rate: float) -> dict[str, Any]:
    cfg = load(DEPLOY / "otel-collector" / "config.yaml")
    ts = cfg["processors"]["tail_sampling"]
    ts["num_traces"] = 10 * runs
    cfg["processors"]["memory_limiter"].update(limit_mib=4000, spike_limit_mib=500)
    pipeline = cfg["service"]["pipelines"]["traces"]
    pipeline["processors"] = [p for p in pipeline["processors"]
                              if not p.startswith("transform/")]
    # traces only: the held traces' bytes are what is measured (no logs store runs here)
    del cfg["service"]["pipelines"]["logs"]
    del cfg["exporters"]["otlphttp/victorialogs"]
    work = Path(tempfile.mkdtemp(prefix="sampler-sizing-"))
    ports = {"otlp_grpc": free_port(), "otlp_http": free_port(), "health": free_port(),
             "metrics": free_port(), "jaeger_grpc": free_port(), "prometheus": free_port(),
             "victorialogs": free_port()}
    path = write_yaml(work / "collector.yaml", collector_config(ports, cfg))
    collector = Program("otelcol-adk", [f"--config={path}"], work, env={"GOGC": "10"},
                        ready_url=f"http://127.0.0.1:{ports['health']}/", label="sizing")
    collector.start()
    server = None
    try:
        server = Server(work, {"ATT_CONFIGURE": "args", "ATT_PROTOCOL": "http/protobuf",
                               "ATT_ENDPOINT": f"http://127.0.0.1:{ports['otlp_http']}",
                               "ATT_TRACEPARENT": "1"})
        server.run("parallel warmup")
        time.sleep(6)  # the warm-up's batch: part of the idle figure
        idle_held = collector_metric(ports["metrics"], ON_MEMORY)
        idle_heap = min(collector_metric(ports["metrics"], HEAP) for _ in range(5))
        caller = Caller(server, rate)
        caller.run(runs / rate)
        server.wait_state(lambda s: s["open"] == 0 and s["runs"] == 0 and s["orphans"] == 0,
                          timeout=60)
        sent = len(caller.sent)
        # Every run's trace held: nothing decides it (its session's creation is a trace
        # of its own, with a root: decided and released 10 s after it arrives).
        assert wait_until(lambda: collector_metric(ports["metrics"], ON_MEMORY)
                          >= idle_held + sent, 60), (
            "not every trace arrived", idle_held, sent,
            collector_metric(ports["metrics"], ON_MEMORY))
        time.sleep(12)  # the last batch; the sessions' traces decided
        held = collector_metric(ports["metrics"], ON_MEMORY) - idle_held
        heap = min(collector_metric(ports["metrics"], HEAP) for _ in range(5))
    finally:
        if server is not None:
            server.stop()
        collector.stop()
    per_trace = (heap - idle_heap) / held
    return {
        "runs": sent, "traces_held": int(held), "idle_heap_mib": round(idle_heap / 2**20, 1),
        "heap_growth_mib": round((heap - idle_heap) / 2**20, 1),
        "bytes_per_held_trace": round(per_trace),
        **capacities(per_trace, idle_heap / 2**20),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1200)
    ap.add_argument("--rate", type=float, default=20.0)
    args = ap.parse_args()
    figures = measure(args.runs, args.rate)
    print(json.dumps(figures, indent=2))
    if not all(figures[k]["num_traces_fits"] for k in ("compose", "k8s_sampler")):
        raise SystemExit("num_traces above what the memory limit holds: see docs/deploy.md")


if __name__ == "__main__":
    main()
