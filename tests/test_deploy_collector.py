"""The collector config uses only components it declares, and samples as documented."""

from __future__ import annotations

import copy
from typing import Any

from .deploy_helpers import DEPLOY, load_yaml, validate_collector

CONFIG = DEPLOY / "otel-collector" / "config.yaml"


def _config() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml(CONFIG)
    return data


def test_every_component_is_declared_and_used() -> None:
    assert validate_collector(_config()) == []


def test_the_validator_catches_undeclared_and_unused_components() -> None:
    cfg = copy.deepcopy(_config())
    cfg["service"]["pipelines"]["traces"]["processors"].insert(1, "attributes/missing")
    cfg["exporters"]["debug"] = {}
    errors = validate_collector(cfg)
    assert any("'attributes/missing' is not declared" in e for e in errors), errors
    assert any("'debug' is declared but used nowhere" in e for e in errors), errors


def test_pipelines_and_receivers() -> None:
    cfg = _config()
    otlp = cfg["receivers"]["otlp"]["protocols"]
    assert otlp["grpc"]["endpoint"].endswith(":4317")
    assert otlp["http"]["endpoint"].endswith(":4318")
    pipes = cfg["service"]["pipelines"]
    assert pipes["traces"]["processors"] == [
        "memory_limiter", "transform/local_root", "tail_sampling", "transform/restore_parent",
        "batch"]
    assert pipes["metrics"]["processors"] == ["memory_limiter", "batch"]
    assert pipes["traces"]["exporters"] == ["otlp/jaeger"]
    assert pipes["metrics"]["exporters"] == ["otlphttp/prometheus"]
    # Log records are not sampled: every one is evidence (an orphan, an unanswered call).
    assert pipes["logs"] == {"receivers": ["otlp"], "processors": ["memory_limiter", "batch"],
                             "exporters": ["otlphttp/victorialogs"]}


def test_tail_sampling_keeps_orphaned_stuck_and_errored_tool_tasks() -> None:
    ts = _config()["processors"]["tail_sampling"]
    policies = {p["name"]: p for p in ts["policies"]}
    ottl = next(p for p in policies.values() if p["type"] == "ottl_condition")
    span_conds = " ".join(ottl["ottl_condition"]["span"])
    assert 'attributes["adk.tool_task.outcome"] == "orphaned"' in span_conds
    assert 'attributes["adk.tool_task.outcome"] == "error"' in span_conds
    assert 'name == "orphaned_task"' in ottl["ottl_condition"]["spanevent"]
    # A task found stuck, whatever its outcome (tests/stack/test_stuck_live.py).
    assert 'name == "stuck_task"' in ottl["ottl_condition"]["spanevent"]
    assert any(p["type"] == "status_code" for p in policies.values())
    rest = [p for p in policies.values() if p["type"] == "probabilistic"]
    assert rest and 0 < rest[0]["probabilistic"]["sampling_percentage"] < 100
    # late spans of a kept trace (an orphan's run span) follow the cached decision
    assert ts["decision_cache"]["sampled_cache_size"] >= ts["num_traces"]


def test_memory_limiter_is_configured() -> None:
    ml = _config()["processors"]["memory_limiter"]
    assert ml["check_interval"] and ml["limit_mib"] > ml["spike_limit_mib"] > 0


def test_num_traces_fits_under_the_memory_limit_at_the_measured_size() -> None:
    """Issue 32 item 5: each sampler's num_traces is what its memory_limiter's soft
    limit holds at the measured bytes per held trace (tests/sampler_capacity.py), so
    num_traces evicts the oldest undecided traces (counted) before the limiter refuses
    new data (agents' spans and metrics alike); and not far below it, wasting memory."""
    from .sampler_capacity import MEASURED, capacities

    for name, cap in capacities(MEASURED["bytes_per_held_trace"],
                                MEASURED["idle_heap_mib"]).items():
        assert cap["num_traces_fits"], (name, cap)
        assert cap["num_traces"] >= 0.8 * cap["traces_that_fit"], (name, cap)


def test_the_trace_is_decided_on_the_local_root_and_its_parent_restored() -> None:
    """Both sampler configs clear a remote parent before tail_sampling and restore it
    after (tests/stack/test_traceparent_sampling.py runs them)."""
    from .sampler_capacity import compose_collector, sampler_configmap

    for cfg in (compose_collector(), sampler_configmap()):
        procs = cfg["service"]["pipelines"]["traces"]["processors"]
        i = procs.index("tail_sampling")
        assert procs[i - 1] == "transform/local_root" and procs[i + 1] == "transform/restore_parent"
        assert (cfg["processors"]["transform/local_root"]
                == compose_collector()["processors"]["transform/local_root"])
        assert (cfg["processors"]["transform/restore_parent"]
                == compose_collector()["processors"]["transform/restore_parent"])
