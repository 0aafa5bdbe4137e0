"""A Runner's close flushes what is new, and skips only what is not.

A close flushes when no run is busy (a server's last close comes right before uvicorn
dies by SIGTERM, with no atexit). It collects metrics only when something may have
been recorded since the last close's collection: a run began or was alive, or a
measurement was taken outside any run, or anything was recorded into the MeterProvider
configure_telemetry() built. The child (tests/close_flush_child.py) records metrics
between closes with no run at all (an orphan that ends after its run and after the
first close; then a metric of the application's own), then dies without atexit: the
close after each must have sent it, and a close right after that has nothing new to
collect. Every assertion is
on what a real OTLP/HTTP receiver decoded, or on the export's own counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .otlp_receivers import HttpReceiver, attrs

HERE = Path(__file__).resolve().parent


def _points(rx: Any, name: str) -> list[Any]:
    out = []
    for _, m in rx.metric_list():
        if m.name == name:
            data = m.histogram if m.HasField("histogram") else m.sum
            out.extend(data.data_points)
    return out


def test_a_close_sends_what_an_orphan_recorded_after_the_last_close() -> None:
    receiver = HttpReceiver()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        proc = subprocess.run([sys.executable, str(HERE / "close_flush_child.py"),
                               receiver.endpoint], capture_output=True, text=True,
                              timeout=120, env=env, cwd=str(HERE))
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-6000:]
        result = json.loads(lines[0][len("RESULT "):])
        rx = receiver.received
    finally:
        receiver.stop()
    assert result["orphans_after_run"] == 1
    assert result["orphans_after_release"] == 0
    first, second, third, fourth = result["metrics_sent"]
    assert first >= 1  # the first close sent the run's metrics
    assert second == first + 1  # the orphan's end, recorded after it: sent by the next
    assert third == second + 1  # the application's own metric, recorded outside runs
    assert fourth == third  # nothing recorded since: no collection, nothing sent
    lifetime = _points(rx, "adk.tool_task.orphan_lifetime")
    assert [p.count for p in lifetime][-1:] == [1], lifetime
    alive = [(attrs(p.attributes)["gen_ai.tool.name"], p.as_int)
             for p in _points(rx, "adk.tool_task.orphans_alive")]
    assert alive[-1:] == [("spawner", 0)], alive
    app_jobs = [p.as_int for _, m in rx.metric_list("the_app") if m.name == "app.jobs"
                for p in m.sum.data_points]
    assert app_jobs[-1:] == [1], app_jobs
