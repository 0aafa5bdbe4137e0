"""Scripted lifecycle scenarios shared by the CLI demo, the audit and the tests.

The scenario library (``library``: the named scenarios and the runs of them) runs
through the real ADK Runner (``runs``: what a scenario is, what its run recorded, the
Harness) with a scripted model (``model``) whose tools (``tools``) record what they did
in a :class:`Probe` (``probe``): the one fake model and the one ground-truth recorder of
the project. The randomized generator the lifecycle tests use is not here: it is
test code (``tests/lifecycle_generator.py``) and does not ship in the wheel."""

from .library import SCENARIOS, run_concurrent_mixed, run_parallel_calls, run_scenario
from .model import RUN_TAG, FanOutLlm, PerRunLlm, ScriptedLiveConnection, ScriptedLlm, call, text
from .probe import Probe, TaskTruth
from .runs import Harness, Scenario, ScenarioRun
from .tools import scenario_tools, scripted_agent

__all__ = ["RUN_TAG", "SCENARIOS", "FanOutLlm", "Harness", "PerRunLlm", "Probe", "Scenario",
           "ScenarioRun", "ScriptedLiveConnection", "ScriptedLlm", "TaskTruth", "call",
           "run_concurrent_mixed", "run_parallel_calls", "run_scenario", "scenario_tools",
           "scripted_agent", "text"]
