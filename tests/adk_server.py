"""ADK's own FastAPI server (``get_fast_api_app`` under uvicorn), as ``adk api_server``
runs it, in a subprocess of its own; and the clients the tests drive it with.

``python -m tests.adk_server PORT AGENTS_DIR`` serves the agents folder on
127.0.0.1:PORT. ADK installs its providers while building the app, before any agent
module is imported; the agent's agent.py then calls configure_telemetry(). One
route is added for the tests: ``GET /_test/state`` returns the spans the server
ended (recorded by a span processor on ADK's own provider) and each plugin's state,
so that a test can compare what the server produced with what a receiver got.

With ``ATT_TRACEPARENT=1`` in its environment the server honours a caller's W3C
``traceparent`` (the run becomes a child of the caller's span) on every FastAPI, as
a server under ``opentelemetry-instrument`` with the FastAPI instrumentation does:
ADK's own code reads only Agent Engine's header. FastAPI 0.165 (resolved with ADK
2.13) does it by itself, under a server span of its own (``POST /run``); 0.141
(ADK 2.12, 1.39) does not.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
AGENTS = HERE / "agents"
APP = "telemetry_app"
USER = "tester"


class Server:
    """One ADK server process on 127.0.0.1."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        from .otlp_receivers import free_port

        agents = tmp / "agents"  # a copy: ADK may write local state next to the agents
        shutil.copytree(AGENTS, agents, ignore=shutil.ignore_patterns("__pycache__"))
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ATT_"))}
        full_env.update(env)
        full_env["PYTHONPATH"] = os.pathsep.join(
            [str(HERE.parent), *filter(None, [os.environ.get("PYTHONPATH")])])
        self._log_path = tmp / f"server-{self.port}.log"
        self._log = self._log_path.open("w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.adk_server", str(self.port), str(agents)],
            stdout=self._log, stderr=subprocess.STDOUT, text=True, env=full_env, cwd=str(tmp))
        self.client = httpx.Client(base_url=self.base, timeout=30)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited (rc={self.proc.returncode}):\n{self.log()}")
            try:
                if self.client.get("/_test/state").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server did not start:\n{self.log()}")

    def log(self) -> str:
        if self._log.closed:
            return self._log_path.read_text()
        self._log.flush()
        self._log.seek(0)
        return self._log.read()

    def session(self) -> str:
        r = self.client.post(f"/apps/{APP}/users/{USER}/sessions", json={})
        r.raise_for_status()
        return str(r.json()["id"])

    def stored_events(self, session_id: str) -> list[dict[str, Any]]:
        """The session's events as ADK's server stored them (its REST API)."""
        r = self.client.get(f"/apps/{APP}/users/{USER}/sessions/{session_id}")
        r.raise_for_status()
        events: list[dict[str, Any]] = r.json()["events"]
        return events

    def run(self, text: str) -> list[dict[str, Any]]:
        r = self.client.post("/run", json=_run_request(self.session(), text))
        r.raise_for_status()
        events: list[dict[str, Any]] = r.json()
        return events

    def state(self, gc: bool = False, spans: bool = True) -> dict[str, Any]:
        params = {"gc": "true"} if gc else {}
        if not spans:
            params["spans"] = "false"
        r = self.client.get("/_test/state", params=params)
        r.raise_for_status()
        result: dict[str, Any] = r.json()
        return result

    def wait_state(self, predicate: Any, timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            if predicate(state) or time.monotonic() > deadline:
                return state
            time.sleep(0.05)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM, as ``docker stop`` or Kubernetes send it; returns the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.client.close()

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


def _run_request(session_id: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"app_name": APP, "user_id": USER, "session_id": session_id,
            "new_message": {"role": "user", "parts": [{"text": text}]}, **extra}


def sse_until_function_call(server: Server, text: str, session_id: str | None = None,
                            headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """POST /run_sse, read events until the model's function call arrives, then
    leave: the connection is closed while the tool runs."""
    events: list[dict[str, Any]] = []
    body = _run_request(session_id or server.session(), text, streaming=False)
    with httpx.Client(base_url=server.base, timeout=30) as client, \
            client.stream("POST", "/run_sse", json=body, headers=headers) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[len("data:"):])
            events.append(event)
            if _function_calls(event):
                break
    return events


def live_seed_and_leave(server: Server, tag: str, timeout: float = 20.0) -> list[dict[str, Any]]:
    """/run_live: says ``seed <tag>``, reads events until both streaming calls were
    dispatched (their pending responses arrived), then goes away."""
    from websockets.sync.client import connect

    sid = server.session()
    url = (f"ws://127.0.0.1:{server.port}/run_live?app_name={APP}&user_id={USER}"
           f"&session_id={sid}&modalities=TEXT")
    want = {f"{tag}-goog", f"{tag}-msft"}
    seen: set[str] = set()
    events: list[dict[str, Any]] = []
    with connect(url, open_timeout=timeout) as ws:
        ws.send(json.dumps({"content": {"role": "user", "parts": [{"text": f"seed {tag}"}]}}))
        deadline = time.monotonic() + timeout
        while not want <= seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no responses for {want - seen}; got {events}")
            event = json.loads(ws.recv(timeout=left))
            events.append(event)
            seen |= {p["functionResponse"].get("id") for p in _parts(event)
                     if "functionResponse" in p}
    return events


def _parts(event: dict[str, Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = (event.get("content") or {}).get("parts") or []
    return parts


def _function_calls(event: dict[str, Any]) -> list[dict[str, Any]]:
    return [p["functionCall"] for p in _parts(event) if "functionCall" in p]


# --- the server process -----------------------------------------------------------


def _recorder() -> Any:
    """A span processor on ADK's provider: the ids of every span the server ended."""
    from opentelemetry.sdk.trace import SpanProcessor

    class Recorder(SpanProcessor):
        def __init__(self) -> None:
            self.ended: list[dict[str, str]] = []
            self._lock = threading.Lock()

        def on_end(self, span: Any) -> None:
            with self._lock:
                parent = f"{span.parent.span_id:016x}" if span.parent else ""
                self.ended.append({"span_id": f"{span.context.span_id:016x}",
                                   "trace_id": f"{span.context.trace_id:032x}",
                                   "parent_id": parent, "name": span.name,
                                   "outcome": str((span.attributes or {}).get(
                                       "adk.tool_task.outcome", ""))})

    return Recorder()


def _traceparent(app: Any) -> Any:
    """ASGI middleware: the caller's W3C trace context (``traceparent``) is current
    while the request is served, so ADK's run span is a child of the caller's span.
    Plain ASGI (no task of its own), so disconnects reach ADK as without it."""
    from opentelemetry import context, propagate

    async def middleware(scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await app(scope, receive, send)
            return
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        token = context.attach(propagate.extract(carrier))
        try:
            await app(scope, receive, send)
        finally:
            context.detach(token)

    return middleware


def _plugins() -> Iterator[Any]:
    from adk_task_telemetry import TaskTelemetryPlugin

    for module in list(sys.modules.values()):
        plugin = getattr(module, "PLUGIN", None)
        if isinstance(plugin, TaskTelemetryPlugin):
            yield plugin


def _serve(port: int, agents_dir: str) -> None:
    import logging

    import uvicorn
    from benchmarks.common import rss_bytes
    from google.adk.cli.fast_api import get_fast_api_app
    from google.adk.cli.utils import logs
    from opentelemetry import trace

    logs.setup_adk_logger(logging.INFO)  # what `adk api_server` does (--log_level INFO)

    app = get_fast_api_app(agents_dir=agents_dir, web=False, host="127.0.0.1", port=port,
                           session_service_uri="memory://", artifact_service_uri="memory://",
                           use_local_storage=False)
    recorder = _recorder()
    trace.get_tracer_provider().add_span_processor(recorder)  # type: ignore[attr-defined]

    @app.get("/_test/state")
    def state(gc: bool = False, spans: bool = True) -> dict[str, Any]:
        if gc:  # what is left once the garbage collector has run (ADK 1.x backstop)
            import gc as gc_module

            gc_module.collect()
        plugins = [asdict(p.state()) for p in _plugins()]
        actions = [m.TELEMETRY.actions for m in list(sys.modules.values())
                   if hasattr(m, "TELEMETRY") and hasattr(m, "PLUGIN")]
        served = [cid for m in list(sys.modules.values()) if hasattr(m, "SERVED")
                  and hasattr(m, "PLUGIN") for cid in m.SERVED]
        export = [{k: asdict(v) for k, v in m.TELEMETRY.export_status().items()}
                  for m in list(sys.modules.values()) if hasattr(m, "PLUGIN")
                  and hasattr(getattr(m, "TELEMETRY", None), "export_status")]
        return {"spans": list(recorder.ended) if spans else [], "plugins": plugins,
                "actions": actions,
                "served": served, "export": export, "rss": rss_bytes(),
                "open": sum(p["open"] for p in plugins), "runs": sum(p["runs"] for p in plugins),
                "orphans": sum(p["orphans"] for p in plugins)}

    served = _traceparent(app) if os.environ.get("ATT_TRACEPARENT") == "1" else app
    # What `adk api_server` does: uvicorn.Server(...).run() in the main thread.
    uvicorn.Server(uvicorn.Config(served, host="127.0.0.1", port=port,
                                  log_level="warning")).run()


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2])
