"""Zero-code instrumentation: TaskTelemetryPlugin on every ADK Runner of the process.

    pip install 'adk-task-telemetry[instrument]'
    OTEL_SERVICE_NAME=support OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4317 \\
        opentelemetry-instrument adk api_server agents/

``opentelemetry-instrument`` finds :class:`AdkTaskTelemetryInstrumentor` through the
``opentelemetry_instrumentor`` entry point (name ``adk_task_telemetry``; disable it with
``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=adk_task_telemetry``). From then on every
``google.adk.runners.Runner`` the process creates gets the plugin as its *first*
plugin, with no code change (docs/zero-code.md).

The one wrap point is ``Runner.__init__`` (``runner_hook.py``, which needs neither this
package's ``[instrument]`` extra nor ``wrapt``): a ``TaskTelemetryPlugin`` the runner
already holds (the app lists one, ``--extra_plugins`` added one, or an ``AgentTool``
child inherited its parent's) is moved to the front; otherwise the instrumentor's
plugin is inserted first.

The instrumentor's plugin is one instance for the whole process, shared by every
runner it was added to: closing one runner ends only the runs that are no longer
running, so the runs of the other runners go on untouched.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

from . import adk_compat as compat
from .plugin import TaskTelemetryPlugin
from .runner_hook import RunnerHook

__all__ = ["AdkTaskTelemetryInstrumentor"]

#: What ``opentelemetry-instrument`` checks before loading us: pyproject.toml's bound,
#: adk_compat.OLDEST_SUPPORTED_ADK (tests/test_adk_compat.py holds the two equal).
_INSTRUMENTS = (f"google-adk >= {compat.OLDEST_SUPPORTED_ADK}",)

_lock = threading.Lock()


def _plugin_options() -> frozenset[str]:
    """The keyword options TaskTelemetryPlugin takes (forwarded from instrument())."""
    params = inspect.signature(TaskTelemetryPlugin.__init__).parameters.values()
    return frozenset(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


class AdkTaskTelemetryInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Registers ``TaskTelemetryPlugin`` first on every ADK ``Runner`` the process creates.

    ``instrument(tracer_provider=..., meter_provider=..., **plugin_options)``: the
    providers default to the global ones (what ``opentelemetry-instrument``'s
    configurator installed from OTEL_* variables); any other keyword that
    ``TaskTelemetryPlugin`` accepts (``cancel_orphans``, ``capture_arguments``, ...)
    is passed on to it. ``uninstrument()`` restores ``Runner.__init__`` and undoes the
    plugin's hooks on ADK (where no other plugin needs them); runners created meanwhile
    keep their plugin, which hooks ADK again if one of them runs.
    """

    _plugin: TaskTelemetryPlugin | None = None
    _plugin_key: tuple[Any, ...] | None = None
    _options: dict[str, Any] = {}
    _hook: RunnerHook | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _INSTRUMENTS

    @property
    def plugin(self) -> TaskTelemetryPlugin | None:
        """The plugin this instrumentor adds to runners (None until a runner needed it)."""
        return self._plugin

    def _instrument(self, **kwargs: Any) -> None:
        allowed = _plugin_options()
        options = {k: v for k, v in kwargs.items() if k in allowed}
        key = tuple(sorted((k, id(v)) for k, v in options.items()))
        # Re-instrumenting with the same settings keeps the plugin: a second one on
        # the same meter provider would register its instruments twice.
        if self._plugin_key != key:
            self._plugin = None
            self._plugin_key = key
        self._options = options
        self._hook = RunnerHook(self._shared_plugin)
        self._hook.install()

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._hook is not None:
            self._hook.uninstall()
            self._hook = None
        if self._plugin is not None:  # ADK's process-wide hooks, where no other plugin
            self._plugin.unhook()     # needs them

    def _shared_plugin(self) -> TaskTelemetryPlugin:
        """Created when a runner first needs it, not in instrument(): an app that lists
        its own TaskTelemetryPlugin then stays the only instance (the first one on a
        meter provider is the one whose observable instruments report)."""
        with _lock:
            if self._plugin is None:
                self._plugin = TaskTelemetryPlugin(**self._options)
            return self._plugin
