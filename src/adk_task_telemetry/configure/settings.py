"""Resolution of configure_telemetry() settings: explicit argument, then variable.

The only module that reads the telemetry's variables (the names: ``variables.py``);
the one other reader of the environment is the CLI's dispatch, for the terminal
conventions ``NO_COLOR`` and ``TERM`` (``cli.dispatch.colour_mode``). Pure
functions over a mapping (``os.environ`` by default), so that the precedence
documented in docs/configuration.md can be tested without touching any global.
"""

from __future__ import annotations

import contextlib
import logging
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from .. import semconv as sc
from . import variables as v

logger = logging.getLogger(sc.EXPORT_LOGGER_NAME)

SIGNALS: Final = ("traces", "metrics", "logs")
GRPC: Final = "grpc"
HTTP: Final = "http/protobuf"
DEFAULT_PROTOCOL: Final = HTTP  # the specification's default
DEFAULT_TIMEOUT_S: Final = 5.0  # shorter than the spec's 10 s: bounds what exit can cost
DEFAULT_METRIC_INTERVAL_MS: Final = 60_000.0  # the specification's
DEFAULT_PROMETHEUS_HOST: Final = "127.0.0.1"
_DEFAULT_ENDPOINT: Final = {GRPC: "http://localhost:4317", HTTP: "http://localhost:4318"}
_EXEMPLAR_FILTERS: Final = ("trace_based", "always_on", "always_off")


@dataclass(frozen=True)
class OtlpTarget:
    """Where and how one signal is sent."""

    signal: str
    protocol: str
    endpoint: str
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT_S  # seconds

    @property
    def insecure(self) -> bool:
        return not self.endpoint.startswith("https://")


def _get(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _signal_var(signal: str, suffix: str) -> str:
    return v.otlp(signal, suffix)


def _general_var(suffix: str) -> str:
    return v.otlp(None, suffix)


def parse_bool(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.strip().lower() == "true"


def sdk_disabled(arg: bool | None, environ: Mapping[str, str] | None = None) -> bool:
    """``disabled`` argument, else OTEL_SDK_DISABLED (only ``true`` disables)."""
    if arg is not None:
        return arg
    env = os.environ if environ is None else environ
    return bool(parse_bool(_get(env, v.OTEL_SDK_DISABLED)))


def normalize_protocol(value: str, *, strict: bool) -> str:
    """``grpc`` or ``http/protobuf``; ``http/json`` is not offered by the Python SDK."""
    v = value.strip().lower()
    if v == GRPC:
        return GRPC
    if v in (HTTP, "http"):
        return HTTP
    if strict:
        raise ValueError(f"protocol must be 'grpc' or 'http/protobuf', not {value!r}")
    logger.warning("adk_task_telemetry: unsupported OTLP protocol %r; using %s", value, HTTP)
    return HTTP


def parse_headers(value: str | None) -> dict[str, str]:
    """W3C-baggage-like ``k1=v1,k2=v2`` with percent-encoding, as the spec defines it."""
    out: dict[str, str] = {}
    if not value:
        return out
    for item in value.split(","):
        key, sep, val = item.partition("=")
        key = urllib.parse.unquote(key).strip()
        if not sep or not key:
            logger.warning("adk_task_telemetry: ignoring malformed OTLP header %r", item)
            continue
        out[key] = urllib.parse.unquote(val).strip()
    return out


def _with_scheme(endpoint: str, environ: Mapping[str, str], signal: str) -> str:
    if "://" in endpoint:
        return endpoint
    insecure = parse_bool(_get(environ, _signal_var(signal, "INSECURE"))
                          or _get(environ, v.OTEL_EXPORTER_OTLP_INSECURE))
    return ("https://" if insecure is False else "http://") + endpoint


def _signal_url(base: str, signal: str) -> str:
    return base.rstrip("/") + "/v1/" + signal


def resolve_target(
    signal: str,
    *,
    endpoint: str | None = None,
    protocol: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> OtlpTarget:
    """One signal's OTLP settings. Each one: explicit argument, then the per-signal
    variable, then the general variable, then the default."""
    env = os.environ if environ is None else environ
    if protocol is not None:
        proto = normalize_protocol(protocol, strict=True)
    else:
        raw = _get(env, _signal_var(signal, "PROTOCOL")) or _get(env, _general_var("PROTOCOL"))
        proto = normalize_protocol(raw, strict=False) if raw else DEFAULT_PROTOCOL

    per_signal = _get(env, _signal_var(signal, "ENDPOINT"))
    general = _get(env, v.OTEL_EXPORTER_OTLP_ENDPOINT)
    if endpoint is not None:
        url = _with_scheme(endpoint.strip(), env, signal)
        url = url if proto == GRPC else _signal_url(url, signal)
    elif per_signal is not None:  # used as is, path included
        url = _with_scheme(per_signal, env, signal)
    elif general is not None:
        url = _with_scheme(general, env, signal)
        url = url if proto == GRPC else _signal_url(url, signal)
    else:
        url = _DEFAULT_ENDPOINT[proto]
        url = url if proto == GRPC else _signal_url(url, signal)

    if headers is not None:
        hdrs = dict(headers)
    else:
        raw_h = _get(env, _signal_var(signal, "HEADERS"))
        if raw_h is None:
            raw_h = _get(env, v.OTEL_EXPORTER_OTLP_HEADERS)
        hdrs = parse_headers(raw_h)
    if proto == GRPC:  # gRPC metadata keys must be lower case
        hdrs = {k.lower(): v for k, v in hdrs.items()}

    if timeout is not None:
        secs = float(timeout)
    else:
        name = _signal_var(signal, "TIMEOUT")
        raw_t = _get(env, name)
        if raw_t is None:
            name, raw_t = v.OTEL_EXPORTER_OTLP_TIMEOUT, _get(env, v.OTEL_EXPORTER_OTLP_TIMEOUT)
        secs = _millis(raw_t, name, DEFAULT_TIMEOUT_S * 1000.0) / 1000.0 if raw_t \
            else DEFAULT_TIMEOUT_S
    if secs <= 0:
        secs = DEFAULT_TIMEOUT_S
    return OtlpTarget(signal, proto, url, hdrs, secs)


def otlp_endpoint_configured(environ: Mapping[str, str] | None = None,
                             signal: str | None = None) -> bool:
    """Whether an OTEL_EXPORTER_OTLP_*ENDPOINT variable names a destination (for
    ``signal``: the general one or that signal's)."""
    env = os.environ if environ is None else environ
    names = [v.OTEL_EXPORTER_OTLP_ENDPOINT] + [_signal_var(s, "ENDPOINT") for s in SIGNALS
                                               if signal is None or s == signal]
    return any(_get(env, n) for n in names)


def _millis(raw: str, name: str, default: float) -> float:
    try:
        value = float(raw)
    except ValueError:
        logger.warning("adk_task_telemetry: %s=%r is not a number of milliseconds; using %g",
                       name, raw, default)
        return default
    return value


def metric_export_interval_millis(arg: float | None,
                                  environ: Mapping[str, str] | None = None) -> float:
    """Argument, else OTEL_METRIC_EXPORT_INTERVAL, else the spec's 60 000 ms."""
    if arg is not None and arg > 0:
        return float(arg)
    env = os.environ if environ is None else environ
    raw = _get(env, v.OTEL_METRIC_EXPORT_INTERVAL)
    value = _millis(raw, v.OTEL_METRIC_EXPORT_INTERVAL, DEFAULT_METRIC_INTERVAL_MS) if raw \
        else DEFAULT_METRIC_INTERVAL_MS
    return value if value > 0 else DEFAULT_METRIC_INTERVAL_MS


def prometheus_host(arg: str | None, environ: Mapping[str, str] | None = None) -> str:
    """Argument, else OTEL_EXPORTER_PROMETHEUS_HOST, else 127.0.0.1: /metrics stays on
    loopback unless the user names an address (a container's bridge, 0.0.0.0)."""
    if arg is not None:
        return arg
    env = os.environ if environ is None else environ
    return _get(env, v.OTEL_EXPORTER_PROMETHEUS_HOST) or DEFAULT_PROMETHEUS_HOST


def exemplar_filter_name(arg: str | None, environ: Mapping[str, str] | None = None) -> str:
    """Argument, else OTEL_METRICS_EXEMPLAR_FILTER, else ``trace_based`` (the spec's)."""
    if arg is not None:
        name = arg.strip().lower()
        if name not in _EXEMPLAR_FILTERS:
            raise ValueError(f"exemplar_filter must be one of {_EXEMPLAR_FILTERS}, not {arg!r}")
        return name
    env = os.environ if environ is None else environ
    raw = (_get(env, v.OTEL_METRICS_EXEMPLAR_FILTER) or "trace_based").lower()
    if raw not in _EXEMPLAR_FILTERS:
        logger.warning("adk_task_telemetry: unknown OTEL_METRICS_EXEMPLAR_FILTER %r; "
                       "using trace_based", raw)
        return "trace_based"
    return raw


def signal_exporters(signal: str, environ: Mapping[str, str] | None = None) -> set[str] | None:
    """OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER / OTEL_LOGS_EXPORTER as a set
    (``otlp``, ``console``, ``none``), or None when the variable is not set."""
    env = os.environ if environ is None else environ
    raw = _get(env, v.exporter(signal))
    if raw is None:
        return None
    names = {n.strip().lower() for n in raw.split(",") if n.strip()}
    unknown = names - {"otlp", "console", "none"}
    if unknown:
        logger.warning("adk_task_telemetry: OTEL_%s_EXPORTER: %s not supported here "
                       "(otlp, console, none)", signal.upper(), ", ".join(sorted(unknown)))
    return names


def protocol_configured(signal: str = "traces", environ: Mapping[str, str] | None = None) -> bool:
    """Whether a variable chooses the OTLP protocol of ``signal``."""
    env = os.environ if environ is None else environ
    return bool(_get(env, _signal_var(signal, "PROTOCOL")) or _get(env, _general_var("PROTOCOL")))


def temporality_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the user chose the metric exporters' temporality by variable."""
    env = os.environ if environ is None else environ
    return _get(env, v.OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE) is not None


#: The SDK's BatchSpanProcessor defaults, which our span pipeline keeps.
DEFAULT_SPAN_DELAY_MS: Final = 5_000.0
DEFAULT_SPAN_BATCH: Final = 512


@dataclass(frozen=True)
class SpanBatching:
    """When configure_telemetry()'s sender thread sends spans: as soon as ``size`` wait,
    else ``delay_s`` after its last send (a flush or the exit: at once)."""

    size: int = DEFAULT_SPAN_BATCH
    delay_s: float = DEFAULT_SPAN_DELAY_MS / 1000.0


def span_batching(environ: Mapping[str, str] | None = None) -> SpanBatching:
    """OTEL_BSP_MAX_EXPORT_BATCH_SIZE and OTEL_BSP_SCHEDULE_DELAY (ms), the SDK's own
    names and defaults: our span pipeline has no SDK batch processor to read them. A
    bad value warns and keeps the default (the SDK raised on some); a delay of 0 sends
    each span at once."""
    env = os.environ if environ is None else environ
    size = _positive_int(env, v.OTEL_BSP_MAX_EXPORT_BATCH_SIZE, DEFAULT_SPAN_BATCH)
    raw = _get(env, v.OTEL_BSP_SCHEDULE_DELAY)
    delay = _millis(raw, v.OTEL_BSP_SCHEDULE_DELAY, DEFAULT_SPAN_DELAY_MS) if raw \
        else DEFAULT_SPAN_DELAY_MS
    if delay < 0:
        logger.warning("adk_task_telemetry: %s=%r is negative; using %g",
                       v.OTEL_BSP_SCHEDULE_DELAY, raw, DEFAULT_SPAN_DELAY_MS)
        delay = DEFAULT_SPAN_DELAY_MS
    return SpanBatching(size, delay / 1000.0)


@dataclass(frozen=True)
class BufferBounds:
    """How much one signal's buffer holds while its endpoint is down."""

    items: int
    bytes: int


#: signal -> (count variable, bytes variable, default count, default bytes)
_BUFFER_DEFAULTS: Final = {
    "traces": (v.ADK_TASK_TELEMETRY_BUFFER_SPANS, v.ADK_TASK_TELEMETRY_BUFFER_SPAN_BYTES,
               50_000, 64 << 20),
    "metrics": (v.ADK_TASK_TELEMETRY_BUFFER_METRIC_BATCHES,
                v.ADK_TASK_TELEMETRY_BUFFER_METRIC_BYTES, 256, 32 << 20),
    "logs": (v.ADK_TASK_TELEMETRY_BUFFER_LOG_RECORDS, v.ADK_TASK_TELEMETRY_BUFFER_LOG_BYTES,
             20_000, 32 << 20),
}


def buffer_bounds(signal: str, environ: Mapping[str, str] | None = None) -> BufferBounds:
    """ADK_TASK_TELEMETRY_BUFFER_* for ``signal``, else the defaults (a positive integer
    each; a bad value warns and keeps the default)."""
    env = os.environ if environ is None else environ
    count_var, bytes_var, count, size = _BUFFER_DEFAULTS[signal]
    return BufferBounds(_positive_int(env, count_var, count), _positive_int(env, bytes_var, size))


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        value = 0
    if value <= 0:
        logger.warning("adk_task_telemetry: %s=%r is not a positive whole number; using %d",
                       name, raw, default)
        return default
    return value


@dataclass(frozen=True)
class PluginOptions:
    """TaskTelemetryPlugin's options as the environment gives them (the defaults where a
    variable is unset or bad: a bad value warns once and never stops the agent)."""

    capture_arguments: bool = False
    max_argument_length: int = 1024
    cancel_orphans: bool = False
    track_spawned_tasks: bool = False
    max_open_tasks: int = 10_000
    stuck_after: float = 120.0
    debug_port: str | None = None
    debug_host: str = "127.0.0.1"


def plugin_options(environ: Mapping[str, str] | None = None) -> PluginOptions:
    """ADK_TASK_TELEMETRY_{CAPTURE_ARGUMENTS,MAX_ARGUMENT_LENGTH,CANCEL_ORPHANS,
    TRACK_SPAWNED_TASKS,MAX_OPEN_TASKS,STUCK_AFTER,DEBUG_PORT,DEBUG_HOST}; an argument
    given to the plugin wins over them."""
    env = os.environ if environ is None else environ
    d = PluginOptions()

    def flag(name: str, default: bool) -> bool:
        raw = _get(env, name)
        if raw is None:
            return default
        if raw.strip().lower() not in ("true", "false"):
            logger.warning("adk_task_telemetry: %s=%r is not true or false; using %s",
                           name, raw, str(default).lower())
            return default
        return bool(parse_bool(raw))

    length = _get(env, v.ADK_TASK_TELEMETRY_MAX_ARGUMENT_LENGTH)
    max_arg = d.max_argument_length
    if length is not None:
        max_arg = -1
        with contextlib.suppress(ValueError):
            max_arg = int(length.replace("_", ""))
        if max_arg < 0:
            logger.warning("adk_task_telemetry: %s=%r is not a whole number >= 0; using %d",
                           v.ADK_TASK_TELEMETRY_MAX_ARGUMENT_LENGTH, length,
                           d.max_argument_length)
            max_arg = d.max_argument_length
    return PluginOptions(
        capture_arguments=flag(v.ADK_TASK_TELEMETRY_CAPTURE_ARGUMENTS, d.capture_arguments),
        max_argument_length=max_arg,
        cancel_orphans=flag(v.ADK_TASK_TELEMETRY_CANCEL_ORPHANS, d.cancel_orphans),
        track_spawned_tasks=flag(v.ADK_TASK_TELEMETRY_TRACK_SPAWNED_TASKS,
                                 d.track_spawned_tasks),
        max_open_tasks=_positive_int(env, v.ADK_TASK_TELEMETRY_MAX_OPEN_TASKS,
                                     d.max_open_tasks),
        stuck_after=_seconds(env, v.ADK_TASK_TELEMETRY_STUCK_AFTER, d.stuck_after),
        debug_port=_get(env, v.ADK_TASK_TELEMETRY_DEBUG_PORT) or None,
        debug_host=_get(env, v.ADK_TASK_TELEMETRY_DEBUG_HOST) or d.debug_host,
    )


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A number of seconds >= 0 (0: off); a bad value warns and gives the default."""
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        logger.warning("adk_task_telemetry: %s=%r is not a number of seconds >= 0; using %g",
                       name, raw, default)
        return default
    return value
