"""Attribute access to ADK's objects: the plugin reads a tool, a context, a task
through these and nowhere else.

Every reader here is defensive: an object of a shape it does not recognise gives
the documented empty answer (``None``, ``""`` or ``False``), never an exception.
They run on the plugin's hot path, once or twice per tool call.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from typing import Any

from .probes import HAS_BACKGROUND_TOOL_REGISTRY

#: A path component of every file of ADK's own package (a frame or a coroutine of ADK).
ADK_DIR = f"{os.sep}google{os.sep}adk{os.sep}"


def invocation_context_of(context: Any) -> Any:
    """The InvocationContext behind a ToolContext or CallbackContext; None if there is
    none (see the package's table of internals: ``_invocation_context``)."""
    return getattr(context, "_invocation_context", None)


def session_id_of(ctx: Any) -> str | None:
    """The session's id; None where there is no session or its id is not a string."""
    session = getattr(ctx, "session", None)
    sid = getattr(session, "id", None)
    return sid if isinstance(sid, str) else None


def agent_name_of(ctx: Any) -> str:
    """The context's agent's name; ``""`` (an empty attribute) where there is none."""
    agent = getattr(ctx, "agent", None)
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) else ""


def tool_key(tool: Any, ctx: Any) -> tuple[Any, ...]:
    """What decides the contract's values of a call to ``tool`` in ``ctx`` (name, class,
    agent, live or not, long-running or not): the plugin works them out once per key."""
    agent = getattr(ctx, "agent", None)
    return (getattr(tool, "name", None), type(tool), getattr(agent, "name", None),
            getattr(ctx, "live_request_queue", None) is not None,
            bool(getattr(tool, "is_long_running", False)))


def is_adk_task(task: asyncio.Task[Any] | None) -> bool:
    """Whether ADK created ``task`` itself (2.x runs a live run in a task of its own).

    Such a task ends exactly when its run does; a caller's task does not. False for
    None or a task whose coroutine has no code object.
    """
    code = getattr(task.get_coro(), "cr_code", None) if task is not None else None
    return ADK_DIR in getattr(code, "co_filename", "")


def is_live(ctx: Any) -> bool:
    """The context belongs to a live run (it has a request queue)."""
    return getattr(ctx, "live_request_queue", None) is not None


def is_streaming_tool(tool: Any) -> bool:
    """The tool's function is an async generator (a streaming tool in a live run)."""
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


def is_stop_streaming(tool: Any) -> bool:
    """``tool`` is ADK's ``stop_streaming``: a live call of it stops a streaming tool."""
    return getattr(tool, "name", None) == "stop_streaming"


def stop_streaming_target(args: Any) -> str | None:
    """The tool name a ``stop_streaming`` call with these arguments asks to stop."""
    name = args.get("function_name") if isinstance(args, dict) else None
    return name if isinstance(name, str) else None


def streaming_task_for(ctx: Any, tool_name: str, call_id: str) -> asyncio.Task[Any] | None:
    """The background task a live streaming dispatch just created for this call; None
    where the registry or the entry is not there.

    Read in ``after_tool_callback`` of the dispatch: ADK registers the task before
    that callback with no await in between, so even the per-name registry of the
    buggy versions still holds this call's task at that moment.
    """
    if HAS_BACKGROUND_TOOL_REGISTRY:
        registry, key = getattr(ctx, "_active_background_tools", None), call_id
    else:
        registry, key = getattr(ctx, "active_streaming_tools", None), tool_name
    entry = registry.get(key) if isinstance(registry, dict) else None
    task = getattr(entry, "task", None)
    return task if isinstance(task, asyncio.Task) else None
