"""A nested run's task is judged when the caller sees its run end (issue 23, item 4).

On ADK 1.x, when a caller's timeout (or a cancelled consumer) cuts a run whose step
awaits an AgentTool call (a nested run) beside a sibling, the step's ``gather`` returns
at the first cancelled child: ADK's run span ends while the AgentTool's task still
unwinds its nested run, and finishes a moment before the caller's cut task is done.
That task ended inside its run: it must not be reported orphaned. A tool that keeps
working 300 ms after its cancellation (``stubborn_slow``) still must be, nested or not.
Each shape runs through the randomized test's harness and oracle (``cut_seen_ns``,
``done_at_cut``: the tools' own record of what was done when the caller saw the end).
"""

from __future__ import annotations

import pytest

from .conftest import Telemetry
from .lifecycle_generator import CallSpec, Spec, run_spec
from .test_lifecycle_random import _run_and_check

#: The AgentTool call beside a sibling that is cancelled at once: the run span ends
#: while the nested run unwinds (the shape that was reported orphaned on 1.39.1).
NESTED_UNWINDING = [
    Spec(-20, "async", ((CallSpec("hang", "c2"), CallSpec("agent_tool", "c1")),),
         "timeout_run", 1, nested=(CallSpec("hang", "s1"),)),
    Spec(-21, "async", ((CallSpec("hang", "c2"), CallSpec("agent_tool", "c1")),),
         "timeout_event", 1, nested=(CallSpec("fast", "s0"), CallSpec("hang", "s1"))),
    Spec(-22, "async", ((CallSpec("agent_tool", "c1"), CallSpec("hang", "c2")),),
         "cancel", 1, nested=(CallSpec("hang", "s1"),)),
]
#: Tools that keep working 300 ms past their cancellation: orphans, beside the nested
#: run or inside it (the AgentTool's task waits for its nested tool, so both are).
STUBBORN = [
    Spec(-23, "async", ((CallSpec("agent_tool", "c1"), CallSpec("stubborn_slow", "c2")),),
         "timeout_run", 1, nested=(CallSpec("hang", "s1"),)),
    Spec(-24, "async", ((CallSpec("hang", "c2"), CallSpec("agent_tool", "c1")),),
         "timeout_event", 1, nested=(CallSpec("stubborn_slow", "s1"),)),
]


@pytest.mark.parametrize("spec", NESTED_UNWINDING + STUBBORN, ids=lambda s: f"shape{-s.seed}")
async def test_nested_run_cut(spec: Spec, telemetry: Telemetry,
                              caplog: pytest.LogCaptureFixture) -> None:
    await _run_and_check(spec, telemetry, caplog)


@pytest.mark.parametrize("spec", STUBBORN, ids=lambda s: f"shape{-s.seed}")
async def test_a_stubborn_tool_is_an_orphan_however_the_run_ends(
        spec: Spec, telemetry: Telemetry) -> None:
    """The 300 ms tool, still working when the caller saw its run end (ADK 1.x: the
    step's gather left it behind), is reported orphaned, not merely allowed to be: the
    wait for the caller's cut task is no grace for a tool that keeps working. Where
    ADK waits for it before the run ends (2.x), it ended inside the run: cancelled."""
    plugin = telemetry.plugin()
    outcome, handle = await run_spec(spec, [plugin])
    try:
        assert outcome.cut_seen_ns, "the caller did not cut the run"
        stubborn = [t for t in outcome.truth.records if t.tool == "stubborn_slow"]
        assert stubborn, "the cut came before the turn"
        said = {str((s.attributes or {}).get("gen_ai.tool.call.id")):
                (s.attributes or {}).get("adk.tool_task.outcome") for s in telemetry.tool_spans()}
        for task in stubborn:
            inside = any(t is task for t in outcome.done_at_cut)
            assert said.get(task.call_id) == ("cancelled" if inside else "orphaned"), said
    finally:
        await handle.close()
