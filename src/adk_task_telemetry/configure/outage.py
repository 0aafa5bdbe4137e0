"""Why an export failed, in a few words, and whether trying again can help.

The OTLP exporters log every failed batch (a page of text, per batch). While
configure_telemetry()'s setup is in force their messages are kept, per thread,
for the one warning of ours that names the cause.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import urllib.parse

#: Loggers of the OTLP exporters: they log every failed batch.
EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http._log_exporter",
)
# Exporter messages that follow our own stopping of an export, not its cause.
_NOT_A_CAUSE = ("Shutdown in progress", "Exporter already shutdown")
# gRPC codes after which we keep the batch (the endpoint may come back): the SDK
# exporter's own retryable codes (CANCELLED, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
# ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS), and UNKNOWN and INTERNAL, which the SDK
# does not retry but a collector or proxy going down answers; any other code means this
# batch will never be accepted.
_GRPC_RETRYABLE = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED",
                   "CANCELLED", "OUT_OF_RANGE", "DATA_LOSS", "UNKNOWN", "INTERNAL"}


class QuietExporterLogs(logging.Filter):
    """Keeps the exporters' per-batch failure messages for one warning of ours.

    Kept per thread: an export runs in its signal's sender thread, so the message a
    failed export left is the cause of that signal's failure, not of another's.
    """

    def __init__(self) -> None:
        super().__init__()
        self.first: dict[int, str] = {}  # thread -> first message since its last result

    def filter(self, record: logging.LogRecord) -> bool:
        key = threading.get_ident()
        if key not in self.first and not str(record.msg).startswith(_NOT_A_CAUSE):
            if len(self.first) > 64:  # threads that never took theirs
                self.first.clear()
            try:
                self.first[key] = record.getMessage()
            except Exception:  # a malformed record must not break logging
                self.first[key] = str(record.msg)
        return False

    def take(self) -> str:
        return self.first.pop(threading.get_ident(), "")

    def install(self) -> None:
        for name in EXPORTER_LOGGERS:
            logging.getLogger(name).addFilter(self)

    def uninstall(self) -> None:
        for name in EXPORTER_LOGGERS:
            logging.getLogger(name).removeFilter(self)


def rejected(text: str) -> bool:
    """The endpoint answered, and said no to this batch for good (HTTP 4xx but 408 and
    429, a gRPC code not in ``_GRPC_RETRYABLE``): keeping it would block the queue."""
    m = re.search(r"code: (\d{3})", text)
    if m:
        code = int(m.group(1))
        return 400 <= code < 500 and code not in (408, 429)
    g = re.search(r"StatusCode\.([A-Z_]+)", text)
    return g is not None and g.group(1) not in _GRPC_RETRYABLE


def probe(where: str) -> str | None:
    """Why an endpoint cannot be reached, from one TCP connect (first failure only)."""
    url = urllib.parse.urlparse(where.split()[0])
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
        with socket.create_connection((url.hostname or "localhost", port), timeout=0.3):
            return None
    except ConnectionRefusedError:
        return "connection refused"
    except socket.gaierror:
        return "the host name does not resolve"
    except (OSError, ValueError):
        return None


def cause(text: str, timeout: float, where: str) -> str:
    """A short, complete cause from an exporter's message (which may be a page long)."""
    if not text or "max retries or shutdown" in text:
        # The HTTP exporter gives up before logging why: ask the socket.
        return probe(where) or f"no successful answer within {timeout:g} s"
    low = text.lower()
    if "connection refused" in low or "connectionrefused" in low:
        return "connection refused"
    if "name or service not known" in low or "nodename nor servname" in low:
        return "the host name does not resolve"
    if "deadline_exceeded" in low or "timed out" in low or "timeout" in low:
        return f"no answer within {timeout:g} s"
    m = re.search(r"code: (\d{3}), reason: ([^,.]{1,60})", text)
    if m:
        return f"HTTP {m.group(1)} {m.group(2).strip()}"
    m = re.search(r"StatusCode\.([A-Z_]+)", text)
    if m:
        # Older gRPC exporters say no more than UNAVAILABLE: the socket may say more.
        return (probe(where) or m.group(1)) if m.group(1) == "UNAVAILABLE" else m.group(1)
    m = re.search(r"Transient error (.{1,60}?) encountered", text)
    if m:
        return m.group(1)
    first = text.split(". ")[0].strip()
    if len(first) > 160:
        first = first[:160].rsplit(" ", 1)[0] + " …"
    return first or "export failed"
