"""adk_task_telemetry.testing, as a test needs it: importing it installs nothing (a test
surface must not change the process it tests), and the scenario section's names are
there."""

from __future__ import annotations

import subprocess
import sys

from adk_task_telemetry import testing

#: The scenarios section (docs/pytest.md lists them for users' tests).
SCENARIO_NAMES = ("RUN_TAG", "SCENARIOS", "Harness", "PerRunLlm", "Probe", "ScenarioRun",
                  "ScriptedLiveConnection", "ScriptedLlm", "TaskTruth", "call", "run_scenario",
                  "scenario_tools", "scripted_agent", "text")


def test_the_scenario_names_are_exported() -> None:
    assert [n for n in SCENARIO_NAMES if not hasattr(testing, n)] == []


def test_importing_it_installs_no_provider() -> None:
    code = ("from opentelemetry import trace, metrics\n"
            "import adk_task_telemetry.testing\n"
            "print(type(trace.get_tracer_provider()).__name__,"
            " type(metrics.get_meter_provider()).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["ProxyTracerProvider", "_ProxyMeterProvider"], out.stdout
