"""Scripted lifecycle scenarios shared by the CLI demo, the audit and the tests."""

from .generated import Spec, generate, run_spec
from .library import (
    SCENARIOS,
    Probe,
    Scenario,
    ScenarioRun,
    run_concurrent_mixed,
    run_parallel_calls,
    run_scenario,
)
from .model import ScriptedLlm, call, text

__all__ = ["SCENARIOS", "Probe", "Scenario", "ScenarioRun", "ScriptedLlm", "Spec", "call",
           "generate", "run_concurrent_mixed", "run_parallel_calls", "run_scenario", "run_spec",
           "text"]
