"""The compose stack: docker-compose 1.29 validates it offline; pins, ports, health, order."""

from __future__ import annotations

import os
from typing import Any

import pytest
import yaml

from .deploy_helpers import DEPLOY, REPO, load_yaml, require_tool, run

COMPOSE = DEPLOY / "compose" / "docker-compose.yml"
SERVICES = {"otel-collector", "jaeger", "prometheus", "grafana", "alertmanager",
            "victorialogs"}
# The collector's contrib image is distroless: no command can run inside it.
NO_HEALTHCHECK = {"otel-collector"}


def _compose(*args: str, password: str | None = "test-only-password") -> Any:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GRAFANA_", "ADK_STACK_", "COMPOSE_"))}
    if password is not None:
        env["GRAFANA_ADMIN_PASSWORD"] = password
    return run([require_tool("docker-compose"), "-f", str(COMPOSE), *args], env=env,
               cwd=COMPOSE.parent)


@pytest.fixture(scope="module")
def resolved() -> dict[str, Any]:
    res = _compose("config")
    assert res.returncode == 0, res.stderr
    data: dict[str, Any] = yaml.safe_load(res.stdout)
    return data


def test_docker_compose_config_validates() -> None:
    res = _compose("config", "-q")
    assert res.returncode == 0, res.stderr


def test_grafana_password_has_no_default() -> None:
    res = _compose("config", "-q", password=None)
    assert res.returncode != 0
    assert "GRAFANA_ADMIN_PASSWORD" in res.stderr
    raw = load_yaml(COMPOSE)
    value = raw["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"]
    assert value.startswith("${GRAFANA_ADMIN_PASSWORD:?"), value


def test_no_top_level_name() -> None:
    assert "name" not in load_yaml(COMPOSE)  # docker-compose 1.29 rejects it


def test_images_are_pinned_and_of_the_right_majors(resolved: dict[str, Any]) -> None:
    services = resolved["services"]
    assert set(services) == SERVICES
    images = {name: s["image"] for name, s in services.items()}
    for image in images.values():
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest" and any(c.isdigit() for c in tag), image
    assert images["otel-collector"].startswith("otel/opentelemetry-collector-contrib:")
    assert images["jaeger"].startswith("jaegertracing/jaeger:2.")
    assert images["prometheus"].startswith("prom/prometheus:v3.")
    assert images["grafana"].startswith("grafana/grafana:")
    assert images["alertmanager"].startswith("prom/alertmanager:")
    assert images["victorialogs"].startswith("victoriametrics/victoria-logs:v1.")


def test_ports_are_bound_to_loopback(resolved: dict[str, Any]) -> None:
    seen = 0
    for name, s in resolved["services"].items():
        for p in s.get("ports", []):
            seen += 1
            host_ip = p.get("host_ip") if isinstance(p, dict) else str(p).split(":")[0]
            assert host_ip == "127.0.0.1", f"{name}: {p}"
    assert seen >= 6


def test_healthchecks_and_start_order(resolved: dict[str, Any]) -> None:
    services = resolved["services"]
    for name, s in services.items():
        if name not in NO_HEALTHCHECK:
            test = s["healthcheck"]["test"]
            assert test[0] == "CMD" and "localhost" in " ".join(test), name
    deps = {n: s.get("depends_on", {}) for n, s in services.items()}
    assert deps["otel-collector"]["jaeger"]["condition"] == "service_healthy"
    assert deps["otel-collector"]["prometheus"]["condition"] == "service_healthy"
    assert deps["otel-collector"]["victorialogs"]["condition"] == "service_healthy"
    assert deps["prometheus"]["alertmanager"]["condition"] == "service_healthy"
    for d in ("prometheus", "jaeger", "alertmanager", "victorialogs"):
        assert deps["grafana"][d]["condition"] == "service_healthy"
    # every service it waits for has a healthcheck
    for n, d in deps.items():
        for target, cond in d.items():
            if cond["condition"] == "service_healthy":
                assert "healthcheck" in services[target], f"{n} waits on {target}"


def test_prometheus_runs_otlp_receiver_and_exemplar_storage(resolved: dict[str, Any]) -> None:
    cmd = resolved["services"]["prometheus"]["command"]
    assert "--web.enable-otlp-receiver" in cmd
    assert "--enable-feature=exemplar-storage" in cmd


def test_mounted_files_exist(resolved: dict[str, Any]) -> None:
    raw = load_yaml(COMPOSE)
    mounts = 0
    for name, s in raw["services"].items():
        for v in s.get("volumes", []):
            src = v.split(":", 1)[0]
            if src.startswith("."):
                mounts += 1
                assert (COMPOSE.parent / src).resolve().exists(), f"{name}: {src}"
    assert mounts >= 6
    assert (REPO / "dashboards" / "generated" / "adk-task-telemetry.json").is_file()


def test_grafana_provisioning() -> None:
    ds = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "datasources.yml")
    by_uid = {d["uid"]: d for d in ds["datasources"]}
    assert by_uid["prometheus"]["type"] == "prometheus"
    assert by_uid["jaeger"]["type"] == "jaeger"
    assert by_uid["alertmanager"]["type"] == "alertmanager"
    dest = by_uid["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert {"name": "trace_id", "datasourceUid": "jaeger"}.items() <= dest[0].items()
    # Logs: the VictoriaLogs plugin; a record's trace_id field opens the trace in Jaeger,
    # a span opens its records (the same field). "$$" is Grafana's literal "$".
    logs = by_uid["victorialogs"]
    assert logs["type"] == "victoriametrics-logs-datasource"
    (derived,) = logs["jsonData"]["derivedFields"]
    assert derived == {**derived, "matcherType": "label", "matcherRegex": "trace_id",
                       "datasourceUid": "jaeger", "url": "$${__value.raw}"}
    back = by_uid["jaeger"]["jsonData"]["tracesToLogsV2"]
    assert back["datasourceUid"] == "victorialogs" and back["customQuery"] is True
    assert back["query"] == 'trace_id:="$${__span.traceId}"'
    plugins = load_yaml(COMPOSE)["services"]["grafana"]["environment"]["GF_PLUGINS_PREINSTALL"]
    assert plugins.startswith("victoriametrics-logs-datasource@")
    for d in ds["datasources"]:
        host = d["url"].split("//", 1)[1].split(":", 1)[0]
        assert host in SERVICES, d["url"]
    prov = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "dashboards.yml")
    path = prov["providers"][0]["options"]["path"]
    grafana = load_yaml(COMPOSE)["services"]["grafana"]
    targets = {v.split(":")[1] for v in grafana["volumes"]}
    assert path in targets


def test_collector_and_prometheus_point_at_compose_services() -> None:
    collector = load_yaml(DEPLOY / "otel-collector" / "config.yaml")
    assert collector["exporters"]["otlp/jaeger"]["endpoint"] == "jaeger:4317"
    assert collector["exporters"]["otlphttp/prometheus"]["endpoint"] == (
        "http://prometheus:9090/api/v1/otlp")
    assert collector["exporters"]["otlphttp/victorialogs"]["logs_endpoint"] == (
        "http://victorialogs:9428/insert/opentelemetry/v1/logs")
    assert collector["service"]["pipelines"]["logs"]["exporters"] == ["otlphttp/victorialogs"]
    jaeger = load_yaml(DEPLOY / "jaeger" / "config.yaml")
    assert jaeger["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].endswith(":4317")
    assert jaeger["extensions"]["jaeger_query"]["http"]["endpoint"].endswith(":16686")
    prom = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    am = prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am == ["alertmanager:9093"]
    assert prom["otlp"]["translation_strategy"] == "UnderscoreEscapingWithSuffixes"
    assert prom["storage"]["exemplars"]["max_exemplars"] > 0
    assert prom["rule_files"] == ["/etc/prometheus/rules/*.yml"]


def test_alertmanager_routes_to_defined_webhook_receivers() -> None:
    am = load_yaml(DEPLOY / "alertmanager" / "alertmanager.yml")
    receivers = {r["name"]: r for r in am["receivers"]}
    for r in receivers.values():
        assert r["webhook_configs"][0]["url"].startswith("http")

    def walk(route: dict[str, Any]) -> list[str]:
        return [route["receiver"]] + [n for r in route.get("routes", []) for n in walk(r)]

    used = walk(am["route"])
    assert set(used) == set(receivers)
    severities = {m.split("=", 1)[1].strip('"') for r in am["route"]["routes"]
                  for m in r.get("matchers", []) if m.startswith("severity=")}
    rules = load_yaml(DEPLOY / "prometheus" / "rules" / "adk-task-telemetry.rules.yml")
    used_sev = {r["labels"]["severity"] for g in rules["groups"] for r in g["rules"]
                if "alert" in r}
    assert used_sev <= severities


def test_scrape_only_config_passes_promtool() -> None:
    res = run([require_tool("promtool"), "check", "config",
               str(DEPLOY / "prometheus" / "prometheus-scrape.yml")])
    assert res.returncode == 0, res.stdout + res.stderr
