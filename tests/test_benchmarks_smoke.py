"""`python -m benchmarks.run --quick` runs and writes every section with sane numbers.

No assertion here is about time: the figures only have to exist, be finite and be
positive where a count, a duration or a rate must be.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("per_task", "runs", "sweep", "memory", "throughput", "goals")


def _numbers(obj: Any, path: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        yield path, float(obj)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{path}[{i}]")


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench")
    md = out / "bench.md"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--out", str(out),
         "--markdown", str(md)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    data: dict[str, Any] = json.loads((out / "quick.json").read_text())
    data["_markdown"] = md.read_text()
    return data


def test_every_section_present(quick: dict[str, Any]) -> None:
    for s in SECTIONS:
        assert s in quick, s
    assert quick["meta"]["quick"] is True
    assert "# Benchmarks" in quick["_markdown"]
    assert "benchmarks.run --quick" in quick["_markdown"]


def test_every_number_finite(quick: dict[str, Any]) -> None:
    for path, x in _numbers({k: v for k, v in quick.items() if k != "_markdown"}):
        assert math.isfinite(x), path


def test_per_task(quick: dict[str, Any]) -> None:
    pt = quick["per_task"]
    for name, s in pt["samples_ns"].items():
        assert _positive(s["median"]), name
    assert _positive(pt["samples_ns"]["floor_bare_span"]["median"])
    assert _positive(pt["plugin_ns"]["ledger_direct"])
    for k in ("ledger_direct", "plugin_callbacks", "plugin_runner"):
        assert math.isfinite(pt["ratio_to_floor"][k]), k


def test_runs(quick: dict[str, Any]) -> None:
    ru = quick["runs"]
    assert {"none", "plugin_only", "adk", "adk_null_plugin", "adk_plugin"} <= set(ru["variants"])
    assert "adk_openinference" in ru["variants"] or ru["skipped"].get("adk_openinference")
    for calls in ("1", "10", "100"):
        for v in ru["variants"]:
            cell = ru["results"][calls][v]
            assert _positive(cell["ms_per_run"]["median"]), (calls, v)
            assert _positive(cell["ratio_to_baseline"]), (calls, v)
            assert math.isfinite(cell["added_pct"]), (calls, v)
    assert ru["plugin_state_size_after"]["adk_plugin"] == [0, 0]
    assert ru["plugin_state_size_after"]["plugin_only"] == [0, 0]


def test_sweep(quick: dict[str, Any]) -> None:
    sw = quick["sweep"]
    assert [r["open_tasks"] for r in sw["by_open_tasks"]][:2] == [1, 10]
    for r in sw["by_open_tasks"]:
        assert _positive(r["us"]["median"])
        assert _positive(r["us_per_open_task"])
    osp = sw["open_span_processor"]
    if "skipped" not in osp:
        assert _positive(osp["span_ratio_with_to_without"])
        for r in osp["idle_sweep_by_unrelated_open_spans"]:
            assert _positive(r["us_idle_run"]["median"])
    for r in sw["by_ended_history"]:
        assert r["state_size"] == [0, 0]
        assert _positive(r["us_idle_run"]["median"])
        assert _positive(r["us_10_open"]["median"])


def test_memory(quick: dict[str, Any]) -> None:
    me = quick["memory"]
    assert me["tool_tasks"] > 0
    assert all(_positive(r["rss_bytes"]) for r in me["rss_checkpoints"])
    assert me["state_size_after"] == {"rss_pass": [0, 0], "tracemalloc_pass": [0, 0]}
    assert _positive(me["tracemalloc"]["peak_above_start_bytes"])


def test_throughput(quick: dict[str, Any]) -> None:
    tp = quick["throughput"]
    assert _positive(tp["harness_with_plugin_tasks_per_s"]["median"])
    assert _positive(tp["harness_alone_tasks_per_s"]["median"])
    assert math.isfinite(tp["plugin_only_tasks_per_s"])
    assert tp["state_size_after"] == [0, 0]


@pytest.mark.parametrize("module, says", [
    ("benchmarks.bench_curve", "to the first level"),
    ("benchmarks.bench_orphans", "orphans alive"),
    ("benchmarks.bench_memory", "bytes per open task"),
    ("benchmarks.bench_server", "tool_task spans received; 0 failed runs"),
    ("benchmarks.bench_export", "CPU per span"),
    ("benchmarks.bench_stuck_sweep", "open tasks: sweep (none due)"),
])
def test_curve_benchmarks_run(module: str, says: str) -> None:
    """Issue 24's curves, at a smoke size: they run (through a real Runner; the export's
    through the plugin's callbacks and a real OTLP receiver) and print their figures
    (nothing about time is asserted)."""
    proc = subprocess.run([sys.executable, "-m", module, "--quick"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert says in proc.stdout
    assert "nan" not in proc.stdout.lower()
