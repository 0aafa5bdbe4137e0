"""TaskTelemetryPlugin's place among a Runner's plugins: ahead of any that could hide a
tool's outcome from it.

ADK calls the plugins in order and stops at the first that returns a value. A plugin
ahead of ours that answers ``on_tool_error_callback`` (ADK's own
``ReflectAndRetryToolPlugin`` does) hides the error from ours: the failed tool would
be reported ``ok``. Users list plugins in any order, so at a run's start, when a plugin
ahead of ours overrides one of the callbacks in ``HIDDEN_BY``, the plugin moves itself
(with any other TaskTelemetryPlugin) ahead of the rest and says so once in an INFO line;
behind plugins that can hide nothing it stays where it was listed. The order itself is
one rule, ``ours_first``, which the Runner hook (``runner_hook.py``) applies too, at
``Runner.__init__``.

The move *replaces* ``PluginManager.plugins`` with a new list rather than reordering
it in place: the loop calling us (and a concurrent run's loop over the same list)
keeps iterating the old list, so no plugin is called twice or skipped. Where the
list cannot be replaced, one WARNING names the plugins ahead and what they can hide.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from google.adk.plugins.base_plugin import BasePlugin

from . import semconv as sc

logger = logging.getLogger(sc.LOGGER_NAME)

#: The callbacks of ours that a plugin ahead can short-circuit, and what is lost then.
HIDDEN_BY: dict[str, str] = {
    "on_tool_error_callback": "a tool that raises is reported ok, with no exception event",
    "before_tool_callback": "a call it answers is not seen at all",
    "after_tool_callback": "a live streaming call is reported ended when its dispatch "
                           "returns",
}

_told: weakref.WeakSet[Any] = weakref.WeakSet()  # plugins that logged their line
#: Per PluginManager, the plugin list last looked at: each run of a Runner asks again,
#: and a list already judged is not judged twice.
_judged: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()


def _overrides(plugin: Any, callback: str) -> bool:
    return getattr(type(plugin), callback, None) is not getattr(BasePlugin, callback, None)


def ours_first(plugins: list[Any], ours: type) -> list[Any]:
    """A new list of the same plugins: every instance of ``ours`` first, then the rest,
    each group in the order it had."""
    return [p for p in plugins if isinstance(p, ours)] + [
        p for p in plugins if not isinstance(p, ours)]


def replace_plugins(manager: Any, plugins: list[Any]) -> bool:
    """Gives ``manager`` the new list (never reorders the old one in place: a loop over
    it, ADK's own or a concurrent run's, keeps iterating what it had). False where the
    list cannot be replaced."""
    try:
        manager.plugins = plugins
        return bool(manager.plugins is plugins)
    except Exception:  # a PluginManager whose list cannot be replaced
        return False


def take_first_place(plugin: Any, invocation_context: Any) -> None:
    """Called from ``plugin``'s ``before_run_callback``: puts ``plugin`` (and every
    other plugin of its class) ahead of any plugin that could answer before it."""
    manager: Any = getattr(invocation_context, "plugin_manager", None)
    plugins = getattr(manager, "plugins", None)
    if not isinstance(plugins, list) or not plugins or plugins[0] is plugin:
        return
    try:
        if _judged.get(manager) is plugins:
            return
        _judged[manager] = plugins
    except TypeError:  # a manager that cannot be weakly referenced: judged every run
        pass
    ours = type(plugin)
    ahead: list[Any] = []
    for p in plugins:
        if p is plugin:
            break
        if not isinstance(p, ours):
            ahead.append(p)
    hidden = {cb: [p for p in ahead if _overrides(p, cb)] for cb in HIDDEN_BY}
    if not any(hidden.values()):
        return  # nothing ahead can answer before us: the order changes nothing
    ok = replace_plugins(manager, ours_first(plugins, ours))
    if plugin in _told:
        return
    _told.add(plugin)
    names = ", ".join(repr(getattr(p, "name", type(p).__name__)) for p in ahead)
    if ok:
        logger.info("adk_task_telemetry: TaskTelemetryPlugin %r was registered after %s; "
                    "it moved itself first so that no plugin answers a tool callback "
                    "before it sees it (register it first to keep your order)",
                    getattr(plugin, "name", ""), names)
    else:
        lost = "; ".join(f"{cb} answered by {', '.join(repr(p.name) for p in ps)}: "
                         f"{HIDDEN_BY[cb]}" for cb, ps in hidden.items() if ps)
        logger.warning("adk_task_telemetry: TaskTelemetryPlugin %r is registered after %s "
                       "and cannot move itself first on this ADK; outcomes it cannot see: "
                       "%s. Register it first.", getattr(plugin, "name", ""), names, lost)
