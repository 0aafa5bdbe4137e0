"""A collector restart under load: ADK's real server, concurrent real clients, a real
OTLP receiver stopped mid-load and started again on the same port.

    python -m tests.soak [--seconds 60] [--outage 10] [--clients 64] [--baseline]
        [--buffer-spans N] [--protocol http/protobuf|grpc]

The server is ``get_fast_api_app`` under uvicorn (tests/adk_server.py), its agent.py
calls configure_telemetry(endpoint=receiver) with the SDK's batch defaults. Each
client loops over: ``/run`` with three parallel tools, ``/run`` where one of two
parallel tools fails, ``/run_sse`` clients that leave mid-tool (a slow tool that is
cancelled, a stubborn one that finishes anyway). At a third of the time the receiver
stops for ``--outage`` seconds. Expected ``tool_task`` spans come
from the tools' own record (``SERVED``), every ended span from a span processor on
ADK's provider; the plugin's count of what it dropped from ``export_status()``.
With ``--baseline`` the same load runs first without an outage, for the latency
ratio. Prints JSON (make soak).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .adk_server import APP, USER, Server, _run_request, sse_until_function_call
from .otlp_receivers import GrpcReceiver, HttpReceiver, Received, attrs, restarted

KINDS = (("parallel", 0.6), ("fail", 0.15), ("slow_sse", 0.1), ("stubborn_sse", 0.1),
         ("linger_live", 0.05))


@dataclass
class Figures:
    """What one soak run measured."""

    requests: dict[str, int] = field(default_factory=dict)
    client_errors: list[str] = field(default_factory=list)
    outage_s: float = 0.0
    tool_tasks_expected: int = 0
    tool_tasks_received: int = 0
    tool_tasks_started_by_outage_end: int = 0
    tool_tasks_lost_started_by_outage_end: int = 0
    orphans_reported: int = 0
    orphan_events_received: int = 0
    spans_ended: int = 0
    spans_received: int = 0
    spans_duplicated: int = 0
    spans_lost: int = 0
    #: Spans that reached the receiver only in requests whose exporter had timed out
    #: before the answer: it counted them failed, so it counts them dropped if its
    #: buffer overflowed before a retry (at-least-once delivery's one ambiguity).
    spans_unconfirmed: int = 0
    dropped_reported: dict[str, dict[str, int]] = field(default_factory=dict)
    run_latency_ms: dict[str, float] = field(default_factory=dict)
    rss_mb: dict[str, float] = field(default_factory=dict)
    recovery_log: list[str] = field(default_factory=list)
    timeline: list[str] = field(default_factory=list)  # when the receiver stopped, restarted


class Load:
    """``clients`` threads of real HTTP clients until ``stop`` is set."""

    def __init__(self, server: Server, clients: int, seed: int = 1) -> None:
        self.server, self.clients = server, clients
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.errors: list[str] = []
        self.latencies: list[tuple[float, float]] = []  # (start time, seconds), /run parallel
        self._rng = random.Random(seed)
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                         for i in range(clients)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def join(self) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(120)

    def _pick(self) -> str:
        with self.lock:
            x = self._rng.random()
        for kind, weight in KINDS:
            if x < weight:
                return kind
            x -= weight
        return KINDS[0][0]

    def _client(self, i: int) -> None:
        # No keep-alive: a connection uvicorn closes while idle would reset the next request.
        with httpx.Client(base_url=self.server.base, timeout=60,
                          limits=httpx.Limits(max_keepalive_connections=0)) as client:
            while not self.stop.is_set():
                kind = self._pick()
                tag = f"k{i}x{uuid.uuid4().hex[:8]}"
                t0 = time.monotonic()
                try:
                    self._one(client, kind, tag)
                except Exception as exc:
                    with self.lock:
                        self.errors.append(f"{kind}: {type(exc).__name__}: {exc}"[:200])
                    continue
                with self.lock:
                    self.counts[kind] = self.counts.get(kind, 0) + 1
                    if kind == "parallel":
                        self.latencies.append((t0, time.monotonic() - t0))

    def _one(self, client: httpx.Client, kind: str, tag: str) -> None:
        r = client.post(f"/apps/{APP}/users/{USER}/sessions", json={})
        r.raise_for_status()
        sid = str(r.json()["id"])
        if kind in ("parallel", "fail"):
            r = client.post("/run", json=_run_request(sid, f"{kind} {tag}"))
            if kind == "parallel":
                r.raise_for_status()
            # fail: the run errors (a 500 on some versions); its tasks are still ours
        elif kind == "slow_sse":
            sse_until_function_call(self.server, f"slow {tag}", session_id=sid)
        elif kind == "stubborn_sse":
            sse_until_function_call(self.server, f"stubborn {tag}", session_id=sid)
        else:
            live_and_leave(self.server, sid, tag)


def live_and_leave(server: Server, sid: str, tag: str, timeout: float = 30.0,
                    headers: dict[str, str] | None = None) -> None:
    """/run_live: ``linger <tag>``, waits for the tool's pending response, leaves."""
    from websockets.sync.client import connect

    url = (f"ws://127.0.0.1:{server.port}/run_live?app_name={APP}&user_id={USER}"
           f"&session_id={sid}&modalities=TEXT")
    with connect(url, open_timeout=timeout, additional_headers=headers) as ws:
        ws.send(json.dumps({"content": {"role": "user", "parts": [{"text": f"linger {tag}"}]}}))
        deadline = time.monotonic() + timeout
        while True:
            event = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            parts = (event.get("content") or {}).get("parts") or []
            if any(p.get("functionResponse", {}).get("id") == f"{tag}-linger" for p in parts):
                return


def _tool_spans(rx: Received) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for span in rx.tool_spans():
        out[str(attrs(span.attributes)["gen_ai.tool.call.id"])] = span
    return out


def _settle(server: Server, timeout: float = 60.0) -> dict[str, Any]:
    """Waits until no run and no tool task is open in the server (orphans ended)."""
    server.wait_state(lambda s: s["open"] == 0 and s["runs"] == 0, timeout=timeout)
    return server.state()


def run(tmp: Path, *, seconds: float, outage: float, clients: int,
        protocol: str = "http/protobuf", buffer_spans: int | None = None,
        env: dict[str, str] | None = None, wait_delivery: float = 90.0) -> Figures:
    """One soak run; ``outage`` 0 runs the same load without stopping the receiver."""
    receiver: GrpcReceiver | HttpReceiver = (
        GrpcReceiver() if protocol == "grpc" else HttpReceiver())
    server_env = {"ATT_CONFIGURE": "args", "ATT_ENDPOINT": receiver.endpoint,
                  "ATT_PROTOCOL": protocol, **(env or {})}
    if buffer_spans is not None:
        server_env["ADK_TASK_TELEMETRY_BUFFER_SPANS"] = str(buffer_spans)
    server = Server(tmp, server_env)
    fig = Figures()
    rss: list[int] = []
    try:
        server.run(f"parallel warmup{uuid.uuid4().hex[:6]}")  # loads agent.py
        # Spans that ended before agent.py's configure_telemetry() are not ours to export:
        # of those ended by now, the ones never sent once nothing is buffered. Not all of
        # them: the load's first seconds may drop the warm-up's last spans (counted), and
        # not those of a later state: each state request ends spans of its own (FastAPI's
        # instrumentation) after its snapshot, sent only after the next.
        ended_by_now = {s["span_id"] for s in _settle(server)["spans"]}
        server.wait_state(lambda s: not any(v["buffered"] for e in s["export"]
                                            for v in e.values()), timeout=wait_delivery)
        received = {s.span_id.hex() for _, _, s in receiver.received.spans()}
        before = ended_by_now - received
        load = Load(server, clients)
        t_start = time.monotonic()
        load.start()
        outage_at = t_start + seconds / 3
        outage_end = float("inf")
        stopped = False
        last_rss = 0.0
        served_by_outage_end: set[str] = set()
        while time.monotonic() < t_start + seconds:
            now = time.monotonic()
            if outage and not stopped and now >= outage_at:
                receiver.stop()
                stopped = True
                outage_at, outage_end = time.monotonic(), time.monotonic() + outage
                fig.timeline.append(f"receiver stopped at {time.strftime('%H:%M:%S')}")
            if stopped and now >= outage_end:
                receiver = restarted(receiver)
                fig.timeline.append(f"receiver restarted at {time.strftime('%H:%M:%S')}")
                stopped = False
                outage = 0.0  # once
                served_by_outage_end = set(server.state(spans=False)["served"])
                fig.outage_s = round(now - outage_at, 1)
            if now - last_rss >= 1.0:
                rss.append(server.state(spans=False)["rss"])
                last_rss = now
            time.sleep(0.1)
        if stopped:  # the outage outlasted the load: end it now
            receiver = restarted(receiver)
            served_by_outage_end = set(server.state(spans=False)["served"])
            fig.outage_s = round(time.monotonic() - outage_at, 1)
        load.join()
        state = _settle(server)
        rss.append(state["rss"])
        expected = set(state["served"])
        rx = receiver.received
        # Positive signal: every expected span arrived, or what was dropped is reported.
        deadline = time.monotonic() + wait_delivery
        while time.monotonic() < deadline:
            state = server.state()
            dropped = sum(sum(v["dropped"].values()) for e in state["export"] for v in e.values())
            got = {s.span_id.hex() for _, _, s in rx.spans()}
            ended = {s["span_id"] for s in state["spans"]} - before
            if len(ended - got) <= dropped and not any(
                    v["buffered"] for e in state["export"] for v in e.values()):
                break
            time.sleep(0.5)
        fig.requests = dict(load.counts)
        fig.client_errors = load.errors[:20]
        tools = _tool_spans(rx)
        fig.tool_tasks_expected = len(expected)
        fig.tool_tasks_received = len(expected & set(tools))
        fig.tool_tasks_started_by_outage_end = len(served_by_outage_end)
        fig.tool_tasks_lost_started_by_outage_end = len(served_by_outage_end - set(tools))
        fig.orphans_reported = state["orphans"]
        fig.orphan_events_received = sum(
            1 for s in tools.values() for e in s.events if e.name == "orphaned_task")
        all_ids = [s.span_id.hex() for _, _, s in rx.spans()]
        ended = {s["span_id"] for s in state["spans"]} - before
        fig.spans_ended = len(ended)
        fig.spans_received = len(ended & set(all_ids))
        fig.spans_duplicated = len(all_ids) - len(set(all_ids))
        fig.spans_lost = len(ended - set(all_ids))
        fig.spans_unconfirmed = len((ended & set(all_ids)) - rx.answered_span_ids())
        fig.dropped_reported = {k: v["dropped"] for e in state["export"] for k, v in e.items()}
        lat = [s for _, s in load.latencies]
        if lat:
            fig.run_latency_ms = {"p50": round(statistics.median(lat) * 1e3, 1),
                                  "p99": round(_quantile(lat, 0.99) * 1e3, 1)}
        fig.rss_mb = {"max": round(max(rss) / 2**20, 1), "end": round(rss[-1] / 2**20, 1)}
        fig.recovery_log = [ln for ln in server.log().splitlines()
                            if "adk_task_telemetry:" in ln and "export" in ln][:10]
        return fig
    finally:
        server.stop()
        receiver.stop()


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--outage", type=float, default=10)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--protocol", default="http/protobuf", choices=["http/protobuf", "grpc"])
    ap.add_argument("--buffer-spans", type=int, default=None)
    ap.add_argument("--baseline", action="store_true", help="the same load without outage first")
    args = ap.parse_args(argv)
    out: dict[str, Any] = {"benchmark": "soak", "args": vars(args)}
    runs: list[tuple[str, Callable[[Path], Figures]]] = []
    if args.baseline:
        runs.append(("no_outage", lambda d: run(d, seconds=args.seconds, outage=0,
                                                clients=args.clients, protocol=args.protocol)))
    runs.append(("outage", lambda d: run(d, seconds=args.seconds, outage=args.outage,
                                         clients=args.clients, protocol=args.protocol,
                                         buffer_spans=args.buffer_spans)))
    for name, fn in runs:
        with tempfile.TemporaryDirectory() as d:
            out[name] = asdict(fn(Path(d)))
    if args.baseline:
        base, with_outage = out["no_outage"]["run_latency_ms"], out["outage"]["run_latency_ms"]
        out["latency_ratio_vs_no_outage"] = {
            k: round(with_outage[k] / base[k], 2) for k in ("p50", "p99") if base.get(k)}
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
