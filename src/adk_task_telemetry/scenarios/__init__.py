"""Scripted lifecycle scenarios shared by the CLI demo, the audit and the tests.

The randomized generator the lifecycle tests use is not here: it is test code
(``tests/lifecycle_generator.py``) and does not ship in the wheel."""

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

__all__ = ["SCENARIOS", "Probe", "Scenario", "ScenarioRun", "ScriptedLlm", "call",
           "run_concurrent_mixed", "run_parallel_calls", "run_scenario", "text"]
