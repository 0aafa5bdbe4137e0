"""OpenTelemetry task-lifecycle observability for Google ADK agents.

Register :class:`TaskTelemetryPlugin` first on your ``App``; every tool task then
becomes a ``tool_task {tool}`` span from creation to end, and tasks still running
when their run ends are reported as ``orphaned_task``.

The public names load on first use: importing the package (as pytest does for its
``pytest11`` plugin, in every project where this package is installed) costs
nothing until one is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:
    from .configure import TelemetryHandle, configure_telemetry
    from .plugin import TaskTelemetryPlugin
    from .records import OpenTask, TrackerState
    from .spans import OpenSpanProcessor

_PUBLIC = {
    "OpenSpanProcessor": ".spans",
    "OpenTask": ".records",
    "TaskTelemetryPlugin": ".plugin",
    "TelemetryHandle": ".configure",
    "TrackerState": ".records",
    "configure_telemetry": ".configure",
}

__all__ = ["OpenSpanProcessor", "OpenTask", "TaskTelemetryPlugin", "TelemetryHandle",
           "TrackerState", "__version__", "configure_telemetry"]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
