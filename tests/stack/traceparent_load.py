"""A traced caller in front of ADK's server, and the sampler's own gauges while it calls.

``Caller`` sends paced requests to ADK's real server (tests/adk_server.py, run with
``ATT_TRACEPARENT=1``), each with a W3C ``traceparent`` of a fresh trace whose parent
span the caller never exports: the agent's run is a child of a span the stack never
receives, as behind any traced service, gateway or frontend. The mix: ``clean`` (/run,
three parallel tools), ``error`` (/run, one of two parallel tools raises) and
``orphan`` (/run_live with the lingering streaming tool, the client leaving once it
runs: the tool outlives its run on every ADK version).

``Gauges`` reads a collector's own metrics once a second: the traces the tail sampler
holds, its heap, its RSS and the count of traces it has received.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field

import httpx

from tests.adk_server import APP, USER, Server, _run_request
from tests.soak import live_and_leave
from tests.stack.tracecheck import collector_metric

ON_MEMORY = "otelcol_processor_tail_sampling_sampling_traces_on_memory"
HEAP = "otelcol_process_runtime_heap_alloc_bytes"
RSS = "otelcol_process_memory_rss"
NEW_TRACES = "otelcol_processor_tail_sampling_new_trace_id_received"
#: (kind, share of requests)
MIX = (("clean", 0.85), ("error", 0.05), ("orphan", 0.10))


@dataclass(frozen=True)
class Sent:
    kind: str
    trace_id: str
    parent_id: str  # the caller's span: never exported


@dataclass
class Caller:
    """``clients`` threads sharing one schedule of ``rate`` requests a second."""

    server: Server
    rate: float
    clients: int = 16
    seed: int = 1
    sent: list[Sent] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random(self.seed)
        self._slot = 0

    def run(self, seconds: float) -> float:
        """Calls for ``seconds``; returns the requests completed per second."""
        self._t0 = time.monotonic()
        self._end = self._t0 + seconds
        threads = [threading.Thread(target=self._client, daemon=True)
                   for _ in range(self.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return len(self.sent) / (time.monotonic() - self._t0)

    def _next(self) -> tuple[float, str] | None:
        with self._lock:
            at = self._t0 + self._slot / self.rate
            self._slot += 1
            x = self._rng.random()
        if at >= self._end:
            return None
        for kind, share in MIX:
            if x < share:
                return at, kind
            x -= share
        return at, MIX[0][0]

    def _client(self) -> None:
        # No keep-alive: a connection uvicorn closes while idle would reset the next request.
        with httpx.Client(base_url=self.server.base, timeout=60,
                          limits=httpx.Limits(max_keepalive_connections=0)) as client:
            while (slot := self._next()) is not None:
                at, kind = slot
                time.sleep(max(0.0, at - time.monotonic()))
                sent = Sent(kind, secrets.token_hex(16), secrets.token_hex(8))
                try:
                    self._one(client, sent)
                except Exception as exc:
                    with self._lock:
                        self.errors.append(f"{kind}: {type(exc).__name__}: {exc}"[:200])
                    continue
                with self._lock:
                    self.sent.append(sent)

    def _one(self, client: httpx.Client, sent: Sent) -> None:
        headers = {"traceparent": f"00-{sent.trace_id}-{sent.parent_id}-01"}
        tag = f"tp{uuid.uuid4().hex[:10]}"
        r = client.post(f"/apps/{APP}/users/{USER}/sessions", json={})
        r.raise_for_status()
        sid = str(r.json()["id"])
        if sent.kind == "orphan":
            live_and_leave(self.server, sid, tag, headers=headers)
            return
        word = "parallel" if sent.kind == "clean" else "fail"
        r = client.post("/run", json=_run_request(sid, f"{word} {tag}"), headers=headers)
        if sent.kind == "clean":
            r.raise_for_status()
        # error: the run errors (a 500 on some versions); its spans are exported all the same


@dataclass
class Gauges:
    """A collector's own gauges, read once a second until ``stop()``."""

    metrics_port: int
    #: (seconds since start, traces held, heap bytes, RSS bytes, traces received)
    samples: list[tuple[float, float, float, float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> Gauges:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        t0 = time.monotonic()
        while not self._stop.wait(1.0):
            try:
                row = (time.monotonic() - t0, collector_metric(self.metrics_port, ON_MEMORY),
                       collector_metric(self.metrics_port, HEAP),
                       collector_metric(self.metrics_port, RSS),
                       collector_metric(self.metrics_port, NEW_TRACES))
            except OSError:
                continue
            self.samples.append(row)

    def peak(self, column: int) -> float:
        return max((s[column] for s in self.samples), default=0.0)

    def arrivals(self, until: float) -> float:
        """New traces a second at the sampler, over the samples up to ``until`` s."""
        window = [s for s in self.samples if s[0] <= until and s[4] > 0]
        if len(window) < 2:
            return 0.0
        return (window[-1][4] - window[0][4]) / (window[-1][0] - window[0][0])
