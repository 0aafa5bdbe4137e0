"""The compose stack's network, as a container sees it (defect 4 of issue 22).

No Docker engine runs here, so each compose service's container is a network namespace
joined to the host by a veth pair (metrics_helpers.Container): the host end's address
is Docker's ``host-gateway``, and the namespace's /etc/hosts holds exactly what Docker
writes from the service's ``extra_hosts`` in deploy/compose/docker-compose.yml. The
programs inside are the real Prometheus 3 and Alertmanager with the committed configs,
addresses untouched (``host.docker.internal:9464``, ``host.docker.internal:5001``).

- the ``adk-agents`` job scrapes an agent on the host: its /metrics must be bound
  where the container reaches the host (OTEL_EXPORTER_PROMETHEUS_HOST, docs/deploy.md);
  on 127.0.0.1 (the default) the scrape fails, which the test shows too;
- Alertmanager's webhooks reach a receiver on the host: ``host.docker.internal`` must
  resolve inside the alertmanager container (its ``extra_hosts``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..stack_programs import running, wait_until
from .metrics_helpers import (
    Api,
    Container,
    Webhook,
    alertmanager,
    can_make_namespaces,
    metrics_app,
    prometheus,
)

AGENT_PORT = 9464  # the committed target: host.docker.internal:9464
WEBHOOK_PORT = 5001  # the committed webhooks: http://host.docker.internal:5001/alerts/...

pytestmark = pytest.mark.skipif(can_make_namespaces() is not None,
                                reason=f"no network namespaces: {can_make_namespaces()}")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


def _up(api: Api, value: int) -> bool:
    return api.scalar(f'max_over_time(up{{job="adk-agents"}}[5m]) == {value} and '
                      f'min_over_time(up{{job="adk-agents"}}[5m]) == {value}') is not None


@pytest.fixture
def prometheus_container(workdir: Path) -> Iterator[tuple[Container, Api]]:
    with Container("prometheus", 1) as box:
        # deploy/prometheus/prometheus.yml as committed: only the rules' path changes.
        prog, api = prometheus(workdir, {}, listen="0.0.0.0", port=9090, container=box)
        with running(prog):
            yield box, api


def test_compose_prometheus_scrapes_an_agent_on_the_host(
        workdir: Path, prometheus_container: tuple[Container, Api]) -> None:
    box, api = prometheus_container
    # The default: /metrics on 127.0.0.1, out of the container's reach. A scrape that
    # failed is a sample up == 0 (a positive signal, not a wait for nothing).
    with metrics_app(workdir, "scrape", "adk-host-default", str(AGENT_PORT)):
        assert wait_until(lambda: _up(api, 0), timeout=60, interval=1), "no failed scrape"
    # What docs/deploy.md tells the user: bind /metrics to the bridge address.
    with metrics_app(workdir, "scrape", "adk-host-bridge", str(AGENT_PORT),
                     env={"OTEL_EXPORTER_PROMETHEUS_HOST": box.gateway}):
        since = time.time()

        def scraped() -> bool:
            return api.scalar(
                'up{job="adk-agents"} == 1 and on() '
                'count(adk_tool_task_started_total{job="adk-agents"}) > 0') is not None
        assert wait_until(scraped, timeout=60, interval=1), (
            f"Prometheus in the container never scraped {box.gateway}:{AGENT_PORT} "
            f"(since {since:.0f})")
    print(f"\nadk-agents scrape from the container: 127.0.0.1 bind: up=0; "
          f"OTEL_EXPORTER_PROMETHEUS_HOST={box.gateway}: up=1 with adk_* series")


def test_compose_alertmanager_reaches_a_webhook_on_the_host(workdir: Path) -> None:
    with Container("alertmanager", 2) as box, \
            Webhook(box.gateway, WEBHOOK_PORT) as hook:
        # deploy/alertmanager/alertmanager.yml as committed, not one address changed.
        prog, api = alertmanager(workdir, {}, listen="0.0.0.0", port=9093, container=box)
        with running(prog):
            alert = {"labels": {"alertname": "AdkToolTaskOrphansAlive", "severity": "critical",
                                "job": "adk-agents", "adk_app_name": "scenarios"},
                     "annotations": {"runbook_url": "docs/runbooks/AdkToolTaskOrphansAlive.md"}}
            assert api.post("/api/v2/alerts", [alert]) == 200
            # group_wait of the on-call route: 10 s.
            delivered = wait_until(lambda: bool(hook.alerts("/alerts/oncall")), timeout=60,
                                   interval=0.5)
            assert delivered, ("no webhook delivery from the alertmanager container; "
                               f"its /etc/hosts: {box.hosts}\n{prog.log()}")
    (path, got), *_ = hook.alerts()
    assert got["labels"]["alertname"] == "AdkToolTaskOrphansAlive"
    print(f"\nalertmanager container -> http://host.docker.internal:{WEBHOOK_PORT}{path}: "
          "delivered")
