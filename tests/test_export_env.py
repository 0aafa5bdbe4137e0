"""Settings precedence of configure_telemetry(): argument, per-signal variable,
general variable, default (docs/configuration.md). Pure functions, no globals."""

from __future__ import annotations

import ast
import asyncio
import logging
import re
from pathlib import Path

import pytest
from opentelemetry import trace

from adk_task_telemetry import configure, testing, variables
from adk_task_telemetry.configure import settings as _env
from adk_task_telemetry.plugin_options import PluginOptions, plugin_options


def test_defaults_follow_the_specification() -> None:
    t = _env.resolve_target("traces", environ={})
    assert (t.protocol, t.endpoint, t.headers) == (
        "http/protobuf", "http://localhost:4318/v1/traces", {})
    assert t.timeout == _env.DEFAULT_TIMEOUT_S
    g = _env.resolve_target("metrics", protocol="grpc", environ={})
    assert (g.endpoint, g.insecure) == ("http://localhost:4317", True)
    assert _env.exemplar_filter_name(None, {}) == "trace_based"
    assert _env.metric_export_interval_millis(None, {}) == 60_000.0
    assert not _env.otlp_endpoint_configured({})


def test_general_variables_apply_to_every_signal() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
           "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20abc,x-team=agents",
           "OTEL_EXPORTER_OTLP_TIMEOUT": "2500"}
    for signal in _env.SIGNALS:
        t = _env.resolve_target(signal, environ=env)
        assert t.endpoint == f"http://collector:4318/v1/{signal}"
        assert t.headers == {"Authorization": "Bearer abc", "x-team": "agents"}
        assert t.timeout == 2.5  # milliseconds, as the specification says
    assert _env.otlp_endpoint_configured(env)


def test_per_signal_variables_beat_general_ones_and_are_used_as_is() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
           "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://tempo:443/otlp/traces",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
           "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "grpc",
           "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://loki:4317",
           "OTEL_EXPORTER_OTLP_HEADERS": "a=1",
           "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "b=2",
           "OTEL_EXPORTER_OTLP_TIMEOUT": "1000",
           "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "3000"}
    traces = _env.resolve_target("traces", environ=env)
    assert (traces.endpoint, traces.insecure) == ("https://tempo:443/otlp/traces", False)
    metrics = _env.resolve_target("metrics", environ=env)
    assert metrics.endpoint == "http://collector:4318/v1/metrics"
    assert (metrics.headers, metrics.timeout) == ({"b": "2"}, 3.0)
    logs = _env.resolve_target("logs", environ=env)
    assert (logs.protocol, logs.endpoint, logs.headers) == ("grpc", "http://loki:4317", {"a": "1"})


def test_explicit_arguments_beat_every_variable() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318",
           "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://env-traces:4318/v1/traces",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
           "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
           "OTEL_EXPORTER_OTLP_HEADERS": "from=env", "OTEL_EXPORTER_OTLP_TIMEOUT": "9000",
           "OTEL_METRIC_EXPORT_INTERVAL": "1000", "OTEL_METRICS_EXEMPLAR_FILTER": "always_off",
           "OTEL_SDK_DISABLED": "true"}
    t = _env.resolve_target("traces", endpoint="http://args:4317", protocol="grpc",
                            headers={"From": "args"}, timeout=0.5, environ=env)
    assert (t.protocol, t.endpoint, t.timeout) == ("grpc", "http://args:4317", 0.5)
    assert t.headers == {"from": "args"}  # gRPC metadata keys are lower case
    h = _env.resolve_target("logs", endpoint="http://args:4318", protocol="http/protobuf",
                            environ=env)
    assert h.endpoint == "http://args:4318/v1/logs"  # a base URL, like the general variable
    assert _env.metric_export_interval_millis(250, env) == 250
    assert _env.metric_export_interval_millis(None, env) == 1000
    assert _env.exemplar_filter_name("always_on", env) == "always_on"
    assert _env.exemplar_filter_name(None, env) == "always_off"
    assert _env.sdk_disabled(False, env) is False
    assert _env.sdk_disabled(None, env) is True


def test_scheme_less_endpoints_and_bad_values() -> None:
    assert _env.resolve_target("traces", endpoint="collector:4317", protocol="grpc",
                               environ={}).endpoint == "http://collector:4317"
    secure = _env.resolve_target("traces", endpoint="collector:4317", protocol="grpc",
                                 environ={"OTEL_EXPORTER_OTLP_INSECURE": "false"})
    assert (secure.endpoint, secure.insecure) == ("https://collector:4317", False)
    with pytest.raises(ValueError, match="protocol"):
        _env.resolve_target("traces", protocol="carrier-pigeon", environ={})
    # A bad variable is not worth crashing the agent over: warn and use the default.
    bad = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_TIMEOUT": "soon",
           "OTEL_EXPORTER_OTLP_HEADERS": "novalue,k=v", "OTEL_METRICS_EXEMPLAR_FILTER": "x"}
    t = _env.resolve_target("traces", environ=bad)
    assert (t.protocol, t.timeout, t.headers) == ("http/protobuf", 5.0, {"k": "v"})
    assert _env.exemplar_filter_name(None, bad) == "trace_based"
    with pytest.raises(ValueError):
        _env.exemplar_filter_name("sometimes", {})
    assert not _env.sdk_disabled(None, {"OTEL_SDK_DISABLED": "yes"})  # only "true" disables


def test_per_signal_exporter_choice() -> None:
    env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "none",
           "OTEL_LOGS_EXPORTER": "console, otlp"}
    assert _env.signal_exporters("traces", env) == {"otlp"}
    assert _env.signal_exporters("metrics", env) == {"none"}
    assert _env.signal_exporters("logs", env) == {"console", "otlp"}
    assert _env.signal_exporters("traces", {}) is None


@testing.configure_afresh()
def test_sdk_disabled_installs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    before = trace.get_tracer_provider()
    handle = configure.configure_telemetry("svc", endpoint="http://127.0.0.1:9", protocol="grpc")
    assert handle.enabled is False
    assert handle.tracer_provider is None and handle.meter_provider is None
    assert trace.get_tracer_provider() is before
    assert configure.configure_telemetry() is handle  # calling again is harmless
    assert handle.force_flush() is True
    handle.shutdown()
    handle.shutdown()


@testing.configure_afresh()
def test_a_typo_in_an_argument_fails_at_configure_time() -> None:
    before = trace.get_tracer_provider()
    with pytest.raises(ValueError, match="protocol"):
        configure.configure_telemetry(protocol="grcp")
    with pytest.raises(ValueError, match="exemplar_filter"):
        configure.configure_telemetry(exemplar_filter="sometimes")
    assert trace.get_tracer_provider() is before
    assert configure.active() is None


def test_a_bad_interval_keeps_the_interval_default_not_the_timeout_one() -> None:
    assert _env.metric_export_interval_millis(None, {"OTEL_METRIC_EXPORT_INTERVAL": "abc"}) \
        == 60_000.0
    bad = {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "soon"}
    assert _env.resolve_target("traces", environ=bad).timeout == 5.0


def test_buffer_bounds_per_signal_from_their_variables() -> None:
    assert _env.buffer_bounds("traces", {}) == _env.BufferBounds(50_000, 64 << 20)
    env = {"ADK_TASK_TELEMETRY_BUFFER_SPANS": "500", "ADK_TASK_TELEMETRY_BUFFER_LOG_BYTES": "4096",
           "ADK_TASK_TELEMETRY_BUFFER_METRIC_BATCHES": "-3"}
    assert _env.buffer_bounds("traces", env).items == 500
    assert _env.buffer_bounds("logs", env).bytes == 4096
    assert _env.buffer_bounds("metrics", env).items == 256  # not positive: the default


def test_span_batching_from_the_sdks_own_variables() -> None:
    """Our span pipeline has no SDK BatchSpanProcessor: its two variables are read here,
    in milliseconds and spans, with the SDK's defaults."""
    assert _env.span_batching({}) == _env.SpanBatching(512, 5.0)
    env = {"OTEL_BSP_SCHEDULE_DELAY": "250", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "64"}
    assert _env.span_batching(env) == _env.SpanBatching(64, 0.25)
    bad = {"OTEL_BSP_SCHEDULE_DELAY": "-1", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "many"}
    assert _env.span_batching(bad) == _env.SpanBatching(512, 5.0)


def _variables_section() -> str:
    text = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    return text.split("\n## Every variable\n", 1)[1].split("\n## ", 1)[0]


def test_docs_list_exactly_the_variables_the_package_reads() -> None:
    listed = re.findall(r"^\| `((?:OTEL|ADK_TASK_TELEMETRY)_[A-Z_]+)`", _variables_section(),
                        re.MULTILINE)
    assert sorted(listed) == sorted(variables.every_variable())
    assert len(listed) == len(set(listed))


def test_no_other_module_names_a_variable() -> None:
    """Every OTEL_*/ADK_TASK_TELEMETRY_* name is a constant of variables.py."""
    src = Path(__file__).resolve().parents[1] / "src" / "adk_task_telemetry"
    pattern = re.compile(r"(OTEL|ADK_TASK_TELEMETRY)_[A-Z_]*[A-Z]")
    found = []
    for path in src.rglob("*.py"):
        if path.name == "variables.py":
            continue
        tree = ast.parse(path.read_text())
        in_fstrings = {id(c) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)
                       for c in n.values}
        found += [f"{path.name}: {n.value}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str)
                  and id(n) not in in_fstrings and pattern.fullmatch(n.value)]
    assert found == []


def test_plugin_options_from_the_environment(caplog: pytest.LogCaptureFixture) -> None:
    env = {variables.ADK_TASK_TELEMETRY_CAPTURE_ARGUMENTS: "TRUE",
           variables.ADK_TASK_TELEMETRY_CANCEL_ORPHANS: "false",
           variables.ADK_TASK_TELEMETRY_TRACK_SPAWNED_TASKS: "true",
           variables.ADK_TASK_TELEMETRY_MAX_OPEN_TASKS: "5_000",
           variables.ADK_TASK_TELEMETRY_MAX_ARGUMENT_LENGTH: "0"}
    got = plugin_options(env)
    assert (got.capture_arguments, got.cancel_orphans, got.track_spawned_tasks,
            got.max_open_tasks, got.max_argument_length) == (True, False, True, 5000, 0)
    assert plugin_options({}) == PluginOptions()
    bad = {variables.ADK_TASK_TELEMETRY_CAPTURE_ARGUMENTS: "yes",
           variables.ADK_TASK_TELEMETRY_MAX_OPEN_TASKS: "0",
           variables.ADK_TASK_TELEMETRY_MAX_ARGUMENT_LENGTH: "-3"}
    with caplog.at_level(logging.WARNING, logger="adk_task_telemetry.export"):
        assert plugin_options(bad) == PluginOptions()  # each keeps its default
    assert len(caplog.records) == 3


def test_a_plugin_argument_beats_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from adk_task_telemetry import TaskTelemetryPlugin

    monkeypatch.setenv(variables.ADK_TASK_TELEMETRY_MAX_OPEN_TASKS, "7")
    monkeypatch.setenv(variables.ADK_TASK_TELEMETRY_CAPTURE_ARGUMENTS, "true")
    from_env = TaskTelemetryPlugin()
    given = TaskTelemetryPlugin(max_open_tasks=9, capture_arguments=False)
    try:
        assert from_env.options.max_open_tasks == 7 and from_env.options.capture_arguments
        assert given.options.max_open_tasks == 9 and not given.options.capture_arguments
    finally:
        for p in (from_env, given):
            asyncio.run(p.close())


def test_prometheus_host_argument_then_variable_then_loopback() -> None:
    assert _env.prometheus_host(None, {}) == "127.0.0.1"
    env = {"OTEL_EXPORTER_PROMETHEUS_HOST": "172.17.0.1"}
    assert _env.prometheus_host(None, env) == "172.17.0.1"
    assert _env.prometheus_host("0.0.0.0", env) == "0.0.0.0"
    assert _env.prometheus_host(None, {"OTEL_EXPORTER_PROMETHEUS_HOST": " "}) == "127.0.0.1"
