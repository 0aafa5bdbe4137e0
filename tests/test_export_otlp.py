"""configure_telemetry() -> real OTLP/gRPC and OTLP/HTTP receivers on 127.0.0.1.

Each protocol gets one instrumented process (see otlp_receivers.py) that runs real
scripted ADK scenarios with the plugin, then shuts down; the receiver decodes what
arrived. gRPC is configured by arguments (with conflicting OTEL_* variables set, which
must lose), HTTP purely by OTEL_* variables.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality

from .conftest import has_seed_bug
from .otlp_receivers import (
    SCOPE,
    GrpcReceiver,
    HttpReceiver,
    Received,
    attrs,
    refusing_endpoint,
    run_children,
)

SCENARIOS = ["seed_bug", "single_call", "parallel_one_fails"]
BASE_LABELS = {"gen_ai.tool.name", "gen_ai.agent.name", "adk.tool_task.kind", "adk.app.name"}
CONTRACT = {  # instrument -> (data kind, unit, extra attributes allowed)
    "adk.tool_task.started": ("sum", "{task}", set()),
    "adk.tool_task.active": ("sum", "{task}", set()),
    "adk.tool_task.duration": ("histogram", "s", {"adk.tool_task.outcome", "error.type",
                                                  "adk.tool_task.cancel.cause"}),
    "adk.tool_task.orphaned": ("sum", "{task}", {"adk.run.end_trigger"}),
    "adk.tool_task.orphans_alive": ("sum", "{task}", set()),
    "adk.tool_task.orphan_lifetime": ("histogram", "s", {"adk.tool_task.outcome"}),
}
CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
MONOTONIC = {"adk.tool_task.started": True, "adk.tool_task.active": False,
             "adk.tool_task.orphaned": True, "adk.tool_task.orphans_alive": False}


@dataclass
class Exported:
    protocol: str
    rx: Received
    result: dict[str, Any]

    def by_call(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for span in self.rx.tool_spans():
            cid = attrs(span.attributes)["gen_ai.tool.call.id"]
            assert cid not in out, f"span for {cid} arrived twice"
            out[cid] = span
        return out


def _jobs(rx: dict[str, GrpcReceiver | HttpReceiver]
          ) -> dict[str, tuple[dict[str, Any], dict[str, str]]]:
    full: dict[str, Any] = {"scenarios": SCENARIOS, "direct_orphan": True, "configure_times": 2}
    return {
        # Every explicit argument must beat the variable that says otherwise.
        "grpc": ({**full, "configure": {
            "service_name": "export-test", "endpoint": rx["grpc"].endpoint,
            "protocol": "grpc", "headers": {"x-tenant": "args"}, "service_version": "1.2.3"}},
            {"OTEL_EXPORTER_OTLP_ENDPOINT": refusing_endpoint(),
             "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
             "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=env",
             "OTEL_SERVICE_NAME": "from-env",
             "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test"}),
        # Nothing but variables.
        "http/protobuf": ({**full, "configure": {}}, {
            "OTEL_EXPORTER_OTLP_ENDPOINT": rx["http/protobuf"].endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=env%20var",
            "OTEL_SERVICE_NAME": "export-test",
            "OTEL_RESOURCE_ATTRIBUTES": "service.version=1.2.3,deployment.environment=test"}),
        # The application installed its own tracer provider first.
        "app": ({"app_provider": True, "configure_times": 2, "scenarios": ["single_call"],
                 "configure": {"service_name": "asked-name", "endpoint": rx["app"].endpoint,
                               "protocol": "grpc"}}, {}),
        # Console only: no OTLP is attempted when no endpoint is configured.
        "console": ({"scenarios": ["single_call"], "direct_orphan": True,
                     "configure": {"console": True}}, {}),
        # The docs' traces-only recipe, no shutdown() call, ten-minute batch delays.
        "traces_only": ({"explicit_shutdown": False, "scenarios": ["single_call"],
                         "direct_orphan": True, "configure": {}}, {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{rx['traces_only'].endpoint}/v1/traces",
            "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "600000", "OTEL_METRIC_EXPORT_INTERVAL": "600000"}),
    }


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, Exported]]:
    """Every instrumented process of this module, run at once against its receiver."""
    rx: dict[str, GrpcReceiver | HttpReceiver] = {
        "grpc": GrpcReceiver(), "http/protobuf": HttpReceiver(), "app": GrpcReceiver(),
        "traces_only": HttpReceiver(), "console": HttpReceiver()}
    try:
        jobs = _jobs(rx)
        results = run_children(list(jobs.values()))
        yield {name: Exported(name, rx[name].received, result)
               for name, result in zip(jobs, results, strict=True)}
    finally:
        for r in rx.values():
            r.stop()


@pytest.fixture(params=["grpc", "http/protobuf"])
def exported(request: pytest.FixtureRequest, runs: dict[str, Exported]) -> Exported:
    run = runs[request.param]
    # shutdown() flushed everything before the child reported.
    assert run.rx.wait_for(lambda: bool(run.rx.traces and run.rx.metrics and run.rx.logs),
                           timeout=10)
    return run


def test_the_run_itself_was_unharmed(exported: Exported) -> None:
    r = exported.result
    assert r["errors"] == []
    assert r["plugin_internal_errors"] == 0
    assert r["same_handle"] is True  # configure_telemetry() twice: one setup
    assert r["installed"] == {"traces": True, "metrics": True, "logs": True}
    assert not r["export_failing"]
    assert not [x for x in r["logs"] if x["logger"].startswith("adk_task_telemetry.export")]


def test_tool_task_spans_arrive_with_call_ids_and_outcomes(exported: Exported) -> None:
    spans = exported.by_call()  # also: no span twice although configure ran twice
    outcomes = {cid: attrs(s.attributes)["adk.tool_task.outcome"] for cid, s in spans.items()}
    assert outcomes["call-1"] == "ok"
    assert outcomes["call-fail"] == "error"
    assert outcomes["call-s1"] == outcomes["call-s2"] == "cancelled"
    assert outcomes["call-direct-orphan"] == "orphaned"
    a = attrs(spans["call-fail"].attributes)
    assert a["error.type"] == "ConnectionError"
    assert a["gen_ai.tool.name"] == "flaky_api" and a["adk.tool_task.kind"] == "call"
    assert spans["call-fail"].status.code == 2  # ERROR
    assert [e.name for e in spans["call-fail"].events] == ["exception"]
    cause = {attrs(e.attributes).get("adk.tool_task.cancel.cause")
             for e in spans["call-s1"].events if e.name == "cancelled"}
    assert cause == {"sibling_failed"}
    assert {s.name for s in spans.values()} >= {"tool_task monitor_stock", "tool_task lookup_order"}


def test_seed_scenario_orphan_event_arrives_on_buggy_adk(exported: Exported) -> None:
    spans = exported.by_call()
    seed = {cid: spans[cid] for cid in ("call-goog", "call-msft")}
    outcomes = sorted(attrs(s.attributes)["adk.tool_task.outcome"] for s in seed.values())
    if has_seed_bug():
        assert outcomes == ["cancelled", "orphaned"]
        orphan = next(s for s in seed.values()
                      if attrs(s.attributes)["adk.tool_task.outcome"] == "orphaned")
        events = [e for e in orphan.events if e.name == "orphaned_task"]
        assert len(events) == 1
        ev = attrs(events[0].attributes)
        assert ev["gen_ai.tool.call.id"] == attrs(orphan.attributes)["gen_ai.tool.call.id"]
        assert ev["gen_ai.tool.name"] == "monitor_stock"
        assert ev["adk.run.end_trigger"] in {"live_teardown", "run_task_done", "after_run"}
        assert ev["adk.tool_task.age"] >= 0
        assert attrs(orphan.attributes)["adk.tool_task.kind"] == "streaming"
    else:
        assert outcomes == ["cancelled", "cancelled"]
        assert not [e for s in seed.values() for e in s.events if e.name == "orphaned_task"]


def test_our_spans_nest_under_adks_execute_tool_in_one_trace(exported: Exported) -> None:
    all_spans = exported.rx.spans()
    ours = exported.by_call()["call-1"]
    parent = [s for _, scope, s in all_spans if s.span_id == ours.parent_span_id]
    assert len(parent) == 1, "the tool_task span's parent was not exported"
    assert parent[0].name == "execute_tool lookup_order"
    assert parent[0].trace_id == ours.trace_id
    adk_scopes = {scope for _, scope, s in all_spans if s.trace_id == ours.trace_id}
    assert adk_scopes >= {SCOPE, "gcp.vertex.agent"}
    assert all(s.kind == 1 for s in exported.rx.tool_spans())  # INTERNAL


def test_resource_and_headers(exported: Exported) -> None:
    for res, _, _ in exported.rx.spans():
        assert res["service.name"] == "export-test"
        assert res["service.version"] == "1.2.3"
        assert res["deployment.environment"] == "test"
        assert res["telemetry.sdk.name"] == "opentelemetry"
        assert res["telemetry.sdk.language"] == "python"
        assert res["service.instance.id"]
    ids = {res["service.instance.id"] for res, _, _ in exported.rx.spans()}
    ids |= {res["service.instance.id"] for res, _ in exported.rx.metric_list()}
    assert len(ids) == 1
    want = "args" if exported.protocol == "grpc" else "env var"
    assert {h.get("x-tenant") for h in exported.rx.headers} == {want}


def _points(rx: Received) -> dict[str, list[tuple[Any, Any]]]:
    """instrument -> [(metric, data point)] over every export received."""
    out: dict[str, list[tuple[Any, Any]]] = {}
    for _, m in rx.metric_list():
        data = getattr(m, m.WhichOneof("data"))
        out.setdefault(m.name, []).extend((m, p) for p in data.data_points)
    return out


def test_metrics_names_units_temporality_and_attributes(exported: Exported) -> None:
    points = _points(exported.rx)
    assert set(CONTRACT) <= set(points)
    # Nothing of ours duplicates ADK's instruments (gen_ai.execute_tool.duration).
    assert all(name.startswith(("adk.tool_task.", "adk.tool_call.")) for name in points), \
        sorted(points)
    # The call ledger: parallel_one_fails leaves its three calls without a response.
    unanswered = points["adk.tool_call.unanswered"]
    for metric, point in unanswered:
        assert metric.WhichOneof("data") == "sum" and metric.unit == "{call}"
        assert metric.sum.is_monotonic and metric.sum.aggregation_temporality == CUMULATIVE
        assert set(attrs(point.attributes)) == {
            "gen_ai.tool.name", "gen_ai.agent.name", "adk.app.name",
            "adk.tool_call.unanswered.reason"}
    totals = {}  # cumulative: the last export holds the totals
    for _, point in unanswered:
        a = attrs(point.attributes)
        totals[(a["gen_ai.tool.name"], a["adk.tool_call.unanswered.reason"])] = point.as_int
    assert totals[("flaky_api", "error")] == 1 and sum(totals.values()) == 3, totals
    for name, (kind, unit, extra) in CONTRACT.items():
        assert points[name], name
        for metric, point in points[name]:
            assert metric.WhichOneof("data") == kind, name
            assert metric.unit == unit, name
            data = getattr(metric, kind)
            assert data.aggregation_temporality == CUMULATIVE, name
            if kind == "sum":
                assert data.is_monotonic is MONOTONIC[name], name
            keys = set(attrs(point.attributes))
            assert BASE_LABELS <= keys <= BASE_LABELS | extra, (name, keys)
    last = {}  # cumulative: the last export holds the totals
    for _, point in points["adk.tool_task.started"]:
        a = attrs(point.attributes)
        last[(a["gen_ai.tool.name"], a["adk.app.name"])] = point.as_int
    assert last[("lookup_order", "scenarios")] == 1
    assert last[("slow_search", "scenarios")] == 2
    assert last[("monitor_stock", "scenarios")] == 2
    duration_outcomes = {attrs(p.attributes)["adk.tool_task.outcome"]
                         for _, p in points["adk.tool_task.duration"]}
    assert duration_outcomes >= {"ok", "error", "cancelled"}
    triggers = {attrs(p.attributes)["adk.run.end_trigger"]
                for _, p in points["adk.tool_task.orphaned"]}
    # The direct orphan's run ends by the live run's own end signal.
    assert triggers and triggers <= {"live_teardown", "run_task_done", "run_span_end"}


def test_duration_and_orphan_points_carry_exemplars_of_their_task_span(
        exported: Exported) -> None:
    spans = {(s.trace_id, s.span_id): s for s in exported.rx.tool_spans()}
    points = _points(exported.rx)
    for name in ("adk.tool_task.duration", "adk.tool_task.orphaned",
                 "adk.tool_task.orphan_lifetime"):
        exemplars = [(p, e) for _, p in points[name] for e in p.exemplars]
        assert exemplars, f"{name}: no exemplars"
        for point, ex in exemplars:
            span = spans.get((ex.trace_id, ex.span_id))
            assert span is not None, f"{name}: exemplar of an unknown span"
            pa, sa = attrs(point.attributes), attrs(span.attributes)
            assert pa["gen_ai.tool.name"] == sa["gen_ai.tool.name"]
    orphan_span = exported.by_call()["call-direct-orphan"]
    orphaned_ex = {(e.trace_id, e.span_id) for _, p in points["adk.tool_task.orphaned"]
                   for e in p.exemplars}
    assert (orphan_span.trace_id, orphan_span.span_id) in orphaned_ex


def test_orphan_warning_arrives_as_a_log_record_linked_to_its_trace(exported: Exported) -> None:
    spans = exported.by_call()
    records = [(res, rec) for res, scope, rec in exported.rx.log_records()
               if scope == "adk_task_telemetry"]
    ours = [(res, rec) for res, rec in records
            if rec.body.string_value.startswith("orphaned tool task:")]
    expected = ["call-direct-orphan"] + (["call-goog"] if has_seed_bug() else [])
    orphans = {cid: s for cid, s in spans.items()
               if attrs(s.attributes)["adk.tool_task.outcome"] == "orphaned"}
    assert sorted(orphans) == sorted(expected)
    assert len(ours) == len(expected)
    # The call ledger's records: parallel_one_fails' three calls, each in its run's trace.
    unanswered = [rec for _, rec in records
                  if rec.body.string_value.startswith("unanswered function call:")]
    assert len(records) == len(ours) + len(unanswered)
    assert sorted(r.body.string_value.split("call_id=")[1].split()[0] for r in unanswered) == [
        "call-fail", "call-s1", "call-s2"]
    for rec in unanswered:
        assert rec.severity_number == 13
        assert rec.trace_id == spans["call-fail"].trace_id
        # Its event's attributes ride on the record: a logs store filters on them.
        fields = attrs(rec.attributes)
        assert f"call_id={fields['gen_ai.tool.call.id']} " in rec.body.string_value
        assert fields["adk.tool_call.unanswered.reason"] and fields["gen_ai.tool.name"]
    for res, rec in ours:
        assert rec.severity_number == 13  # WARN
        body = rec.body.string_value
        assert body.startswith("orphaned tool task:")
        cid = body.split("call_id=")[1].split()[0]
        span = orphans[cid]
        assert rec.trace_id == span.trace_id and rec.span_id == span.span_id
        assert res["service.name"] == "export-test"
        fields = attrs(rec.attributes)
        assert fields["gen_ai.tool.call.id"] == cid
        assert fields["gen_ai.tool.name"] == attrs(span.attributes)["gen_ai.tool.name"]
        assert "code.stacktrace" not in fields  # that stays on the span event


def test_an_app_provider_gets_our_export_added_and_nothing_is_doubled(
        runs: dict[str, Exported]) -> None:
    """The application installed its TracerProvider and MeterProvider first: they
    stay (with their own exporters and resource), our OTLP export is added to the
    tracer provider, the plugin records its metrics into a MeterProvider of its own,
    each span goes out once each way, and one warning says so, including that
    service.name cannot change."""
    result, rx = runs["app"].result, runs["app"].rx
    assert result["errors"] == [] and result["same_handle"] is True
    assert result["installed"] == {"traces": False, "metrics": True, "logs": True}
    assert result["actions"] == {"traces": "added_to_existing",
                                 "metrics": "own_meter_provider", "logs": "installed"}
    assert result["app_spans"].count("tool_task lookup_order") == 1
    assert not [n for n in result["app_metrics"] if n.startswith("adk.tool_task.")]
    told = [x["message"] for x in result["logs"] if "already installed" in x["message"]]
    assert len(told) == 1, result["logs"]
    assert f"added OTLP export to {rx_endpoint(runs['app'])}" in told[0]
    assert "TracerProvider" in told[0] and "service.name=unknown_service" in told[0]
    assert "metrics: the plugin records into a MeterProvider of its own" in told[0]
    assert "asked for asked-name" in told[0]
    assert rx.wait_for(lambda: bool(rx.metrics) and bool(rx.tool_spans()))
    ours = [s for s in rx.tool_spans() if s.name == "tool_task lookup_order"]
    assert len(ours) == 1
    # Spans keep the application's resource; our own metrics carry the name asked for.
    assert {res["service.name"] for res, _, _ in rx.spans()} == {"unknown_service"}
    assert {res["service.name"] for res, _ in rx.metric_list()} == {"asked-name"}
    started = [p for _, m in rx.metric_list() if m.name == "adk.tool_task.started"
               for p in m.sum.data_points]
    assert [p.as_int for p in started][-1:] == [1]


def rx_endpoint(run: Exported) -> str:
    return str(run.result["otlp_targets"]["traces"])


def test_exit_flush_and_the_traces_only_recipe(runs: dict[str, Exported]) -> None:
    """The docs' "straight to Jaeger" recipe, with no shutdown() call: only traces
    are sent (OTEL_METRICS_EXPORTER/OTEL_LOGS_EXPORTER=none) and the atexit hook
    delivers them although the batch delay is ten minutes."""
    result, rx = runs["traces_only"].result, runs["traces_only"].rx
    assert result["errors"] == []
    assert not [x for x in result["logs"] if x["logger"] == "adk_task_telemetry.export"]
    assert rx.wait_for(lambda: bool(rx.traces), timeout=10)
    calls = {attrs(s.attributes)["gen_ai.tool.call.id"] for s in rx.tool_spans()}
    assert calls == {"call-1", "call-direct-orphan"}
    assert rx.metrics == [] and rx.logs == []


def test_console_output_without_any_otlp(runs: dict[str, Exported]) -> None:
    result = runs["console"].result
    assert result["errors"] == []
    out = result["stdout"]
    assert '"name": "tool_task lookup_order"' in out  # the span
    assert '"adk.tool_task.started"' in out  # the metrics
    assert "orphaned tool task: tool=direct_tool" in out  # the log record
    # Nothing tried to reach an OTLP endpoint, so nothing failed.
    assert not [x for x in result["logs"] if x["logger"] == "adk_task_telemetry.export"]
