"""``demo --otlp``: the endpoint checked, the protocol chosen, and the plugin put on
the providers ``configure_telemetry()`` builds, teed into memory so that what is drawn
is what is sent. The OTLP exporters are base dependencies of the package: a failure
to set them up is a broken install, and is said so in one line.
"""

from __future__ import annotations

import importlib
import logging
import sys
import urllib.parse

from .. import semconv as sc
from .harness import Tee
from .results import PROG, UsageError

_SIGNAL_PATHS = ("/v1/traces", "/v1/metrics", "/v1/logs")


def check_endpoint(value: str) -> str:
    """A usable --otlp ENDPOINT (``http(s)://host[:port][/prefix]`` or ``host:port``),
    or a UsageError saying what is wrong with it: a typo must not turn into an
    export that silently fails for the whole demo."""
    endpoint = value.strip()
    if not endpoint:
        raise UsageError("--otlp: the endpoint is empty (e.g. http://localhost:4317)")
    if any(ch.isspace() for ch in endpoint):
        raise UsageError(f"--otlp: {value!r} contains whitespace")
    try:
        parts = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"//{endpoint}")
        port = parts.port
    except ValueError as e:
        raise UsageError(f"--otlp: {value!r} is not a URL ({e})") from None
    if "://" in endpoint and parts.scheme not in ("http", "https"):
        raise UsageError(f"--otlp: {value!r}: the scheme must be http or https")
    if not parts.hostname:
        raise UsageError(f"--otlp: {value!r} names no host (e.g. http://localhost:4317)")
    if port == 0:
        raise UsageError(f"--otlp: {value!r}: port 0 is not a port")
    if parts.path.rstrip("/").endswith(_SIGNAL_PATHS):
        raise UsageError(f"--otlp: {value!r} is one signal's URL; give the collector's "
                         "base URL (the /v1/... paths are added)")
    return endpoint


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())[:300]


def otlp_protocol(endpoint: str, asked: str | None) -> str | None:
    """The protocol for --otlp: as asked, else as OTEL_* says, else gRPC for the
    conventional OTLP/gRPC port 4317 (OTLP's default, HTTP, otherwise)."""
    from ..configure.settings import protocol_configured

    if asked or protocol_configured("traces"):
        return asked
    try:
        port = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"//{endpoint}").port
    except ValueError:
        return None
    return "grpc" if port == 4317 else None


class Export:
    """--otlp: the plugin on providers from configure_telemetry(), teed into memory."""

    def __init__(self, endpoint: str, protocol: str | None) -> None:
        try:
            configure = importlib.import_module(__name__.split(".")[0]).configure_telemetry
        except Exception as e:  # a broken install: say so in one line
            raise UsageError(
                "--otlp needs adk_task_telemetry.configure_telemetry and the OTLP exporters "
                f"adk-task-telemetry depends on (reinstall it): {_one_line(e)}") from None
        from ..plugin import TaskTelemetryPlugin

        self.endpoint = endpoint
        try:
            self.handle = configure("adk-task-telemetry-demo", endpoint=endpoint,
                                    protocol=protocol)
        except ValueError as e:  # a malformed endpoint or protocol
            raise UsageError(f"--otlp: {' '.join(str(e).split())}") from None
        except ImportError as e:  # an exporter package missing or unimportable
            raise UsageError(f"--otlp: {' '.join(str(e).split())}") from None
        except Exception as e:  # an exporter that cannot even be built: a broken install
            raise UsageError(f"--otlp: cannot set up OTLP export to {endpoint} "
                             f"({_one_line(e)})") from None
        # Export problems (collector down) are worth a line on stderr.
        export_log = logging.getLogger(sc.EXPORT_LOGGER_NAME)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(f"{PROG}: %(message)s"))
        handler.setLevel(logging.WARNING)
        export_log.addHandler(handler)
        # One plugin, on the exporting providers, its spans teed into memory: what
        # is drawn is what is sent, and each orphan is logged once.
        from opentelemetry import trace

        tracer_provider = self.handle.tracer_provider or trace.get_tracer_provider()
        add = getattr(tracer_provider, "add_span_processor", None)
        if not callable(add):
            raise UsageError("--otlp: the installed tracer provider is not the OpenTelemetry "
                             "SDK's; cannot draw what it exports")
        self.tee = Tee()
        add(self.tee)
        self.plugin = TaskTelemetryPlugin(
            tracer_provider=tracer_provider,
            meter_provider=getattr(self.handle, "meter_provider", None))

    def close(self) -> bool:
        """Flushes and shuts the exporters down; True when everything was sent."""
        ok = bool(self.handle.force_flush())
        self.handle.shutdown()
        return ok
