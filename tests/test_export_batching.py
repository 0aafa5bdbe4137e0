"""configure_telemetry()'s spans go from its own span processor straight into the
traces buffer; the sender thread batches them as the SDK's BatchSpanProcessor would.

A full batch (``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``) must go out by itself, a partial one
not before ``OTEL_BSP_SCHEDULE_DELAY`` (from the last send) and then by itself, and a
flush must send what there is,
however little, and an unsampled span is never sent. Real pipeline (built detached), a
real OTLP receiver; what the receiver decodes is the oracle.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision, Sampler, SamplingResult

from adk_task_telemetry.configure import TelemetryHandle, detached

from .otlp_receivers import HttpReceiver

#: Far longer than any test here waits: a span that arrives came without the delay.
NEVER_MS = "600000"


@pytest.fixture
def rx() -> Iterator[HttpReceiver]:
    r = HttpReceiver()
    yield r
    r.stop()


class _RecordOnly(Sampler):
    """Records spans without sampling them: span processors see their end, and an
    exporting one must leave them out (as the SDK's BatchSpanProcessor does)."""

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        return SamplingResult(Decision.RECORD_ONLY)

    def get_description(self) -> str:
        return "RecordOnly"


def _pipeline(rx: HttpReceiver, monkeypatch: pytest.MonkeyPatch, *, batch: int,
              delay_ms: str) -> TelemetryHandle:
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", str(batch))
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", delay_ms)
    return detached(endpoint=rx.endpoint, protocol="http/protobuf", service_name="batching")


def _names(rx: HttpReceiver) -> list[str]:
    return sorted(span.name for _, _, span in rx.received.spans())


def _end_spans(handle: TelemetryHandle, names: list[str], scope: str = "batching") -> None:
    assert handle.tracer_provider is not None
    tracer = handle.tracer_provider.get_tracer(scope)  # (the SDK may keep it by name)
    for name in names:
        tracer.start_span(name).end()


def test_a_full_batch_goes_out_without_a_flush(rx: HttpReceiver,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    handle = _pipeline(rx, monkeypatch, batch=4, delay_ms=NEVER_MS)
    try:
        _end_spans(handle, ["a", "b", "c", "d"])
        assert rx.received.wait_for(lambda: len(_names(rx)) == 4), _names(rx)
        assert _names(rx) == ["a", "b", "c", "d"]
        assert len(rx.received.traces) == 1  # one export, not one per span
    finally:
        handle.shutdown()


def _requests(rx: HttpReceiver) -> list[list[str]]:
    """The span names of each export request the receiver took, in arrival order."""
    with rx.received.cond:
        return [sorted(span.name for rs in req.resource_spans for ss in rs.scope_spans
                       for span in ss.spans) for req in rx.received.traces]


def test_a_partial_batch_waits_for_the_delay(rx: HttpReceiver,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """After a send, a partial batch is held for the delay (here longer than the test):
    a span that ends alone goes out with the two that end after it, in one request,
    once they make a full batch. A sender that sent a partial batch at once would send
    it alone (a request of its own): while it is held, a second pipeline sends a span
    and its receiver takes it (time enough for a sender that does not hold it)."""
    handle = _pipeline(rx, monkeypatch, batch=3, delay_ms=NEVER_MS)
    rx2 = HttpReceiver()
    other = _pipeline(rx2, monkeypatch, batch=512, delay_ms="50")
    try:
        _end_spans(handle, ["a"])
        assert handle.force_flush(timeout_millis=20_000) is True  # a send: the delay runs
        assert _requests(rx) == [["a"]]
        _end_spans(handle, ["b"])
        _end_spans(other, ["tick"])
        assert rx2.received.wait_for(lambda: _names(rx2) == ["tick"]), _names(rx2)
        _end_spans(handle, ["c", "d"])  # a full batch with "b"
        assert rx.received.wait_for(lambda: len(_names(rx)) == 4), _requests(rx)
        assert _requests(rx) == [["a"], ["b", "c", "d"]]
    finally:
        other.shutdown()
        handle.shutdown()
        rx2.stop()


def test_a_partial_batch_goes_out_after_the_delay(rx: HttpReceiver,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """...and goes out by itself once the delay passed (no flush, no full batch)."""
    handle = _pipeline(rx, monkeypatch, batch=512, delay_ms="50")
    try:
        _end_spans(handle, ["first"])
        assert rx.received.wait_for(lambda: _names(rx) == ["first"]), _names(rx)
        _end_spans(handle, ["only"])  # after a send: it waits the delay, then goes alone
        assert rx.received.wait_for(lambda: len(_names(rx)) == 2), _requests(rx)
        assert _requests(rx) == [["first"], ["only"]]
    finally:
        handle.shutdown()


def test_a_flush_sends_what_there_is_and_an_unsampled_span_never(
        rx: HttpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    handle = _pipeline(rx, monkeypatch, batch=512, delay_ms=NEVER_MS)
    try:
        assert handle.tracer_provider is not None
        handle.tracer_provider.sampler = _RecordOnly()  # tracers made from now on
        _end_spans(handle, ["unsampled"], scope="record-only")
        handle.tracer_provider.sampler = ALWAYS_ON
        _end_spans(handle, ["x", "y"], scope="sampled")
        assert handle.force_flush(timeout_millis=20_000) is True
        assert _names(rx) == ["x", "y"]  # the flush returned once the receiver answered
        assert handle.export_status()["traces"].sent == 2
    finally:
        handle.shutdown()



def test_the_providers_force_flush_sends_what_there_is_at_once(
        rx: HttpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tracer_provider.force_flush()`` (ADK's server, an application, process_exit.py for a
    provider of others) made the SDK's processor hand its spans over at once: ours
    sends them without waiting for a full batch or the delay."""
    handle = _pipeline(rx, monkeypatch, batch=512, delay_ms=NEVER_MS)
    try:
        assert handle.tracer_provider is not None
        _end_spans(handle, ["p", "q"])
        assert handle.tracer_provider.force_flush() is True
        assert rx.received.wait_for(lambda: _names(rx) == ["p", "q"]), _names(rx)
    finally:
        handle.shutdown()
