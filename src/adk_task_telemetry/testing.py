"""The supported test surface of adk_task_telemetry: for tests of this package and of
users' apps. Stable within a minor release; what it offers never needs a private
attribute of the package, so a refactor of the internals does not break the tests
that use it.

Each section is owned by one part of the package.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opentelemetry import metrics, trace

from . import adk_compat as _compat
from .engine import stuck_sweep as _stuck
from .engine.records import Options, RunRecord, RunStart, TaskRecord, ToolIdentity
from .engine.tracker import Tracker
from .scenarios import RUN_TAG as RUN_TAG
from .scenarios import SCENARIOS as SCENARIOS
from .scenarios import Harness as Harness
from .scenarios import PerRunLlm as PerRunLlm
from .scenarios import Probe as Probe
from .scenarios import ScenarioRun as ScenarioRun
from .scenarios import ScriptedLiveConnection as ScriptedLiveConnection
from .scenarios import ScriptedLlm as ScriptedLlm
from .scenarios import TaskTruth as TaskTruth
from .scenarios import call as call
from .scenarios import run_scenario as run_scenario
from .scenarios import scenario_tools as scenario_tools
from .scenarios import scripted_agent as scripted_agent
from .scenarios import text as text

# --- compat ---


@contextlib.contextmanager
def fresh_adk_notes(installed: str | None = None) -> Iterator[None]:
    """Inside the block, the once-per-process notes about the installed google-adk
    (newer than the newest tested, an INFO record; probes decided without ADK's source,
    a WARNING) are made afresh, as if google-adk ``installed`` were installed (None:
    the real one). After it, the state before is back: a note made in the block does
    not count for the process.

    Feature probes are not re-run: ``installed`` changes only what the notes say and
    whether the "newer than tested" one is due.
    """
    with _compat.fresh_notes(installed):
        yield


# --- house ---


@contextlib.contextmanager
def configure_afresh() -> Iterator[None]:
    """Inside: ``configure_telemetry()`` behaves as if it had not run in this process
    (the next call sets up, rather than returning the earlier handle). Afterwards the
    earlier handle is the active one again. Providers a call inside installed stay
    installed: OpenTelemetry sets a global provider only once per process."""
    from . import configure

    earlier = configure.replace_active(None)
    try:
        yield
    finally:
        configure.replace_active(earlier)


# --- tracker ---
# The lifecycle engine driven directly, without ADK (benchmarks, unit checks), and a
# way to make it fail inside (robustness tests). ``Tracker``, ``RunRecord`` and
# ``TaskRecord`` are handed out as opaque values: pass them back to these helpers.

#: The tracker verbs that the plugin's callbacks call (``failing_tracker`` breaks them).
_PLUGIN_VERBS = ("run_started", "run_of", "event_seen", "run_step", "calls_seen", "run_ended",
                 "closed", "tool_started", "current", "returned_here", "raised_here",
                 "bind_thread_work")


def tracker(tracer_provider: trace.TracerProvider | None = None,
            meter_provider: metrics.MeterProvider | None = None, *,
            max_open_tasks: int = 10_000) -> Tracker:
    """A tracker of its own (what one plugin instance holds), on these providers."""
    return Tracker(tracer_provider, meter_provider, Options(max_open_tasks=max_open_tasks))


def start_run(tracker: Tracker, invocation_id: str, *, app_name: str = "bench",
              conversation_id: str | None = "session-1") -> RunRecord:
    """A run, as ``before_run_callback`` starts one, with no ADK span or task: it
    ends when ``end_run`` (or the process's exit sweep) says so."""
    return tracker.run_started(RunStart(invocation_id, app_name, conversation_id))


def open_call(tracker: Tracker, run: RunRecord, call_id: str, *, task: Any = None,
              tool_name: str = "fetch", agent_name: str = "worker") -> TaskRecord | None:
    """A tool call of ``run``, as ``before_tool_callback`` opens one: bound to
    ``task`` (its end is the call's end), or, with ``task`` None, ended by its
    callbacks (``return_call``). None where ``max_open_tasks`` records are open."""
    identity = ToolIdentity(tool_name, "FunctionTool", agent_name, "call", run.app_name)
    return tracker.tool_started(run.invocation_id, call_id, identity,
                                tracker.metrics.series_for(identity), task)


def return_call(tracker: Tracker, record: TaskRecord) -> None:
    """The call produced its result (``after_tool_callback``)."""
    tracker.returned(record)


def end_run(tracker: Tracker, run: RunRecord, trigger: str = "after_run") -> None:
    """ADK said the run ended (``after_run_callback`` by default): each call still
    running becomes an orphan."""
    tracker.run_ended(run, trigger)


@contextlib.contextmanager
def failing_tracker(error: BaseException | None = None) -> Iterator[None]:
    """Inside the block, every tracker verb that a plugin callback calls raises
    ``error`` (default ``RuntimeError``): a forced failure inside the plugin's own
    code, which it must swallow and count (``TaskTelemetryPlugin.internal_errors``)
    without breaking the user's run."""
    failure = error if error is not None else RuntimeError("forced by failing_tracker")

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise failure

    # A verb of the tracker's base class (its books) is shadowed, then unshadowed.
    saved = {name: vars(Tracker).get(name) for name in _PLUGIN_VERBS}
    try:
        for name in _PLUGIN_VERBS:
            setattr(Tracker, name, broken)
        yield
    finally:
        for name, verb in saved.items():
            if verb is None:
                delattr(Tracker, name)
            else:
                setattr(Tracker, name, verb)


# --- scenarios ---
# The scripted model, the tools' ground truth and the scenario library that ``demo`` and
# ``audit`` run (adk_task_telemetry.scenarios), re-exported above: a test scripts an
# agent with ``scripted_agent(name, turns, tools)`` (turns of ``call(...)``/``text(...)``
# parts) or a ``ScriptedLlm`` of its own, takes tools that record their bodies from
# ``scenario_tools(probe)``, or runs a named scenario with ``run_scenario(name,
# plugins)``; a ``Probe`` says which tool bodies still run (``pending()``) and how each
# ended (``records``), never asking the plugin.

# --- server ---
# The benchmarks' load model: ``FanOutLlm(tool, calls)`` asks for ``calls`` parallel
# calls of ``tool`` in a run's first turn and answers "done" once they are back,
# reading the turn from the request, so one instance serves many concurrent runs (ADK's
# server in benchmarks/bench_server.py, the held runs of benchmarks/bench_curve.py).
from .scenarios import FanOutLlm as FanOutLlm  # noqa: E402

# --- closeflush ---


@contextlib.contextmanager
def close_metrics_every(seconds: float) -> Iterator[None]:
    """Inside the block, a Runner's close collects metrics at most once per ``seconds``
    (``close_flush.CLOSE_METRICS_EVERY_S``, 1 s): a test that needs a close to fall inside
    the interval on a loaded machine widens it, rather than racing the clock."""
    from .lifecycle import close_flush

    before = close_flush.CLOSE_METRICS_EVERY_S
    close_flush.CLOSE_METRICS_EVERY_S = seconds
    try:
        yield
    finally:
        close_flush.CLOSE_METRICS_EVERY_S = before


def stuck_sweeps() -> int:
    """Stuck sweeps done so far in this process: the positive signal a test waits for
    (a sweep after the one it waits on has seen every task as it is now)."""
    return _stuck.sweeps()


def sweep_stuck() -> None:
    """One stuck sweep of every loop's watched tasks now, as the loop's timer would do
    (reports those due; a task that ended is never told)."""
    _stuck.sweep()
