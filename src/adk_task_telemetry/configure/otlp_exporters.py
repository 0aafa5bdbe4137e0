"""The SDK's OTLP exporters, one per signal and protocol (gRPC, HTTP/protobuf)."""

from __future__ import annotations

from typing import Any

from .settings import GRPC, OtlpTarget


def otlp_exporter(target: OtlpTarget, temporality: dict[type, Any] | None) -> Any:
    """The SDK's OTLP exporter of one signal, for its protocol."""
    try:
        return _make(target, temporality)
    except ImportError as e:
        raise ImportError(
            f"OTLP export needs {e.name}, a dependency of adk-task-telemetry: reinstall it "
            f"(pip install --force-reinstall adk-task-telemetry)") from e


def _make(target: OtlpTarget, temporality: dict[type, Any] | None) -> Any:
    hdrs = target.headers or None
    common: dict[str, Any] = {"endpoint": target.endpoint, "headers": hdrs,
                              "timeout": target.timeout}
    if target.protocol == GRPC:
        common["insecure"] = target.insecure
        if target.signal == "traces":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            return OTLPSpanExporter(**common)
        if target.signal == "metrics":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter,
            )
            return OTLPMetricExporter(**common, preferred_temporality=temporality)
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        return OTLPLogExporter(**common)
    if target.signal == "traces":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpSpanExporter,
        )
        return HttpSpanExporter(**common)
    if target.signal == "metrics":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HttpMetricExporter,
        )
        return HttpMetricExporter(**common, preferred_temporality=temporality)
    from opentelemetry.exporter.otlp.proto.http._log_exporter import (
        OTLPLogExporter as HttpLogExporter,
    )
    return HttpLogExporter(**common)
