"""Orphans, metrics and unanswered calls do not depend on the sampler.

An unsampled trace costs the plugin only what metrics, orphan detection and the
ledger need; this holds that what they report stays exactly the same under
``ALWAYS_OFF``, a 1 % ``ParentBased`` sampler and ``ALWAYS_ON``, on the whole
scenario corpus (each sampler in a process of its own: ADK traces with the global
provider).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _report(sampler: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "tests.sampling_run", sampler], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def reports() -> dict[str, dict[str, Any]]:
    return {s: _report(s) for s in ("always_on", "always_off", "ratio")}


def test_the_reference_run_reports_every_kind_of_finding(
        reports: dict[str, dict[str, Any]]) -> None:
    """The comparison below means something: orphans, errors and unanswered calls occur."""
    on = reports["always_on"]
    outcomes = {row[5] for row in on["seen"] if row[0] == "task"}
    assert {"ok", "error", "cancelled", "orphaned"} <= outcomes
    assert any(row[0] == "unanswered" for row in on["seen"])
    assert on["tool_spans"] > 0
    assert reports["always_off"]["tool_spans"] == 0  # nothing was recorded there


@pytest.mark.parametrize("sampler", ["always_off", "ratio"])
def test_findings_are_the_same_whatever_the_sampler(
        sampler: str, reports: dict[str, dict[str, Any]]) -> None:
    on, other = reports["always_on"], reports[sampler]
    assert other["seen"] == on["seen"]
    assert other["metrics"] == on["metrics"]
    assert other["state"] == on["state"] == [0, 0, 0]
    assert other["internal_errors"] == on["internal_errors"] == 0
