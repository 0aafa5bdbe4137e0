"""Every dashboard query returns data on both metric paths, as Grafana would send it.

Prometheus 3 runs as deploy/compose runs it (deploy/prometheus/prometheus.yml, the
compose service's flags, its OTLP receiver on), on its own: the test needs no other
program. Two agent processes (tests/stack/metrics_app.py) run the scenario library
through configure_telemetry():

- the OTLP path: metrics pushed straight to Prometheus' OTLP receiver (the path without
  a collector; the collector's batch processor keeps the SDK's timestamps, so the samples
  Prometheus stores are the same) at the SDK's default export interval (60 s, nothing
  shortened); the test waits for three pushes to land;
- the scrape path: configure_telemetry(prometheus_port=...) serving /metrics, scraped
  by the committed adk-agents job at the committed 15 s interval.

Each of the dashboard's queries (dashboards/generated/*.json) is then evaluated the way
Grafana evaluates it at that moment, on the dashboard's default range (the last hour):
$__rate_interval, $__interval, the step and the range by Grafana's own rules
(deploy_helpers.GrafanaQuery), from the provisioned datasource's timeInterval
(deploy/grafana/provisioning) and, for a user whose own Prometheus datasource sets none,
Grafana's default (15s). The dashboard's $job selects one path. A query that returns no
point is a panel that would be empty: the test fails and names it.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from adk_task_telemetry import adk_compat as compat

from ..deploy_helpers import (
    DASHBOARD_JSON,
    GrafanaQuery,
    dashboard_panels,
    dashboard_range_s,
    datasource_time_interval,
)
from ..stack_programs import free_port, running, wait_until
from .metrics_helpers import Api, metrics_app, otlp_env, prometheus

OTLP_JOB = "adk-scenarios-otlp"  # service.name: the job over OTLP
SCRAPE_JOB = "adk-agents"  # the committed scrape job
PUSHES = 3  # OTLP exports (60 s apart) that must have landed before the queries run
POOL_METRICS = "adk_tool_thread_pool_"


@dataclass
class Paths:
    api: Api
    now: float


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Paths]:
    workdir = tmp_path_factory.mktemp("dashboards-live")
    scrape_port = free_port()
    prog, api = prometheus(workdir, {
        "host.docker.internal:9464": f"127.0.0.1:{scrape_port}",
        # No collector and no Alertmanager here: their addresses go nowhere.
        "otel-collector:8888": f"127.0.0.1:{free_port()}",
        "jaeger:8888": f"127.0.0.1:{free_port()}",
        "alertmanager:9093": f"127.0.0.1:{free_port()}",
    })
    with running(prog), \
            metrics_app(workdir, "scrape", "adk-scenarios-scrape", str(scrape_port)), \
            metrics_app(workdir, "otlp", OTLP_JOB, env=otlp_env(api.url)):
        def samples(job: str) -> float:
            v = api.scalar(f'max(count_over_time(adk_tool_task_started_total'
                           f'{{job="{job}"}}[30m]))')
            return v or 0.0
        # The first push comes one interval after configure_telemetry(): about
        # (PUSHES + 1) minutes.
        assert wait_until(lambda: samples(OTLP_JOB) >= PUSHES, timeout=(PUSHES + 2) * 60,
                          interval=2), f"{PUSHES} OTLP pushes not in:\n{prog.log()}"
        assert wait_until(lambda: samples(SCRAPE_JOB) >= 4, timeout=120, interval=1)
        yield Paths(api, time.time())


def _has_data(res: dict[str, Any]) -> bool:
    data = res["data"]
    if data["resultType"] == "matrix":
        return any(s["values"] for s in data["result"])
    return bool(data["result"])


def evaluate(paths: Paths, job: str, time_interval: str | None) -> dict[str, str]:
    """Every query of the dashboard for ``job``: title -> the PromQL sent, when empty."""
    dashboard = json.loads(DASHBOARD_JSON.read_text())
    range_s = dashboard_range_s(dashboard)
    empty: dict[str, str] = {}
    total = 0
    for panel in dashboard_panels(dashboard):
        for target in panel.get("targets", []):
            q = GrafanaQuery(panel, target, now=paths.now, range_s=range_s,
                             time_interval=time_interval)
            expr = q.expr({"job": job})
            if POOL_METRICS in expr and not compat.RUN_ASYNC_USES_TOOL_THREAD_POOL:
                continue  # no tool thread pool on this ADK: nothing to show, rightly
            total += 1
            res = (paths.api.query(expr, **q.params()) if q.instant
                   else paths.api.query_range(expr, **q.params()))
            assert res["status"] == "success", f"{q.title}: {res.get('error')}\n{expr}"
            if not _has_data(res):
                empty[q.title] = (f"{expr}  [{'instant' if q.instant else 'range'} "
                                  f"rate_interval={q.vars['$__rate_interval']} step={q.step_s}s]")
    print(f"\ndashboard queries with data, job={job}, datasource timeInterval="
          f"{time_interval or 'unset (15s)'}: {total - len(empty)}/{total}")
    for title, expr in empty.items():
        print(f"  empty: {title}: {expr}")
    return empty


@pytest.mark.parametrize("job", [OTLP_JOB, SCRAPE_JOB], ids=["otlp-push-60s", "scrape-15s"])
@pytest.mark.parametrize("datasource", ["provisioned", "grafana-default"])
def test_every_dashboard_query_returns_data(paths: Paths, job: str, datasource: str) -> None:
    """The provisioned datasource (deploy/grafana) and a user's own Prometheus datasource
    with Grafana's default interval: the dashboard must show every panel on both."""
    time_interval = datasource_time_interval() if datasource == "provisioned" else None
    empty = evaluate(paths, job, time_interval)
    assert not empty, (f"{len(empty)} dashboard queries return nothing on {job} "
                       f"(timeInterval {time_interval or 'unset'}):\n"
                       + "\n".join(f"{t}: {e}" for t, e in empty.items()))


def test_the_otlp_path_pushed_at_the_default_interval(paths: Paths) -> None:
    """The OTLP samples are 60 s apart (the SDK default): nothing was shortened."""
    res = paths.api.query(f'adk_tool_task_started_total{{job="{OTLP_JOB}"}}[30m]',
                          time=paths.now)
    stamps = sorted(float(t) for t, _ in res["data"]["result"][0]["values"])
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert gaps and all(59 <= g <= 70 for g in gaps), gaps
