"""TaskTelemetryPlugin: ADK callbacks -> tracker verbs.

Every callback returns None and swallows its own failures: in ADK the first
plugin to return a value short-circuits the rest, and a plugin exception aborts
the user's run. The plugin keeps no lifecycle state: the tracker owns it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from google.adk.plugins.base_plugin import BasePlugin
from opentelemetry import metrics, trace

from . import adk_compat as compat
from . import exit as _exit
from . import plugin_order
from . import semconv as sc
from .privacy import Redactor, default_redactor, to_attribute
from .records import OpenTask, TrackerState
from .tracker import Options, Tracker, register_shutdown

logger = logging.getLogger(sc.LOGGER_NAME)


class TaskTelemetryPlugin(BasePlugin):
    """A span per ADK tool task, from creation to its end, and orphans at run end.

    Register it first: ``App(plugins=[TaskTelemetryPlugin(), ...])``.

    Args:
      tracer_provider, meter_provider: default to the global providers.
      cancel_orphans: cancel each orphan right after reporting it (its span gets a
        ``cancelled`` event with cause ``orphan_cancelled``).
      track_spawned_tasks: strict mode: also report asyncio tasks that a tool body
        spawned and left running when its run ended, as orphans of its call id.
      capture_arguments: record tool arguments and results (redacted, truncated).
        Off by default: they can hold personal data.
      redact: ``redact(tool_name, value) -> value`` applied before recording.
      max_argument_length: characters kept of a captured argument or result.
      max_open_tasks: records kept at most; further tool tasks are counted in
        ``adk.tool_task.overflow`` and not tracked.
    """

    def __init__(
        self,
        name: str = "adk_task_telemetry",
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        cancel_orphans: bool = False,
        track_spawned_tasks: bool = False,
        capture_arguments: bool = False,
        redact: Redactor = default_redactor,
        max_argument_length: int = 1024,
        max_open_tasks: int = 10_000,
    ) -> None:
        super().__init__(name=name)
        if max_open_tasks < 1 or max_argument_length < 0:
            raise ValueError("max_open_tasks must be >= 1 and max_argument_length >= 0")
        # configure_telemetry() beside a MeterProvider it could not add a reader to
        # gives the plugin one of its own (exit.py): use it unless told otherwise.
        self._tracker = Tracker(tracer_provider, meter_provider or _exit.plugin_meter_provider(),
                                Options(
            cancel_orphans=cancel_orphans, track_spawned_tasks=track_spawned_tasks,
            max_open_tasks=max_open_tasks))
        self._capture = capture_arguments
        self._redact = redact
        self._max_arg = max_argument_length
        compat.add_live_teardown_listener(self)
        register_shutdown()

    # --- public -----------------------------------------------------------------

    def open_tasks(self) -> list[OpenTask]:
        """Tool tasks running now, orphans included (``orphaned=True``)."""
        return self._tracker.open_tasks()

    def state(self) -> TrackerState:
        """Runs, open tasks and orphans held now (all 0 when idle): for tests and checks."""
        return self._tracker.state()

    @property
    def internal_errors(self) -> int:
        """How many times the plugin failed inside (and swallowed it)."""
        return self._tracker.failures

    # --- run --------------------------------------------------------------------

    async def before_run_callback(self, *, invocation_context: Any) -> None:
        try:
            ctx = invocation_context
            self._tracker.run_started(str(ctx.invocation_id), _app_name(ctx),
                                      trace.get_current_span(), _current_task(), ctx)
            plugin_order.take_first_place(self, ctx)
        except Exception:
            self._tracker.failed("before_run_callback")
        return None

    async def on_event_callback(self, *, invocation_context: Any, event: Any) -> None:
        try:
            self._tracker.run_step(str(invocation_context.invocation_id), _current_task())
        except Exception:
            self._tracker.failed("on_event_callback")
        return None

    async def after_run_callback(self, *, invocation_context: Any) -> None:
        self._run_ended(invocation_context, sc.EndTrigger.AFTER_RUN)
        return None

    async def on_run_error_callback(self, *, invocation_context: Any, error: Exception) -> None:
        self._run_ended(invocation_context, sc.EndTrigger.RUN_ERROR)
        return None

    async def close(self) -> None:
        try:
            busy = self._tracker.closed()
            # ADK's server closes its runners before uvicorn dies by SIGTERM: what
            # was recorded goes out now (off the event loop, bounded). Not while
            # other runs go on (a Runner per request): batching does its job there.
            if not busy:
                await _exit.flush_after_close()
        except Exception:
            self._tracker.failed("close")

    def _on_live_teardown(self, invocation_context: Any) -> None:
        """ADK 1.x only (see adk_compat): a live run stopped its background tools."""
        self._run_ended(invocation_context, sc.EndTrigger.LIVE_TEARDOWN)

    def _run_ended(self, invocation_context: Any, trigger: str) -> None:
        try:
            self._tracker.run_ended(str(invocation_context.invocation_id), trigger)
        except Exception:
            self._tracker.failed(trigger)

    # --- tools ------------------------------------------------------------------

    async def before_tool_callback(self, *, tool: Any, tool_args: Any, tool_context: Any) -> None:
        try:
            ctx = compat.invocation_context_of(tool_context)
            invocation_id = str(ctx.invocation_id)
            kind = compat.task_kind(tool, ctx)
            stop = compat.is_stop_streaming_call(tool, tool_args) if kind == sc.Kind.CALL else None
            if stop is not None:
                self._tracker.stop_requested(invocation_id, stop)
            tool_name = str(getattr(tool, "name", "") or type(tool).__name__)
            extra = None
            if self._capture:
                extra = self._captured(sc.GEN_AI_TOOL_CALL_ARGUMENTS, tool_name, tool_args)
            self._tracker.opened(
                invocation_id, _app_name(ctx), ctx, str(tool_context.function_call_id or ""),
                tool_name, type(tool).__name__, compat.agent_name_of(ctx),
                compat.session_id_of(ctx), kind, _current_task(), extra)
        except Exception:
            self._tracker.failed("before_tool_callback")
        return None

    async def after_tool_callback(
        self, *, tool: Any, tool_args: Any, tool_context: Any, result: Any
    ) -> None:
        try:
            record = self._tracker.current()
            if record is None or record.call_id != str(tool_context.function_call_id or ""):
                return None
            if self._capture:
                attrs = self._captured(sc.GEN_AI_TOOL_CALL_RESULT, record.tool_name, result)
                if attrs:
                    record.span.set_attributes(attrs)
            if compat.works_in_background(record.kind):
                ctx = compat.invocation_context_of(tool_context)
                self._tracker.moved(
                    record, compat.streaming_task_for(ctx, record.tool_name, record.call_id))
            else:
                self._tracker.returned(record)
        except Exception:
            self._tracker.failed("after_tool_callback")
        return None

    async def on_tool_error_callback(
        self, *, tool: Any, tool_args: Any, tool_context: Any, error: Exception
    ) -> None:
        try:
            record = self._tracker.current()
            if record is not None and record.call_id == str(tool_context.function_call_id or ""):
                self._tracker.raised(record, error)
        except Exception:
            self._tracker.failed("on_tool_error_callback")
        return None

    # --- internals --------------------------------------------------------------

    def _captured(self, key: str, tool_name: str, value: Any) -> dict[str, str] | None:
        try:
            redacted = self._redact(tool_name, value)
        except Exception:
            logger.warning("adk_task_telemetry: redact hook failed; nothing recorded")
            return None
        if redacted is None:
            return None
        return {key: to_attribute(redacted, self._max_arg)}


def _current_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


def _app_name(ctx: Any) -> str:
    return str(getattr(ctx, "app_name", "") or "")
