"""Every environment variable that configures adk-task-telemetry, one constant each.

Only ``configure/settings.py`` (configure_telemetry()'s) and ``plugin_options.py`` (the
plugin's own, read without loading ``configure/``) read those of the telemetry (the
terminal conventions at the end excepted, below); docs/configuration.md lists exactly
these (a test holds the two together). Variables the OpenTelemetry SDK reads
itself (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_BLRP_*``,
compression, certificates) are not ours and are not listed; of ``OTEL_BSP_*``, the two
that still mean something to configure_telemetry()'s span pipeline (which has no SDK
batch processor) are read here. The
terminal conventions ``NO_COLOR`` and ``TERM`` configure nothing of the telemetry: they
are listed at the end, and only the CLI's dispatch reads them (``cli.dispatch``;
docs/cli.md).
"""

from __future__ import annotations

from typing import Final

OTEL_SDK_DISABLED: Final = "OTEL_SDK_DISABLED"
"""``true`` installs nothing; the plugin records into the no-op API."""

OTEL_EXPORTER_OTLP_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
"""Base URL of every signal (HTTP appends ``/v1/<signal>``)."""
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
"""Traces URL, used as it is."""
OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
"""Metrics URL, used as it is."""
OTEL_EXPORTER_OTLP_LOGS_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
"""Logs URL, used as it is."""

OTEL_EXPORTER_OTLP_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_PROTOCOL"
"""``grpc`` or ``http/protobuf`` (the default) for every signal."""
OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
"""Protocol of traces."""
OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
"""Protocol of metrics."""
OTEL_EXPORTER_OTLP_LOGS_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL"
"""Protocol of logs."""

OTEL_EXPORTER_OTLP_HEADERS: Final = "OTEL_EXPORTER_OTLP_HEADERS"
"""``k=v,k2=v2`` (percent-encoded) sent with every export."""
OTEL_EXPORTER_OTLP_TRACES_HEADERS: Final = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
"""Headers of trace exports."""
OTEL_EXPORTER_OTLP_METRICS_HEADERS: Final = "OTEL_EXPORTER_OTLP_METRICS_HEADERS"
"""Headers of metric exports."""
OTEL_EXPORTER_OTLP_LOGS_HEADERS: Final = "OTEL_EXPORTER_OTLP_LOGS_HEADERS"
"""Headers of log exports."""

OTEL_EXPORTER_OTLP_TIMEOUT: Final = "OTEL_EXPORTER_OTLP_TIMEOUT"
"""Milliseconds one export may take, retries included (default 5,000)."""
OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: Final = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
"""Timeout of trace exports (ms)."""
OTEL_EXPORTER_OTLP_METRICS_TIMEOUT: Final = "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT"
"""Timeout of metric exports (ms)."""
OTEL_EXPORTER_OTLP_LOGS_TIMEOUT: Final = "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT"
"""Timeout of log exports (ms)."""

OTEL_EXPORTER_OTLP_INSECURE: Final = "OTEL_EXPORTER_OTLP_INSECURE"
"""``false``: a scheme-less endpoint means ``https://``."""
OTEL_EXPORTER_OTLP_TRACES_INSECURE: Final = "OTEL_EXPORTER_OTLP_TRACES_INSECURE"
"""The same, for traces."""
OTEL_EXPORTER_OTLP_METRICS_INSECURE: Final = "OTEL_EXPORTER_OTLP_METRICS_INSECURE"
"""The same, for metrics."""
OTEL_EXPORTER_OTLP_LOGS_INSECURE: Final = "OTEL_EXPORTER_OTLP_LOGS_INSECURE"
"""The same, for logs."""

OTEL_TRACES_EXPORTER: Final = "OTEL_TRACES_EXPORTER"
"""``otlp``, ``console``, ``none`` (a comma list) for traces."""
OTEL_METRICS_EXPORTER: Final = "OTEL_METRICS_EXPORTER"
"""The same, for metrics."""
OTEL_LOGS_EXPORTER: Final = "OTEL_LOGS_EXPORTER"
"""The same, for logs."""

OTEL_METRIC_EXPORT_INTERVAL: Final = "OTEL_METRIC_EXPORT_INTERVAL"
"""Milliseconds between metric pushes (default 60,000)."""
OTEL_EXPORTER_PROMETHEUS_HOST: Final = "OTEL_EXPORTER_PROMETHEUS_HOST"
"""The address ``/metrics`` binds to when ``prometheus_port`` is given (default 127.0.0.1)."""
OTEL_METRICS_EXEMPLAR_FILTER: Final = "OTEL_METRICS_EXEMPLAR_FILTER"
"""``trace_based`` (default), ``always_on``, ``always_off``."""
OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE: Final = (
    "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE")
"""Set: the exporters' own temporality choice; unset: every instrument cumulative."""

# configure_telemetry()'s spans go from a span processor of ours straight into the
# traces buffer (no SDK BatchSpanProcessor): these two keep their SDK meaning there.
OTEL_BSP_SCHEDULE_DELAY: Final = "OTEL_BSP_SCHEDULE_DELAY"
"""Milliseconds a span waits at most for its batch to fill before it is sent (5,000)."""
OTEL_BSP_MAX_EXPORT_BATCH_SIZE: Final = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
"""Spans per export; a full batch is sent at once (512)."""

# While an endpoint is down (or slow), what was recorded waits in a buffer per
# signal, bounded by count and by (estimated, encoded) bytes; past either bound the
# oldest is dropped and counted in ``adk.export.dropped``.
ADK_TASK_TELEMETRY_BUFFER_SPANS: Final = "ADK_TASK_TELEMETRY_BUFFER_SPANS"
"""Spans held while the traces endpoint is down (default 50,000: about 170 MB resident
at 3.4 KB a span; 30 s of ADK's server at 250 tool tasks a second)."""
ADK_TASK_TELEMETRY_BUFFER_SPAN_BYTES: Final = "ADK_TASK_TELEMETRY_BUFFER_SPAN_BYTES"
"""Bytes of spans held (default 64 MiB, as OTLP would encode them)."""
ADK_TASK_TELEMETRY_BUFFER_METRIC_BATCHES: Final = "ADK_TASK_TELEMETRY_BUFFER_METRIC_BATCHES"
"""Metric exports (one per interval) held (default 256)."""
ADK_TASK_TELEMETRY_BUFFER_METRIC_BYTES: Final = "ADK_TASK_TELEMETRY_BUFFER_METRIC_BYTES"
"""Bytes of metric exports held (default 32 MiB)."""
ADK_TASK_TELEMETRY_BUFFER_LOG_RECORDS: Final = "ADK_TASK_TELEMETRY_BUFFER_LOG_RECORDS"
"""Log records held (default 20,000)."""
ADK_TASK_TELEMETRY_BUFFER_LOG_BYTES: Final = "ADK_TASK_TELEMETRY_BUFFER_LOG_BYTES"
"""Bytes of log records held (default 32 MiB)."""

# The plugin's own options, for users who cannot pass arguments (`opentelemetry-instrument`,
# `adk api_server --extra_plugins`), as the contrib GenAI instrumentations read content
# capture from the environment. An argument given to TaskTelemetryPlugin wins.
ADK_TASK_TELEMETRY_CAPTURE_ARGUMENTS: Final = "ADK_TASK_TELEMETRY_CAPTURE_ARGUMENTS"
"""``true``: record tool arguments and results, redacted and truncated (default ``false``:
they can hold personal data)."""
ADK_TASK_TELEMETRY_MAX_ARGUMENT_LENGTH: Final = "ADK_TASK_TELEMETRY_MAX_ARGUMENT_LENGTH"
"""Characters kept of a captured argument or result (default 1,024)."""
ADK_TASK_TELEMETRY_CANCEL_ORPHANS: Final = "ADK_TASK_TELEMETRY_CANCEL_ORPHANS"
"""``true``: cancel each orphan right after reporting it (default ``false``)."""
ADK_TASK_TELEMETRY_TRACK_SPAWNED_TASKS: Final = "ADK_TASK_TELEMETRY_TRACK_SPAWNED_TASKS"
"""``true``: strict mode, tasks a tool body spawned are reported too (default ``false``)."""
ADK_TASK_TELEMETRY_MAX_OPEN_TASKS: Final = "ADK_TASK_TELEMETRY_MAX_OPEN_TASKS"
"""Tool-task records held at most; further tasks are counted as overflow (default 10,000)."""
ADK_TASK_TELEMETRY_STUCK_AFTER: Final = "ADK_TASK_TELEMETRY_STUCK_AFTER"
"""Seconds after which a tool task still running is reported stuck (a WARNING record and a
``stuck_task`` event), again at 2x, 4x, ... that age (default 120; 0 turns it off)."""
ADK_TASK_TELEMETRY_DEBUG_PORT: Final = "ADK_TASK_TELEMETRY_DEBUG_PORT"
"""The live view's HTTP debug endpoint: a port, ``0`` (any free port, logged) or a range
``8790-8799`` (each process takes the first free one); unset: no endpoint (default)."""
ADK_TASK_TELEMETRY_DEBUG_HOST: Final = "ADK_TASK_TELEMETRY_DEBUG_HOST"
"""The address the debug endpoint listens on (default ``127.0.0.1``, loopback only)."""


# --- cli ---
# Terminal conventions, not telemetry settings (so not in every_variable() nor in
# docs/configuration.md): the CLI's dispatch reads them once and hands the views a
# colour mode; `--help` and docs/cli.md describe them.
NO_COLOR: Final = "NO_COLOR"
"""Set to any non-empty value: the CLI never colours (no-color.org; wins over --color)."""
TERM: Final = "TERM"
"""``dumb``: the CLI does not colour unless --color always."""


def otlp(signal: str | None, suffix: str) -> str:
    """``OTEL_EXPORTER_OTLP_[SIGNAL_]<suffix>``: one of the constants above."""
    name: str = globals()["OTEL_EXPORTER_OTLP_" + (f"{signal.upper()}_" if signal else "")
                          + suffix]
    return name


def exporter(signal: str) -> str:
    """``OTEL_TRACES_EXPORTER`` and its siblings."""
    name: str = globals()[f"OTEL_{signal.upper()}_EXPORTER"]
    return name


def every_variable() -> list[str]:
    """The names above, in order (what docs/configuration.md must list)."""
    return [v for k, v in globals().items() if k.startswith(("OTEL_", "ADK_TASK_TELEMETRY_"))]
