"""A process that runs the scenario library with the plugin and serves /metrics.

Used by the live Prometheus test: ``python tests/deploy_metrics_app.py PORT``. It
serves OpenTelemetry metrics through opentelemetry-exporter-prometheus on
127.0.0.1:PORT, runs the ADK-behaviour scenarios once (before Prometheus' first scrape, so
the orphan counter's first sample is already above zero), prints ``ready`` and
then keeps running (and keeps orphaned tool bodies alive) until it is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import start_http_server

from adk_task_telemetry.plugin import TaskTelemetryPlugin
from adk_task_telemetry.scenarios import SCENARIOS as LIBRARY
from adk_task_telemetry.scenarios import run_scenario

# The audit corpus (ADK behaviour: every task kind and outcome, and the seed bug),
# not the scenarios of application bugs (a tool that ignores cancellation orphans on
# every ADK version): on ADK 2.13 this set must leave no orphan at all.
SCENARIOS = tuple(name for name, s in LIBRARY.items() if s.audit)


async def main(port: int) -> None:
    resource = Resource.create({"service.name": "adk-scenarios"})
    reader = PrometheusMetricReader()
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    tracer_provider = TracerProvider(resource=resource)
    plugin = TaskTelemetryPlugin(tracer_provider=tracer_provider, meter_provider=meter_provider)
    runs = []
    for name in SCENARIOS:
        # The pool's runner stays open, as a server's does: closing the plugin's last
        # runner closes the plugin, whose pool gauges then report nothing.
        with contextlib.suppress(Exception):
            runs.append(await run_scenario(name, [plugin],
                                           close_runner="thread_pool" not in name))
    # Metrics are all recorded before the endpoint opens: the first scrape
    # already sees the orphan counter above zero.
    server, _thread = start_http_server(port, addr="127.0.0.1")
    print("ready", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        server.shutdown()
        for run in runs:
            await run.probe.cleanup()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(int(sys.argv[1])))
