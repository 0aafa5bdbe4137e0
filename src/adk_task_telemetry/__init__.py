"""OpenTelemetry task-lifecycle observability for Google ADK agents.

Every tool call ADK makes runs as an asyncio task; this package makes each one a span
from its creation to its end, and reports the tasks still running when their run ends
(``orphaned_task``) so that an alert can fire.

Install
-------

::

    pip install adk-task-telemetry                  # the plugin, with OTLP export
    pip install 'adk-task-telemetry[prometheus]'    # + a Prometheus /metrics endpoint
    pip install 'adk-task-telemetry[instrument]'    # + zero-code (opentelemetry-instrument)

Register
--------

First among the ``App``'s plugins (ADK stops calling plugins after the first one that
returns a value; this one never does, and never raises into ADK)::

    from google.adk.apps import App
    from adk_task_telemetry import TaskTelemetryPlugin, configure_telemetry

    telemetry = configure_telemetry(service_name="support-agent")  # OTLP, from OTEL_*
    app = App(name="support", root_agent=agent, plugins=[TaskTelemetryPlugin()])

Under ``adk web`` / ``adk api_server``: the same in ``agent.py``, or
``--extra_plugins adk_task_telemetry.TaskTelemetryPlugin``. Without touching the code:
``opentelemetry-instrument adk api_server agents/`` adds the plugin to every ``Runner``.

Configure
---------

``configure_telemetry()`` installs tracer, meter and logger providers (or adds its
exporters to those ADK or the application installed), from arguments, then ``OTEL_*``
variables: ``endpoint=``, ``protocol=``, ``prometheus_port=``; it never lets a dead
endpoint reach the agent, and flushes at exit and on SIGTERM. It returns a
``TelemetryHandle`` (``force_flush()``, ``shutdown()``). ``TaskTelemetryPlugin`` takes
``cancel_orphans``, ``track_spawned_tasks`` (strict mode), ``capture_arguments`` (off:
tool arguments are never recorded otherwise) with ``redact`` and
``max_argument_length``, and ``max_open_tasks``; each but ``redact`` also from its
``ADK_TASK_TELEMETRY_*`` variable, for zero-code users (an argument wins;
``plugin.options`` says what is in force). ``plugin.open_tasks()`` (``OpenTask``)
and ``plugin.state()`` (``TrackerState``, all zero when idle) are the supported hooks
for health checks and tests; ``OpenSpanProcessor`` reports spans a tool left open.

Observe
-------

``add_observer(fn)`` tells ``fn`` of every tool task's end (``TaskSeen``) and every
unanswered call (``UnansweredCall``), from every plugin of the process, as it happens,
without an OpenTelemetry pipeline (the pytest gate is built on it); it runs inside the
plugin's callback, so keep it quick. ``remove_observer(fn)`` stops it.

What you get
------------

- a ``tool_task {gen_ai.tool.name}`` span per tool task, child of ADK's
  ``execute_tool`` span, with ``adk.tool_task.outcome`` (``ok``, ``error``,
  ``recovered``, ``cancelled``, ``orphaned``);
- ``orphaned_task`` events, the ``adk.tool_task.orphaned`` counter
  (``adk_tool_task_orphaned_total``) and a WARNING log record linked to the trace;
- ``adk.tool_task.*`` metrics, and the call ledger: ``unanswered_call`` for function
  calls left without a response at a run's end (``adk.tool_call.unanswered``);
- ``adk-task-telemetry demo`` / ``audit`` (the scenario library on the installed ADK)
  and ``pytest --adk-fail-on-orphans``.

Every name, what it means and when it appears: docs/telemetry.md in the repository;
options and variables: docs/configuration.md.

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
    from .engine.records import OpenTask, TaskSeen, TrackerState, UnansweredCall
    from .observe import add_observer, remove_observer
    from .plugin import TaskTelemetryPlugin
    from .signals.span_processors import OpenSpanProcessor

_PUBLIC = {
    "OpenSpanProcessor": ".signals.span_processors",
    "OpenTask": ".engine.records",
    "TaskTelemetryPlugin": ".plugin",
    "TelemetryHandle": ".configure",
    "TrackerState": ".engine.records",
    "TaskSeen": ".engine.records",
    "UnansweredCall": ".engine.records",
    "add_observer": ".observe",
    "remove_observer": ".observe",
    "configure_telemetry": ".configure",
}

__all__ = ["OpenSpanProcessor", "OpenTask", "TaskSeen", "TaskTelemetryPlugin",
           "TelemetryHandle", "TrackerState", "UnansweredCall", "__version__",
           "add_observer", "configure_telemetry", "remove_observer"]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
