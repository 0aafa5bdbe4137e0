"""Every collector of deploy/ has its own metrics scraped: the loss alerts
(OtelCollector*) and the dashboard's Pipeline health row read nothing otherwise.

Compose: each service running a Collector config (the collector, and Jaeger v2, a
Collector distribution) serves its metrics on 0.0.0.0:8888 and deploy/prometheus/
prometheus.yml scrapes <service>:8888. Kubernetes: each workload whose ConfigMap is a
Collector config (the gateways, the samplers) serves them on a container port named
``metrics`` and deploy/k8s/podmonitor.yaml selects it. A collector left at its default
(localhost:8888 since Collector 0.110) or a pod the PodMonitor misses fails here.
"""

from __future__ import annotations

from typing import Any

import yaml

from .deploy_helpers import DEPLOY, load_yaml, load_yaml_all

K8S = DEPLOY / "k8s"
METRICS_PORT = 8888


def own_metrics_address(cfg: dict[str, Any]) -> tuple[str, int] | None:
    """(host, port) of a Collector config's Prometheus pull reader, if any."""
    readers = (cfg.get("service", {}).get("telemetry", {}).get("metrics", {})
               .get("readers") or [])
    for reader in readers:
        prom = reader.get("pull", {}).get("exporter", {}).get("prometheus")
        if prom:
            return str(prom.get("host")), int(prom.get("port"))
    return None


def compose_collectors() -> dict[str, dict[str, Any]]:
    """compose service -> the Collector config it runs."""
    return {"otel-collector": load_yaml(DEPLOY / "otel-collector" / "config.yaml"),
            "jaeger": load_yaml(DEPLOY / "jaeger" / "config.yaml")}


def scrape_targets() -> set[str]:
    cfg = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    return {t for job in cfg["scrape_configs"] for sc in job.get("static_configs", [])
            for t in sc["targets"]}


def test_every_compose_collector_is_scraped() -> None:
    compose = load_yaml(DEPLOY / "compose" / "docker-compose.yml")["services"]
    volumes = {name: " ".join(map(str, svc.get("volumes", []))) for name, svc in compose.items()}
    assert "otel-collector/config.yaml" in volumes["otel-collector"]
    assert "jaeger/config.yaml" in volumes["jaeger"]
    for service, cfg in compose_collectors().items():
        assert own_metrics_address(cfg) == ("0.0.0.0", METRICS_PORT), service
        assert f"{service}:{METRICS_PORT}" in scrape_targets(), service


def _k8s_docs() -> list[dict[str, Any]]:
    kust = load_yaml(K8S / "kustomization.yaml")
    return [d for f in kust["resources"] for d in load_yaml_all(K8S / f)]


def k8s_collectors() -> dict[str, dict[str, Any]]:
    """app.kubernetes.io/name of each workload running a Collector config -> its pod spec."""
    docs = _k8s_docs()
    configs = {d["metadata"]["name"]: yaml.safe_load(d["data"]["config.yaml"])
               for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in d.get("data", {})}
    out = {}
    for d in docs:
        if d["kind"] not in ("Deployment", "StatefulSet", "DaemonSet"):
            continue
        pod = d["spec"]["template"]
        maps = {v["configMap"]["name"] for v in pod["spec"].get("volumes", [])
                if "configMap" in v}
        for name in maps & set(configs):
            assert own_metrics_address(configs[name]) == ("0.0.0.0", METRICS_PORT), name
            out[pod["metadata"]["labels"]["app.kubernetes.io/name"]] = pod
    return out


def test_every_k8s_collector_is_scraped_by_the_podmonitor() -> None:
    collectors = k8s_collectors()
    assert set(collectors) == {"otel-gateway", "otel-sampler"}
    monitor = next(d for d in _k8s_docs() if d["kind"] == "PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    exprs = monitor["spec"]["selector"]["matchExpressions"]
    selected = {v for e in exprs if e["key"] == "app.kubernetes.io/name"
                and e["operator"] == "In" for v in e["values"]}
    assert selected == set(collectors)
    port = monitor["spec"]["podMetricsEndpoints"][0]["port"]
    for name, pod in collectors.items():
        ports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"]
                 for p in c.get("ports", [])}
        assert ports.get(port) == METRICS_PORT, name
