"""Every config in deploy/ loaded by the program it is for, as committed.

The Collector configs (the compose one and those in the k8s ConfigMaps) through
``otelcol-adk validate``, which builds every component from its config exactly as a start
would, without binding ports; Jaeger's through ``jaeger validate`` (Jaeger v2 is a
Collector distribution); Prometheus' with ``promtool check config`` (its rule files
included), the rules with ``promtool check rules`` and their unit tests with
``promtool test rules``; the PrometheusRule's rules through promtool too; Alertmanager's
with ``amtool check-config``. The programs are the ones `make stack-bin` builds, at the
versions deploy/'s images pin (tests/test_stack_versions.py). Where a file names a path
of the container it runs in, the path is mapped back to the repository file that
deploy/compose mounts there; nothing else is changed.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy_helpers import DEPLOY, RULE_TESTS, RULES, load_yaml, load_yaml_all
from tests.stack_programs import check, write_yaml

K8S = DEPLOY / "k8s"
COMPOSE = DEPLOY / "compose" / "docker-compose.yml"


def _out(res: subprocess.CompletedProcess[str]) -> str:
    return f"exit {res.returncode}\n{res.stdout}{res.stderr}"


def _k8s_collector_configs() -> dict[str, str]:
    """``file:ConfigMap`` -> the collector config text of every ConfigMap in deploy/k8s/
    (and its overlays) that holds one."""
    out: dict[str, str] = {}
    for path in sorted(K8S.rglob("*.yaml")):
        for doc in load_yaml_all(path):
            if not isinstance(doc, dict) or doc.get("kind") != "ConfigMap":
                continue
            for key, text in (doc.get("data") or {}).items():
                cfg = yaml.safe_load(text) if key.endswith((".yaml", ".yml")) else None
                if isinstance(cfg, dict) and "receivers" in cfg and "service" in cfg:
                    out[f"{path.relative_to(DEPLOY)}:{doc['metadata']['name']}/{key}"] = text
    return out


COLLECTOR_CONFIGS = {
    "otel-collector/config.yaml": (DEPLOY / "otel-collector" / "config.yaml").read_text(),
    **_k8s_collector_configs(),
}


def test_the_k8s_collector_configs_are_found() -> None:
    """The ConfigMaps read above are the gateway's and the sampler's (the search bites)."""
    names = {k.split(":", 1)[1] for k in COLLECTOR_CONFIGS if k.startswith("k8s/")}
    assert names >= {"otel-gateway-config/config.yaml", "otel-sampler-config/config.yaml"}


@pytest.mark.parametrize("name", sorted(COLLECTOR_CONFIGS))
def test_the_collector_validates_each_config(name: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(COLLECTOR_CONFIGS[name])
    res = check("otelcol-adk", ["validate", f"--config={config}"])
    assert res.returncode == 0, f"{name}: {_out(res)}"


def test_validate_refuses_an_integer_resolver_port(tmp_path: Path) -> None:
    """The gateway's ``resolver.dns.port`` is a string field: the YAML int 4317 the
    gateway once had makes the Collector refuse the whole config (defect 1), so the
    committed gateway config must quote it; this proves validate is the check that bites."""
    name = next(k for k in COLLECTOR_CONFIGS if k.endswith("otel-gateway-config/config.yaml"))
    text = COLLECTOR_CONFIGS[name]
    quoted = re.compile(r'^(\s*port:\s*)"4317"\s*$', re.MULTILINE)
    assert quoted.search(text), "the gateway's resolver port is no longer the string \"4317\""
    config = tmp_path / "config.yaml"
    config.write_text(quoted.sub(r"\g<1>4317", text))
    res = check("otelcol-adk", ["validate", f"--config={config}"])
    assert res.returncode != 0, _out(res)
    assert "port" in res.stdout + res.stderr, _out(res)


def test_validate_refuses_an_unknown_component(tmp_path: Path) -> None:
    """A component the distribution does not have (here the contrib ``spanmetrics``
    connector) fails validate: a passing validate means every component is built in."""
    cfg = yaml.safe_load(COLLECTOR_CONFIGS["otel-collector/config.yaml"])
    cfg["connectors"] = {"spanmetrics": {}}
    cfg["service"]["pipelines"]["traces"]["exporters"].append("spanmetrics")
    cfg["service"]["pipelines"]["metrics/spans"] = {"receivers": ["spanmetrics"],
                                                    "exporters": ["otlphttp/prometheus"]}
    res = check("otelcol-adk", ["validate", f"--config={write_yaml(tmp_path / 'c.yaml', cfg)}"])
    assert res.returncode != 0
    assert "spanmetrics" in res.stdout + res.stderr, _out(res)


# Collector v0.161.0 renamed these exporters; the names deploy/ uses are their deprecated
# aliases, which the factories still answer to (the validate tests above load them) but
# `components` does not list.
DEPRECATED_ALIASES = {("exporters", "otlp"): "otlp_grpc", ("exporters", "otlphttp"): "otlp_http",
                      ("exporters", "loadbalancing"): "load_balancing"}


def _used_component_types() -> dict[str, set[str]]:
    used: dict[str, set[str]] = {kind: set() for kind in
                                 ("receivers", "processors", "exporters", "extensions",
                                  "connectors")}
    for text in COLLECTOR_CONFIGS.values():
        cfg = yaml.safe_load(text)
        for kind in ("receivers", "processors", "exporters", "extensions", "connectors"):
            for name in cfg.get(kind) or {}:
                ctype = name.split("/", 1)[0]
                used[kind].add(DEPRECATED_ALIASES.get((kind, ctype), ctype))
    return used


def test_the_distribution_has_exactly_the_components_deploy_uses() -> None:
    """``otelcol-adk components`` (what the binary has) equals the component types that
    deploy/'s collector configs name: nothing missing, nothing built in for nothing."""
    res = check("otelcol-adk", ["components"])
    assert res.returncode == 0, _out(res)
    listed = yaml.safe_load(res.stdout)
    built = {kind: {str(c["name"]) for c in listed.get(kind) or []}
             for kind in ("receivers", "processors", "exporters", "extensions", "connectors")}
    used = _used_component_types()
    assert built == used


# --- Jaeger ---------------------------------------------------------------------


def test_jaeger_validates_its_config() -> None:
    res = check("jaeger", ["validate", f"--config={DEPLOY / 'jaeger' / 'config.yaml'}"])
    assert res.returncode == 0, _out(res)


def test_jaeger_validate_bites(tmp_path: Path) -> None:
    cfg = load_yaml(DEPLOY / "jaeger" / "config.yaml")
    cfg["exporters"]["jaeger_storage_exporter"]["trace_storage"] = "no-such-backend"
    cfg["extensions"]["jaeger_storage"]["backends"]["memstore"]["memory"]["max_traces"] = "many"
    res = check("jaeger", ["validate", f"--config={write_yaml(tmp_path / 'j.yaml', cfg)}"])
    assert res.returncode != 0, _out(res)


# --- Prometheus -------------------------------------------------------------------


def _compose_mounts(service: str) -> dict[str, Path]:
    """Container path -> repository path, for the bind mounts of one compose service."""
    out: dict[str, Path] = {}
    for volume in load_yaml(COMPOSE)["services"][service].get("volumes", []):
        source, target = str(volume).split(":")[:2]
        if source.startswith("."):
            out[target] = (COMPOSE.parent / source).resolve()
    return out


def _with_mounted_paths(config: dict[str, Any], mounts: dict[str, Path]) -> dict[str, Any]:
    """rule_files that name a container path, pointed at the repository path mounted there."""
    files = []
    for pattern in config.get("rule_files") or []:
        for target, source in mounts.items():
            if pattern.startswith(target + "/"):
                pattern = str(source) + pattern[len(target):]
        files.append(pattern)
    return {**config, "rule_files": files}


def test_promtool_checks_the_compose_prometheus_config_with_its_mounted_rules(
        tmp_path: Path) -> None:
    config = _with_mounted_paths(load_yaml(DEPLOY / "prometheus" / "prometheus.yml"),
                                 _compose_mounts("prometheus"))
    assert any(str(RULES.parent) in f for f in config["rule_files"]), config["rule_files"]
    res = check("promtool", ["check", "config",
                             str(write_yaml(tmp_path / "prometheus.yml", config))])
    assert res.returncode == 0, _out(res)
    assert f"SUCCESS: {len(load_yaml(RULES)['groups'][0]['rules'])} rules found" in res.stdout, \
        _out(res)


def test_promtool_checks_the_scrape_config() -> None:
    """prometheus-scrape.yml names its rules relative to itself: checked in place."""
    res = check("promtool", ["check", "config", "prometheus-scrape.yml"],
                cwd=DEPLOY / "prometheus")
    assert res.returncode == 0, _out(res)
    assert "rules found" in res.stdout, _out(res)


def test_promtool_checks_the_rules() -> None:
    res = check("promtool", ["check", "rules", str(RULES)])
    assert res.returncode == 0, _out(res)
    assert "SUCCESS" in res.stdout


def test_promtool_runs_the_rule_unit_tests() -> None:
    res = check("promtool", ["test", "rules", str(RULE_TESTS)])
    assert res.returncode == 0, _out(res)
    assert "SUCCESS" in res.stdout


def test_promtool_checks_the_prometheusrule_rules(tmp_path: Path) -> None:
    """The k8s PrometheusRule's spec is a rules file as far as Prometheus is concerned."""
    rule = next(d for d in load_yaml_all(K8S / "prometheusrule.yaml")
                if d["kind"] == "PrometheusRule")
    res = check("promtool", ["check", "rules",
                             str(write_yaml(tmp_path / "prometheusrule.yml", rule["spec"]))])
    assert res.returncode == 0, _out(res)
    assert "SUCCESS" in res.stdout


def test_promtool_check_rules_bites(tmp_path: Path) -> None:
    rules = load_yaml(RULES)
    rules["groups"][0]["rules"][0]["expr"] = "sum by (job) (rate(x[5m])"
    res = check("promtool", ["check", "rules", str(write_yaml(tmp_path / "r.yml", rules))])
    assert res.returncode != 0, _out(res)


# --- Alertmanager -------------------------------------------------------------------


def test_amtool_checks_the_alertmanager_config() -> None:
    res = check("amtool", ["check-config", str(DEPLOY / "alertmanager" / "alertmanager.yml")])
    assert res.returncode == 0, _out(res)
    assert "SUCCESS" in res.stdout, _out(res)


def test_amtool_check_config_bites(tmp_path: Path) -> None:
    cfg = load_yaml(DEPLOY / "alertmanager" / "alertmanager.yml")
    cfg["route"]["receiver"] = "no-such-receiver"
    res = check("amtool", ["check-config", str(write_yaml(tmp_path / "am.yml", cfg))])
    assert res.returncode != 0, _out(res)
    assert "no-such-receiver" in res.stdout + res.stderr, _out(res)
