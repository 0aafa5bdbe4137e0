"""Checks of what reached Jaeger against what the agent sent (its ground truth), and
the sampler's own count of its decisions: the positive signal that a trace has been
decided, so that a trace Jaeger lacks is known lost, not late."""

from __future__ import annotations

import re
import urllib.request
from typing import Any

from adk_task_telemetry import semconv as sc
from tests.stack.conftest import Jaeger, Trace, span_events, span_tags
from tests.stack_programs import wait_until

#: The sampler's decisions, counted by the collector itself (sampled="true"/"false").
DECISIONS = "otelcol_processor_tail_sampling_global_count_traces_sampled"


def collector_metric(metrics_port: int, name: str, **labels: str) -> float:
    """The sum of a collector's own metric ``name`` (any suffix such as _total) over
    the series with ``labels``, read from its Prometheus endpoint on ``metrics_port``."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m or not m.group(1).startswith(name):
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def missing(trace: Trace, spans: list[dict[str, Any]]) -> list[str]:
    """Spans the agent ended in ``trace`` that Jaeger does not hold (name:id)."""
    held = {s["spanID"] for s in spans}
    return [f"{s['name']}:{s['span_id']}" for s in trace.spans if s["span_id"] not in held]


def whole(jaeger: Jaeger, trace: Trace, timeout: float) -> list[dict[str, Any]]:
    """Jaeger's spans of ``trace`` once it holds every span the agent ended in it."""
    got: list[dict[str, Any]] = []

    def complete() -> bool:
        nonlocal got
        got = jaeger.trace(trace.trace_id)
        return bool(got) and not missing(trace, got)
    assert wait_until(complete, timeout, interval=1.0), (
        f"trace {trace.trace_id} ({sorted(trace.units)}) not whole in Jaeger: "
        f"{len(got)} spans held, missing {missing(trace, got)}")
    return got


def settled(jaeger: Jaeger, metrics_port: int, trace_ids: set[str],
            timeout: float) -> set[str]:
    """Waits until the sampler has decided at least ``len(trace_ids)`` traces and Jaeger
    holds as many of them as it kept; returns those Jaeger holds. (The collector sees
    only these traces.)"""
    def decisions() -> float:
        return collector_metric(metrics_port, DECISIONS)
    assert wait_until(lambda: decisions() >= len(trace_ids), timeout, interval=1.0), (
        f"the sampler decided {decisions()} of {len(trace_ids)} traces")
    kept = collector_metric(metrics_port, DECISIONS, decision="sampled")
    held: set[str] = set()

    def arrived() -> bool:
        nonlocal held
        held = {tid for tid in trace_ids if jaeger.trace(tid)}
        return len(held) >= kept
    assert wait_until(arrived, timeout, interval=2.0), (
        f"Jaeger holds {len(held)} of the {kept} traces the sampler kept")
    return held


def check_orphan_trace(trace: Trace, spans: list[dict[str, Any]]) -> None:
    """The orphan's own span, its event and stack, ADK's run span, the run's tool spans."""
    for call_id in trace.orphaned:
        own = [s for s in spans if s["operationName"].startswith(sc.SPAN_NAME_PREFIX)
               and span_tags(s).get(sc.GEN_AI_TOOL_CALL_ID) == call_id]
        assert len(own) == 1, (call_id, [s["operationName"] for s in spans])
        tags = span_tags(own[0])
        assert tags.get(sc.ADK_TOOL_TASK_OUTCOME) == "orphaned", tags
        events = [e for e in span_events(own[0]) if e.get("event") == sc.EVENT_ORPHANED_TASK]
        assert len(events) == 1, span_events(own[0])
        assert events[0].get(sc.GEN_AI_TOOL_CALL_ID) == call_id, events[0]
        assert str(events[0].get(sc.CODE_STACKTRACE) or "").strip(), events[0]
    # ADK's run span (invoke_workflow / invoke_agent / invocation, by ADK version) is
    # the one root, as the agent sent it.
    roots = [s for s in spans if not s.get("references")]
    sent_roots = [s for s in trace.spans if s["parent"] is None]
    assert [s["spanID"] for s in roots] == [s["span_id"] for s in sent_roots], (
        [s["operationName"] for s in roots], sent_roots)
    assert sent_roots[0]["scope"] != sc.SCOPE_NAME, sent_roots  # ADK's, not ours
    sent_tools = {s["span_id"] for s in trace.spans
                  if s["name"].startswith(sc.SPAN_NAME_PREFIX)}
    held_tools = {s["spanID"] for s in spans
                  if s["operationName"].startswith(sc.SPAN_NAME_PREFIX)}
    assert sent_tools == held_tools
