"""OpenTelemetry task-lifecycle observability for Google ADK agents.

Register :class:`TaskTelemetryPlugin` first on your ``App``; every tool task then
becomes a ``tool_task {tool}`` span from creation to end, and tasks still running
when their run ends are reported as ``orphaned_task``.
"""

from .plugin import TaskTelemetryPlugin
from .records import OpenTask, TrackerState
from .setup import TelemetryHandle, configure_telemetry
from .spans import OpenSpanProcessor
from .version import __version__

__all__ = ["OpenSpanProcessor", "OpenTask", "TaskTelemetryPlugin", "TelemetryHandle",
           "TrackerState", "__version__", "configure_telemetry"]
