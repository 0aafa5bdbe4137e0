"""What the OpenTelemetry SDK calls: our span processor and our metric and log
exporters, which only hand telemetry over to the signal's sender (export.py).

Kept apart from the sender because it is the SDK's side: its base classes and their
renames between SDK releases live here, and none of it waits on the network. A span's
end pays one append to the traces buffer's inbox and a length check; the SDK's
periodic reader and log batch processor get SUCCESS as soon as the batch is in the
buffer (a batch the endpoint never takes is counted there, not here).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk._logs import export as _log_export
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from .. import otel_compat
from .export import Sender

try:  # the base class was renamed in SDK 1.39; the old name warns
    from opentelemetry.sdk._logs.export import LogRecordExporter as _LogExporterBase
except ImportError:  # pragma: no cover - SDK < 1.39
    from opentelemetry.sdk._logs.export import (  # type: ignore[assignment]
        LogExporter as _LogExporterBase,
    )

_LOG_SUCCESS = (getattr(_log_export, "LogRecordExportResult", None)
                or _log_export.LogExportResult).SUCCESS  # the enum was renamed in 1.39


class _HandOver:
    """What our two SDK-facing exporters share: they only hand batches over."""

    def __init__(self, sender: Sender) -> None:
        self.sender = sender

    def force_flush(self, timeout_millis: float = 30_000) -> bool:
        return True  # nothing is held here; the handle waits for the sender

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.sender.buffer.closed = True  # the sender goes on until the handle stops it


class SpanHandOver(SpanProcessor):
    """configure_telemetry()'s span processor: each ended, sampled span goes straight
    into the traces buffer, which the sender thread drains (no SDK batch processor in
    between). The span's end pays one append and a length check; the sender is
    woken when a batch is there. While the endpoint fails each span is taken into the
    buffer at its end, measured, so the bounds hold as it waits."""

    def __init__(self, sender: Sender) -> None:
        self.sender = sender
        self._inbox = sender.buffer.inbox

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        if ctx is None or not ctx.trace_flags.sampled:  # as the SDK's processors do
            return
        inbox = self._inbox
        inbox.append(span)
        sender = self.sender
        if len(inbox) >= sender.wake_at:  # 1 while the endpoint fails (Sender.wake)
            sender.wake()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """The spans ended so far go out now (as the SDK's BatchSpanProcessor would
        hand them to its exporter); the network is not waited for (the handle's
        force_flush waits for the sender)."""
        self.sender.push()
        return True

    def shutdown(self) -> None:
        # Like the SDK's processor, nothing more is taken: later spans go to a deque
        # that keeps none (what the inbox holds now is still sent, or counted).
        self._inbox = deque(maxlen=0)
        buf = self.sender.buffer
        with buf.cond:
            buf.closed = True  # the sender sends what is there until the handle stops it
            buf.cond.notify_all()


class LogExport(_HandOver, _LogExporterBase):  # type: ignore[misc]
    def export(self, batch: Sequence[Any]) -> Any:
        self.sender.put(batch)
        return _LOG_SUCCESS


class MetricExport(_HandOver, MetricExporter):
    def __init__(self, sender: Sender) -> None:
        # The reader reads these from its exporter; ours mirror the OTLP exporter's.
        temporality, aggregation = otel_compat.exporter_preferences(sender.inner)
        MetricExporter.__init__(self, preferred_temporality=temporality,
                                preferred_aggregation=aggregation)
        _HandOver.__init__(self, sender)

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        self.sender.put([metrics_data])
        return MetricExportResult.SUCCESS


ADAPTERS: dict[str, Callable[[Sender], Any]] = {
    "traces": SpanHandOver, "metrics": MetricExport, "logs": LogExport}
