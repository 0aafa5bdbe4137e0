"""Resolution of configure_telemetry() settings: explicit argument, then OTEL_* variable.

Pure functions over a mapping (``os.environ`` by default), so that the precedence
documented in docs/configuration.md can be tested without touching any global.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

logger = logging.getLogger("adk_task_telemetry.export")

SIGNALS: Final = ("traces", "metrics", "logs")
GRPC: Final = "grpc"
HTTP: Final = "http/protobuf"
DEFAULT_PROTOCOL: Final = HTTP  # the specification's default
DEFAULT_TIMEOUT_S: Final = 5.0  # shorter than the spec's 10 s: bounds what exit can cost
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
    return f"OTEL_EXPORTER_OTLP_{signal.upper()}_{suffix}"


def parse_bool(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.strip().lower() == "true"


def sdk_disabled(arg: bool | None, environ: Mapping[str, str] | None = None) -> bool:
    """``disabled`` argument, else OTEL_SDK_DISABLED (only ``true`` disables)."""
    if arg is not None:
        return arg
    env = os.environ if environ is None else environ
    return bool(parse_bool(_get(env, "OTEL_SDK_DISABLED")))


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
                          or _get(environ, "OTEL_EXPORTER_OTLP_INSECURE"))
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
        raw = _get(env, _signal_var(signal, "PROTOCOL")) or _get(env, "OTEL_EXPORTER_OTLP_PROTOCOL")
        proto = normalize_protocol(raw, strict=False) if raw else DEFAULT_PROTOCOL

    per_signal = _get(env, _signal_var(signal, "ENDPOINT"))
    general = _get(env, "OTEL_EXPORTER_OTLP_ENDPOINT")
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
            raw_h = _get(env, "OTEL_EXPORTER_OTLP_HEADERS")
        hdrs = parse_headers(raw_h)
    if proto == GRPC:  # gRPC metadata keys must be lower case
        hdrs = {k.lower(): v for k, v in hdrs.items()}

    if timeout is not None:
        secs = float(timeout)
    else:
        raw_t = _get(env, _signal_var(signal, "TIMEOUT")) or _get(env, "OTEL_EXPORTER_OTLP_TIMEOUT")
        secs = _millis(raw_t, "OTEL_EXPORTER_OTLP_TIMEOUT") / 1000.0 if raw_t else DEFAULT_TIMEOUT_S
    if secs <= 0:
        secs = DEFAULT_TIMEOUT_S
    return OtlpTarget(signal, proto, url, hdrs, secs)


def otlp_endpoint_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether any OTEL_EXPORTER_OTLP_*ENDPOINT variable names a destination."""
    env = os.environ if environ is None else environ
    names = ["OTEL_EXPORTER_OTLP_ENDPOINT"] + [_signal_var(s, "ENDPOINT") for s in SIGNALS]
    return any(_get(env, n) for n in names)


def _millis(raw: str, name: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        logger.warning("adk_task_telemetry: %s=%r is not a number of milliseconds", name, raw)
        return DEFAULT_TIMEOUT_S * 1000.0
    return value


def metric_export_interval_millis(arg: float | None,
                                  environ: Mapping[str, str] | None = None) -> float:
    """Argument, else OTEL_METRIC_EXPORT_INTERVAL, else the spec's 60 000 ms."""
    if arg is not None and arg > 0:
        return float(arg)
    env = os.environ if environ is None else environ
    raw = _get(env, "OTEL_METRIC_EXPORT_INTERVAL")
    value = _millis(raw, "OTEL_METRIC_EXPORT_INTERVAL") if raw else 60_000.0
    return value if value > 0 else 60_000.0


def exemplar_filter_name(arg: str | None, environ: Mapping[str, str] | None = None) -> str:
    """Argument, else OTEL_METRICS_EXEMPLAR_FILTER, else ``trace_based`` (the spec's)."""
    if arg is not None:
        name = arg.strip().lower()
        if name not in _EXEMPLAR_FILTERS:
            raise ValueError(f"exemplar_filter must be one of {_EXEMPLAR_FILTERS}, not {arg!r}")
        return name
    env = os.environ if environ is None else environ
    raw = (_get(env, "OTEL_METRICS_EXEMPLAR_FILTER") or "trace_based").lower()
    if raw not in _EXEMPLAR_FILTERS:
        logger.warning("adk_task_telemetry: unknown OTEL_METRICS_EXEMPLAR_FILTER %r; "
                       "using trace_based", raw)
        return "trace_based"
    return raw


def signal_exporters(signal: str, environ: Mapping[str, str] | None = None) -> set[str] | None:
    """OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER / OTEL_LOGS_EXPORTER as a set
    (``otlp``, ``console``, ``none``), or None when the variable is not set."""
    env = os.environ if environ is None else environ
    raw = _get(env, f"OTEL_{signal.upper()}_EXPORTER")
    if raw is None:
        return None
    names = {n.strip().lower() for n in raw.split(",") if n.strip()}
    unknown = names - {"otlp", "console", "none"}
    if unknown:
        logger.warning("adk_task_telemetry: OTEL_%s_EXPORTER: %s not supported here "
                       "(otlp, console, none)", signal.upper(), ", ".join(sorted(unknown)))
    return names
