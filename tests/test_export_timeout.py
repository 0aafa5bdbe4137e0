"""OTEL_EXPORTER_OTLP_[SIGNAL_]TIMEOUT are milliseconds for every exporter we build.

The specification (and configure_telemetry()) reads them as milliseconds; the
OpenTelemetry Python SDK's OTLP exporters read them as seconds when they are given no
timeout. So every exporter configure_telemetry() builds must get its timeout from our
settings: ``200`` must give up after 0.2 s, not 200 s. The exporters' timeout is a
private attribute, so this watches behaviour: a real pipeline (configure_telemetry()'s,
built detached) sends spans, metrics and log records to an endpoint that accepts
connections and never answers, and a flush with a far deadline must see each export
give up by itself (the signal reported failing), long before the deadline ends it.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator

import pytest
from opentelemetry.sdk._logs import LoggingHandler

from adk_task_telemetry.configure import detached

from .otlp_receivers import BlackHole

#: The flush's own deadline: far beyond our 0.2 s, far short of the SDK's 200 s.
FLUSH_DEADLINE_MS = 30_000


@pytest.fixture
def hole() -> Iterator[BlackHole]:
    h = BlackHole()
    yield h
    h.stop()


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_TIMEOUT",
                                      "OTEL_EXPORTER_OTLP_{SIGNAL}_TIMEOUT"])
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_timeout_variable_is_milliseconds_for_every_exporter(
        protocol: str, variable: str, hole: BlackHole,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for signal in ("TRACES", "METRICS", "LOGS"):
        monkeypatch.setenv(variable.replace("{SIGNAL}", signal), "200")
    handle = detached(endpoint=hole.endpoint, protocol=protocol, service_name="timeout")
    try:
        assert {t.timeout for t in handle.otlp_targets.values()} == {0.2}
        assert handle.tracer_provider is not None and handle.meter_provider is not None
        assert handle.logger_provider is not None
        handle.tracer_provider.get_tracer("t").start_span("s").end()
        handle.meter_provider.get_meter("t").create_counter("c").add(1)
        log = logging.getLogger("adk_task_telemetry.test_export_timeout")
        with warnings.catch_warnings():  # deprecated for a contrib package; still works
            warnings.simplefilter("ignore", DeprecationWarning)
            bridge = LoggingHandler(logger_provider=handle.logger_provider)
        log.addHandler(bridge)
        try:
            log.warning("a record for the black hole")
        finally:
            log.removeHandler(bridge)

        assert handle.force_flush(timeout_millis=FLUSH_DEADLINE_MS) is False
        status = handle.export_status()
        # Failing: an attempt of each signal ended by its own timeout (at the flush's
        # deadline an attempt still in flight is not a failure yet).
        assert {s: st.failing for s, st in status.items()} == {
            "traces": True, "metrics": True, "logs": True}, status
        assert all(st.buffered >= 1 for st in status.values()), status  # kept, not lost
    finally:
        handle.shutdown(timeout_millis=200)
