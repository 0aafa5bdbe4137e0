"""What ADK's signals mean for a tool task.

The tracker knows states and transitions; which ADK signal ends which task, and what
ADK's behaviour implies about an end, is written here once. Pure functions of the
tracker's own values (a kind, a trigger, an exception), except ``task_kind`` (reads a
tool and a context through ``access``) and ``caller_closed_run`` (reads the exception
in flight): none raises; an unrecognised input gives the plain answer (``call``,
False, no cause beyond the documented ones).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from .. import semconv as _sc
from .access import (
    ADK_DIR,
    is_live,
    is_long_running_tool,
    is_non_blocking_tool,
    is_streaming_tool,
)

#: Kinds that run inside one step of the run (the task running that step awaits
#: them): they cannot legitimately outlive the task that drove the step.
STEP_KINDS = frozenset({_sc.Kind.CALL, _sc.Kind.LONG_RUNNING})


def task_kind(tool: Any, ctx: Any) -> str:
    """The contract's ``adk.tool_task.kind`` of a call to ``tool`` in run ``ctx``."""
    if is_long_running_tool(tool):
        return _sc.Kind.LONG_RUNNING
    if is_live(ctx):
        if is_streaming_tool(tool):
            return _sc.Kind.STREAMING
        if is_non_blocking_tool(tool):
            return _sc.Kind.NON_BLOCKING
    return _sc.Kind.CALL


def works_in_background(kind: str) -> bool:
    """A live streaming dispatch only returns "pending": the work goes on in the
    background task ADK registers before ``after_tool_callback`` (streaming_task_for)."""
    return kind == _sc.Kind.STREAMING


def kinds_ended_by(trigger: str, driver_is_run: bool) -> frozenset[str] | None:
    """Which open tasks of a run a run-end trigger ends (None: all of them). Each
    trigger's whole rule is here, with ``caller_cut_run`` below:

    - ``after_run``, ``run_error``, ``live_teardown``, ``plugin_close`` and
      ``shutdown`` end the run. ``plugin_close`` is applied only to runs no longer
      running (``RunRecord.still_running``): ``Runner.close()`` does not stop runs
      in progress, and one plugin may serve many Runners.
    - ``run_task_done``: the task driving the run's current step ended. If ADK made
      that task for the run alone (2.x live), the run is over. If it is a caller's
      task, the caller may hand the run's generator on to another task (a
      ``wait_for(anext(...))`` per event does), so only the tasks of that step end.
    - ``run_span_end``: ADK's run span ended (all of the run's tasks end); whether
      the caller cut the run is read from what passed through it
      (``span_end_cut_run``).
    """
    if trigger == _sc.EndTrigger.RUN_TASK_DONE and not driver_is_run:
        return STEP_KINDS
    return None


#: Triggers that mean the caller stopped the run before it finished, once they end
#: it (the reason of an unanswered call whose own task explains nothing).
_CALLER_ENDS = frozenset({_sc.EndTrigger.RUN_TASK_DONE, _sc.EndTrigger.LIVE_TEARDOWN,
                          _sc.EndTrigger.PLUGIN_CLOSE})


def caller_cut_run(trigger: str) -> bool:
    """Whether a run that ``trigger`` ended was stopped by its caller (part of the
    trigger's rule: ``kinds_ended_by``). Never for ``run_span_end``, which tells it
    when the span ends (``span_end_cut_run``)."""
    return trigger in _CALLER_ENDS


def span_end_cut_run(error: BaseException | None) -> bool:
    """ADK's run span ended with ``error`` passing through it, and no other signal had
    ended the run: the caller cut it, unless the run raised an ``Exception`` (a
    ``CancelledError`` or ``GeneratorExit`` is the caller's doing)."""
    return not isinstance(error, Exception)


def cancellation_unwinds_step(error: BaseException | None) -> bool:
    """ADK's run span ended with ``error`` passing through it: a cancellation (a
    caller's timeout, a cancelled consumer) unwinds the task driving the run. ADK 1.x's
    step ``gather`` returns at its first cancelled child, so the span may end while the
    step's other tool tasks still unwind their own cancellation (an AgentTool's nested
    run takes a few loop turns): the run is over when that driving task is done.
    Only the tasks with a cancellation in flight (``cancellation_in_flight``) are still
    unwinding it: a task that nothing cancelled (the sibling of a tool that raised
    ``CancelledError`` by itself, ADK issue 7172) runs on and is an orphan at once."""
    return isinstance(error, asyncio.CancelledError)


def cancellation_in_flight(task: asyncio.Task[Any]) -> bool:
    """Whether a cancellation was requested of the unfinished ``task`` (its
    ``Task.cancelling()`` count, Python 3.11 on): when a step's ``gather`` is cancelled
    it cancels each child, and a child still running is unwinding that cancellation.
    Python 3.10 cannot tell: there every unfinished task of a step a cancellation
    unwinds counts as unwinding it (docs/telemetry.md, *When a cut run ends*)."""
    cancelling = getattr(task, "cancelling", None)
    return cancelling is None or cancelling() > 0


def cancelled_itself(task: asyncio.Task[Any]) -> bool:
    """A cancelled ``task`` whose ``cancel()`` nobody called: its own code raised
    CancelledError (a client library cancelling its own future, ADK issue 7172).
    ``Task.cancelling()`` counts the requests (Python 3.11+); on 3.10, which cannot
    tell, every cancellation counts as requested (the rule of ``cancel_cause``)."""
    cancelling = getattr(task, "cancelling", None)
    return cancelling is not None and cancelling() == 0


def caller_closed_run() -> bool:
    """Whether ADK runs ``after_run_callback`` now because the caller closed the run.

    ADK 2.x calls it from a ``finally`` of its run generator also when the caller
    closes that generator early (``aclose()``, or asyncio's finaliser of an abandoned
    one: a ``GeneratorExit``) or stops ``Runner.run``'s thread or aborts the run (a
    ``CancelledError`` it treats as closing early); a run its caller cut otherwise
    skips after_run. That exception is in flight, with ADK's frames in its
    traceback, while the callback runs: read it there, before any await. 1.x calls
    after_run only for a completed run.
    """
    error = sys.exc_info()[1]
    if not isinstance(error, (GeneratorExit, asyncio.CancelledError)):
        return False
    tb = error.__traceback__
    while tb is not None:
        if ADK_DIR in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


def is_tool_error(error: BaseException) -> bool:
    """Whether ``on_tool_error_callback`` reports a real error. From 2.13 on ADK also
    reports a cancellation there; the task's own end tells that better."""
    return isinstance(error, Exception)


def cancel_cause(kind: str, sibling_failed: bool) -> str:
    """Why ADK cancelled a task, when nothing told us before the cancellation.

    Live background tools are cancelled by the run's teardown; a call is cancelled
    because a sibling in its step raised (ADK cancels the rest), else because the
    caller went away (timeout, cancelled consumer, aclose, abort signal).
    """
    if kind in (_sc.Kind.STREAMING, _sc.Kind.NON_BLOCKING):
        return _sc.CancelCause.RUN_TEARDOWN
    if sibling_failed:
        return _sc.CancelCause.SIBLING_FAILED
    return _sc.CancelCause.CALLER_CANCELLED


def marks_sibling_failure(kind: str) -> bool:
    """A call that raises makes ADK cancel the unfinished calls of its step."""
    return kind == _sc.Kind.CALL
