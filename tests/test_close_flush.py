"""A Runner's close flushes what is new, and skips only what is not.

A close flushes when no run is busy (a server's last close comes right before uvicorn
dies by SIGTERM, with no atexit). It collects metrics only when something may have
been recorded since the last close's collection: a run began or was alive, or a
measurement was taken outside any run, or anything was recorded into the MeterProvider
configure_telemetry() built; and at most once per close_flush.CLOSE_METRICS_EVERY_S, unless
orphans were measured since: a close within the interval leaves them to one deferred
collection, which must reach the receiver. The child (tests/close_flush_child.py) records metrics
between closes with no run at all (an orphan that ends after its run and after the
first close; then a metric of the application's own), then dies without atexit: the
close after each must have sent it, and a close right after that has nothing new to
collect. Every assertion is
on what a real OTLP/HTTP receiver decoded, or on the export's own counts.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
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
    first, second, third, deferred, fourth = result["metrics_sent"]
    assert first >= 1  # the first close sent the run's metrics
    assert second == first + 1  # the orphan's end, recorded after it: sent by the next
    # The application's own metric, recorded outside runs, then a close within the
    # interval of the last collection: not collected at that close ...
    assert third == second
    assert deferred == third + 1  # ... but by the one deferred collection
    assert fourth == deferred  # nothing recorded since: no collection, nothing sent
    lifetime = _points(rx, "adk.tool_task.orphan_lifetime")
    assert [p.count for p in lifetime][-1:] == [1], lifetime
    alive = [(attrs(p.attributes)["gen_ai.tool.name"], p.as_int)
             for p in _points(rx, "adk.tool_task.orphans_alive")]
    assert alive[-1:] == [("spawner", 0)], alive
    app_jobs = [p.as_int for _, m in rx.metric_list("the_app") if m.name == "app.jobs"
                for p in m.sum.data_points]
    assert app_jobs[-1:] == [1], app_jobs


def _started_total(rx: Any) -> int | None:
    """``adk.tool_task.started`` summed over its series, in the last batch that has it
    (cumulative: the total the process had counted when that batch was collected)."""
    last = None
    for _, m in rx.metric_list():
        if m.name == "adk.tool_task.started":
            last = sum(p.as_int for p in m.sum.data_points)
    return last


def test_sigterm_to_a_server_with_a_runner_per_request_sends_the_deferred_metrics(
        tmp_path: Path) -> None:
    """uvicorn with our SIGTERM handler chained in front of its own (configure_telemetry()
    in the lifespan's startup), a Runner made and closed per request: the last
    requests' closes defer their metrics (the interval is a minute there), and SIGTERM,
    after which uvicorn re-raises the signal with its own saved handler and no atexit
    runs, must still get every run's metrics to the receiver."""
    import httpx

    from .otlp_receivers import free_port

    receiver = HttpReceiver()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    log = (tmp_path / "server.log").open("w+")
    proc = subprocess.Popen([sys.executable, str(HERE / "close_flush_server.py"), str(port),
                             receiver.endpoint], stdout=log, stderr=subprocess.STDOUT,
                            text=True, env=env, cwd=str(HERE))
    runs = 3
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            while True:
                assert proc.poll() is None, _log(log)
                try:
                    handler = client.get("/handler").json()
                    break
                except httpx.TransportError:  # not listening yet
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(0.1)
            # The shape this test is about: ours first, uvicorn's behind it.
            assert handler["module"] == "adk_task_telemetry.lifecycle.process_exit", handler
            sent = [client.get("/run").json()["metrics_sent"] for _ in range(runs)]
        # The first close collected; the last one left its run's metrics to a deferral.
        assert sent[0] >= 1 and sent[-1] == sent[-2], sent
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
        rx = receiver.received
        assert rx.wait_for(lambda: _started_total(rx) == runs * 2, timeout=10), (
            _started_total(rx), _log(log))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        receiver.stop()
    assert rc == -signal.SIGTERM, _log(log)  # uvicorn re-raised it: died by it, no atexit
    durations = [p.count for p in _points(rx, "adk.tool_task.duration")]
    assert durations[-1:] == [runs * 2], durations


def _log(log: Any) -> str:
    log.flush()
    log.seek(0)
    return str(log.read())[-4000:]


def test_the_exit_list_sends_what_the_last_closes_deferred() -> None:
    """Runners per request, the last closes' metrics deferred (the interval is a minute
    there), then the process returns from main: the exit list (atexit) drops the
    pending deferral and collects everything itself."""
    receiver = HttpReceiver()
    runs = 3
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        proc = subprocess.run([sys.executable, str(HERE / "close_flush_server.py"), "0",
                               receiver.endpoint, str(runs)], capture_output=True,
                              text=True, timeout=120, env=env, cwd=str(HERE))
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-6000:]
        sent = json.loads(lines[0][len("RESULT "):])["metrics_sent"]
        rx = receiver.received
    finally:
        receiver.stop()
    assert sent[0] >= 1 and sent[-1] == sent[-2], sent  # the last close deferred
    assert _started_total(rx) == runs * 2
    durations = [p.count for p in _points(rx, "adk.tool_task.duration")]
    assert durations[-1:] == [runs * 2], durations
