"""Hooks on the live path of frozen ADK releases.

Where a released ADK gives plugins no signal on its live path, the plugin wraps one
ADK function there, chosen by the probes (``LIVE_RUN_END_HOOK``, ``LIVE_TOOL_HOOK``)
and only on the layout each wrapper was written for; elsewhere nothing is installed.
A wrapper calls only the listener plugins registered in that invocation's own plugin
manager (never another plugin), never changes what ADK runs or returns, swallows what
a listener raises, and stands aside when no listener is in the invocation. Installed
once per process with the first listener, undone (the original put back, the very
same object) when the last one is gone (collected, or removed at an uninstrument); a
Runner's start or close neither installs nor undoes.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import threading
import weakref
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

from .. import semconv as _sc
from .access import is_live
from .notes import note_untested_adk
from .probes import FUNCTIONS_MODULE, LIVE_RUN_END_HOOK, LIVE_TOOL_HOOK

logger = logging.getLogger(_sc.LOGGER_NAME)

_NEEDS_HOOKS = LIVE_RUN_END_HOOK or LIVE_TOOL_HOOK
_listeners: weakref.WeakSet[Any] = weakref.WeakSet()
#: (owner, name) -> (original, wrapper) of each hook in place.
_installed: dict[tuple[Any, str], tuple[Any, Any]] = {}
#: Installs and undos of the live hooks: a listener's death (a weakref
#: callback) may undo them from whichever thread dropped it.
_hook_lock = threading.RLock()


class LiveRunListener(Protocol):
    """What hears a live run's end where ADK tells plugins nothing (a TaskTelemetryPlugin;
    its tool callbacks hear the live calls)."""

    def live_run_ended(self, invocation_context: Any) -> None: ...


def add_live_teardown_listener(listener: LiveRunListener) -> None:
    """Makes ``listener`` (a TaskTelemetryPlugin) hear what this ADK does not tell
    plugins on its live path, installing the hooks it needs:

    - the end of a live run, as ``listener.live_run_ended(ctx)`` (LIVE_RUN_END_HOOK);
    - live tool calls, as its own ``before_tool_callback``, ``after_tool_callback`` and
      ``on_tool_error_callback``, where ADK calls no plugin callback for a live call
      (LIVE_TOOL_HOOK).

    The listener is held weakly and heard for as long as it lives (a Runner's close
    does not end it: an App's plugin serves the Runners made after it); the hooks are
    undone when the last listener is gone (collected, or ``remove_live_listener``).

    Every plugin calls this from its constructor, so it is also where the once-per-
    process note about an ADK newer than the newest tested is logged.
    """
    note_untested_adk()
    hooks = _hooks()
    if not hooks:
        return
    with _hook_lock:
        if listener not in _listeners:
            _listeners.add(listener)
            weakref.finalize(listener, _live_listener_gone).atexit = False
        for owner, name, make in hooks:
            if (owner, name) not in _installed:
                original = vars(owner)[name]
                wrapper = make(original)
                setattr(owner, name, wrapper)
                _installed[(owner, name)] = (original, wrapper)


def keep_listening(listener: Any) -> None:
    """``listener`` starts a run: if it was removed (an explicit uninstrument), it
    listens again (an App's plugins outlive what removed them)."""
    if _NEEDS_HOOKS and listener not in _listeners:
        add_live_teardown_listener(listener)


def remove_live_listener(listener: Any) -> None:
    """``listener`` stops listening: once no listener is left, every hook is undone."""
    _listeners.discard(listener)
    _live_listener_gone()


def _live_listener_gone() -> None:
    with _hook_lock:
        if any(True for _ in _listeners):  # iteration skips the dead
            return
        for (owner, name), (original, wrapper) in list(_installed.items()):
            if vars(owner).get(name) is wrapper:
                setattr(owner, name, original)
                del _installed[(owner, name)]
            else:  # someone wrapped ours since: left in place, standing aside
                logger.debug("adk_task_telemetry: %s.%s was wrapped again; hook kept",
                             owner, name)


def live_hooks() -> list[str]:
    """``owner.name`` of each hook in place now (for docs and checks)."""
    return sorted(f"{getattr(o, '__name__', o)}.{n}" for o, n in _installed)


def _hooks() -> list[tuple[Any, str, Callable[[Any], Any]]]:
    out: list[tuple[Any, str, Callable[[Any], Any]]] = []
    if LIVE_RUN_END_HOOK:
        from google.adk.agents.base_agent import BaseAgent
        out.append((BaseAgent, "run_live", _run_end_hook))
    if LIVE_TOOL_HOOK:
        out.append((importlib.import_module(FUNCTIONS_MODULE), "_process_function_live_helper",
                    _tool_call_hook))
    return out


def _listeners_of(ctx: Any) -> list[Any]:
    """The listeners registered in the invocation's plugin manager, in its order."""
    plugins = getattr(getattr(ctx, "plugin_manager", None), "plugins", None)
    if not plugins or not len(_listeners):
        return []
    ours = {id(p) for p in _listeners}
    return [p for p in plugins if id(p) in ours]


def _run_end_hook(original: Callable[..., Any]) -> Callable[..., Any]:
    """``BaseAgent.run_live``: for the root agent of a live run (the Runner hands it the
    invocation's own context, whose agent it is; a transfer or a workflow hands a sub-
    agent a copy whose agent is the parent) the generator ADK reads is wrapped. Its end
    (the caller's aclose, the queue closed, an error, a cancelled consumer) comes after
    the agent's whole teardown. Looked up when the run starts, after before_run: a
    plugin that listens again from its before_run (``keep_listening``) sees that run."""

    @functools.wraps(original)
    def run_live(self: Any, parent_context: Any, *args: Any, **kwargs: Any) -> Any:
        events = original(self, parent_context, *args, **kwargs)
        try:
            root = getattr(parent_context, "agent", None) is self and is_live(parent_context)
            listeners = _listeners_of(parent_context) if root else []
        except Exception:
            listeners = []
        return _until_live_run_ends(events, parent_context) if listeners else events

    return run_live


async def _until_live_run_ends(events: Any, ctx: Any) -> AsyncGenerator[Any, None]:
    try:
        async for event in events:
            yield event
    finally:
        try:
            await events.aclose()
        finally:
            for listener in _listeners_of(ctx):
                try:
                    listener.live_run_ended(ctx)
                except Exception:  # never break ADK's teardown
                    logger.debug("live run end listener failed", exc_info=True)


def _tool_call_hook(original: Callable[..., Any]) -> Callable[..., Any]:
    """``functions._process_function_live_helper``: runs one live call's tool in the
    call's own task, inside ADK's ``execute_tool`` span; a streaming call's background
    task is registered in ``active_streaming_tools`` before it returns."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    async def _process_function_live_helper(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs).arguments
            listeners = _listeners_of(bound["invocation_context"])
            call = {"tool": bound["tool"], "tool_args": bound["function_args"],
                    "tool_context": bound["tool_context"]}
        except Exception:
            listeners = []
        if not listeners:
            return await original(*args, **kwargs)
        await _tell(listeners, "before_tool_callback", call)
        try:
            result = await original(*args, **kwargs)
        except Exception as error:
            await _tell(listeners, "on_tool_error_callback", {**call, "error": error})
            raise
        await _tell(listeners, "after_tool_callback", {**call, "result": result})
        return result

    return _process_function_live_helper


async def _tell(listeners: list[Any], callback: str, kwargs: dict[str, Any]) -> None:
    for listener in listeners:
        try:
            await getattr(listener, callback)(**kwargs)
        except Exception:  # a listener never breaks the user's call
            logger.debug("live %s listener failed", callback, exc_info=True)
