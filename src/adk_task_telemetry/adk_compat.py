"""Everything that differs between the google-adk versions we support, in one place.

Supported and tested: 1.39.1, 2.12.0 and 2.13.x. Everything here reads ADK state
defensively: a shape we do not recognise yields ``None``, never an exception.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import weakref
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from . import semconv as _sc

logger = logging.getLogger("adk_task_telemetry")
_SEP = os.sep


def _parse(v: str) -> tuple[int, int, int]:
    parts = [int("".join(ch for ch in p if ch.isdigit()) or 0) for p in v.split(".")[:3]]
    major, minor, micro = [*parts, 0, 0, 0][:3]
    return major, minor, micro


try:
    ADK_VERSION_STRING = version("google-adk")
except PackageNotFoundError:  # pragma: no cover - ADK is a dependency
    ADK_VERSION_STRING = "0.0.0"
ADK_VERSION = _parse(ADK_VERSION_STRING)

#: ADK keeps live background tools per function-call id from 2.13 on (the fix of
#: issue 7058); before that, per tool name.
HAS_BACKGROUND_TOOL_REGISTRY = ADK_VERSION >= (2, 13, 0)
#: ``on_run_error_callback`` exists only in 2.x.
HAS_RUN_ERROR_CALLBACK = ADK_VERSION >= (2, 0, 0)
#: ADK 1.x fires no plugin hook when a live run tears down its background tools.
NEEDS_LIVE_TEARDOWN_HOOK = ADK_VERSION < (2, 0, 0)


def runner_accepts_abort_signal() -> bool:
    """``Runner.run_async(abort_signal=...)`` exists (2.x): a caller can abort a run."""
    try:
        from google.adk.runners import Runner
    except ImportError:  # pragma: no cover
        return False
    return "abort_signal" in inspect.signature(Runner.run_async).parameters


def invocation_context_of(context: Any) -> Any:
    """The InvocationContext behind a ToolContext or CallbackContext."""
    return getattr(context, "_invocation_context", None)


def session_id_of(ctx: Any) -> str | None:
    session = getattr(ctx, "session", None)
    sid = getattr(session, "id", None)
    return sid if isinstance(sid, str) else None


def agent_name_of(ctx: Any) -> str:
    agent = getattr(ctx, "agent", None)
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) else ""


def is_adk_task(task: asyncio.Task[Any] | None) -> bool:
    """Whether ADK created ``task`` itself (2.x runs a live run in a task of its own).

    Such a task ends exactly when its run does; a caller's task does not.
    """
    code = getattr(task.get_coro(), "cr_code", None) if task is not None else None
    filename = getattr(code, "co_filename", "")
    return f"{_SEP}google{_SEP}adk{_SEP}" in filename


def is_live(ctx: Any) -> bool:
    return getattr(ctx, "live_request_queue", None) is not None


def is_streaming_tool(tool: Any) -> bool:
    func = getattr(tool, "func", None)
    return func is not None and inspect.isasyncgenfunction(func)


def is_non_blocking_tool(tool: Any) -> bool:
    """Mirrors ADK's own test (2.x reads ``behavior`` first, 1.x only scheduling)."""
    behavior = getattr(tool, "behavior", None)
    if behavior is not None:
        return getattr(behavior, "name", str(behavior)) == "NON_BLOCKING"
    return getattr(tool, "response_scheduling", None) is not None


def is_long_running_tool(tool: Any) -> bool:
    return bool(getattr(tool, "is_long_running", False))


def is_stop_streaming_call(tool: Any, args: Any) -> str | None:
    """The tool name a live ``stop_streaming`` call asks to stop, if this is one."""
    if getattr(tool, "name", None) != "stop_streaming" or not isinstance(args, dict):
        return None
    name = args.get("function_name")
    return name if isinstance(name, str) else None


def streaming_task_for(ctx: Any, tool_name: str, call_id: str) -> asyncio.Task[Any] | None:
    """The background task a live streaming dispatch just created for this call.

    Read in ``after_tool_callback`` of the dispatch: ADK registers the task before
    that callback with no await in between, so even the per-name registry of the
    buggy versions still holds this call's task at that moment.
    """
    if HAS_BACKGROUND_TOOL_REGISTRY:
        entry = (getattr(ctx, "_active_background_tools", None) or {}).get(call_id)
    else:
        entry = (getattr(ctx, "active_streaming_tools", None) or {}).get(tool_name)
    task = getattr(entry, "task", None)
    return task if isinstance(task, asyncio.Task) else None


# --- ADK 1.x: live teardown ---------------------------------------------------

_teardown_listeners: weakref.WeakSet[Any] = weakref.WeakSet()
_teardown_hook_installed = False


def add_live_teardown_listener(listener: Any) -> None:
    """Calls ``listener._on_live_teardown(ctx)`` after a 1.x live run stopped its tools.

    ADK 1.x has no plugin hook at that moment, so on 1.x only we wrap
    ``BaseLlmFlow._stop_background_tool_tasks`` once per process. The wrapper calls
    the original first and swallows anything a listener raises.
    """
    if not NEEDS_LIVE_TEARDOWN_HOOK:
        return
    _teardown_listeners.add(listener)
    _install_live_teardown_hook()


def _install_live_teardown_hook() -> None:
    global _teardown_hook_installed
    if _teardown_hook_installed:
        return
    try:
        from google.adk.flows.llm_flows.base_llm_flow import BaseLlmFlow
    except ImportError:  # pragma: no cover - layout of every 1.x we support
        logger.warning("adk_task_telemetry: cannot hook live teardown on this ADK")
        return
    original: Callable[..., Any] | None = getattr(BaseLlmFlow, "_stop_background_tool_tasks", None)
    if original is None:  # pragma: no cover
        logger.warning("adk_task_telemetry: cannot hook live teardown on this ADK")
        return

    async def _stop_background_tool_tasks(self: Any, invocation_context: Any) -> None:
        try:
            await original(self, invocation_context)
        finally:
            for listener in list(_teardown_listeners):
                try:
                    listener._on_live_teardown(invocation_context)
                except Exception:  # never break ADK's teardown
                    logger.debug("live teardown listener failed", exc_info=True)

    _stop_background_tool_tasks.__wrapped__ = original  # type: ignore[attr-defined]
    BaseLlmFlow._stop_background_tool_tasks = _stop_background_tool_tasks  # type: ignore[attr-defined,method-assign]
    _teardown_hook_installed = True


# --- what ADK's signals mean for a tool task --------------------------------------
#
# The tracker knows states and transitions; which ADK signal ends which task, and
# what ADK's behaviour implies about an end, is written here once.

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
    """Which open tasks of a run a run-end trigger ends (None: all of them).

    - ``after_run``, ``run_error``, ``live_teardown``, ``plugin_close`` (applied
      only to runs whose driving task is gone) and ``shutdown`` end the run.
    - ``run_task_done``: the task driving the run's current step ended. If ADK made
      that task for the run alone (2.x live), the run is over. If it is a caller's
      task, the caller may hand the run's generator on to another task (a
      ``wait_for(anext(...))`` per event does), so only the tasks of that step end.
    """
    if trigger == _sc.EndTrigger.RUN_TASK_DONE and not driver_is_run:
        return STEP_KINDS
    return None


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
