"""The Kubernetes manifests, validated offline: kinds, fields and cross-references."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from .deploy_helpers import DEPLOY, RULES, load_module, load_yaml, load_yaml_all, validate_k8s

K8S = DEPLOY / "k8s"


def _docs() -> list[dict[str, Any]]:
    kust = load_yaml(K8S / "kustomization.yaml")
    return [d for f in kust["resources"] for d in load_yaml_all(K8S / f)]


def test_kustomization_lists_every_manifest() -> None:
    kust = load_yaml(K8S / "kustomization.yaml")
    assert kust["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == on_disk


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


def test_prometheusrule_is_the_tested_rules_file() -> None:
    rule = next(d for d in _docs() if d["kind"] == "PrometheusRule")
    assert rule["spec"]["groups"] == load_yaml(RULES)["groups"]
    render = load_module(K8S / "render_prometheusrule.py", "render_prometheusrule")
    assert render.main(["--check"]) == 0, "run python deploy/k8s/render_prometheusrule.py"


def test_every_manifest_parses_as_yaml() -> None:
    for f in K8S.glob("*.yaml"):
        assert load_yaml_all(f), f
