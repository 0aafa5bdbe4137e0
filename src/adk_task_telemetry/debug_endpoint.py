"""The live view: an opt-in HTTP debug endpoint listing every tool task running now.

``GET /debug/tool_tasks`` answers one JSON document (``SCHEMA``) of this process: per
task still running (in its run or orphaned) its run, session, app, agent, tool, call
id, kind, age, state (``running``, ``cancel_requested``, ``orphaned``), its trace id
(and span id once its span is made: a stuck task's is), where it waits now (the
``code.stacktrace`` form of the orphan report, with ``stuck_at``, the innermost frame
of the user's code), and its captured arguments only where ``capture_arguments`` is on.
``adk-task-telemetry tasks`` reads it (cli/tasks.py), as Go's goroutine dump is read.

Security: off unless a port is configured (``debug_port=`` or
``ADK_TASK_TELEMETRY_DEBUG_PORT``); it listens on ``127.0.0.1`` unless told otherwise
(``debug_host=`` / ``ADK_TASK_TELEMETRY_DEBUG_HOST``); it serves GET only, nothing
that changes state. A stack shows code lines, never local values.

Several processes (``adk api_server`` under several uvicorn workers): give a range,
``8790-8799``; each process takes the first free port of it, and the CLI asks every
port of the range. ``0`` takes any free port (logged at INFO, and ``address()``).

The server runs on a daemon thread of its own and reads the records from there (each
list copied in one step; stacks only read): a loop blocked by a synchronous tool can
still be looked at. One endpoint per process, whatever the plugins.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry import trace

from . import semconv as sc
from .engine import stuck_sweep as stuck
from .signals.stacks import innermost_user_frame

logger = logging.getLogger(sc.LOGGER_NAME)

PATH = "/debug/tool_tasks"
SCHEMA = "adk-task-telemetry/tasks/1"
DEFAULT_HOST = "127.0.0.1"


class DebugPortTaken(OSError):
    """No port of the configured ones could be bound (another process holds it)."""


_server: ThreadingHTTPServer | None = None
_lock = threading.Lock()


def parse_ports(spec: str) -> list[int]:
    """``8790``, ``0`` or ``8790-8799`` -> the ports to try, in order."""
    spec = spec.strip()
    lo, sep, hi = spec.partition("-")
    try:
        first = int(lo)
        last = int(hi) if sep else first
    except ValueError:
        raise ValueError(f"debug port {spec!r} is not a port, 0 or a range like 8790-8799"
                         ) from None
    if not (0 <= first <= last <= 65535) or (first == 0 and last != 0):
        raise ValueError(f"debug port {spec!r} is not a port, 0 or a range like 8790-8799")
    return list(range(first, last + 1))


def serve(ports: str, host: str = DEFAULT_HOST) -> tuple[str, int]:
    """Starts the process's endpoint (once; later calls return its address). Raises
    ``DebugPortTaken`` when every port given is taken, ValueError for a bad spec."""
    global _server
    with _lock:
        if _server is not None:
            return address() or (host, 0)
        tried = parse_ports(ports)
        for port in tried:
            try:
                server = ThreadingHTTPServer((host, port), _Handler)
            except OSError:
                continue
            server.daemon_threads = True
            _server = server
            threading.Thread(target=server.serve_forever, name="adk-task-telemetry-debug",
                             daemon=True).start()
            bound = server.server_address
            logger.info("adk_task_telemetry: tool-task live view on http://%s:%d%s",
                        bound[0], bound[1], PATH)
            return str(bound[0]), int(bound[1])
        raise DebugPortTaken(
            f"the debug endpoint could not listen on {host}:{ports}: "
            f"{'every port of the range is' if len(tried) > 1 else 'the port is'} taken "
            f"(another process, or another worker: give a range such as "
            f"{tried[0]}-{tried[0] + 9} in ADK_TASK_TELEMETRY_DEBUG_PORT)")


def address() -> tuple[str, int] | None:
    """Where the endpoint listens, if it does."""
    server = _server
    if server is None:
        return None
    host, port = server.server_address[:2]
    return str(host), int(port)


def stop() -> None:
    """Stops the endpoint (tests; a process that wants its port back)."""
    global _server
    with _lock:
        server, _server = _server, None
    if server is not None:
        server.shutdown()
        server.server_close()


def snapshot() -> dict[str, Any]:
    """The document the endpoint serves: every tool task running now in this process."""
    now = time.time_ns()
    tasks: list[dict[str, Any]] = []
    for tracker, w in stuck.watched():
        for record in tracker.open_records():
            try:
                tasks.append(_task(record, now, w.capture))
            except Exception:  # a record that ended while read: it is not running
                continue
    tasks.sort(key=lambda t: -t["age_s"])
    return {"schema": SCHEMA, "pid": os.getpid(), "unix_nano": now, "tasks": tasks}


def _task(record: Any, now: int, capture: bool) -> dict[str, Any]:
    run = record.run
    span = record.span
    ctx = (span.get_span_context() if span is not None
           else trace.get_current_span(record.parent).get_span_context())
    stack = stuck.stack_of(record)
    frame = innermost_user_frame(stack) if stack else None
    out: dict[str, Any] = {
        "invocation_id": run.invocation_id, "session_id": run.conversation_id,
        "app": run.app_name, "agent": record.identity.agent_name, "tool": record.tool_name,
        "call_id": record.call_id, "kind": record.kind,
        "age_s": round((now - record.start_ns) / 1e9, 6), "state": stuck.state_of(record),
        "trace_id": format(ctx.trace_id, "032x") if ctx.is_valid else None,
        # The task's own span id once its span is made (a stuck task's is); else None.
        "span_id": format(ctx.span_id, "016x") if span is not None and ctx.is_valid
        else None,
        "stuck_at": None if frame is None else {
            "file": frame.file, "line": frame.line, "function": frame.func,
            "code": frame.code},
        "stacktrace": stack,
    }
    if capture and record.extra:
        out["captured"] = {k: v for k, v in record.extra.items()
                           if k in (sc.GEN_AI_TOOL_CALL_ARGUMENTS, sc.GEN_AI_TOOL_CALL_RESULT)}
    return out


class _Handler(BaseHTTPRequestHandler):
    server_version = "adk-task-telemetry"

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != PATH:
            self._send(404, {"error": f"not found; the live view is {PATH}"})
            return
        try:
            self._send(200, snapshot())
        except Exception as e:  # never let the view take anything down
            self._send(500, {"error": type(e).__name__})

    def _send(self, status: int, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return  # no access log on stderr
