"""The supported test surface: for tests of this package and of users' apps.

A test that needs more than the user-facing API (a scripted model, the tools' own
ground truth, a fresh ``configure_telemetry()``) uses what is here, never a private
attribute or an underscore module of the package: the package's insides may move in
any release, this module's names do not.

Rules:

* Stable within a minor release: a name here keeps its meaning in every x.y.*; a
  change or removal comes in a new minor and is listed in the changelog.
* For tests only: nothing in the package imports this module, and importing it installs
  nothing (no provider, no hook) and changes no process-wide state.
* Everything here is real (the ADK Runner, the OTel SDK, asyncio tasks): no mocks.
* One section per area (``# --- <area> ---``); each section extends ``__all__``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from . import configure
from .scenarios import (
    RUN_TAG,
    SCENARIOS,
    Harness,
    PerRunLlm,
    Probe,
    ScenarioRun,
    ScriptedLiveConnection,
    ScriptedLlm,
    TaskTruth,
    call,
    run_scenario,
    scenario_tools,
    scripted_agent,
    text,
)

__all__: list[str] = []

# --- scenarios ---
# The scripted model, the tools' ground truth and the scenario library that ``demo`` and
# ``audit`` run (adk_task_telemetry.scenarios): a test scripts an agent with
# ``scripted_agent(name, turns, tools)`` (turns of ``call(...)``/``text(...)`` parts),
# takes tools that record their bodies from ``scenario_tools(probe)``, or runs a named
# scenario with ``run_scenario(name, plugins)``; ``Probe`` says which bodies still run.


@contextlib.contextmanager
def unconfigured() -> Iterator[None]:
    """Inside the block, ``configure_telemetry()`` configures as in a fresh process
    (a handle an earlier test made is set aside, not shut down); on leaving, that
    earlier handle is the one the process keeps again. A handle made inside the block
    is the test's to shut down."""
    before = configure.replace_active(None)
    try:
        yield
    finally:
        configure.replace_active(before)


__all__ += ["RUN_TAG", "SCENARIOS", "Harness", "PerRunLlm", "Probe", "ScenarioRun",
            "ScriptedLiveConnection", "ScriptedLlm", "TaskTruth", "call", "run_scenario",
            "scenario_tools", "scripted_agent", "text", "unconfigured"]
