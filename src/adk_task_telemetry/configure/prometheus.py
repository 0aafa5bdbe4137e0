"""The Prometheus scrape endpoint: a pull reader and the HTTP server that serves it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics.export import MetricReader

from .. import semconv as sc

logger = logging.getLogger(sc.EXPORT_LOGGER_NAME)


@dataclass
class PrometheusEndpoint:
    host: str  # the address it is bound to
    port: int  # the real one when 0 was asked
    reader: MetricReader
    server: Any  # prometheus_client's WSGI server, when it gives it back

    def stop(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.shutdown()
            server.server_close()


def start(host: str, port: int) -> PrometheusEndpoint | None:
    """Serves ``/metrics``; a port in use is a warning (None), not an exception."""
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server
    except ImportError as exc:  # pragma: no cover - the `prometheus` extra provides both
        raise RuntimeError(
            "prometheus_port needs opentelemetry-exporter-prometheus: "
            "pip install 'adk-task-telemetry[prometheus]'") from exc
    try:
        started = start_http_server(port, addr=host)
    except OSError as exc:  # a port in use must not stop the agent (nor the other exports)
        logger.warning("adk_task_telemetry: cannot serve Prometheus metrics on %s:%s (%s); "
                       "continuing without it", host, port, exc)
        return None
    server = started[0] if isinstance(started, tuple) else None
    bound = str(server.server_address[0]) if server is not None else host
    endpoint = PrometheusEndpoint(bound, int(server.server_port) if server is not None else port,
                                  PrometheusMetricReader(), server)
    logger.info("adk_task_telemetry: Prometheus metrics on http://%s:%s/metrics",
                host, endpoint.port)
    return endpoint
