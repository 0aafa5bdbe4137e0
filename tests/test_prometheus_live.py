"""Live: a real Prometheus scrapes a process running the scenario library with the plugin.

The process serves /metrics (opentelemetry-exporter-prometheus) and records every
scenario before Prometheus' first scrape, so the orphan counter's first sample is
already above zero: AdkToolTaskOrphaned must still fire on ADK versions with issue
7058 (< 2.13) and stay silent on 2.13. Every dashboard query must return data.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from adk_task_telemetry import adk_compat as compat

from .conftest import has_seed_bug
from .deploy_helpers import (
    DASHBOARD_JSON,
    DEPLOY,
    REPO,
    RULES,
    Prometheus,
    dashboard_targets,
    free_port,
    label_values_call,
    load_yaml,
    prometheus_server,
    substitute,
)

APP = Path(__file__).with_name("deploy_metrics_app.py")
JOB = "adk-agents"
ORPHAN_METRICS = ("adk_tool_task_orphaned_total", "adk_tool_task_orphans_alive")
POOL_METRICS = "adk_tool_thread_pool_"


@contextlib.contextmanager
def metrics_app(workdir: Path, timeout: float = 90.0) -> Iterator[int]:
    port = free_port()
    log = workdir / "metrics_app.log"
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, str(APP), str(port)], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=err, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        # "ready" comes once the scenarios have run
        readable, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if readable else ""
        assert line.strip() == "ready", (
            f"metrics app not ready (exit {proc.poll()}): {line!r}\n"
            f"{log.read_text(errors='replace')[-3000:]}")
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def scrape_config(app_port: int) -> dict[str, Any]:
    """deploy/prometheus/prometheus-scrape.yml with the test's target and short intervals."""
    cfg: dict[str, Any] = load_yaml(DEPLOY / "prometheus" / "prometheus-scrape.yml")
    cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    cfg.pop("alerting", None)  # no Alertmanager here; /api/v1/alerts shows the state
    (job,) = cfg["scrape_configs"]
    assert job["job_name"] == JOB
    job["static_configs"] = [{"targets": [f"127.0.0.1:{app_port}"]}]
    return cfg


def wait_for(what: str, check: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.25)


def orphan_alerts(prom: Prometheus) -> list[dict[str, Any]]:
    alerts = prom.api("alerts")["data"]["alerts"]
    return [a for a in alerts if a["labels"]["alertname"] == "AdkToolTaskOrphaned"]


def last_evaluation(prom: Prometheus) -> float:
    """When the rule group was last evaluated (Unix time), 0 before the first time."""
    groups = prom.api("rules")["data"]["groups"]
    stamp = groups[0].get("lastEvaluation", "") if groups else ""
    if not stamp or stamp.startswith("0001"):
        return 0.0
    day, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(day).replace(tzinfo=timezone.utc).timestamp() + float(
        f"0.{frac[:6] or 0}")


def values(result: dict[str, Any]) -> list[float]:
    data = result["data"]
    if data["resultType"] == "matrix":
        return [float(v) for s in data["result"] for _, v in s["values"]]
    if data["resultType"] == "vector":
        return [float(s["value"][1]) for s in data["result"]]
    return [float(data["result"][1])]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, float]]:
    workdir = tmp_path_factory.mktemp("prom-live")
    with metrics_app(workdir) as port:
        files = {f"rules/{RULES.name}": RULES.read_text()}
        with prometheus_server(workdir, scrape_config(port), files) as prom:
            start = time.time()
            wait_for("three scrapes of the metrics app", lambda: prom.query(
                f'count_over_time(up{{job="{JOB}"}}[1m]) >= 3 and up{{job="{JOB}"}} == 1'
            )["data"]["result"])
            yield prom, start


def test_orphan_alert_fires_exactly_on_versions_with_the_seed_bug(
        live: tuple[Prometheus, float]) -> None:
    prom, _ = live
    if has_seed_bug():
        firing = wait_for("AdkToolTaskOrphaned firing", lambda: [
            a for a in orphan_alerts(prom) if a["state"] == "firing"])
        labels = firing[0]["labels"]
        assert labels["gen_ai_tool_name"] == "monitor_stock"
        assert labels["gen_ai_agent_name"] == "trader"
        assert labels["job"] == JOB and labels["severity"] == "warning"
        assert firing[0]["annotations"]["runbook_url"].endswith("AdkToolTaskOrphaned.md")
    else:
        # The metrics app's series are scraped: five more evaluations (1s apart) must
        # leave the orphan alert inactive.
        since = time.time()
        wait_for("five more rule evaluations", lambda: last_evaluation(prom) >= since + 5)
        assert last_evaluation(prom) <= time.time() + 1
        assert orphan_alerts(prom) == []
        assert prom.query("adk_tool_task_orphaned_total")["data"]["result"] == []
    health = prom.api("rules")["data"]["groups"][0]["rules"]
    assert all(r["health"] == "ok" for r in health), [r.get("lastError") for r in health]


def test_every_dashboard_query_returns_data(live: tuple[Prometheus, float]) -> None:
    prom, start = live
    dashboard = json.loads(DASHBOARD_JSON.read_text())
    now = time.time()
    for title, t in dashboard_targets(dashboard):
        expr = substitute(t["expr"])
        if t.get("instant"):
            res = prom.query(expr)
        else:
            res = prom.api("query_range", query=expr, start=start - 5, end=now, step="1s")
        assert res["status"] == "success", f"{title}: {res.get('error')}"
        got = values(res)
        if POOL_METRICS in expr and not compat.RUN_ASYNC_USES_TOOL_THREAD_POOL:
            # The pool gauges report only while a pool lives, and on this ADK the
            # corpus's run_async calls run on the event loop: no pool, no series.
            assert got == [], f"{title} {t['refId']}: {got}"
            continue
        about_orphans = any(m in expr for m in ORPHAN_METRICS)
        if about_orphans and not has_seed_bug():
            # ADK 2.13 leaves no orphan: no series, or the panel's explicit zero.
            assert all(v == 0 for v in got), f"{title} {t['refId']}: {got}"
            continue
        assert got, f"{title} {t['refId']} returned no data:\n{expr}"
        if about_orphans:
            assert max(got) > 0, f"{title} {t['refId']} shows no orphan: {got}"


def test_every_dashboard_variable_has_values(live: tuple[Prometheus, float]) -> None:
    prom, _ = live
    dashboard = json.loads(DASHBOARD_JSON.read_text())
    expected = {"job": JOB, "app": "scenarios", "agent": "trader", "tool": "monitor_stock"}
    for v in dashboard["templating"]["list"]:
        if v["type"] != "query":
            continue
        selector, label = label_values_call(v["query"])
        res = prom.api(f"label/{label}/values", **{"match[]": substitute(selector or "")})
        assert res["status"] == "success", res
        assert expected[v["name"]] in res["data"], f"${v['name']}: {res['data']}"
