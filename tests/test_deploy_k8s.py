"""The Kubernetes manifests, validated offline: kinds, fields and cross-references."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from .deploy_helpers import (
    DEPLOY,
    RULES,
    load_module,
    load_yaml,
    load_yaml_all,
    run,
    validate_k8s,
)

K8S = DEPLOY / "k8s"
EXAMPLE_AGENT = K8S / "example-agent"
# Registries that only stand for the user's own: an image there cannot be pulled.
PLACEHOLDER_REGISTRIES = ("registry.example.com/", "example.com/", "example.org/")


def _docs(folder: Path = K8S) -> list[dict[str, Any]]:
    kust = load_yaml(folder / "kustomization.yaml")
    return [d for f in kust["resources"] for d in load_yaml_all(folder / f)]


def _images(docs: list[dict[str, Any]]) -> dict[str, str]:
    """``Kind/name`` of each container -> its image, for every workload in ``docs``."""
    return {f"{d['kind']}/{d['metadata']['name']}/{c['name']}": str(c["image"])
            for d in docs if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet")
            for c in d["spec"]["template"]["spec"]["containers"]}


def test_kustomization_lists_every_manifest_of_its_folder() -> None:
    kust = load_yaml(K8S / "kustomization.yaml")
    assert kust["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == on_disk


def test_the_default_kustomization_deploys_only_what_can_run() -> None:
    """`kubectl apply -k deploy/k8s` must not start the example agent: its image is a
    placeholder that no cluster can pull (4 replicas in ImagePullBackOff). Every image of
    the default set is a public one; the example is a second, explicit step."""
    images = _images(_docs())
    assert images, "no workload in deploy/k8s"
    placeholders = {k: v for k, v in images.items() if v.startswith(PLACEHOLDER_REGISTRIES)}
    assert placeholders == {}
    assert all(v.startswith(("otel/opentelemetry-collector-contrib:",
                             "victoriametrics/victoria-logs:")) for v in images.values())


def test_the_example_agent_is_its_own_kustomization() -> None:
    """deploy/k8s/example-agent holds the agent Deployment (placeholder image and all);
    applied after the default set, together they validate (namespace, gateway Service)."""
    kust = load_yaml(EXAMPLE_AGENT / "kustomization.yaml")
    assert kust["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    on_disk = {p.name for p in EXAMPLE_AGENT.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == on_disk == {"agent-example.yaml"}
    agent = _docs(EXAMPLE_AGENT)
    assert [d["kind"] for d in agent] == ["Deployment"]
    assert validate_k8s(_docs() + agent) == []
    assert "kubectl apply -k deploy/k8s/example-agent" in (DEPLOY.parent / "docs" /
                                                         "deploy.md").read_text()


def test_the_example_agent_runs_adk_api_server_speaking_otlp_http_to_the_gateway() -> None:
    """ADK's server (`adk api_server`) exports over OTLP/HTTP only, whatever
    OTEL_EXPORTER_OTLP_PROTOCOL says: the endpoint must be the gateway Service's port that
    targets its OTLP/HTTP receiver (4318), not the gRPC one. tests/stack/
    test_example_agent.py runs this command and environment against the k8s tier."""
    (agent,) = _docs(EXAMPLE_AGENT)
    (container,) = agent["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["adk", "api_server"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    host, port = env["OTEL_EXPORTER_OTLP_ENDPOINT"].removeprefix("http://").split(":")
    assert host == "otel-gateway.adk-observability.svc.cluster.local"
    gateway = next(d for d in _docs() if d["kind"] == "Service"
                   and d["metadata"]["name"] == "otel-gateway")
    targets = {int(p["port"]): p["targetPort"] for p in gateway["spec"]["ports"]}
    assert targets[int(port)] == "otlp-http"
    assert _collector("otel-gateway-config")["receivers"]["otlp"]["protocols"]["http"][
        "endpoint"].endswith(":4318")
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    probe = container["readinessProbe"]["httpGet"]
    assert probe["path"] == "/list-apps"  # an ADK server route that answers once loaded


@pytest.mark.skipif(shutil.which("kubectl") is None,
                    reason="kubectl (with its built-in kustomize) is not installed")
def test_kubectl_kustomize_renders_both_without_the_placeholder_in_the_default() -> None:
    default = run(["kubectl", "kustomize", str(K8S)])
    assert default.returncode == 0, default.stderr
    docs = [d for d in yaml.safe_load_all(default.stdout) if d]
    assert not any(v.startswith(PLACEHOLDER_REGISTRIES) for v in _images(docs).values())
    assert {d["kind"] for d in docs} >= {"Namespace", "Deployment", "StatefulSet"}
    example = run(["kubectl", "kustomize", str(EXAMPLE_AGENT)])
    assert example.returncode == 0, example.stderr
    assert "registry.example.com/support-agent" in example.stdout


def test_manifests_validate() -> None:
    docs = _docs()
    assert validate_k8s(docs) == []
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ConfigMap", "Deployment", "StatefulSet", "Service",
            "PrometheusRule"} <= kinds


def test_the_validator_catches_broken_references() -> None:
    docs = copy.deepcopy(_docs())
    for d in docs:
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "otel-gateway":
            d["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] = "nope"
        if d["kind"] == "Service" and d["metadata"]["name"] == "otel-sampler-headless":
            d["spec"]["ports"][0]["targetPort"] = "grpc-typo"
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "otel-gateway-config":
            d["data"]["config.yaml"] = d["data"]["config.yaml"].replace(
                "otel-sampler-headless", "otel-sampler")
    errors = validate_k8s(docs)
    assert any("missing ConfigMap nope" in e for e in errors), errors
    assert any("targetPort grpc-typo" in e for e in errors), errors
    assert any("resolver must name a headless Service" in e for e in errors), errors


def _collector(name: str) -> dict[str, Any]:
    for d in _docs():
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name:
            cfg: dict[str, Any] = yaml.safe_load(d["data"]["config.yaml"])
            return cfg
    raise AssertionError(name)


def test_gateway_routes_traces_by_trace_id_to_the_sampler_tier() -> None:
    gw = _collector("otel-gateway-config")
    lb = gw["exporters"]["loadbalancing"]
    assert lb["routing_key"] == "traceID"
    assert lb["resolver"]["dns"]["hostname"].startswith("otel-sampler-headless.")
    assert gw["service"]["pipelines"]["traces"]["exporters"] == ["loadbalancing"]
    assert "tail_sampling" not in gw.get("processors", {})


def test_sampler_tier_tail_samples_orphans_and_errors() -> None:
    sampler = _collector("otel-sampler-config")
    assert "tail_sampling" in sampler["service"]["pipelines"]["traces"]["processors"]
    local = load_yaml(DEPLOY / "otel-collector" / "config.yaml")
    assert (sampler["processors"]["tail_sampling"]["policies"]
            == local["processors"]["tail_sampling"]["policies"])


def test_gateway_sends_log_records_straight_to_the_logs_store() -> None:
    """Logs need no tail sampling: the gateway (the tier agents send to) exports them to
    VictoriaLogs' OTLP endpoint, the Service of victorialogs.yaml; the sampler tier
    receives traces only, so a logs pipeline there would never see a record."""
    gw = _collector("otel-gateway-config")
    logs = gw["service"]["pipelines"]["logs"]
    assert logs["receivers"] == ["otlp"]
    assert logs["processors"] == ["memory_limiter", "batch"]
    (exporter,) = logs["exporters"]
    endpoint = gw["exporters"][exporter]["logs_endpoint"]
    assert endpoint == ("http://victorialogs.adk-observability.svc.cluster.local:9428"
                        "/insert/opentelemetry/v1/logs")
    sampler = _collector("otel-sampler-config")
    assert set(sampler["service"]["pipelines"]) == {"traces"}
    store = next(d for d in _docs() if d["kind"] == "StatefulSet"
                 and d["metadata"]["name"] == "victorialogs")
    assert store["spec"]["replicas"] == 1


def test_prometheusrule_is_the_tested_rules_file() -> None:
    rule = next(d for d in _docs() if d["kind"] == "PrometheusRule")
    assert rule["spec"]["groups"] == load_yaml(RULES)["groups"]
    render = load_module(K8S / "render_prometheusrule.py", "render_prometheusrule")
    assert render.main(["--check"]) == 0, "run python deploy/k8s/render_prometheusrule.py"


def test_every_manifest_parses_as_yaml() -> None:
    for f in K8S.rglob("*.yaml"):
        assert load_yaml_all(f), f
