"""Defect 2: tail sampling must decide on the evidence, not on a clock started at a
trace's first span.

An orphan is known only when its run ends: its tool_task span, with the
``orphaned_task`` event, ends in the run-end sweep, next to ADK's run span (the
trace's root), which ends when the run ends. A sampler that decides
``decision_wait`` after the first span decides a longer run without that evidence;
90 % of those traces are dropped, and the orphan's span, arriving later, follows the
cached "not sampled". The fix (both collector configs) decides
``decision_wait_after_root_received`` after the root arrives, with ``decision_wait``
only as the fallback for a root that never comes.

The test runs each committed config (deploy/otel-collector/config.yaml, and the
sampler ConfigMap of deploy/k8s/otel-sampler.yaml) in the real otelcol-adk, with
every duration scaled down by ``SCALE``, the ratio kept:

  * tail_sampling's decision_wait and decision_wait_after_root_received: divided by
    SCALE, rounded up to whole seconds (the processor decides on a 1 s tick and
    counts these waits in whole ticks): today's 30 s -> 2 s;
  * the agent's span batch delay (OTEL_BSP_SCHEDULE_DELAY, the SDK's 5 s) -> 333 ms;
  * the run: three times today's decision_wait (90 s) -> 6 s.

Addresses are rewritten to loopback (the traces go to the session's Jaeger; the
compose config's metrics exporter to a closed port: metrics are not this test's
subject). ``SESSIONS`` such runs at once: a first-span clock keeps each by the 10 %
baseline only, so it passes by luck with probability 0.1 ** SESSIONS.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.sampler_capacity import compose_collector, sampler_configmap
from tests.stack.conftest import Stack, agent_process, collector_config
from tests.stack.tracecheck import check_orphan_trace, missing, settled
from tests.stack_programs import free_port, running

SCALE = 15
TODAY_WAIT_S = 30.0  # decision_wait before the fix
RUN_S = 3 * TODAY_WAIT_S / SCALE
SESSIONS = 4
#: Ample for the fixed config's scaled fallback (30 min / 15 = 120 s) and batching.
SETTLE_S = 300.0


def seconds(value: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", str(value).strip())
    assert m, value
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def scaled(cfg: Any) -> Any:
    ts = cfg["processors"]["tail_sampling"]
    for key in ("decision_wait", "decision_wait_after_root_received"):
        if key in ts:
            ts[key] = f"{max(1, math.ceil(seconds(ts[key]) / SCALE))}s"
    return cfg


#: (the config, the protocol the agent sends with: the sampler tier receives gRPC only)
CONFIGS: dict[str, tuple[Callable[[], Any], str]] = {
    "compose": (compose_collector, "http/protobuf"),
    "k8s-sampler": (sampler_configmap, "grpc"),
}


@pytest.mark.parametrize("which", sorted(CONFIGS))
def test_a_run_three_times_the_wait_keeps_its_orphan_trace_whole(
        stack: Stack, which: str, tmp_path: Path) -> None:
    committed, protocol = CONFIGS[which]
    cfg = scaled(committed())
    ts = cfg["processors"]["tail_sampling"]
    ports = stack.collector_ports(prometheus=free_port())
    collector = stack.collector(f"long-run-{which}", collector_config(ports, cfg), ports)
    endpoint = f"http://127.0.0.1:{ports['otlp_grpc' if protocol == 'grpc' else 'otlp_http']}"
    with running(collector), agent_process(
            endpoint, tmp_path, "--scenarios", "none", "--long-run", str(RUN_S),
            "--sessions", str(SESSIONS), "--service", f"adk-long-run-{which}",
            "--protocol", protocol, label=f"long-run-{which}",
            env={"OTEL_BSP_SCHEDULE_DELAY": str(5000 // SCALE)}) as run:
        long = run.of_kind("orphan")
        assert len(long) == SESSIONS, run.truth["units"]
        sent = {s["trace_id"] for s in run.truth["spans"]}
        held = settled(stack.jaeger, ports["metrics"], sent, SETTLE_S)
        whole = [t for t in long
                 if t.trace_id in held and not missing(t, stack.jaeger.trace(t.trace_id))]
        size = max(run.truth["otlp_bytes"][t.trace_id] for t in long)
        print(f"\nlong run ({which}: decision_wait {ts.get('decision_wait')}, "
              f"after root {ts.get('decision_wait_after_root_received', 'unset')}; "
              f"runs of {RUN_S:.0f} s, {run.unit('long_run')['note']}): "
              f"{len(whole)} of {len(long)} orphan traces whole in Jaeger "
              f"({size} B of OTLP each)")
        assert len(whole) == len(long), (
            f"{len(long) - len(whole)} of {len(long)} orphan traces lost or cut: the "
            "sampler decided before the run's end brought the evidence")
        for t in long:
            check_orphan_trace(t, stack.jaeger.trace(t.trace_id))
