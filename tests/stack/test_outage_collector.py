"""The agent's outage buffer against the real collector: otelcol-adk stopped for 10 s
and started again on the same ports while the agent is under load loses no tool_task
span.

tests/test_export_outage.py shows the buffer against the suite's own OTLP receiver;
here the other end is the real program, with the way it really stops (SIGTERM: its
receivers close first, then it drains what it holds) and starts (its listeners come
back some time after the process does). The agent is tests/stack/corpus_app.py with
``configure_telemetry()`` at its defaults but the endpoint (OTLP/HTTP), running
scripted runs of three parallel calls back to back.

The collector's config is deploy/otel-collector/config.yaml with its addresses on
loopback and one change: the traces pipeline without tail_sampling, so that every span
it receives goes on to Jaeger (sampling would hide which spans arrived; it is not this
test's subject). The count is by call id: every call the tool served (its own record)
has its tool_task span in Jaeger, found through Jaeger's query API.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from adk_task_telemetry import semconv as sc
from tests.stack.conftest import Stack, agent_process, collector_config, span_tags
from tests.stack.tracecheck import collector_metric
from tests.stack_programs import free_port, running, wait_until

OUTAGE_S = 10.0
LOAD_S = 36.0  # the outage starts once the collector has passed spans on, ends at ~1/2


def test_a_collector_stopped_for_10s_under_load_loses_no_tool_task_span(
        stack: Stack, tmp_path: Path) -> None:
    ports = stack.collector_ports(prometheus=free_port())
    cfg = collector_config(ports)
    pipeline = cfg["service"]["pipelines"]["traces"]
    pipeline["processors"] = [p for p in pipeline["processors"] if p != "tail_sampling"]
    collector = stack.collector("outage-collector", cfg, ports)
    service = "adk-outage"
    outage: dict[str, float] = {}
    errors: list[BaseException] = []

    def stop_and_restart() -> None:
        try:
            # A positive signal that load flows through: spans accepted and sent on.
            assert wait_until(lambda: collector_metric(
                ports["metrics"], "otelcol_exporter_sent_spans") > 100, 120, 0.5)
            outage["stopped"] = time.monotonic()
            collector.stop()
            time.sleep(OUTAGE_S)  # the outage itself: its length is the scenario
            collector.start(timeout=120)
            outage["restarted"] = time.monotonic()
        except BaseException as e:  # reported by the test thread
            errors.append(e)

    with running(collector):
        chaos = threading.Thread(target=stop_and_restart, daemon=True)
        chaos.start()
        with agent_process(f"http://127.0.0.1:{ports['otlp_http']}", tmp_path,
                           "--scenarios", "none", "--load", str(LOAD_S), "--calls", "3",
                           "--service", service, label="outage-agent") as run:
            chaos.join(120)
            assert not errors, errors
            assert "restarted" in outage, "the collector did not come back"
            served = run.unit("scripted")["returned"]
            traces = set(run.unit("scripted")["call_traces"].values())

            def tool_spans() -> set[str]:
                found: set[str] = set()
                for tid in traces:
                    for s in stack.jaeger.trace(tid):
                        if s["operationName"].startswith(sc.SPAN_NAME_PREFIX):
                            found.add(str(span_tags(s).get(sc.GEN_AI_TOOL_CALL_ID)))
                return found
            got: set[str] = set()

            def all_there() -> bool:
                nonlocal got
                got = tool_spans()
                return set(served) <= got
            # The agent retries every second once the collector answers again.
            wait_until(all_there, 180, interval=3.0)
            lost = sorted(set(served) - got)
            print(f"\noutage: collector stopped {OUTAGE_S:.0f} s "
                  f"({outage['restarted'] - outage['stopped']:.1f} s until it answered "
                  f"again) during {LOAD_S:.0f} s of load: {len(served)} tool calls served, "
                  f"{len(served) - len(lost)} tool_task spans in Jaeger, {len(lost)} lost")
            assert not lost, f"{len(lost)} of {len(served)} tool_task spans lost: {lost[:20]}"
