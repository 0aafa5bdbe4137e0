"""One wrap of ``google.adk.runners.Runner.__init__``: TaskTelemetryPlugin first on every Runner.

A plain function wrapper, restored by identity: it needs neither
``opentelemetry-instrumentation`` nor ``wrapt``, so the pytest gate watches every
Runner on a plain install too. The instrumentor (``instrumentation.py``) is a
``BaseInstrumentor`` around it.

After ADK built the runner's ``PluginManager`` (from ``App.plugins``, the deprecated
``plugins=``, ``--extra_plugins`` or an ``AgentTool``'s parent), the hook looks at
``runner.plugin_manager.plugins``: ``TaskTelemetryPlugin`` instances already there are
put first (``plugin_order.ours_first``, the rule a run's start applies too; they never
return a value, so moving them changes nothing the others do); otherwise the hook's
plugin is put first. The hook never adds a second one of ours; two that the app itself
listed both stay (each reports every task) and a WARNING says so.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

from . import plugin_order
from . import semconv as sc
from .plugin import TaskTelemetryPlugin

logger = logging.getLogger(sc.INSTRUMENTATION_LOGGER_NAME)

__all__ = ["RunnerHook", "is_hooked"]

_lock = threading.Lock()
_hooks: list[RunnerHook] = []  # installed and enabled, oldest first


def is_hooked() -> bool:
    """Some hook (an instrumentor's, the pytest gate's) adds the plugin to new Runners."""
    return bool(_hooks)


class RunnerHook:
    """Wraps ``Runner.__init__`` while installed; ``plugin()`` gives the plugin a
    runner without its own gets (called when a runner first needs one)."""

    def __init__(self, plugin: Callable[[], TaskTelemetryPlugin]) -> None:
        self._plugin = plugin
        self._original: Any = None
        self._replacement: Any = None
        self._enabled = False

    @property
    def installed(self) -> bool:
        return self._enabled

    def install(self) -> None:
        from google.adk.runners import Runner

        with _lock:
            if self._enabled:
                return
            original = vars(Runner)["__init__"]
            hook = self

            @functools.wraps(original)
            def __init__(runner: Any, *args: Any, **kwargs: Any) -> None:
                original(runner, *args, **kwargs)
                if hook._enabled:
                    try:
                        hook.register(runner)
                    except Exception:  # never break the application's Runner
                        logger.warning("adk_task_telemetry: could not register "
                                       "TaskTelemetryPlugin on %r", runner, exc_info=True)

            Runner.__init__ = __init__  # type: ignore[method-assign,assignment]
            self._original, self._replacement = original, __init__
            self._enabled = True
            _hooks.append(self)

    def uninstall(self) -> None:
        """Restores ``Runner.__init__`` if it is still our wrapper; one that someone
        wrapped over stays in place, inert. Runners created meanwhile keep their plugin."""
        from google.adk.runners import Runner

        with _lock:
            if not self._enabled:
                return
            self._enabled = False
            if self in _hooks:
                _hooks.remove(self)
            if vars(Runner).get("__init__") is self._replacement:
                Runner.__init__ = self._original  # type: ignore[method-assign]
            self._original = self._replacement = None

    def register(self, runner: Any) -> None:
        plugins = getattr(getattr(runner, "plugin_manager", None), "plugins", None)
        if not isinstance(plugins, list):
            logger.warning("adk_task_telemetry: this Runner has no plugin_manager.plugins "
                           "list; TaskTelemetryPlugin not registered")
            return
        manager = runner.plugin_manager
        present = [p for p in plugins if isinstance(p, TaskTelemetryPlugin)]
        if present:
            if plugins[0] is not present[0] and not plugin_order.replace_plugins(
                    manager, plugin_order.ours_first(plugins, TaskTelemetryPlugin)):
                logger.warning("adk_task_telemetry: could not put TaskTelemetryPlugin "
                               "first on this Runner")
            if len(present) > 1:
                logger.warning(
                    "adk_task_telemetry: %d TaskTelemetryPlugin instances on one Runner "
                    "(%s): every tool task is reported %d times", len(present),
                    ", ".join(repr(p.name) for p in present), len(present))
            return
        plugin = self._plugin()
        if any(getattr(p, "name", None) == plugin.name for p in plugins):
            logger.warning("adk_task_telemetry: a plugin named %r that is not a "
                           "TaskTelemetryPlugin is registered; not adding ours", plugin.name)
            return
        if not plugin_order.replace_plugins(manager, [plugin, *plugins]):
            logger.warning("adk_task_telemetry: this Runner's plugin list cannot be "
                           "replaced; TaskTelemetryPlugin not registered")
