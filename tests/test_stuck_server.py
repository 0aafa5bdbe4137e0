"""The live view under ADK's own server, several server processes on one port range.

Two ADK servers (``get_fast_api_app`` under uvicorn, as ``adk api_server`` runs it; two
processes, as uvicorn's workers are) get the same ``ADK_TASK_TELEMETRY_DEBUG_PORT``
range: each plugin's endpoint takes the first free port of it, and
``adk-task-telemetry tasks --port <range>`` lists the tasks of both. A tool call held
open on one of them is listed under that server's pid, with the line it waits on.
Agents: tests/agents/telemetry_app (its ``slow_search`` waits 60 s).
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adk_task_telemetry.cli.dispatch import main as cli_main

from .adk_server import Server, _run_request
from .otlp_receivers import free_port


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[list[Server], str]]:
    first = free_port()
    ports = f"{first}-{first + 20}"
    env = {"ADK_TASK_TELEMETRY_DEBUG_PORT": ports, "ATT_CONFIGURE": "none"}  # no export
    started: list[Server] = []
    try:
        for i in range(2):
            started.append(Server(tmp_path / f"s{i}", env))
        yield started, ports
    finally:
        for s in started:
            s.stop()


def _tasks(ports: str) -> dict[str, Any]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = cli_main(["tasks", "--port", ports, "--json"])
    assert code == 0
    return dict(json.loads(buf.getvalue()))


def test_the_live_view_of_every_server_process(servers: tuple[list[Server], str]) -> None:
    (a, b), ports = servers
    tag = uuid.uuid4().hex[:8]
    # ADK's server imports an agent at its first request: a process's plugin, and so
    # its endpoint, exists from then on. One run on b that ends.
    r = b.client.post("/run", json=_run_request(b.session(), f"parallel {tag}"))
    r.raise_for_status()
    sid = a.session()
    stop = threading.Event()

    def hold() -> None:  # a client that waits for the slow call's answer
        body = _run_request(sid, f"slow {tag}", streaming=False)
        with contextlib.suppress(httpx.HTTPError), \
                httpx.Client(base_url=a.base, timeout=120) as client, \
                client.stream("POST", "/run_sse", json=body) as response:
            for _ in response.iter_lines():
                if stop.is_set():
                    return

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        deadline = time.monotonic() + 60
        while True:
            doc = _tasks(ports)
            by_pid = {p["pid"]: p for p in doc["processes"]}
            mine = [t for t in by_pid.get(a.proc.pid, {}).get("tasks", [])
                    if t["call_id"] == f"{tag}-slow"]
            if mine or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert set(by_pid) == {a.proc.pid, b.proc.pid}  # one endpoint per process
        assert len({p["url"] for p in doc["processes"]}) == 2
        (task,) = mine
        assert task["tool"] == "slow_search" and task["state"] == "running"
        assert task["stuck_at"]["function"] == "slow_search"
        assert task["stuck_at"]["code"] == "await asyncio.sleep(60)"
        assert task["stuck_at"]["file"].endswith("agent.py")
        assert by_pid[b.proc.pid]["tasks"] == []
    finally:
        stop.set()
