"""How many held traces each committed tail-sampling config fits under its memory limit,
from the measured bytes per held trace (tests/stack/sampler_sizing.py measures them;
docs/deploy.md gives the figures; tests/test_deploy_collector.py holds the configs'
``num_traces`` to them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
SAMPLER = DEPLOY / "k8s" / "otel-sampler.yaml"
COLLECTOR = DEPLOY / "otel-collector" / "config.yaml"
#: An LRU entry of the decision caches (golang-lru: map slot, list element, 16-byte
#: trace id), estimated, not measured.
CACHE_BYTES_PER_ID = 100
#: `make sampler-sizing` (python -m tests.stack.sampler_sizing --runs 1200) on
#: otelcol-adk 0.161.0, 2026-12-05: 1,249 traces held (the traced-caller mix: 85 %
#: three parallel tools, 5 % a failing tool, 10 % a live orphan), heap +20.6 MiB.
MEASURED = {"bytes_per_held_trace": 17329, "idle_heap_mib": 4.0}


def sampler_configmap() -> Any:
    """The sampler tier's collector config (the ConfigMap of deploy/k8s/otel-sampler.yaml)."""
    for doc in yaml.safe_load_all(SAMPLER.read_text()):
        if doc and doc.get("kind") == "ConfigMap":
            return yaml.safe_load(doc["data"]["config.yaml"])
    raise AssertionError(f"no ConfigMap in {SAMPLER}")


def compose_collector() -> Any:
    return yaml.safe_load(COLLECTOR.read_text())


def sampler_memory_limit_mib() -> float:
    """The sampler container's memory limit (the StatefulSet's resources)."""
    for doc in yaml.safe_load_all(SAMPLER.read_text()):
        if doc and doc.get("kind") == "StatefulSet":
            limits = doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
            value = str(limits["memory"])
            return float(value[:-2]) * {"Gi": 1024.0, "Mi": 1.0}[value[-2:]]
    raise AssertionError(f"no StatefulSet in {SAMPLER}")


def soft_limit_mib(cfg: Any, container_mib: float | None) -> float:
    """memory_limiter's soft limit, limit - spike (in MiB, or percentages of the
    container's limit): above it the limiter collects garbage and refuses data."""
    ml = cfg["processors"]["memory_limiter"]
    if "limit_mib" in ml:
        return float(ml["limit_mib"] - ml["spike_limit_mib"])
    assert container_mib is not None
    return container_mib * (ml["limit_percentage"] - ml["spike_limit_percentage"]) / 100


def capacity(cfg: Any, container_mib: float | None, bytes_per_trace: float,
             idle_heap_mib: float) -> dict[str, Any]:
    """(soft limit - idle heap - decision caches) / bytes per held trace."""
    ts = cfg["processors"]["tail_sampling"]
    caches = (ts["decision_cache"]["sampled_cache_size"]
              + ts["decision_cache"]["non_sampled_cache_size"]) * CACHE_BYTES_PER_ID
    soft = soft_limit_mib(cfg, container_mib) * 2**20
    fits = int((soft - idle_heap_mib * 2**20 - caches) / bytes_per_trace)
    return {"soft_limit_mib": round(soft / 2**20), "caches_mib": round(caches / 2**20, 1),
            "traces_that_fit": fits, "num_traces": ts["num_traces"],
            "num_traces_fits": ts["num_traces"] <= fits}


def capacities(bytes_per_trace: float, idle_heap_mib: float) -> dict[str, dict[str, Any]]:
    return {"compose": capacity(compose_collector(), None, bytes_per_trace, idle_heap_mib),
            "k8s_sampler": capacity(sampler_configmap(), sampler_memory_limit_mib(),
                                    bytes_per_trace, idle_heap_mib)}
